// The plan preview page: loads the tenant's snapshot once, plans every edit in the
// browser with the planner component, and applies through the server.

import { COMPONENT_JS, PlannerError, loadPlanner, loadPlugins } from './planner.js';

const ASSETS = new URL('/preview/assets/', location.href);
const API = '/api/compute/';

/** A kind's heading from its camelCase name: `providerAccount` -> `Provider accounts`. */
function kindTitle(kind) {
  const words = kind.replace(/[A-Z]/g, (letter) => ` ${letter.toLowerCase()}`);
  return `${words.charAt(0).toUpperCase()}${words.slice(1)}s`;
}

/** Members of a snapshot that are not sections of objects. */
const NOT_SECTIONS = new Set(['caller', 'modules', 'bindings', 'plugins']);

const $ = (id) => document.getElementById(id);

/** What the page knows: the token (memory only), the loaded planner, the last plan. */
const session = {
  token: '',
  planner: null,
  exported: '',
  plan: null,
  request: '',
  busy: false,
  /** js-yaml, loaded with the planner from the assets. */
  yaml: null,
};

// ---- the server -------------------------------------------------------------------

class ApiFailure extends Error {
  constructor(status, body) {
    const error = body?.error ?? {};
    super(error.message ?? `HTTP ${status}`);
    this.status = status;
    this.code = error.code ?? `HTTP_${status}`;
    this.details = error.details;
  }
}

/** POSTs to `compute.<method>` (e.g. `fleet/export`) with the bearer token. */
/** The state a planner reads, which export answers with for this `Accept` (SPEC §11). */
const STATE_MEDIA_TYPE = 'application/vnd.fleet.state+json';

async function api(method, body, accept = 'application/json') {
  const response = await fetch(API + method, {
    method: 'POST',
    headers: { Authorization: `Bearer ${session.token}`, 'Content-Type': 'application/json', Accept: accept },
    body: typeof body === 'string' ? body : JSON.stringify(body ?? {}),
  });
  const text = await response.text();
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    value = { error: { message: text } };
  }
  if (!response.ok) throw new ApiFailure(response.status, value);
  return value;
}

// ---- the planner ------------------------------------------------------------------

let componentModule = null;
const coreModules = new Map();

/** Compiles each core module once per page; instances are made per snapshot. */
function getCoreModule(name) {
  if (!coreModules.has(name)) {
    coreModules.set(name, WebAssembly.compileStreaming(fetch(new URL(name, ASSETS))));
  }
  return coreModules.get(name);
}

/**
 * A module plugin transpiled by `preview/build.sh` into `plugins/<digest>/`: its
 * component module and core modules, or an explanation of how to transpile it.
 */
async function importPlugin(digest) {
  const base = new URL(`plugins/${digest}/`, ASSETS);
  const url = new URL('plugin.js', base);
  const probe = await fetch(url, { method: 'GET', cache: 'no-cache' });
  if (!probe.ok) {
    const message = `a module plugin of this server (sha256 ${digest}) is not transpiled for the preview: ` +
      'run preview/build.sh with the plugin file';
    throw Object.assign(new Error(message), { missingAssets: true });
  }
  const cores = new Map();
  const getCoreModule = (name) => {
    if (!cores.has(name)) cores.set(name, WebAssembly.compileStreaming(fetch(new URL(name, base))));
    return cores.get(name);
  };
  return [await import(url.href), getCoreModule];
}

/** Imports the transpiled component, or explains how to build it. */
async function importComponent() {
  if (componentModule) return componentModule;
  const url = new URL(COMPONENT_JS, ASSETS);
  const probe = await fetch(url, { method: 'GET', cache: 'no-cache' });
  if (!probe.ok) {
    const body = await probe.json().catch(() => ({}));
    throw Object.assign(new Error(body?.error?.message ?? `HTTP ${probe.status}`), { missingAssets: true });
  }
  componentModule = await import(url.href);
  return componentModule;
}

/** Loads (or reloads, after an apply) the snapshot and a planner instance over it. */
async function loadTenant() {
  const [component, snapshot, exported] = await Promise.all([
    importComponent(),
    api('fleet/export', {}, STATE_MEDIA_TYPE),
    api('fleet/export', {}),
  ]);
  session.yaml ??= await import(new URL('js-yaml.mjs', ASSETS).href);
  session.plugins = await loadPlugins(snapshot, importPlugin);
  session.planner = await loadPlanner(component, getCoreModule, snapshot, session.plugins);
  session.snapshot = snapshot;
  session.exported = JSON.stringify(exported.document, null, 2);
  const objects = Object.entries(snapshot)
    .filter(([name, value]) => !NOT_SECTIONS.has(name) && Array.isArray(value))
    .reduce((sum, [, value]) => sum + value.length, 0);
  $('who').textContent = `tenant ${snapshot.caller.tenant} · principal ${snapshot.caller.principal} · ` +
    `${objects} objects in the snapshot`;
  const missing = exported.missing ?? [];
  $('missing').hidden = missing.length === 0;
  $('missing').textContent = missing.length
    ? `This deployment does not run the modules of: ${missing.join(', ')}. Objects there are blocked.`
    : '';
}

/**
 * The request both planners see, as one text: the page plans and applies these bytes.
 * A JSON document goes in as typed, so that the planner sees what JSON.parse would hide
 * (a key twice); anything else is read as YAML, as the CLI reads files.
 */
function planRequest() {
  const text = $('document').value;
  const prune = $('prune').checked;
  if (text.trimStart().startsWith('{')) {
    try {
      JSON.parse(text);
    } catch (error) {
      throw new Error(`the document is not valid JSON: ${error.message}`);
    }
    return `{"document": ${text}, "prune": ${prune}}`;
  }
  let document;
  try {
    document = session.yaml.load(text);
  } catch (error) {
    throw new Error(`the document is neither JSON nor valid YAML: ${error.message}`);
  }
  return JSON.stringify({ document: document ?? {}, prune });
}

/** How many edits were planned (or refused): tests and tools wait on `data-planned`. */
let planned = 0;

function replan() {
  if (!session.planner) return;
  try {
    planOnce();
  } finally {
    planned += 1;
    document.body.dataset.planned = String(planned);
  }
}

function planOnce() {
  let request;
  try {
    request = planRequest();
  } catch (error) {
    return showPlanError({ code: 'INVALID_ARGUMENT', message: error.message });
  }
  const started = performance.now();
  try {
    const text = session.planner.plan(request);
    const elapsed = performance.now() - started;
    session.plan = JSON.parse(text);
    session.request = request;
    renderPlan(session.plan, text);
    $('timing').textContent = `planned in your browser in ${elapsed.toFixed(1)} ms`;
    $('timing').dataset.ms = elapsed.toFixed(3);
  } catch (error) {
    if (!(error instanceof PlannerError)) throw error;
    if (error.code === 'INTERNAL') {
      // A trapped instance is not used again; plan the next edit on a fresh one.
      loadPlugins(session.snapshot, importPlugin)
        .then((plugins) => loadPlanner(componentModule, getCoreModule, session.snapshot, (session.plugins = plugins)))
        .then((planner) => (session.planner = planner));
    }
    showPlanError(error);
  }
}

// ---- rendering --------------------------------------------------------------------

function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === 'class') node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) node.append(child);
  return node;
}

/** A field value for people: an empty string shows as `""`, not as nothing. */
const show = (value) => (typeof value === 'string' && value !== '' ? value : JSON.stringify(value));

const NOUNS = {
  site: 'site', providerAccount: 'provider account', pool: 'pool', ownerQuota: 'owner quota', offer: 'offer',
  flavor: 'flavor',
};

/** `1 live flavor not in the document is left alone; prune would delete it.`, per kind and action. */
function leftAloneLines(leftAlone) {
  const groups = new Map();
  for (const entry of leftAlone ?? []) {
    const key = `${entry.kind} ${entry.action}`;
    groups.set(key, { ...entry, count: (groups.get(key)?.count ?? 0) + 1 });
  }
  return [...groups.values()].map(({ kind, action, count }) => {
    const noun = `live ${NOUNS[kind] ?? kind}${count === 1 ? '' : 's'}`;
    return `${count} ${noun} not in the document ${count === 1 ? 'is' : 'are'} left alone; prune would ${action} ${count === 1 ? 'it' : 'them'}.`;
  });
}

function renderPlan(plan, text) {
  $('errors').hidden = true;
  const counts = Object.entries(plan.summary)
    .filter(([name, count]) => count > 0 && !['unchanged', 'blocked', 'denied', 'warnings'].includes(name))
    .map(([name, count]) => `${count} to ${name}`);
  const calls = plan.calls.length;
  const parts = [
    counts.length ? counts.join(', ') : 'no changes',
    `${plan.summary.unchanged} unchanged`,
  ];
  const leftAlone = leftAloneLines(plan.leftAlone);
  if (leftAlone.length) parts.push(`${plan.leftAlone.length} left alone`);
  $('left-alone').hidden = leftAlone.length === 0;
  $('left-alone').textContent = leftAlone.join(' ');
  if (plan.summary.blocked) parts.push(`${plan.summary.blocked} blocked`);
  if (plan.summary.denied) parts.push(`${plan.summary.denied} denied`);
  if (plan.summary.warnings) parts.push(`${plan.summary.warnings} ${plan.summary.warnings === 1 ? 'warning' : 'warnings'}`);
  parts.push(`${calls} ${calls === 1 ? 'call' : 'calls'}`);
  $('summary').textContent = parts.join(' · ');
  $('summary').className = `summary${calls === 0 && plan.blocked.length === 0 ? ' none' : ''}`;

  const changes = $('changes');
  changes.replaceChildren();
  // The kinds in dependency order, as the snapshot names the modules that run; then any
  // other kind a change names (a module that does not run).
  const kinds = [...new Set([...(session.snapshot.modules ?? []), ...plan.changes.map((change) => change.kind)])];
  for (const kind of kinds) {
    const ofKind = plan.changes.filter((change) => change.kind === kind);
    if (ofKind.length === 0) continue;
    changes.append(element('div', { class: 'kind' }, kindTitle(kind)));
    for (const change of ofKind) {
      const sign = change.text.charAt(0);
      const row = element('div', { class: `change ${sign === '!' ? 'blocked' : change.action}` },
        element('div', { class: 'text' }, change.text));
      if (change.fields?.length && sign !== '+') {
        const fields = element('ul', { class: 'fields' });
        for (const field of change.fields) {
          fields.append(element('li', {},
            `${field.field}: `,
            element('span', { class: 'from' }, show(field.from)),
            element('span', { class: 'arrow' }, ' → '),
            element('span', { class: 'to' }, show(field.to))));
        }
        row.append(fields);
      }
      changes.append(row);
    }
  }

  const blocked = $('blocked');
  blocked.hidden = plan.blocked.length === 0;
  blocked.replaceChildren();
  if (plan.blocked.length) {
    const list = element('ul');
    for (const reason of plan.blocked) {
      list.append(element('li', {}, element('code', {}, `${reason.kind} ${reason.key}`), ` (${reason.field}): ${reason.reason}`));
    }
    blocked.append(element('h3', {}, 'Blocked: apply is refused until these are resolved'), list);
  }

  renderVerdicts(plan.policy);
  const denied = (plan.summary.denied ?? 0) > 0;
  $('plan-hash').textContent = plan.planHash;
  $('plan-json').textContent = text;
  $('apply').disabled = session.busy || plan.blocked.length > 0 || denied;
  $('apply').title = plan.blocked.length
    ? 'the plan has blocked changes'
    : denied
      ? 'policies deny the plan; a mandatory one can be overridden with fleet apply --override'
      : `apply ${calls} calls with this plan hash`;
}

/**
 * The verdicts of the policies in force (SPEC §14), as the CLI prints them: `!` for a
 * denial of a mandatory or enforced policy, `?` for a warning (an advisory denial too).
 */
function renderVerdicts(policy) {
  const box = $('verdicts');
  const verdicts = policy?.verdicts ?? [];
  box.hidden = verdicts.length === 0;
  box.replaceChildren();
  if (!verdicts.length) return;
  const list = element('ul');
  let denials = 0;
  for (const verdict of verdicts) {
    const denies = verdict.rule === 'deny' && verdict.level !== 'advisory';
    if (denies) denials += 1;
    const object = [verdict.kind, verdict.key].filter(Boolean).join(' ');
    list.append(element('li', { class: denies ? 'denied' : 'warning' },
      `${denies ? '!' : '?'} policy `, element('code', {}, verdict.policy), ` (${verdict.level}): ${verdict.message}`,
      object ? element('span', { class: 'object' }, ` (${object})`) : ''));
  }
  const heading = denials
    ? `Denied by policy: apply is refused (${denials} ${denials === 1 ? 'denial' : 'denials'})`
    : 'Policy warnings';
  box.className = `verdicts${denials ? ' denied' : ''}`;
  box.append(element('h3', {}, heading), list);
}

function showPlanError(error) {
  session.plan = null;
  const box = $('errors');
  box.hidden = false;
  box.replaceChildren(element('h3', {}, `${error.code}: ${error.message}`));
  const problems = error.details?.problems ?? [];
  if (problems.length) {
    const list = element('ul');
    for (const problem of problems) {
      list.append(element('li', {}, element('code', {}, problem.path || '/'), ` ${problem.message}`));
    }
    box.append(list);
  }
  $('summary').textContent = '';
  $('changes').replaceChildren();
  $('blocked').hidden = true;
  $('verdicts').hidden = true;
  $('left-alone').hidden = true;
  $('plan-hash').textContent = '—';
  $('plan-json').textContent = '';
  $('timing').textContent = '';
  $('apply').disabled = true;
}

function showOutcome(ok, title, detail) {
  const box = $('outcome');
  box.hidden = false;
  box.className = `outcome${ok ? '' : ' failed'}`;
  box.replaceChildren(element('strong', {}, title));
  if (detail !== undefined) box.append(element('pre', {}, typeof detail === 'string' ? detail : JSON.stringify(detail, null, 2)));
}

/** Shows `nodes` in the notice box above the workspace; none hides it. */
function showNotice(...nodes) {
  $('notice').hidden = nodes.length === 0;
  $('notice').replaceChildren(...nodes);
}

// ---- actions ----------------------------------------------------------------------

async function connect(token) {
  session.token = token.trim();
  showNotice();
  $('who').textContent = 'loading…';
  try {
    await loadTenant();
  } catch (error) {
    $('who').textContent = '';
    $('workspace').hidden = true;
    if (error.missingAssets) {
      showNotice(
        element('strong', {}, 'The planner is not built for the browser yet. '),
        'The server has no transpiled planner component to send. Building it needs Node.js 20+ ',
        'and npm; in a checkout of fleet, run',
        element('pre', {}, 'cd preview\nnpm ci\nnpm run build'),
        'and reload this page, or start the server with ',
        element('code', {}, '--preview-dir'),
        ' pointing at a built copy. Everything else in fleet works without it.',
      );
    } else {
      showNotice(element('strong', {}, `${error.code ?? 'ERROR'}: `), error.message);
    }
    return;
  }
  $('workspace').hidden = false;
  $('document').value = session.exported;
  $('outcome').hidden = true;
  replan();
}

/** Asks before applying, with the plan's summary; loudly when it deletes or archives. */
function confirmApply(plan) {
  const { create, update, restore, delete: deletes, archive, rename } = plan.summary;
  const calls = plan.calls.length;
  const renames = rename ? `, ${rename} to rename` : '';
  const lines = [`Apply ${calls} ${calls === 1 ? 'call' : 'calls'} to the tenant?`,
    `${create} to create, ${update} to update, ${restore} to restore${renames}.`];
  if (deletes + archive > 0) {
    lines.unshift(`⚠ THIS DELETES ${deletes} AND ARCHIVES ${archive} ${deletes + archive === 1 ? 'OBJECT' : 'OBJECTS'}.`);
  }
  return window.confirm(lines.join('\n'));
}

/** The status after an apply, in words. */
function describeStatus(status) {
  if (!status.applied) return 'No document is applied.';
  const { planHash, appliedBy, appliedAt } = status.applied;
  const drift = status.drift ? `Drifted (${status.drift.changes.length} changes) at the check of ${status.checkedAt}.` : 'In sync.';
  return `Applied ${planHash} by ${appliedBy} at ${appliedAt}. ${drift}`;
}

/** What moved between the plan the page applied and the plan for the estate now. */
function whatMoved(before, now) {
  const key = (change) => `${change.kind} ${change.key}`;
  const nowByKey = new Map(now.changes.map((change) => [key(change), change.text]));
  const beforeKeys = new Set(before.changes.map(key));
  const lines = [];
  for (const change of before.changes) {
    const text = nowByKey.get(key(change));
    if (text !== change.text) lines.push(`was:  ${change.text}\nnow:  ${text ?? `nothing to do for ${key(change)}`}`);
  }
  for (const change of now.changes) {
    if (!beforeKeys.has(key(change))) lines.push(`was:  nothing for ${key(change)}\nnow:  ${change.text}`);
  }
  return lines.length ? lines.join('\n') : 'the same changes, against an estate whose other values moved';
}

async function apply() {
  if (!session.plan || session.busy) return;
  if (session.plan.calls.length > 0 && !confirmApply(session.plan)) return;
  session.busy = true;
  $('apply').disabled = true;
  const applying = session.plan;
  const request = JSON.parse(session.request);
  request.planHash = applying.planHash;
  try {
    const applied = await api('fleet/apply', JSON.stringify(request));
    const status = await api('fleet/status', {});
    const calls = `${applied.applied} ${applied.applied === 1 ? 'call' : 'calls'}`;
    showOutcome(true, `Applied ${calls}.`, describeStatus(status));
    // The state changed: plan the same document against a new snapshot.
    const edited = $('document').value;
    await loadTenant();
    $('document').value = edited;
  } catch (error) {
    if (error.code === 'CONFIG_DRIFT') {
      // Someone else changed the tenant: take a new snapshot, plan again, and say what moved.
      const edited = $('document').value;
      await loadTenant().catch(() => {});
      $('document').value = edited;
      replan();
      const now = session.plan;
      showOutcome(false, 'Not applied: the estate changed since this plan was made. The plan above is new; review it and apply again.',
        now ? whatMoved(applying, now) : undefined);
    } else {
      const detail = error.details && Object.keys(error.details).length ? error.details : undefined;
      showOutcome(false, `${error.code}: ${error.message}`, detail);
    }
  } finally {
    session.busy = false;
    replan();
  }
}

/** Takes a token from the URL fragment (#token=...), which is never sent to a server. */
function tokenFromFragment() {
  const token = new URLSearchParams(location.hash.slice(1)).get('token');
  if (token) {
    history.replaceState(null, '', location.pathname);
    $('token').value = token;
  }
  return token;
}

function init() {
  const fromFragment = tokenFromFragment();
  // A #token= link pasted into an open tab changes only the fragment.
  window.addEventListener('hashchange', () => {
    const token = tokenFromFragment();
    if (token) connect(token);
  });
  $('connect').addEventListener('submit', (event) => {
    event.preventDefault();
    connect($('token').value);
  });
  $('document').addEventListener('input', replan);
  $('prune').addEventListener('change', replan);
  $('apply').addEventListener('click', apply);
  $('reset').addEventListener('click', () => {
    $('document').value = session.exported;
    replan();
  });
  if (fromFragment) connect(fromFragment);
}

init();

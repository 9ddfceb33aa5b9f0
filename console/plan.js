// The Plan view: a document typed, pasted or dropped, planned in the browser by the
// planner component (with the tenant's plugins and policies, from the snapshot) on
// every edit, and applied through the server on confirmation with the plan hash shown.
// History's rollback plans a revision's document here too. The component is loaded by
// load.js; the change lines and verdicts are drawn by render.js, as other views draw them.

import { PlannerError } from './planner.js';
import { importYaml, newPlanner } from './load.js';
import { changeRows, renderVerdicts } from './render.js';
import { $, element, kindNoun, plural } from './dom.js';
import { ApiFailure, SignedOut, api, explain, loadTenant, showNotice, tenant } from './session.js';

/** The plan view's state: the planner over the current snapshot and the last plan. */
const session = {
  planner: null,
  plan: null,
  request: '',
  busy: false,
  /** js-yaml, loaded with the planner from the assets. */
  yaml: null,
  /** Whether the editor holds the export as it was loaded (so a reload may replace it). */
  pristine: true,
  /** What the view says about the document another view handed it (a rollback, a file). */
  intent: null,
};

// ---- the planner ------------------------------------------------------------------

/**
 * After every (re)load of the tenant: a planner over the new snapshot, and the editor
 * reset to the export unless it holds an edit. Without the transpiled planner the
 * rest of the console works; the plan view says what to build.
 */
export async function showTenantInPlan() {
  const missing = tenant.missing;
  $('missing').hidden = missing.length === 0;
  $('missing').textContent = missing.length
    ? `This deployment does not run the modules of: ${missing.join(', ')}. Objects there are blocked.`
    : '';
  const snapshot = tenant.snapshot;
  let planner = null;
  let failure = null;
  try {
    planner = await newPlanner(snapshot);
    session.yaml ??= await importYaml();
  } catch (error) {
    failure = error;
  }
  // A newer snapshot (or a sign-out) came meanwhile: its own call shows it.
  if (tenant.snapshot !== snapshot) return;
  session.planner = planner;
  if (failure) {
    // The rest of the console works without a planner: say why in this view only.
    showNotPlannable(failure.missingAssets ? failure.message : `it failed to load: ${explain(failure)}`);
  } else {
    showIntent();
  }
  if (session.pristine) $('document').value = exportedText();
  replan();
}

function showNotPlannable(message) {
  const box = $('plan-intent');
  box.hidden = false;
  box.replaceChildren(
    element('strong', {}, 'The planner cannot run in this page. '),
    message,
    '. Everything else in the console works without it.',
  );
  showPlanError({ code: 'UNAVAILABLE', message: 'no planner in this page' });
}

/** What the view says above the editor about the document it was handed, if anything. */
function showIntent() {
  $('plan-intent').hidden = !session.intent;
  $('plan-intent').replaceChildren(session.intent ?? '');
}

/** Forgets the signed-out tenant's document, plan and planner. */
export function forgetPlan() {
  Object.assign(session, { planner: null, plan: null, request: '', pristine: true, intent: null });
  $('document').value = '';
  $('file').value = '';
  $('prune').checked = false;
  showPlanError({ code: 'UNAVAILABLE', message: 'signed out' });
  for (const id of ['errors', 'plan-intent', 'outcome', 'blocked', 'verdicts', 'left-alone', 'missing']) {
    $(id).hidden = true;
    $(id).replaceChildren();
  }
}

const exportedText = () => JSON.stringify(tenant.document, null, 2);

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
  } catch (error) {
    // A bug of this page, not of the document: said here, never a failed sign-in.
    showPlanError({ code: 'INTERNAL', message: `the page failed to show the plan: ${explain(error)}` });
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
      const snapshot = tenant.snapshot;
      newPlanner(snapshot)
        .then((planner) => tenant.snapshot === snapshot && (session.planner = planner))
        .catch((failure) => showNotPlannable(`it failed to load again: ${explain(failure)}`));
    }
    showPlanError(error);
  }
}

// ---- rendering --------------------------------------------------------------------

/** `1 live flavor not in the document is left alone; prune would delete it.`, per kind and action. */
function leftAloneLines(leftAlone) {
  const groups = new Map();
  for (const entry of leftAlone ?? []) {
    const key = `${entry.kind} ${entry.action}`;
    groups.set(key, { ...entry, count: (groups.get(key)?.count ?? 0) + 1 });
  }
  return [...groups.values()].map(({ kind, action, count }) => {
    const noun = `live ${kindNoun(kind)}${count === 1 ? '' : 's'}`;
    return `${count} ${noun} not in the document ${count === 1 ? 'is' : 'are'} left alone; prune would ${action} ${count === 1 ? 'it' : 'them'}.`;
  });
}

function renderPlan(plan, text) {
  $('errors').hidden = true;
  const counts = Object.entries(plan.summary)
    .filter(([name, count]) => count > 0 && !['unchanged', 'blocked', 'denied', 'warnings', 'approvalRequired'].includes(name))
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
  if (plan.summary.approvalRequired) parts.push(`${plan.summary.approvalRequired} requiring approval`);
  if (plan.summary.warnings) parts.push(plural(plan.summary.warnings, 'warning'));
  parts.push(plural(calls, 'call'));
  $('summary').textContent = parts.join(' · ');
  $('summary').className = `summary${calls === 0 && plan.blocked.length === 0 ? ' none' : ''}`;
  $('changes').replaceChildren(...changeRows(plan.changes, tenant.snapshot.modules ?? []));

  const blocked = $('blocked');
  blocked.hidden = plan.blocked.length === 0;
  blocked.replaceChildren();
  if (plan.blocked.length) {
    const list = element('ul');
    for (const reason of plan.blocked) {
      list.append(element('li', {}, element('code', {}, `${reason.kind} ${reason.key}`), ` (${reason.field}): ${reason.reason}`));
    }
    blocked.append(element('h4', {}, 'Blocked: apply is refused until these are resolved'), list);
  }

  renderVerdicts(plan.policy, $('verdicts'));
  const denied = (plan.summary.denied ?? 0) > 0;
  const needsApproval = (plan.summary.approvalRequired ?? 0) > 0;
  $('plan-hash').textContent = plan.planHash;
  $('plan-json').textContent = text;
  $('apply').disabled = session.busy || plan.blocked.length > 0 || denied || needsApproval;
  $('apply').title = plan.blocked.length
    ? 'the plan has blocked changes'
    : denied
      ? 'policies deny the plan; a mandatory one can be overridden with fleet apply --override'
      : needsApproval
        ? 'policies require approval: propose this plan and have it reviewed'
        : `apply ${plural(calls, 'call')} with this plan hash`;
  // Enforced denials cannot be proposed; mandatory ones can, overridden at apply.
  const enforced = (plan.policy?.verdicts ?? []).some((verdict) => verdict.rule === 'deny' && verdict.level === 'enforced');
  $('propose').disabled = session.busy || plan.blocked.length > 0 || enforced || calls === 0;
  $('propose').title = calls === 0 ? 'nothing to propose' : 'keep this plan as a proposal, for others to review';
}

function showPlanError(error) {
  session.plan = null;
  const box = $('errors');
  box.hidden = false;
  box.replaceChildren(element('h4', {}, `${error.code}: ${error.message}`));
  const problems = error.details?.problems ?? [];
  if (problems.length) {
    box.append(element('ul', {}, problems.map((problem) =>
      element('li', {}, element('code', {}, problem.path || '/'), ` ${problem.message}`))));
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
  $('propose').disabled = true;
}

function showOutcome(ok, title, detail) {
  const box = $('outcome');
  box.hidden = false;
  box.className = `outcome${ok ? '' : ' failed'}`;
  box.replaceChildren(element('strong', {}, title));
  if (detail !== undefined) box.append(element('pre', {}, typeof detail === 'string' ? detail : JSON.stringify(detail, null, 2)));
}

// ---- actions ----------------------------------------------------------------------

/**
 * Puts `text` in the editor and plans it, with `intent` said above it (a rollback,
 * a dropped file): the way other views hand a document to this one.
 */
export function planDocument(text, prune, intent) {
  $('document').value = text;
  $('prune').checked = prune;
  $('outcome').hidden = true;
  session.pristine = false;
  session.intent = intent ?? null;
  showIntent();
  replan();
}

/** Asks before applying, with the plan's summary; loudly when it deletes or archives. */
function confirmApply(plan) {
  const { create, update, restore, delete: deletes, archive, rename } = plan.summary;
  const calls = plan.calls.length;
  const renames = rename ? `, ${rename} to rename` : '';
  const lines = [`Apply ${plural(calls, 'call')} to the tenant?`,
    `${create} to create, ${update} to update, ${restore} to restore${renames}.`];
  if (deletes + archive > 0) {
    lines.unshift(`⚠ THIS DELETES ${deletes} AND ARCHIVES ${archive} ${deletes + archive === 1 ? 'OBJECT' : 'OBJECTS'}.`);
  }
  return window.confirm(lines.join('\n'));
}

/** The status after an apply, in words. */
function describeStatus(status) {
  if (!status.applied) return 'No document is applied.';
  const { revision, planHash, appliedBy, appliedAt } = status.applied;
  const drift = status.drift ? `Drifted (${plural(status.drift.changes.length, 'change')}) at the check of ${status.checkedAt}.` : 'In sync.';
  return `Revision ${revision}: ${planHash} by ${appliedBy} at ${appliedAt}. ${drift}`;
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

/** Plans the same editor text against a new snapshot (after an apply, here or elsewhere). */
async function reloadKeepingEdit() {
  const edited = $('document').value;
  const pristine = session.pristine;
  await loadTenant();
  if (!pristine) $('document').value = edited;
  replan();
}

async function apply() {
  if (!session.plan || session.busy) return;
  if (session.plan.calls.length > 0 && !confirmApply(session.plan)) return;
  session.busy = true;
  $('apply').disabled = true;
  const applying = session.plan;
  // The very bytes planned (`{"document": ..., "prune": ...}`), with the plan hash added.
  const request = `${session.request.slice(0, -1)}, "planHash": ${JSON.stringify(applying.planHash)}}`;
  try {
    const applied = await api('fleet/apply', request);
    session.intent = null;
    const done = `Applied ${plural(applied.applied, 'call')}.`;
    // The state changed: say what it is now, and plan the same document against it.
    try {
      const status = await api('fleet/status', {});
      showOutcome(true, done, describeStatus(status));
      await reloadKeepingEdit();
    } catch (error) {
      if (!(error instanceof SignedOut)) showOutcome(true, done, `The tenant could not be read again: ${explain(error)}`);
    }
  } catch (error) {
    if (error instanceof SignedOut) return;
    if (error.code === 'CONFIG_DRIFT') {
      // Someone else changed the tenant: take a new snapshot, plan again, and say what moved.
      await reloadKeepingEdit().catch(() => {});
      const now = session.plan;
      showOutcome(false, 'Not applied: the estate changed since this plan was made. The plan above is new; review it and apply again.',
        now ? whatMoved(applying, now) : undefined);
    } else {
      showRefusal(error);
    }
  } finally {
    session.busy = false;
    replan();
  }
}

/** An action's refusal: the server's, with what it lists, below the plan; else a notice. */
function showRefusal(error) {
  if (error instanceof ApiFailure) {
    const detail = error.details && Object.keys(error.details).length ? error.details : undefined;
    showOutcome(false, error.explained, detail);
  } else {
    showNotice(explain(error));
  }
}

/**
 * Keeps the plan on screen as a proposal (SPEC §17): the very bytes planned, with a
 * title, planned again by the server; then the Proposals view shows it.
 */
async function propose() {
  if (!session.plan || session.busy) return;
  const title = window.prompt('What is this change for? (the proposal\'s title)', '');
  if (title === null) return;
  session.busy = true;
  $('propose').disabled = true;
  const request = `${session.request.slice(0, -1)}, "title": ${JSON.stringify(title.slice(0, 200))}}`;
  try {
    const { proposal } = await api('proposals/create', request);
    session.intent = null;
    showOutcome(true, `Proposed as #${proposal.number}${proposal.approved ? ', approved' : ''}.`,
      'Another principal reviews it in the Proposals view; once approved, it is applied from there.');
    location.hash = `#proposals/${proposal.number}`;
  } catch (error) {
    if (!(error instanceof SignedOut)) showRefusal(error);
  } finally {
    session.busy = false;
    replan();
  }
}

/**
 * Whether a proposal is approved, as the planner in this page judges it (SPEC §17): its
 * document planned with the proposal; none without a planner.
 */
export function judgeProposal(document, prune, proposal) {
  if (!session.planner) return null;
  const { number, author, title, reviews } = proposal;
  const request = JSON.stringify({ document, prune, proposal: { number, author, title, reviews } });
  try {
    return JSON.parse(session.planner.plan(request)).approval ?? null;
  } catch {
    return null;
  }
}

/** Reads a dropped or chosen file into the editor. */
async function openFile(file) {
  if (!file) return;
  planDocument(await file.text(), $('prune').checked, `Planning ${file.name}.`);
}

/** Wires the view's controls once; `showTenantInPlan` loads a planner per snapshot. */
export function mountPlan() {
  $('document').addEventListener('input', () => {
    session.pristine = false;
    replan();
  });
  $('prune').addEventListener('change', replan);
  $('apply').addEventListener('click', apply);
  $('propose').addEventListener('click', propose);
  $('reset').addEventListener('click', () => {
    planDocument(exportedText(), false);
    session.pristine = true;
  });
  $('file').addEventListener('change', () => openFile($('file').files[0]));
  const editor = $('document');
  editor.addEventListener('dragover', (event) => {
    event.preventDefault();
    editor.classList.add('dropping');
  });
  editor.addEventListener('dragleave', () => editor.classList.remove('dropping'));
  editor.addEventListener('drop', (event) => {
    event.preventDefault();
    editor.classList.remove('dropping');
    openFile(event.dataTransfer.files[0]);
  });
}

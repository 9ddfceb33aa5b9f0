// The console (SPEC §16): sign-in, the views and what they share — the API with the
// session's token, the tenant's export and snapshot, and the live event stream. Each
// view is its own module; the planner runs in the browser (planner.js, plan.js).

import { $, element, own } from './dom.js';
import { forgetPlan, mountPlan, showTenantInPlan } from './plan.js';
import { renderStatus, showEvents } from './status.js';
import { mountEstate, renderEstate, renderObject } from './estate.js';
import { mountHistory, renderHistory } from './history.js';
import { renderCapacity } from './capacity.js';

const API = '/api/compute/';
/** The state a planner reads, which export answers with for this `Accept` (SPEC §11). */
const STATE_MEDIA_TYPE = 'application/vnd.fleet.state+json';
/** Where the token is kept: this tab's session storage, never a URL or a cookie. */
const TOKEN_KEY = 'fleet.token';

/** An error answer of the API: its code, message and details, and what permission it lacked. */
export class ApiFailure extends Error {
  constructor(status, body) {
    const error = body?.error ?? {};
    super(error.message ?? `HTTP ${status}`);
    this.status = status;
    this.code = error.code ?? `HTTP_${status}`;
    this.details = error.details;
  }

  /** For people: a denial names the permission the token lacks. */
  get explained() {
    const { permission, scope } = this.details ?? {};
    if (this.status === 403 && permission) {
      return `${this.code}: the token lacks ${permission} @ ${scope}. ${this.message}`;
    }
    if (this.status === 401) return `${this.code}: the token is not accepted (${this.message}). Sign in again.`;
    return `${this.code}: ${this.message}`;
  }
}

/**
 * An answer that arrived for a session that has ended (signed out, or signed in again):
 * what it holds is dropped, never shown.
 */
export class SignedOut extends Error {}

/** What the page knows about the signed-in tenant; views read it, `loadTenant` fills it. */
export const tenant = {
  token: '',
  /** Counts sign-ins and sign-outs: an answer is for the session it was asked in. */
  session: 0,
  /** The export's document (names, no ids), its `missing` kinds, and the planner's snapshot. */
  document: null,
  missing: [],
  snapshot: null,
  /** `fleet.status`, refreshed by the event stream. */
  status: null,
  /** Sections in the snapshot's kind order: `[{kind, section}]`. */
  kinds: [],
  /** When (the server's clock, ms, to the second) the export was read. */
  readAt: 0,
};

/**
 * POSTs to `compute.<method>` (e.g. `fleet/export`) with the session's token; `answer`,
 * when given, receives the server's `Date` of the answer (`answer.at`, in ms).
 */
export async function api(method, body, accept = 'application/json', answer = {}) {
  const session = tenant.session;
  const response = await fetch(API + method, {
    method: 'POST',
    headers: { Authorization: `Bearer ${tenant.token}`, 'Content-Type': 'application/json', Accept: accept },
    body: typeof body === 'string' ? body : JSON.stringify(body ?? {}),
  });
  answer.at = Date.parse(response.headers.get('date') ?? '');
  const text = await response.text();
  if (tenant.session !== session) throw new SignedOut(`${method} answered after the session ended`);
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    value = { error: { message: text } };
  }
  if (!response.ok) throw new ApiFailure(response.status, value);
  return value;
}

/** The sections of the built-in kinds (SPEC §4); plugins name theirs in their descriptors. */
const BUILT_IN_SECTIONS = {
  site: 'sites', providerAccount: 'providerAccounts', pool: 'pools', ownerQuota: 'ownerQuotas', offer: 'offers',
  flavor: 'flavors',
};

/** Counts reads of the tenant: only the newest one is shown. */
let reads = 0;

/**
 * Loads (or reloads, after an apply or an event) the export, the snapshot and the
 * status; changes nothing when a newer read began meanwhile.
 */
export async function loadTenant() {
  const read = {};
  const mine = ++reads;
  const [exported, snapshot, status] = await Promise.all([
    api('fleet/export', {}, 'application/json', read),
    api('fleet/export', {}, STATE_MEDIA_TYPE),
    api('fleet/status', {}),
  ]);
  if (mine !== reads) return;
  const plugins = new Map((snapshot.plugins ?? []).map(({ descriptor }) => [descriptor.kind, descriptor.section]));
  tenant.document = exported.document;
  tenant.readAt = read.at || 0;
  tenant.missing = exported.missing ?? [];
  tenant.snapshot = snapshot;
  tenant.status = status;
  tenant.kinds = (snapshot.modules ?? Object.keys(BUILT_IN_SECTIONS))
    .map((kind) => ({ kind, section: own(BUILT_IN_SECTIONS, kind) ?? plugins.get(kind) }))
    .filter(({ section }) => section);
  const objects = tenant.kinds.reduce((sum, { section }) => sum + Object.keys(exported.document[section] ?? {}).length, 0);
  $('who').textContent = `tenant ${snapshot.caller.tenant} · ${snapshot.caller.principal} · ${objects} objects`;
  await showTenantInPlan();
}

/** An error for people, from any failure a view meets. */
export const explain = (error) => (error instanceof ApiFailure ? error.explained : String(error?.message ?? error));

/** Shows `nodes` in the notice box; none hides it. */
export function showNotice(...nodes) {
  $('notice').hidden = nodes.length === 0;
  $('notice').replaceChildren(...nodes);
}

// ---- sign-in ----------------------------------------------------------------------

async function signIn(token) {
  stream?.abort();
  tenant.token = token.trim();
  tenant.session += 1;
  showNotice();
  $('who').textContent = 'signing in…';
  const submit = $('sign-in').querySelector('button');
  submit.disabled = true;
  try {
    await loadTenant();
  } catch (error) {
    if (error instanceof SignedOut) return;
    tenant.token = '';
    sessionStorage.removeItem(TOKEN_KEY);
    $('who').textContent = '';
    showNotice(element('strong', {}, 'Not signed in. '), explain(error));
    return;
  } finally {
    submit.disabled = false;
  }
  sessionStorage.setItem(TOKEN_KEY, tenant.token);
  $('token').value = '';
  $('sign-in').hidden = true;
  $('signed-in').hidden = false;
  $('views').hidden = false;
  $('welcome').hidden = true;
  listen();
  route();
}

function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  tenant.session += 1;
  stream?.abort();
  stream = null;
  Object.assign(tenant, { token: '', document: null, snapshot: null, status: null, kinds: [], missing: [], readAt: 0 });
  // Nothing of the tenant stays in the page for whoever signs in next.
  for (const view of document.querySelectorAll('.view')) view.hidden = true;
  for (const id of ['status-body', 'events', 'kinds', 'rows', 'object-body', 'revisions', 'difference', 'owners', 'from', 'to']) {
    $(id).replaceChildren();
  }
  for (const id of ['who', 'live', 'estate-count', 'shown', 'object-title']) $(id).textContent = '';
  $('filter').value = '';
  forgetPlan();
  $('views').hidden = true;
  $('signed-in').hidden = true;
  $('sign-in').hidden = false;
  $('welcome').hidden = false;
  delete document.body.dataset.view;
  shownView = null;
  showNotice();
  history.replaceState(null, '', location.pathname);
  $('token').focus();
}

// ---- views ------------------------------------------------------------------------

/** `#object/pool/gpu-a` -> `['object', 'pool', 'gpu-a']`, each part decoded. */
function currentRoute() {
  const parts = location.hash.slice(1).split('/').map((part) => {
    try {
      return decodeURIComponent(part);
    } catch {
      return part;
    }
  });
  return parts[0] ? parts : ['status'];
}

/** Shows the view the URL's fragment names, rendered from what the page knows now. */
export function route() {
  if (!tenant.snapshot) return;
  const [name, ...rest] = currentRoute();
  const view = VIEWS.has(name) ? name : 'status';
  for (const section of document.querySelectorAll('.view')) section.hidden = section.id !== `view-${view}`;
  for (const link of $('views').querySelectorAll('a')) {
    const current = link.dataset.view === view || (view === 'object' && link.dataset.view === 'estate');
    if (current) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  document.body.dataset.view = view;
  // A new view takes the focus to its heading, so that keyboard and screen-reader users
  // start there (a redraw of the same view leaves the focus where it is).
  if (shownView !== view) $(`view-${view}`).querySelector('h2')?.focus({ preventScroll: true });
  shownView = view;
  render(view, rest).catch((error) => error instanceof SignedOut || showNotice(explain(error)));
}

/** The views, as the URL's fragment names them (`#estate/pool` is the estate's). */
const VIEWS = new Set(['status', 'estate', 'object', 'plan', 'history', 'capacity']);

/** The view on screen, to tell a redraw from a change of view. */
let shownView = null;

async function render(view, rest) {
  if (view === 'status') renderStatus(tenant.status, recent);
  else if (view === 'estate') renderEstate(rest[0]);
  else if (view === 'object') await renderObject(rest[0], rest[1]);
  else if (view === 'history') await renderHistory();
  else if (view === 'capacity') renderCapacity(tenant.document);
}

// ---- the event stream -------------------------------------------------------------

let stream = null;
/** The newest events seen, newest first, for the status view. */
const recent = [];
const RECENT = 20;

/**
 * Follows `GET /api/compute/events/stream` (SSE) with the token as a bearer header,
 * which an EventSource cannot send: fetch reads the frames. Every event refreshes the
 * status, at most once per burst. The stream resumes after the last event it saw when
 * it drops, and lets go of its connection while the tab is hidden (a browser opens
 * only six to one server, for every tab together), catching up when it is shown again.
 */
function listen() {
  const signedIn = new AbortController();
  stream = signedIn;
  let after = 0;
  let connection = null;
  let refreshing = null;
  const hidden = () => document.visibilityState === 'hidden';
  document.addEventListener('visibilitychange', () => hidden() && connection?.abort(), { signal: signedIn.signal });
  signedIn.signal.addEventListener('abort', () => clearTimeout(refreshing));
  // An event means the estate or its status moved (a drift, an apply, a heal): read the
  // tenant again and draw the view on screen from it.
  const refresh = () => {
    refreshing ??= setTimeout(async () => {
      refreshing = null;
      try {
        await loadTenant();
        if (document.body.dataset.view !== 'plan') route();
      } catch (error) {
        if (!(error instanceof SignedOut)) $('live').textContent = `not up to date: ${explain(error)}`;
      }
    }, 150);
  };
  const receive = (frame) => {
    const data = frame.split('\n').filter((line) => line.startsWith('data: ')).map((line) => line.slice(6)).join('\n');
    if (!data) return;
    const event = JSON.parse(data);
    after = Math.max(after, event.seq ?? after);
    recent.unshift(event);
    recent.length = Math.min(recent.length, RECENT);
    showEvents(recent);
    // What happened before the second the tenant was read is in what the page shows
    // (the stream's first frames replay the tenant's events).
    if (!(Date.parse(event.at) < tenant.readAt)) refresh();
  };
  const follow = async () => {
    while (!signedIn.signal.aborted) {
      if (hidden()) {
        $('live').textContent = 'paused while this tab is hidden';
        await new Promise((shown) => document.addEventListener('visibilitychange', shown, { once: true }));
        continue;
      }
      connection = new AbortController();
      try {
        const response = await fetch(`${API}events/stream?after=${after}`, {
          headers: { Authorization: `Bearer ${tenant.token}`, Accept: 'text/event-stream' },
          signal: AbortSignal.any([signedIn.signal, connection.signal]),
        });
        if (!response.ok) {
          const failure = new ApiFailure(response.status, await response.json().catch(() => ({})));
          $('live').textContent = `not live: ${failure.explained}`;
          // A token that may not follow the stream stays refused; anything else is retried.
          if ([401, 403].includes(response.status)) return;
          throw failure;
        }
        $('live').textContent = 'live';
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffered = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffered += value;
          let end;
          while ((end = buffered.indexOf('\n\n')) >= 0) {
            receive(buffered.slice(0, end));
            buffered = buffered.slice(end + 2);
          }
        }
      } catch {
        if (signedIn.signal.aborted) return;
        if (connection.signal.aborted) continue;
      }
      $('live').textContent = 'reconnecting…';
      await new Promise((done) => setTimeout(done, 1000));
    }
  };
  recent.length = 0;
  showEvents(recent);
  follow();
}

function init() {
  $('sign-in').addEventListener('submit', (event) => {
    event.preventDefault();
    signIn($('token').value);
  });
  $('sign-out').addEventListener('click', signOut);
  // The skip link moves the focus; it is not a view of its own.
  document.querySelector('a.skip').addEventListener('click', (event) => {
    event.preventDefault();
    $('main').focus();
  });
  window.addEventListener('hashchange', route);
  mountPlan();
  mountEstate();
  mountHistory();
  const kept = sessionStorage.getItem(TOKEN_KEY);
  if (kept) signIn(kept);
}

init();

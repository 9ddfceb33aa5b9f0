// The console's session (SPEC §16): the signed-in token (kept in this tab's session
// storage), the API client that sends it, what the page has read of the tenant, errors
// for people and the page's notice. Every view imports it and it imports no view, so
// what the page draws after a read of the tenant is handed to it by app.js.

import { $, own } from './dom.js';

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

  /** For people: a denial names the permission the token lacks, once. */
  get explained() {
    const { permission, scope } = this.details ?? {};
    if (this.status === 403 && permission && !this.message.includes(permission)) {
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
  /** What the token may do, found at sign-in: `{fleet, proposals, webhooks}`. */
  may: null,
  /** Who signed in, as far as the page knows (from the snapshot, or from a denial). */
  principal: null,
};

/**
 * What the signed-in token may read, asked of the server once, at sign-in: each view
 * is shown only to a token that may read what it shows (a reviewer's sees Proposals).
 * `UNAUTHENTICATED` fails the sign-in; a denial only closes that view.
 */
export async function probe() {
  const may = {};
  const ask = async (name, method, body) => {
    try {
      await api(method, body);
      may[name] = true;
    } catch (error) {
      if (!(error instanceof ApiFailure) || error.status !== 403) throw error;
      may[name] = false;
      tenant.principal ??= error.details?.principal ?? null;
    }
  };
  await Promise.all([
    ask('fleet', 'fleet/status', {}),
    ask('proposals', 'proposals/list', { limit: 1 }),
    ask('webhooks', 'webhooks/list', {}),
  ]);
  tenant.may = may;
  return may;
}

// ---- the session's token ----------------------------------------------------------

/** The token this tab signed in with before a reload of the page, if any. */
export const keptToken = () => sessionStorage.getItem(TOKEN_KEY);

/** Starts a session with `token`: answers to the calls of an earlier one are dropped. */
export function beginSession(token) {
  tenant.token = token.trim();
  tenant.session += 1;
  Object.assign(tenant, { may: null, principal: null });
}

/** Keeps the session's token, which the server accepted, for a reload of the page. */
export function keepToken() {
  sessionStorage.setItem(TOKEN_KEY, tenant.token);
}

/** Forgets a token the server did not accept, here and in the tab's storage. */
export function forgetToken() {
  tenant.token = '';
  sessionStorage.removeItem(TOKEN_KEY);
}

/**
 * Ends the session: its token and everything read of the tenant are forgotten, and
 * answers to its calls still on their way are dropped.
 */
export function endSession() {
  sessionStorage.removeItem(TOKEN_KEY);
  tenant.session += 1;
  Object.assign(tenant, {
    token: '', document: null, snapshot: null, status: null, kinds: [], missing: [], readAt: 0, may: null, principal: null,
  });
}

// ---- the API ----------------------------------------------------------------------

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

/**
 * Opens `GET /api/compute/events/stream` (SSE) after event `after`, with the session's
 * token as a bearer header, which an EventSource cannot send: the caller reads the
 * frames of the response's body.
 */
export function eventStream(after, signal) {
  return fetch(`${API}events/stream?after=${after}`, {
    headers: { Authorization: `Bearer ${tenant.token}`, Accept: 'text/event-stream' },
    signal,
  });
}

// ---- the tenant -------------------------------------------------------------------

/** The sections of the built-in kinds (SPEC §4); plugins name theirs in their descriptors. */
const BUILT_IN_SECTIONS = {
  site: 'sites', providerAccount: 'providerAccounts', pool: 'pools', ownerQuota: 'ownerQuotas', offer: 'offers',
  flavor: 'flavors',
};

/** Counts reads of the tenant: only the newest one is shown. */
let reads = 0;

/** What the page draws from each read of the tenant it keeps; app.js sets it. */
let showTenant = async () => {};

/**
 * Sets what `loadTenant` awaits after each read it keeps (app.js: who is signed in, and
 * the plan view's planner over the new snapshot), so that this module needs no view.
 */
export function onTenantRead(show) {
  showTenant = show;
}

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
  tenant.principal = snapshot.caller?.principal ?? tenant.principal;
  tenant.status = status;
  tenant.kinds = (snapshot.modules ?? Object.keys(BUILT_IN_SECTIONS))
    .map((kind) => ({ kind, section: own(BUILT_IN_SECTIONS, kind) ?? plugins.get(kind) }))
    .filter(({ section }) => section);
  await showTenant();
}

// ---- for people -------------------------------------------------------------------

/** An error for people, from any failure a view meets. */
export const explain = (error) => (error instanceof ApiFailure ? error.explained : String(error?.message ?? error));

/** Shows `nodes` in the notice box; none hides it. */
export function showNotice(...nodes) {
  $('notice').hidden = nodes.length === 0;
  $('notice').replaceChildren(...nodes);
}

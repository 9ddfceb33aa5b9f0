// The Source view (SPEC §20.3): the tenant's git source — where its document is read
// from, what git holds against what was applied (the state of the last cycle, head and
// applied commits, the last attempt's error, the proposal it waits on, the pin) — and
// refresh, sync, pin and unpin, each only for a token that may call it.

import { $, element, when } from './dom.js';
import { ApiFailure, SignedOut, api, explain, tenant } from './session.js';

/** Commits are shown by their first 12 characters, as `fleet source` prints them. */
const SHORT = 12;
/** A full commit id, as the server takes one (SHA-1 or SHA-256). */
const COMMIT = /^[0-9a-f]{40}([0-9a-f]{24})?$/;
/** What a source without one says to do (SPEC §20.3's command line). */
const SET_COMMAND = 'fleet source set URL --mode observe|propose|auto [--branch B] [--path P]';

/** Counts reads of the view: an answer for an older read is dropped. */
let reads = 0;
/** What the last action came to, `{ ok, title, detail }`: said again when the view is drawn anew. */
let said = null;
/** The method catalogue (`GET /api/methods`): what each method needs, the same for every token. */
let catalogue = null;
/** What the session's token may do here, `{ session, refresh, sync, pin, unpin }`, found once per session. */
let may = null;

// ---- what the token may do --------------------------------------------------------

/** The permission and scope `compute.<name>` needs, from the server's catalogue. */
async function needs(name) {
  catalogue ??= fetch('/api/methods').then((response) => {
    if (!response.ok) throw new Error(`the method catalogue answered HTTP ${response.status}`);
    return response.json();
  });
  const method = (await catalogue).methods.find((entry) => entry.name === `compute.${name}`);
  if (!method) throw new Error(`the server does not serve compute.${name}`);
  return method;
}

/** `compute:*:* @ *` allows `compute:sources:read` at `compute-sources`, as the server decides (auth.rs). */
function allows(grant, { permission, scope }) {
  const [have, at] = grant.split('@').map((part) => part.trim());
  const segments = have.split(':');
  const wanted = permission.split(':');
  return segments.length === 3 && wanted.length === 3 && segments.every((part, index) => part === '*' || part === wanted[index]) &&
    (at === '*' || at === scope);
}

/** The token's grants, when the snapshot names them (a token that may read the fleet); else `undefined`. */
const grants = () => (Array.isArray(tenant.snapshot?.caller?.grants) ? tenant.snapshot.caller.grants : undefined);

/** Whether the grants known allow every one of `names` (`sources.sync` also needs `fleet.apply`). */
async function granted(known, ...names) {
  const wanted = await Promise.all(names.map(needs));
  return wanted.every((method) => known.some((grant) => allows(grant, method)));
}

/**
 * Whether the server refuses `method` to this token, asked with a body no method takes
 * (`{"probe": true}`): authorization is decided before the body is read, so the answer
 * is a denial (403) or a refusal of the body, and nothing is done either way.
 */
async function permitted(method) {
  try {
    await api(method, { probe: true });
    return true;
  } catch (error) {
    if (error instanceof ApiFailure && error.status === 403) return false;
    if (error instanceof ApiFailure && error.status === 400) return true;
    throw error;
  }
}

/**
 * Whether the signed-in token may read the source, for app.js at sign-in: from the
 * grants the snapshot names when the token may read the fleet (no request the browser
 * would log as failed), else asked of the server (`NOT_FOUND`, no source, is a yes).
 */
export async function sourcesReadable() {
  const known = grants();
  if (known) return granted(known, 'sources.get');
  try {
    await api('sources/get', {});
    return true;
  } catch (error) {
    if (error instanceof ApiFailure && error.status === 404) return true;
    if (error instanceof ApiFailure && error.status === 403) return false;
    throw error;
  }
}

/**
 * What the token may do to the source: decided from its grants when the snapshot names
 * them; else asked of the server with `permitted` for the `compute:sources:write`
 * actions, and sync (which also needs what an apply needs, that the page cannot ask
 * without applying) left out.
 */
async function actions() {
  if (may?.session === tenant.session) return may;
  const session = tenant.session;
  const known = grants();
  let found;
  if (known) {
    const [refresh, sync, pin, unpin] = await Promise.all([
      granted(known, 'sources.refresh'), granted(known, 'sources.sync', 'fleet.apply'),
      granted(known, 'sources.pin'), granted(known, 'sources.unpin'),
    ]);
    found = { refresh, sync, pin, unpin };
  } else {
    const write = await permitted('sources/unpin');
    found = { refresh: write, sync: false, pin: write, unpin: write };
  }
  if (session === tenant.session) may = { session, ...found };
  return found;
}

// ---- the view ---------------------------------------------------------------------

/** Renders the tenant's source (again, after an action or an event). */
export async function renderSources() {
  const mine = ++reads;
  const box = $('source-body');
  let source = null;
  let can;
  try {
    [source, can] = await Promise.all([
      api('sources/get', {}).then((answer) => answer.source, (error) => {
        if (error instanceof ApiFailure && error.code === 'NOT_FOUND') return null;
        throw error;
      }),
      actions(),
    ]);
  } catch (error) {
    if (mine === reads && !(error instanceof SignedOut)) box.replaceChildren(element('p', { class: 'errors' }, explain(error)));
    return;
  }
  if (mine !== reads) return;
  draw(source, can);
}

/** Draws `source` (or its absence) with the buttons `can` allows. */
function draw(source, can) {
  const box = $('source-body');
  if (!source) {
    said = null;
    box.replaceChildren(
      element('p', { id: 'source-state', class: 'state none' }, 'No source: this tenant\'s document is not read from git.'),
      element('p', {}, 'Make one with ', element('code', { id: 'source-command' }, SET_COMMAND),
        ' (see docs/guide/git.md).'));
    return;
  }
  const status = source.status ?? {};
  const nodes = [
    element('p', { id: 'source-state', class: `state ${status.state === 'synced' ? 'converged' : 'drifted'}` },
      status.state ?? 'unknown',
      status.error ? element('span', { id: 'source-error', class: 'reason' }, `: ${status.error}`) : null),
    facts(source, status),
  ];
  const bar = buttons(source, status, can);
  if (bar) nodes.push(bar);
  nodes.push(element('div', { id: 'source-outcome', class: 'outcome', role: 'status', hidden: true }));
  box.replaceChildren(...nodes);
  if (said) paint(said);
}

/** A commit, short, with the whole id as its title; `—` for none. */
const commit = (id, attributes = {}) => (typeof id === 'string'
  ? element('code', { ...attributes, title: id }, id.slice(0, SHORT))
  : element('span', attributes, '—'));

function facts(source, status) {
  const attempt = status.lastAttempt;
  const settings = [source.prune && 'prune', source.heal && 'heal', `every ${source.interval}`].filter(Boolean).join(', ');
  // The proposal links to the Proposals view only for a token that may read it.
  const proposal = status.proposal === undefined
    ? '—'
    : tenant.may?.proposals
      ? element('a', { href: `#proposals/${encodeURIComponent(status.proposal)}` }, `#${status.proposal}`)
      : `#${status.proposal}`;
  const pair = (term, detail) => [element('dt', {}, term), element('dd', {}, detail)];
  return element('dl', { class: 'facts', id: 'source-facts' },
    pair('Repository', element('code', { id: 'source-url' }, source.url)),
    pair('Branch', element('code', {}, source.branch)),
    pair('Path', element('code', {}, source.path)),
    pair('Mode', element('span', { id: 'source-mode' }, `${source.mode} (${settings})`)),
    pair('Head commit', [commit(status.headCommit, { id: 'source-head' }), status.fetchedAt ? ` fetched ${when(status.fetchedAt)}` : '']),
    pair('Applied commit', commit(status.appliedCommit, { id: 'source-applied' })),
    pair('Applied revision', element('span', { id: 'source-revision' },
      status.appliedRevision === undefined ? '—' : String(status.appliedRevision))),
    status.changedIn ? pair('Document changed in', commit(status.changedIn)) : null,
    pair('Last attempt', attempt
      ? [commit(attempt.commit), ` at ${when(attempt.at)}`,
        attempt.error ? element('span', { id: 'source-attempt-error', class: 'reason' }, `: ${attempt.error}`) : '']
      : '—'),
    pair('Waits on proposal', element('span', { id: 'source-proposal' }, proposal)),
    pair('Pinned', source.pinned ? commit(source.pinned, { id: 'source-pinned' }) : 'no: follows the branch'),
    source.signers?.length ? pair('Signers', element('ul', { class: 'plain' }, source.signers.map((key) => element('li', {}, element('code', {}, key))))) : null,
    pair('Credential', source.credential ? 'set' : 'none'));
}

function button(id, label, action, kind) {
  const node = element('button', { type: 'button', id, class: kind }, label);
  node.addEventListener('click', action);
  return node;
}

/** Refresh, sync, pin and unpin, each only when `can` says the token may call it. */
function buttons(source, status, can) {
  const bar = element('div', { class: 'bar source-actions' });
  if (can.refresh) bar.append(button('source-refresh', 'Refresh', refresh));
  if (can.sync) bar.append(button('source-sync', 'Sync to head', sync, 'quiet'));
  if (can.pin) {
    // The applied commit, unless another is typed in.
    const typed = element('input', {
      id: 'source-pin-commit', type: 'text', spellcheck: 'false', autocomplete: 'off', size: 42,
      value: source.pinned ?? status.appliedCommit ?? '', placeholder: 'a full commit id',
    });
    bar.append(element('label', { for: 'source-pin-commit' }, 'Commit'), typed,
      button('source-pin', 'Pin', () => pin(typed.value.trim()), 'quiet'));
  }
  if (can.unpin && source.pinned) bar.append(button('source-unpin', 'Unpin', unpin, 'quiet'));
  return bar.childElementCount ? bar : null;
}

// ---- the actions ------------------------------------------------------------------

function paint({ ok, title, detail }) {
  const box = $('source-outcome');
  if (!box) return;
  box.hidden = false;
  box.className = `outcome${ok ? '' : ' failed'}`;
  box.replaceChildren(element('strong', {}, title));
  if (detail !== undefined) box.append(element('pre', {}, JSON.stringify(detail, null, 2)));
}

/**
 * Runs an action (each answers `{"source"}`) and draws the source it answers with what
 * it came to; a refusal is said in the view and the source drawn as it is now.
 */
async function act(method, body, done) {
  said = null;
  for (const node of document.querySelectorAll('#source-body .source-actions button')) node.disabled = true;
  try {
    const { source } = await api(method, body);
    said = { ok: true, title: done(source) };
  } catch (error) {
    if (error instanceof SignedOut) return;
    const detail = error instanceof ApiFailure && error.details && Object.keys(error.details).length ? error.details : undefined;
    said = { ok: false, title: explain(error), detail };
  }
  await renderSources();
}

/** What a cycle came to, for people: the state, and the error when there is one. */
const cameTo = (source) => `${source.status.state}${source.status.error ? `: ${source.status.error}` : ''}`;

function refresh() {
  return act('sources/refresh', {}, (source) => `Refreshed: ${cameTo(source)}.`);
}

/** Applies the document at the branch's head as the server finds it now, in any mode. */
function sync() {
  if (!window.confirm('Apply the document at the branch\'s head now, whatever the mode?')) return;
  return act('sources/sync', {}, (source) => `Synced: ${cameTo(source)}.`);
}

function pin(commitId) {
  if (!COMMIT.test(commitId)) {
    said = { ok: false, title: 'Pin needs a full commit id: 40 (or 64) lowercase hex digits.' };
    paint(said);
    return;
  }
  if (!window.confirm(`Pin the source to ${commitId.slice(0, SHORT)}? It applies and heals to that commit and ignores new heads until unpinned.`)) return;
  return act('sources/pin', { commit: commitId }, (source) => `Pinned to ${commitId.slice(0, SHORT)}: ${cameTo(source)}.`);
}

function unpin() {
  return act('sources/unpin', {}, (source) => `Unpinned: the source follows ${source.branch} again.`);
}

/** Forgets what the view drew and found for the session that ended. */
export function forgetSources() {
  reads += 1;
  said = null;
  may = null;
}

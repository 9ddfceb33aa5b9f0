// The console (SPEC §16): the page's wiring — the sign-in form, routing between the
// views and mounting them, and the live event stream. The session and the API client
// are session.js's, below every view; each view is its own module; the planner runs in
// the browser (planner.js, load.js, plan.js).

import { $, element } from './dom.js';
import {
  ApiFailure, SignedOut, beginSession, endSession, eventStream, explain, forgetToken, keepToken, keptToken, loadTenant,
  onTenantRead, probe, showNotice, tenant,
} from './session.js';
import { forgetPlan, mountPlan, showTenantInPlan } from './plan.js';
import { renderStatus, showEvents } from './status.js';
import { mountEstate, renderEstate, renderObject } from './estate.js';
import { mountHistory, renderHistory } from './history.js';
import { mountProposals, renderProposals } from './proposals.js';
import { renderWebhooks } from './webhooks.js';
import { forgetSources, renderSources, sourcesReadable } from './sources.js';
import { renderCapacity } from './capacity.js';

/** After each read of the tenant: who is signed in, and the plan view's planner over the new snapshot. */
async function showTenant() {
  const { caller } = tenant.snapshot;
  const objects = tenant.kinds.reduce((sum, { section }) => sum + Object.keys(tenant.document[section] ?? {}).length, 0);
  $('who').textContent = `tenant ${caller.tenant} · ${caller.principal} · ${objects} objects`;
  await showTenantInPlan();
}

// ---- sign-in ----------------------------------------------------------------------

async function signIn(token) {
  stream?.abort();
  beginSession(token);
  showNotice();
  $('who').textContent = 'signing in…';
  const submit = $('sign-in').querySelector('button');
  submit.disabled = true;
  try {
    const may = await probe();
    if (may.fleet) await loadTenant();
    // After the tenant's read: its snapshot names the token's grants, which decide this.
    may.sources = await sourcesReadable();
    if (!Object.values(may).some(Boolean)) {
      throw new Error('the token may read none of what the console shows: it needs compute:fleet:admin @ compute-fleet, ' +
        'compute:proposals:read @ compute-proposals, compute:webhooks:read @ compute-webhooks ' +
        'or compute:sources:read @ compute-sources');
    }
  } catch (error) {
    if (error instanceof SignedOut) return;
    forgetToken();
    $('who').textContent = '';
    showNotice(element('strong', {}, 'Not signed in: '), explain(error));
    return;
  } finally {
    submit.disabled = false;
  }
  if (!tenant.may.fleet) {
    const views = Object.entries(tenant.may).filter(([, may]) => may).map(([view]) => view);
    $('who').textContent = `${tenant.principal ?? 'signed in'} · may read ${views.join(' and ')}`;
  }
  // Each view only for a token that may read what it shows.
  for (const link of $('views').querySelectorAll('a')) link.hidden = !allowed(link.dataset.view);
  keepToken();
  $('token').value = '';
  $('sign-in').hidden = true;
  $('signed-in').hidden = false;
  $('views').hidden = false;
  $('welcome').hidden = true;
  if (tenant.may.fleet) listen();
  route();
}

/** Whether the signed-in token may read what `view` shows. */
function allowed(view) {
  const may = tenant.may ?? {};
  if (view === 'proposals') return Boolean(may.proposals);
  if (view === 'webhooks') return Boolean(may.webhooks);
  if (view === 'source') return Boolean(may.sources);
  return Boolean(may.fleet);
}

function signOut() {
  endSession();
  stream?.abort();
  stream = null;
  // Nothing of the tenant stays in the page for whoever signs in next.
  for (const view of document.querySelectorAll('.view')) view.hidden = true;
  for (const id of ['status-body', 'events', 'kinds', 'rows', 'object-body', 'revisions', 'difference', 'owners', 'from', 'to',
    'proposal-list', 'proposal', 'webhook-list', 'source-body']) {
    $(id).replaceChildren();
  }
  for (const id of ['who', 'live', 'estate-count', 'shown', 'object-title']) $(id).textContent = '';
  $('filter').value = '';
  forgetPlan();
  forgetSources();
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
function route() {
  if (!tenant.may) return;
  const [name, ...rest] = currentRoute();
  const wanted = VIEWS.has(name) ? name : 'status';
  const view = allowed(wanted) ? wanted : [...VIEWS].find(allowed);
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
const VIEWS = new Set(['status', 'estate', 'object', 'plan', 'proposals', 'history', 'webhooks', 'source', 'capacity']);

/** The view on screen, to tell a redraw from a change of view. */
let shownView = null;

async function render(view, rest) {
  if (view === 'status') renderStatus(tenant.status, recent);
  else if (view === 'estate') renderEstate(rest[0]);
  else if (view === 'object') await renderObject(rest[0], rest[1]);
  else if (view === 'proposals') await renderProposals(rest[0]);
  else if (view === 'history') await renderHistory();
  else if (view === 'webhooks') await renderWebhooks();
  else if (view === 'source') await renderSources();
  else if (view === 'capacity') renderCapacity(tenant.document);
}

// ---- the event stream -------------------------------------------------------------

let stream = null;
/** The newest events seen, newest first, for the status view. */
const recent = [];
const RECENT = 20;

/**
 * Follows the tenant's event stream (`eventStream`: SSE, whose frames fetch reads).
 * Every event refreshes the status, at most once per burst. The stream resumes after
 * the last event it saw when it drops, and lets go of its connection while the tab is
 * hidden (a browser opens only six to one server, for every tab together), catching up
 * when it is shown again.
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
        const response = await eventStream(after, AbortSignal.any([signedIn.signal, connection.signal]));
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
  mountProposals();
  onTenantRead(showTenant);
  const kept = keptToken();
  if (kept) signIn(kept);
}

init();

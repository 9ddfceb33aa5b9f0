// The Status view: the applied revision, heal, converged or drifted since when, and who
// changed what (a drift's changes name the principal, the method and the time from the
// audit trail); app.js re-renders it from the event stream.

import { $, element, plural, shortHash, show, table, when } from './dom.js';
import { sourceOf } from './render.js';

/**
 * Renders `fleet.status` (SPEC §6.5, §15), with `events` (newest first) for when the
 * tenant converged.
 */
export function renderStatus(status, events) {
  const body = $('status-body');
  if (!status?.applied) {
    body.replaceChildren(element('p', { id: 'state', class: 'state none' }, 'No document is applied yet.'),
      element('p', {}, 'Plan the export (or any document) in ', element('a', { href: '#plan' }, 'Plan'), ' and apply it.'));
    return;
  }
  const { revision, planHash, appliedBy, appliedAt, heal, calls, prune } = status.applied;
  const drift = status.drift;
  const state = drift
    ? element('p', { id: 'state', class: 'state drifted' },
      `Drifted since ${when(drift.since)}`, ` · ${plural(drift.changes.length, 'object')} no longer as applied`)
    : element('p', { id: 'state', class: 'state converged' },
      `Converged since ${when(convergedSince(status, events))}`);
  const facts = element('dl', { class: 'facts' },
    element('dt', {}, 'Revision'), element('dd', { id: 'revision' }, String(revision)),
    element('dt', {}, 'Applied'), element('dd', {}, `${when(appliedAt)} by ${appliedBy} (${plural(calls, 'call')}${prune ? ', prune' : ''})`),
    element('dt', {}, 'Plan hash'), element('dd', {}, element('code', { title: planHash }, shortHash(planHash))),
    status.applied.source ? [element('dt', {}, 'Source'), element('dd', { id: 'applied-source' }, sourceOf(status.applied.source))] : null,
    element('dt', {}, 'Self-heal'), element('dd', { id: 'heal' }, heal ? 'on: drift is applied away by the reconciler' : 'off'),
    element('dt', {}, 'Last check'), element('dd', {}, when(status.checkedAt)));
  const nodes = [state, facts];
  if (drift) {
    const rows = drift.changes.map((change) => [
      element('a', { href: `#object/${encodeURIComponent(change.kind)}/${encodeURIComponent(change.key)}` }, `${change.kind} ${change.key}`),
      change.action,
      element('ul', { class: 'plain' }, (change.fields ?? []).map((field) =>
        element('li', {}, `${field.field}: applied `, element('span', { class: 'from' }, show(field.applied)),
          ', now ', element('span', { class: 'to' }, show(field.actual))))),
      change.changedBy ?? '—',
      change.method ?? '—',
      when(change.changedAt),
    ]);
    nodes.push(table('Who changed what since the apply',
      ['Object', 'Action', 'Applied and actual values', 'Changed by', 'Method', 'At'], rows, { class: 'grid', id: 'drift' }));
    if (status.drift.healError) nodes.push(element('p', { class: 'errors' }, `Self-heal refused: ${status.drift.healError}`));
  }
  body.replaceChildren(...nodes);
}

/**
 * Since when the tenant is converged: its return to convergence (the newest
 * `fleet.converged`), or the apply of its revision when that came later.
 */
function convergedSince(status, events) {
  const converged = events.find((event) => event.type === 'fleet.converged')?.at;
  const applied = status.applied.appliedAt;
  return converged && converged > applied ? converged : applied;
}

/** The newest events, newest first: `fleet.drifted`, `fleet.converged`, `fleet.healed`. */
export function showEvents(events) {
  $('events').replaceChildren(...events.map((event) => element('li', { class: event.type.replace('.', '-') },
    element('strong', {}, event.type), ` at ${when(event.at)}`, describe(event))));
}

function describe(event) {
  const data = event.data ?? {};
  if (event.type === 'fleet.drifted') {
    const who = [...new Set((data.changes ?? []).map((change) => change.changedBy).filter(Boolean))];
    const objects = (data.changes ?? []).map((change) => `${change.kind} ${change.key}`);
    return `: ${objects.join(', ')}${who.length ? ` (changed by ${who.join(', ')})` : ''}`;
  }
  if (event.type === 'fleet.healed') return `: revision ${data.revision} applied again (${plural(data.calls ?? 0, 'call')})`;
  return '';
}

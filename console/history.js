// The History view (SPEC §15): the tenant's revisions, newest first (each with where its
// document came from, §20.2), the difference between any two (as `fleet diff` words it),
// and rollback: a revision's document planned in the Plan view, applied there on
// confirmation like any other plan.

import { $, element, own, plural, shortHash, show, when } from './dom.js';
import { SignedOut, api, explain, tenant } from './session.js';
import { planDocument } from './plan.js';
import { changeRows, sourceOf } from './render.js';

/** Revisions read per page. */
const PAGE = 50;

/** The revisions listed so far, newest first. */
let listed = [];
/** Counts reads of the list: an answer for an older read is dropped. */
let reads = 0;

/**
 * Renders the newest page of revisions (again, after an event: an apply may have added
 * one). A comparison shown stays: revisions never change.
 */
export async function renderHistory() {
  await more([]);
}

/** Reads the page of revisions older than those of `shown`, and lists them after it. */
async function more(shown = listed) {
  const mine = ++reads;
  const after = shown.at(-1)?.revision;
  $('older').disabled = true;
  let page;
  try {
    page = await api('fleet/history', after ? { after, limit: PAGE } : { limit: PAGE });
  } catch (error) {
    if (mine === reads && !(error instanceof SignedOut)) {
      $('revisions').replaceChildren(element('p', { class: 'errors' }, explain(error)));
    }
    return;
  } finally {
    if (mine === reads) $('older').disabled = false;
  }
  if (mine !== reads) return;
  listed = [...shown, ...page.revisions];
  $('older').hidden = page.revisions.length < PAGE || listed.at(-1)?.revision === 1;
  const current = tenant.status?.applied?.revision;
  const rows = listed.map((revision) => {
    const rollback = element('button', { type: 'button', class: 'quiet', 'data-revision': revision.revision },
      `Roll back to ${revision.revision}`);
    rollback.disabled = revision.revision === current;
    rollback.addEventListener('click', () => rollBack(revision.revision));
    return element('tr', { class: revision.revision === current ? 'current' : undefined },
      element('th', { scope: 'row' }, String(revision.revision), revision.revision === current ? ' (applied)' : ''),
      element('td', {}, when(revision.appliedAt)),
      element('td', {}, revision.appliedBy),
      element('td', {}, String(revision.calls)),
      element('td', {}, revision.prune ? 'yes' : 'no'),
      element('td', {}, overrides(revision)),
      element('td', {}, element('code', { title: revision.planHash }, shortHash(revision.planHash))),
      element('td', { class: 'source' }, sourceOf(revision.source)),
      element('td', {}, rollback));
  });
  $('revisions').replaceChildren(listed.length
    ? element('table', { class: 'grid', id: 'revision-table' },
      element('caption', {}, 'Revisions, newest first'),
      element('thead', {}, element('tr', {}, ['Revision', 'Applied at', 'By', 'Calls', 'Prune', 'Overrides', 'Plan hash', 'Source', 'Rollback']
        .map((header) => element('th', { scope: 'col' }, header)))),
      element('tbody', {}, rows))
    : element('p', { class: 'muted' }, 'No revisions: nothing was applied yet.'));
  // The choices of the comparison, kept when they are still listed.
  const options = () => listed.map(({ revision }) => element('option', { value: revision }, String(revision)));
  const [from, to] = [$('from').value, $('to').value];
  $('from').replaceChildren(...options());
  $('to').replaceChildren(...options());
  const listedAs = (value) => listed.some(({ revision }) => String(revision) === value);
  if (listedAs(from) && listedAs(to)) {
    [$('from').value, $('to').value] = [from, to];
  } else if (listed.length > 1) {
    $('from').value = String(listed[1].revision);
  }
}

/**
 * The mandatory policies whose denials the revision's apply overrode (SPEC §14), each
 * with the reason its applier gave; `—` for none.
 */
function overrides(revision) {
  const given = revision.overrides ?? [];
  if (!given.length) return '—';
  return element('ul', { class: 'overrides' },
    given.map(({ policy, reason }) => element('li', {}, element('strong', {}, policy), `: ${reason}`)));
}

/** Plans revision `number`'s document (with its prune flag) in the Plan view. */
async function rollBack(number) {
  try {
    const revision = await api('fleet/revision', { revision: number });
    location.hash = '#plan';
    planDocument(JSON.stringify(revision.document, null, 2), revision.prune === true,
      `Rolling back to revision ${number} (applied ${when(revision.appliedAt)} by ${revision.appliedBy}): ` +
      'this is the plan that takes the estate back. Apply asks before it changes anything.');
  } catch (error) {
    if (!(error instanceof SignedOut)) $('difference').replaceChildren(element('p', { class: 'errors' }, explain(error)));
  }
}

/** The kinds that archive what a pruning apply removes; plugins say it in their descriptors. */
function archives(kind) {
  if (kind === 'pool') return true;
  return (tenant.snapshot.plugins ?? []).some(({ descriptor }) => descriptor.kind === kind && descriptor.removal === 'archive');
}

/** A section's objects by key, or none for anything that is not a map. */
const objects = (value) => (value && typeof value === 'object' && !Array.isArray(value) ? value : {});

/** A value's JSON with every map's keys sorted: maps that differ only in order are equal. */
function canonical(value) {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  const pairs = Object.keys(value).sort().map((key) => `${JSON.stringify(key)}:${canonical(value[key])}`);
  return `{${pairs.join(',')}}`;
}

/**
 * The default of a field's type (SPEC §5: `0`, `""`, `{}`, `false`), known from the
 * value the other revision gives it: a field a document leaves out reads as that, as the
 * planner reads it, so `gpus` left out and `gpus: 0` are no difference.
 */
function defaultOf(value) {
  if (typeof value === 'number') return 0;
  if (typeof value === 'string') return '';
  if (typeof value === 'boolean') return false;
  if (value && typeof value === 'object' && !Array.isArray(value)) return {};
  return null;
}

/**
 * The changes from one document to another, as `fleet diff` lists them:
 * `{action, kind, key, fields?, text}` by section and key in the documents' order.
 */
export function differences(old, now, prune) {
  const kindOf = new Map(tenant.kinds.map(({ kind, section }) => [section, kind]));
  const sections = [...Object.keys(now), ...Object.keys(old).filter((section) => !Object.hasOwn(now, section))];
  const changes = [];
  for (const section of sections) {
    const kind = kindOf.get(section) ?? section;
    // Sections of objects only: `moved`, a list, is no object of its own.
    const before = objects(own(old, section));
    const after = objects(own(now, section));
    for (const [key, fields] of Object.entries(after)) {
      const was = own(before, key);
      if (!was) {
        const listed = Object.entries(fields).map(([field, value]) => `${field} ${show(value)}`);
        changes.push({ action: 'create', kind, key, text: `+ ${kind} ${key}: create (${listed.join(', ')})` });
        continue;
      }
      const names = [...Object.keys(was), ...Object.keys(fields).filter((field) => !Object.hasOwn(was, field))];
      const moved = names
        .map((field) => {
          const [from, to] = [own(was, field), own(fields, field)];
          return { field, from: from ?? defaultOf(to), to: to ?? defaultOf(from) };
        })
        .filter(({ from, to }) => canonical(from) !== canonical(to));
      if (moved.length === 0) continue;
      const worded = moved.map(({ field, from, to }) => `${field} ${show(from)} -> ${show(to)}`);
      changes.push({ action: 'update', kind, key, fields: moved, text: `~ ${kind} ${key}: update (${worded.join(', ')})` });
    }
    const removal = prune ? (archives(kind) ? 'archive' : 'delete') : 'left alone';
    for (const key of Object.keys(before).filter((key) => !Object.hasOwn(after, key))) {
      changes.push({ action: 'remove', kind, key, text: `- ${kind} ${key}: ${removal} (not in the document)` });
    }
  }
  return changes;
}

async function compare(event) {
  event.preventDefault();
  const [from, to] = [Number($('from').value), Number($('to').value)];
  const box = $('difference');
  try {
    const [old, now] = await Promise.all([from, to].map((revision) => api('fleet/revision', { revision })));
    const changes = differences(old.document, now.document, now.prune === true);
    const nodes = [];
    if (old.prune !== now.prune) nodes.push(element('p', {}, `Prune: ${old.prune ? 'on' : 'off'} -> ${now.prune ? 'on' : 'off'}`));
    if (!changes.length && old.prune === now.prune) {
      nodes.push(element('p', { class: 'summary none' }, `No differences: revisions ${from} and ${to} apply the same document.`));
    } else {
      const count = (action) => changes.filter((change) => change.action === action).length;
      nodes.push(element('p', { class: 'summary' }, `From revision ${from} to ${to}: ${count('create')} created, ` +
        `${count('update')} updated, ${plural(count('remove'), 'object')} no longer in the document.`));
      nodes.push(element('div', { class: 'changes' }, changeRows(changes, tenant.snapshot.modules ?? [])));
    }
    box.replaceChildren(...nodes);
  } catch (error) {
    if (!(error instanceof SignedOut)) box.replaceChildren(element('p', { class: 'errors' }, explain(error)));
  }
}

/** Wires the view's controls once. */
export function mountHistory() {
  $('older').addEventListener('click', () => more());
  $('compare').addEventListener('submit', compare);
}

// The Estate view: a table per kind the deployment serves (plugin kinds included), with
// filter and sort, drawn as a window of the rows on screen so that ten thousand objects
// scroll as smoothly as ten; and an object's view with its fields, its audit history and,
// when drifted, its applied and actual values.

import { $, element, kindTitle, own, plural, show, table, when } from './dom.js';
import { SignedOut, api, explain, tenant } from './session.js';

/** Rows drawn above and below the window, so that a scroll of a few rows draws nothing. */
const OVERSCAN = 12;

/** The table on screen: its kind, rows (filtered, sorted) and sort order. */
const view = {
  kind: null,
  columns: [],
  /** Every object of the kind: `{name, values, text}` (`text` lowercased, for the filter). */
  all: [],
  rows: [],
  sort: { column: 'name', descending: false },
  rowHeight: 0,
  drawn: '',
};

/** A cell's text: maps as `key=value` pairs, everything else as the plan shows values. */
function cellText(value) {
  if (value === undefined) return '';
  if (value !== null && typeof value === 'object') {
    return Object.entries(value).map(([key, text]) => `${key}=${text}`).join(', ');
  }
  return show(value);
}

/** The kind's objects from the export: columns in the document's field order. */
function objectsOf(section) {
  const objects = Object.entries(tenant.document?.[section] ?? {});
  const columns = [];
  const seen = new Set();
  for (const [, fields] of objects) {
    for (const field of Object.keys(fields)) {
      if (seen.has(field)) continue;
      seen.add(field);
      columns.push(field);
    }
  }
  const all = objects.map(([name, fields]) => {
    const values = columns.map((column) => cellText(fields[column]));
    return { name, values, raw: fields, text: [name, ...values].join('\u0000').toLowerCase() };
  });
  return { columns, all };
}

/** Renders the kind list and the table of `kind` (the first kind when none is named). */
export function renderEstate(kind) {
  const started = performance.now();
  const kinds = tenant.kinds;
  const chosen = kinds.find((entry) => entry.kind === kind) ?? kinds[0];
  $('kinds').replaceChildren(...kinds.map(({ kind: each, section }) => {
    const count = Object.keys(tenant.document?.[section] ?? {}).length;
    return element('a', {
      href: `#estate/${encodeURIComponent(each)}`,
      'aria-current': each === chosen?.kind ? 'page' : undefined,
    }, `${kindTitle(each)} `, element('span', { class: 'count' }, String(count)));
  }));
  if (!chosen) return;
  if (view.kind !== chosen.kind) view.sort = { column: 'name', descending: false };
  if (view.kind !== chosen.kind || view.document !== tenant.document) {
    // A new kind, or the tenant read again (after an event): the sort and the filter stay.
    Object.assign(view, objectsOf(chosen.section), { kind: chosen.kind, document: tenant.document });
  }
  $('estate-count').textContent = `${kindTitle(chosen.kind)}: ${plural(view.all.length, 'object')}`;
  arrange();
  // The time to the first paint of the table, for the tests' log (not asserted).
  requestAnimationFrame(() => {
    document.body.dataset.estatePaintMs = (performance.now() - started).toFixed(1);
  });
}

/** Filters and sorts the kind's rows, then draws the table. */
function arrange() {
  const needle = $('filter').value.trim().toLowerCase();
  const rows = needle ? view.all.filter((row) => row.text.includes(needle)) : [...view.all];
  const { column, descending } = view.sort;
  const index = view.columns.indexOf(column);
  const key = (row) => (index < 0 ? row.name : row.raw[column]);
  rows.sort((a, b) => {
    const [x, y] = [key(a), key(b)];
    const order = typeof x === 'number' && typeof y === 'number'
      ? x - y
      : cellText(x).localeCompare(cellText(y), undefined, { numeric: true });
    return (descending ? -order : order) || a.name.localeCompare(b.name);
  });
  view.rows = rows;
  $('shown').textContent = needle ? `${rows.length} of ${view.all.length} match` : '';
  buildTable();
}

/**
 * The table's frame (head, body) for the current kind and sort; rows come from `draw`.
 * A redraw keeps the scroll position and the focused sort button.
 */
function buildTable() {
  const container = $('rows');
  const top = container.scrollTop;
  const focused = container.contains(document.activeElement) ? document.activeElement.dataset.column : undefined;
  const headers = ['name', ...view.columns].map((column) => {
    const sorted = view.sort.column === column;
    const direction = sorted ? (view.sort.descending ? 'descending' : 'ascending') : 'none';
    const button = element('button', { type: 'button', class: 'sort', 'data-column': column },
      column, sorted ? (view.sort.descending ? ' ▼' : ' ▲') : '');
    button.addEventListener('click', () => {
      view.sort = { column, descending: sorted ? !view.sort.descending : false };
      arrange();
    });
    return element('th', { scope: 'col', 'aria-sort': direction }, button);
  });
  const frame = element('table', { class: 'grid estate', 'aria-rowcount': view.rows.length + 1 },
    element('caption', { class: 'visually-hidden' }, `${kindTitle(view.kind)}, sortable by each column`),
    element('thead', {}, element('tr', { 'aria-rowindex': 1 }, headers)),
    element('tbody', { id: 'estate-body' }));
  container.replaceChildren(frame);
  view.drawn = '';
  view.measured = false;
  draw(top);
  container.scrollTop = top;
  if (focused !== undefined) container.querySelector(`button.sort[data-column="${CSS.escape(focused)}"]`)?.focus();
}

/** Draws the rows in (and near) the window scrolled to `top`, between two spacer rows. */
function draw(top = $('rows').scrollTop) {
  const container = $('rows');
  const body = $('estate-body');
  if (!body) return;
  const height = view.rowHeight || 30;
  const first = Math.max(0, Math.floor(top / height) - OVERSCAN);
  const count = Math.ceil(container.clientHeight / height) + 2 * OVERSCAN;
  const last = Math.min(view.rows.length, first + count);
  const drawn = `${first}:${last}`;
  if (drawn === view.drawn) return;
  view.drawn = drawn;
  const spacer = (rows) => {
    const row = element('tr', { class: 'spacer', 'aria-hidden': 'true' });
    row.style.height = `${rows * height}px`;
    return row;
  };
  const rows = view.rows.slice(first, last).map((row, offset) => element('tr', { 'aria-rowindex': first + offset + 2 },
    element('th', { scope: 'row' },
      element('a', { href: `#object/${encodeURIComponent(view.kind)}/${encodeURIComponent(row.name)}` }, row.name)),
    row.values.map((value) => element('td', { title: value.length > 24 ? value : undefined }, value))));
  if (view.rows.length === 0) {
    rows.push(element('tr', {}, element('td', { colspan: view.columns.length + 1, class: 'muted' }, 'nothing to show')));
  }
  body.replaceChildren(spacer(first), ...rows, spacer(view.rows.length - last));
  // Rows are one line each; measure one (once per table) so that the spacers match
  // what is drawn.
  const sample = view.rows.length ? rows[0]?.getBoundingClientRect().height : 0;
  if (!view.measured && sample) {
    view.measured = true;
    if (Math.abs(sample - height) > 0.5) {
      view.rowHeight = sample;
      view.drawn = '';
      draw(top);
    }
  }
}

/** Wires the filter and the scrolling window once. */
export function mountEstate() {
  $('filter').addEventListener('input', () => {
    $('rows').scrollTop = 0;
    arrange();
  });
  let pending = false;
  $('rows').addEventListener('scroll', () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      draw();
    });
  });
}

// ---- one object -------------------------------------------------------------------

/** At most this many audit records are read for one object (newest shown first). */
const AUDIT_PAGES = 10;

/** Renders one object: its fields, its drift, and its audit history. */
export async function renderObject(kind, name) {
  const entry = tenant.kinds.find((each) => each.kind === kind);
  const fields = entry && own(own(tenant.document, entry.section), name);
  $('object-title').textContent = `${kind ?? '?'} ${name ?? '?'}`;
  $('object-back').setAttribute('href', `#estate/${encodeURIComponent(kind ?? '')}`);
  const body = $('object-body');
  if (!fields) {
    body.replaceChildren(element('p', {}, `The estate has no ${kind} named ${name}.`));
    return;
  }
  const id = tenant.snapshot.bindings?.find((binding) => binding.kind === kind && binding.name === name)?.id;
  const rows = [['id', id ?? '—'], ...Object.entries(fields).map(([field, value]) => [field, cellText(value)])];
  const nodes = [table('Fields', ['Field', 'Value'], rows, { class: 'grid fields-table', id: 'object-fields' })];
  const drift = tenant.status?.drift?.changes?.find((change) => change.kind === kind && change.key === name);
  if (drift) {
    // What happened (the server words it), not the plan line that would undo it.
    const at = drift.changedAt ? ` at ${when(drift.changedAt)}` : ' (no record of who changed it)';
    nodes.push(table(`Drifted: ${drift.text}${at}`,
      ['Field', 'Applied', 'Actual'],
      (drift.fields ?? []).map((field) => [field.field, show(field.applied), show(field.actual)]),
      { class: 'grid drift', id: 'object-drift' }));
  }
  const history = element('div', { id: 'object-audit', class: 'scroll' }, element('p', { class: 'muted' }, 'reading the audit trail…'));
  nodes.push(element('h3', {}, 'Audit history'), history);
  body.replaceChildren(...nodes);
  if (!id) {
    history.replaceChildren(element('p', { class: 'muted' }, 'No live object: nothing is recorded.'));
    return;
  }
  try {
    const records = await auditOf(kind, id);
    history.replaceChildren(records.length
      ? table(null, ['At', 'Principal', 'Method', 'Via', 'Changes'], records.reverse().map((record) => [
        when(record.at), record.principal, record.method, record.via,
        element('ul', { class: 'plain' }, (record.changes ?? []).map((change) =>
          element('li', {}, `${change.field}: `, element('span', { class: 'from' }, show(change.from)), ' -> ',
            element('span', { class: 'to' }, show(change.to))))),
      ]), { class: 'grid' })
      : element('p', { class: 'muted' }, 'No audit records.'));
  } catch (error) {
    if (!(error instanceof SignedOut)) history.replaceChildren(element('p', { class: 'errors' }, explain(error)));
  }
}

/** The object's audit records, oldest first (SPEC §13). */
async function auditOf(kind, id) {
  const records = [];
  let after;
  for (let page = 0; page < AUDIT_PAGES; page += 1) {
    const { records: batch } = await api('audit/list', { kind, id, after, limit: 500 });
    records.push(...batch);
    if (batch.length < 500) break;
    after = batch.at(-1).seq;
  }
  return records;
}

// What every view of the console builds its DOM with. Text only ever enters the page
// as text nodes or attribute values (never as markup), so no string the API returns —
// a name, a label, a message — can run or inject anything.

export const $ = (id) => document.getElementById(id);

/**
 * `element('a', {href: '#x', class: 'link'}, 'text', child)`: attributes are set as
 * attributes, children appended as nodes (strings become text nodes). `null`,
 * `undefined` and `false` children are skipped.
 */
export function element(tag, attributes = {}, ...children) {
  const node = tag.startsWith('svg:')
    ? document.createElementNS('http://www.w3.org/2000/svg', tag.slice(4))
    : document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'class') node.setAttribute('class', value);
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child !== undefined && child !== null && child !== false) node.append(child);
  }
  return node;
}

/**
 * `object[key]` when the object has it as its own: names from documents and URLs are
 * looked up with this, so that `constructor` or `__proto__` is never a prototype's.
 */
export const own = (object, key) => (object && Object.hasOwn(object, key) ? object[key] : undefined);

/** `3 calls`, `1 call`. */
export const plural = (count, noun) => `${count} ${noun}${count === 1 ? '' : 's'}`;

/** A kind for people, from its camelCase name: `providerAccount` -> `provider account`. */
export const kindNoun = (kind) => kind.replace(/[A-Z]/g, (letter) => ` ${letter.toLowerCase()}`);

/** A kind's heading: `providerAccount` -> `Provider accounts`. */
export function kindTitle(kind) {
  const noun = kindNoun(kind);
  return `${noun.charAt(0).toUpperCase()}${noun.slice(1)}s`;
}

/** A field value for people: an empty string shows as `""`, not as nothing. */
export const show = (value) => (typeof value === 'string' && value !== '' ? value : JSON.stringify(value));

/** A time the API wrote (RFC 3339, UTC), as people read it: `2026-12-01 22:17:10 UTC`. */
export const when = (at) => (typeof at === 'string' ? at.replace('T', ' ').replace(/Z$/, ' UTC') : '—');

/** A short plan hash for tables: `sha256:2c44421a95…`. */
export const shortHash = (hash) => (typeof hash === 'string' ? `${hash.slice(0, 19)}…` : '—');

/** A table from a header row and rows of cells (text or nodes). */
export function table(caption, headers, rows, attributes = {}) {
  return element('table', attributes,
    caption ? element('caption', {}, caption) : null,
    element('thead', {}, element('tr', {}, headers.map((header) => element('th', { scope: 'col' }, header)))),
    element('tbody', {}, rows.map((cells) => element('tr', {}, cells.map((cell) => element('td', {}, cell))))));
}

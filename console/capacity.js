// The Capacity view: per owner, its quota against the capacity of the pools it owns and
// the offers it gives out of them and receives (vcpus, memoryMib, gpus), drawn as plain
// SVG bars (docs/decisions/0017-console.md says why no charting library), with every
// number also in the chart's text and an overcommit marked in words, not by colour only.

import { $, element, own } from './dom.js';

const RESOURCES = ['vcpus', 'memoryMib', 'gpus'];
/** The bars of a resource, in the order drawn. */
const BARS = [
  ['owned', 'owned pools'],
  ['given', 'offers given'],
  ['received', 'offers received'],
  ['capacity', 'capacity'],
];

const WIDTH = 640;
const LABEL = 210;
const BAR = 13;
const GAP = 4;
const GROUP = BARS.length * (BAR + GAP) + 22;

const number = (value) => value.toLocaleString('en');

/**
 * Each owner's figures from the export's document: `{owner, quota?, owned, given,
 * received, capacity, overcommits: [text]}`, owners by name. Archived pools count for
 * nothing; offers count for their pool's owner (given) and their `to` (received). An
 * overcommit is a pool whose offers exceed it, an owner whose offers exceed its pools,
 * or an owner whose capacity exceeds its quota.
 */
export function capacities(document) {
  const owners = new Map();
  const zero = () => Object.fromEntries(RESOURCES.map((resource) => [resource, 0]));
  const of = (owner) => {
    if (!owners.has(owner)) owners.set(owner, { owner, quota: null, owned: zero(), given: zero(), received: zero() });
    return owners.get(owner);
  };
  const pools = document.pools ?? {};
  for (const [owner, quota] of Object.entries(document.ownerQuotas ?? {})) {
    of(owner).quota = Object.fromEntries(RESOURCES.map((resource) => [resource, quota[resource] ?? 0]));
  }
  for (const pool of Object.values(pools)) {
    if (pool.archived || typeof pool.owner !== 'string') continue;
    for (const resource of RESOURCES) of(pool.owner).owned[resource] += pool[resource] ?? 0;
  }
  const offered = new Map();
  for (const offer of Object.values(document.offers ?? {})) {
    const pool = own(pools, offer.pool);
    const giver = pool?.owner;
    if (pool && !offered.has(offer.pool)) offered.set(offer.pool, zero());
    for (const resource of RESOURCES) {
      if (pool) offered.get(offer.pool)[resource] += offer[resource] ?? 0;
      if (typeof giver === 'string') of(giver).given[resource] += offer[resource] ?? 0;
      if (typeof offer.to === 'string') of(offer.to).received[resource] += offer[resource] ?? 0;
    }
  }
  const overOffered = new Map();
  for (const [name, sums] of offered) {
    const pool = own(pools, name);
    for (const resource of RESOURCES) {
      if (typeof pool.owner !== 'string' || sums[resource] <= (pool[resource] ?? 0)) continue;
      const found = overOffered.get(pool.owner) ?? [];
      found.push(`the offers of pool ${name} give ${number(sums[resource])} ${resource} out of ${number(pool[resource] ?? 0)}`);
      overOffered.set(pool.owner, found);
    }
  }
  return [...owners.values()].sort((a, b) => a.owner.localeCompare(b.owner)).map((figures) => {
    figures.capacity = Object.fromEntries(RESOURCES.map((resource) => [resource,
      figures.owned[resource] - figures.given[resource] + figures.received[resource]]));
    figures.overcommits = [...(overOffered.get(figures.owner) ?? []), ...RESOURCES.flatMap((resource) => {
      const found = [];
      if (figures.given[resource] > figures.owned[resource]) {
        found.push(`offers give ${number(figures.given[resource])} ${resource} out of pools of ${number(figures.owned[resource])}`);
      }
      if (figures.quota && figures.capacity[resource] > figures.quota[resource]) {
        found.push(`capacity of ${number(figures.capacity[resource])} ${resource} exceeds the quota of ${number(figures.quota[resource])}`);
      }
      return found;
    })];
    return figures;
  });
}

/** One owner's chart: a group of bars per resource, the quota a line across them. */
function chart(figures) {
  const height = RESOURCES.length * GROUP + 8;
  // The chart's numbers in words, for those who do not see it.
  const summary = RESOURCES.map((resource) => `${resource}: ${figures.quota ? `quota ${number(figures.quota[resource])}, ` : ''}` +
    BARS.map(([name, label]) => `${label} ${number(figures[name][resource])}`).join(', ')).join('; ');
  const svg = element('svg:svg', {
    viewBox: `0 0 ${WIDTH} ${height}`, width: WIDTH, height, role: 'img',
    'aria-label': `Capacity of ${figures.owner}. ${summary}`, class: 'chart',
  });
  RESOURCES.forEach((resource, index) => {
    const top = index * GROUP + 14;
    const values = BARS.map(([name]) => figures[name][resource]);
    const quota = figures.quota?.[resource];
    const scale = Math.max(1, quota ?? 0, ...values);
    const span = WIDTH - LABEL - 90;
    svg.append(element('svg:text', { x: 0, y: top - 3, class: 'resource' }, resource,
      quota === undefined ? ' (no quota)' : ` (quota ${number(quota)})`));
    BARS.forEach(([name, label], bar) => {
      const y = top + bar * (BAR + GAP);
      const value = values[bar];
      const over = (name === 'given' && value > figures.owned[resource]) || (name === 'capacity' && quota !== undefined && value > quota);
      svg.append(
        element('svg:text', { x: 8, y: y + BAR - 2, class: 'label' }, label),
        element('svg:rect', { x: LABEL, y, width: Math.max(value > 0 ? 1 : 0, (value / scale) * span), height: BAR,
          class: `bar ${name}${over ? ' over' : ''}` }),
        element('svg:text', { x: LABEL + (value / scale) * span + 6, y: y + BAR - 2, class: `value${over ? ' over' : ''}` },
          `${number(value)}${over ? ' ⚠' : ''}`));
    });
    if (quota !== undefined) {
      const x = LABEL + (quota / scale) * span;
      svg.append(element('svg:line', { x1: x, x2: x, y1: top - 2, y2: top + BARS.length * (BAR + GAP), class: 'quota' },
        element('svg:title', {}, `quota ${number(quota)} ${resource}`)));
    }
  });
  return svg;
}

/** Renders every owner's chart. */
export function renderCapacity(document) {
  const owners = capacities(document ?? {});
  $('owners').replaceChildren(...(owners.length ? owners.map((figures) => element('figure', {
    class: `owner${figures.overcommits.length ? ' overcommitted' : ''}`, 'data-owner': figures.owner,
  },
  element('figcaption', {}, element('strong', {}, figures.owner),
    figures.overcommits.length ? element('span', { class: 'flag' }, ' overcommitted') : null,
    figures.quota ? null : element('span', { class: 'muted' }, ' no quota')),
  chart(figures),
  figures.overcommits.length
    ? element('ul', { class: 'overcommits' }, figures.overcommits.map((text) => element('li', {}, text)))
    : null)) : [element('p', { class: 'muted' }, 'No owners: the estate has no pools, offers or quotas.')]));
}

// What the views that show a plan draw it with: its change lines by kind (a plan's in
// the Plan and Proposals views, a difference's in History) and the verdicts of its
// policies. Each view keeps its own layout around these and its own state.

import { element, kindTitle, plural, show } from './dom.js';

/**
 * A plan's (or a difference's) change lines by kind, in `order` and then any other kind
 * they name: `{kind, action, text, fields?: [{field, from, to}]}` each.
 */
export function changeRows(changes, order) {
  const rows = [];
  const kinds = [...new Set([...order, ...changes.map((change) => change.kind)])];
  for (const kind of kinds) {
    const ofKind = changes.filter((change) => change.kind === kind);
    if (ofKind.length === 0) continue;
    rows.push(element('div', { class: 'kind' }, kindTitle(kind)));
    for (const change of ofKind) {
      const sign = change.text.charAt(0);
      const row = element('div', { class: `change ${sign === '!' ? 'blocked' : change.action}` },
        element('div', { class: 'text' }, change.text));
      if (change.fields?.length && sign !== '+') {
        row.append(element('ul', { class: 'fields' }, change.fields.map((field) => element('li', {},
          `${field.field}: `,
          element('span', { class: 'from' }, show(field.from)),
          element('span', { class: 'arrow' }, ' -> '),
          element('span', { class: 'to' }, show(field.to))))));
      }
      rows.push(row);
    }
  }
  return rows;
}

/**
 * The verdicts of the policies in force (SPEC §14, §17) into `box`, as the CLI prints
 * them: `!` for a denial of a mandatory or enforced policy, `=` for an approval it
 * requires, `?` for a warning (an advisory denial or approval too).
 */
export function renderVerdicts(policy, box) {
  const verdicts = policy?.verdicts ?? [];
  box.hidden = verdicts.length === 0;
  box.replaceChildren();
  if (!verdicts.length) return;
  const list = element('ul');
  let denials = 0;
  let approvals = 0;
  for (const verdict of verdicts) {
    const binding = verdict.level !== 'advisory';
    const denies = binding && verdict.rule === 'deny';
    const approval = binding && verdict.rule === 'require_approval';
    if (denies) denials += 1;
    if (approval) approvals += 1;
    const object = [verdict.kind, verdict.key].filter(Boolean).join(' ');
    const [mark, kind] = denies ? ['!', 'denied'] : approval ? ['=', 'approval'] : ['?', 'warning'];
    list.append(element('li', { class: kind },
      `${mark} policy `, element('code', {}, verdict.policy), ` (${verdict.level}): ${verdict.message}`,
      object ? element('span', { class: 'object' }, ` (${object})`) : ''));
  }
  const heading = denials
    ? `Denied by policy: apply is refused (${plural(denials, 'denial')})`
    : approvals
      ? `Approval required: propose this plan and have it reviewed (${plural(approvals, 'verdict')})`
      : 'Policy warnings';
  box.className = `verdicts${denials ? ' denied' : ''}`;
  box.append(element('h4', {}, heading), list);
}

/**
 * Where a plan came from (SPEC §20.2): the repository and the commit's first 7
 * characters, then the ref and the path when they were given; `—` for none. The commit
 * links to `${repo}/commit/${commit}` only when the repository is an https URL: no href
 * is ever built from anything else (an ssh address, a `javascript:` text).
 */
export function sourceOf(source) {
  if (!source || typeof source.repo !== 'string' || typeof source.commit !== 'string') return '—';
  const { repo, commit } = source;
  const short = commit.slice(0, 7);
  const linked = /^https:\/\/[^\s/?#@\\]+\/\S+$/.test(repo) && /^[0-9a-fA-F]+$/.test(commit);
  const named = linked
    ? element('a', { href: `${repo.replace(/\/$/, '')}/commit/${commit}`, rel: 'noopener noreferrer', title: commit }, short)
    : element('code', { title: commit }, short);
  const where = [source.ref, source.path].filter((part) => typeof part === 'string' && part !== '');
  return element('span', { class: 'source' }, `${repo} @ `, named, where.length ? ` (${where.join(', ')})` : '');
}

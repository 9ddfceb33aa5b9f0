// The Proposals view (SPEC §17): the tenant's proposals, newest first; one proposal's
// plan exactly as it was made, where its document came from (§20.2), its reviews, and
// whether it is approved (as the server recorded it, and why, as the planner in this
// page judges it); a review with a comment; apply for an approved proposal; withdraw
// for its author.

import { $, element, plural, shortHash, when } from './dom.js';
import { ApiFailure, SignedOut, api, explain, tenant } from './session.js';
import { judgeProposal } from './plan.js';
import { changeRows, renderVerdicts, sourceOf } from './render.js';

/** Counts reads of the view: an answer for an older read is dropped. */
let reads = 0;
/** The proposal shown, to draw again after a review or an event. */
let shown = null;
/**
 * What the last action on a proposal came to, `{ number, ok, title, detail }`: said again
 * when an event draws the proposal anew, until another action or another proposal.
 */
let said = null;

/** Renders the list (filtered by state) and, with `number`, that proposal below it. */
export async function renderProposals(number) {
  const mine = ++reads;
  shown = number === undefined ? null : Number(number);
  if (said && said.number !== shown) said = null;
  const state = $('proposal-state').value;
  let answer;
  try {
    answer = await api('proposals/list', state ? { state, limit: 100 } : { limit: 100 });
  } catch (error) {
    if (mine === reads && !(error instanceof SignedOut)) {
      $('proposal-list').replaceChildren(element('p', { class: 'errors' }, explain(error)));
    }
    return;
  }
  if (mine !== reads) return;
  const rows = answer.proposals.map((proposal) => element('tr', { class: proposal.number === shown ? 'current' : undefined },
    element('th', { scope: 'row' }, element('a', { href: `#proposals/${proposal.number}` }, `#${proposal.number}`)),
    element('td', {}, proposal.title || '—'),
    element('td', {}, proposal.state),
    element('td', {}, proposal.author),
    element('td', {}, when(proposal.createdAt)),
    element('td', {}, plural(proposal.reviews.length, 'review')),
    element('td', {}, proposal.state === 'open' ? (proposal.approved ? 'approved' : 'waiting') : '—'),
    element('td', {}, element('code', { title: proposal.planHash }, shortHash(proposal.planHash))),
    element('td', { class: 'source' }, sourceOf(proposal.source))));
  $('proposal-list').replaceChildren(rows.length
    ? element('div', { class: 'scroll', tabindex: '0', role: 'region', 'aria-label': 'Proposals' },
      element('table', { class: 'grid', id: 'proposal-table' },
        element('caption', {}, 'Proposals, newest first'),
        element('thead', {}, element('tr', {}, ['Proposal', 'Title', 'State', 'Author', 'Proposed at', 'Reviews', 'Approval', 'Plan hash', 'Source']
          .map((header) => element('th', { scope: 'col' }, header)))),
        element('tbody', {}, rows)))
    : element('p', { class: 'muted' }, state ? `No ${state} proposals.` : 'No proposals yet: the Plan view proposes one.'));
  if (shown === null) {
    $('proposal').replaceChildren();
    return;
  }
  await showProposal(shown, mine);
}

async function showProposal(number, mine) {
  const box = $('proposal');
  let whole;
  try {
    whole = await api('proposals/get', { number });
  } catch (error) {
    if (mine === reads && !(error instanceof SignedOut)) box.replaceChildren(element('p', { class: 'errors' }, explain(error)));
    return;
  }
  if (mine !== reads) return;
  const { proposal, plan, document } = whole;
  // Who is signed in (a reviewer's token reads no snapshot; a denial said who).
  const me = tenant.principal;
  const open = proposal.state === 'open';
  const verdicts = element('div', { class: 'verdicts' });
  renderVerdicts(plan.policy, verdicts);
  const standing = open ? (proposal.approved ? 'approved' : 'not approved yet') : proposal.state;
  const revision = proposal.revision ? ` as revision ${proposal.revision}` : '';
  const nodes = [
    element('h3', { id: 'proposal-title' }, `#${proposal.number} ${proposal.title || '(untitled)'}`),
    element('p', { class: 'summary', id: 'proposal-standing' },
      `${standing}${revision} · proposed by ${proposal.author} at ${when(proposal.createdAt)}` +
      `${proposal.prune ? ' · prune' : ''} · ${plural(plan.calls.length, 'call')}`),
    open ? why(judgeProposal(document, proposal.prune, proposal)) : null,
    element('div', { class: 'changes' }, changeRows(plan.changes, tenant.snapshot?.modules ?? [])),
    verdicts,
    element('p', { class: 'hash' }, 'plan hash ', element('code', {}, proposal.planHash)),
    proposal.source ? element('p', { class: 'hash', id: 'proposal-source' }, 'from ', sourceOf(proposal.source)) : null,
    element('h4', {}, 'Reviews'),
    proposal.reviews.length
      ? element('ul', { class: 'reviews' }, proposal.reviews.map((review) => element('li', { class: review.verdict },
        element('strong', {}, review.principal), ` ${review.verdict === 'approve' ? 'approved' : 'rejected'} at ${when(review.at)}`,
        review.comment ? `: ${review.comment}` : '')))
      : element('p', { class: 'muted' }, 'No reviews yet.'),
  ];
  if (open && proposal.author !== me) nodes.push(reviewForm(proposal.number));
  const actions = element('div', { class: 'bar' });
  if (open && proposal.approved && tenant.may?.fleet) {
    actions.append(button('apply-proposal', 'Apply', () => applyProposal(proposal)));
  }
  if (open && proposal.author === me) actions.append(button('withdraw', 'Withdraw', () => withdraw(proposal.number), 'quiet'));
  if (actions.childElementCount) nodes.push(actions);
  nodes.push(element('div', { id: 'proposal-outcome', class: 'outcome', role: 'status', hidden: true }));
  box.replaceChildren(...nodes);
  if (said?.number === number) paint(said);
}

/** Why the proposal is approved or not, as the planner in this page judges it. */
function why(approval) {
  if (!approval) return null;
  const lines = [];
  for (const { policy, message } of approval.pending) {
    lines.push(`waiting for policy ${policy}${message ? `: ${message}` : ''}`);
  }
  for (const { policy, principal, message } of approval.rejections) {
    lines.push(`rejected by ${policy ? `policy ${policy}` : principal}: ${message}`);
  }
  if (approval.rule === 'default' && !approval.approved && !approval.rejected) {
    lines.push('waiting for an approving review by someone other than the author');
  }
  const judged = approval.rule === 'policies' ? 'the policies\' approve and reject rules' : 'the default rule';
  return element('div', { class: 'approval', id: 'proposal-approval' },
    element('p', {}, `${approval.approved ? 'Approved' : approval.rejected ? 'Rejected' : 'Not approved'} by ${judged}.`),
    lines.length ? element('ul', {}, lines.map((line) => element('li', {}, line))) : null);
}

function button(id, label, action, kind) {
  const node = element('button', { type: 'button', id, class: kind });
  node.textContent = label;
  node.addEventListener('click', action);
  return node;
}

function reviewForm(number) {
  const comment = element('textarea', { id: 'review-comment', rows: 2, maxlength: 2000, 'aria-label': 'Review comment' });
  return element('div', { class: 'review' },
    element('label', { for: 'review-comment' }, 'Comment'),
    comment,
    element('div', { class: 'bar' },
      button('approve', 'Approve', () => review(number, 'approve', comment.value)),
      button('reject', 'Reject', () => review(number, 'reject', comment.value), 'quiet')));
}

/** Says what an action on proposal `number` came to, and keeps it for redraws. */
function outcome(number, ok, title, detail) {
  said = { number, ok, title, detail };
  paint(said);
}

function paint({ ok, title, detail }) {
  const box = $('proposal-outcome');
  if (!box) return;
  box.hidden = false;
  box.className = `outcome${ok ? '' : ' failed'}`;
  box.replaceChildren(element('strong', {}, title));
  if (detail !== undefined) box.append(element('pre', {}, typeof detail === 'string' ? detail : JSON.stringify(detail, null, 2)));
}

/** Runs an action of the view, then draws the proposal again; a refusal is said in the view. */
async function act(number, action) {
  said = null;
  let done;
  try {
    done = await action();
  } catch (error) {
    if (error instanceof SignedOut) return;
    const detail = error instanceof ApiFailure && error.details && Object.keys(error.details).length ? error.details : undefined;
    outcome(number, false, error instanceof ApiFailure ? error.explained : explain(error), detail);
    return;
  }
  if (done) said = { number, ok: true, title: done };
  await renderProposals(number);
}

function review(number, verdict, comment) {
  return act(number, async () => {
    const { proposal } = await api('proposals/review', { number, verdict, comment });
    return `Reviewed: ${proposal.state === 'rejected' ? 'the proposal is rejected' : proposal.approved ? 'the proposal is approved' : 'not approved yet'}.`;
  });
}

function withdraw(number) {
  if (!window.confirm(`Withdraw proposal #${number}? It cannot be applied after that.`)) return;
  return act(number, async () => {
    await api('proposals/withdraw', { number });
    return 'Withdrawn.';
  });
}

function applyProposal(proposal) {
  if (!window.confirm(`Apply proposal #${proposal.number} exactly as it was reviewed?`)) return;
  return act(proposal.number, async () => {
    const applied = await api('fleet/apply', { proposal: proposal.number });
    return `Applied ${plural(applied.applied, 'call')}.`;
  });
}

/** Wires the view's controls once. */
export function mountProposals() {
  $('proposal-state').addEventListener('change', () => renderProposals(shown ?? undefined));
}

// The Webhooks view (SPEC §18): the tenant's webhooks, and each one's latest delivery
// attempts with their status or error, so that an operator sees what a receiver got.

import { $, element, table, when } from './dom.js';
import { SignedOut, api, explain } from './session.js';

/** Attempts shown per webhook. */
const LATEST = 10;

/** Counts reads of the view: an answer for an older read is dropped. */
let reads = 0;

/** Renders the webhooks and their latest attempts (again, after an event). */
export async function renderWebhooks() {
  const mine = ++reads;
  const box = $('webhook-list');
  let sections;
  try {
    const { webhooks } = await api('webhooks/list', {});
    sections = await Promise.all(webhooks.map(async (webhook) => {
      const { deliveries } = await api('webhooks/deliveries', { name: webhook.name, limit: LATEST });
      return section(webhook, deliveries);
    }));
  } catch (error) {
    if (mine === reads && !(error instanceof SignedOut)) box.replaceChildren(element('p', { class: 'errors' }, explain(error)));
    return;
  }
  if (mine !== reads) return;
  box.replaceChildren(...(sections.length
    ? sections
    : [element('p', { class: 'muted' }, 'No webhooks: compute.webhooks.put subscribes one (see docs/guide/webhooks.md).')]));
}

function section(webhook, attempts) {
  const state = webhook.enabled
    ? element('span', { class: 'muted' }, 'enabled')
    : element('span', { class: 'errors' }, `disabled: ${webhook.disabled ?? ''}`);
  const rows = attempts.map((attempt) => [
    attempt.event,
    element('code', {}, attempt.id),
    String(attempt.attempt),
    when(attempt.at),
    attempt.status !== undefined ? String(attempt.status) : attempt.error ?? '—',
    `${attempt.durationMs} ms`,
    attempt.state,
  ]);
  return element('section', { class: 'webhook', 'aria-label': `Webhook ${webhook.name}` },
    element('h3', {}, `${webhook.name} `, state),
    element('p', {}, element('code', {}, webhook.url), ` · ${webhook.events.join(', ')}`),
    rows.length
      ? element('div', { class: 'scroll', tabindex: '0', role: 'region', 'aria-label': `Delivery attempts of ${webhook.name}` },
        table('Latest delivery attempts, newest first',
        ['Event', 'Id', 'Attempt', 'At', 'Status or error', 'Duration', 'State'], rows, { class: 'grid' }))
      : element('p', { class: 'muted' }, 'No delivery attempted yet.'));
}

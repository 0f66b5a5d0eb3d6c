/**
 * Delivery payloads of docs/upstream.md, "Payload shapes" and "Batched payloads", built from a world event with the kinds table.
 */
import { kindSpec } from './kinds.js';
import type { WorldEvent } from './kinds.js';

export type Payload = Record<string, unknown>;

/** The body of a non-batched delivery: flat, nested or campaign.sent, each with account_id. */
export function directPayload(event: WorldEvent, accountId: number): Payload {
  const spec = kindSpec(event.kind);
  switch (spec.shape) {
    case 'flat':
      return { ...event.subscriber, event: event.kind, account_id: accountId };
    case 'campaign':
      return { ...event.campaign, event: event.kind, account_id: accountId };
    case 'nested':
      return { ...nestedItem(event), account_id: accountId };
  }
}

/** One item of a batched body: the nested shape without account_id (docs/upstream.md, "Batched payloads"). */
export function nestedItem(event: WorldEvent): Payload {
  const item: Payload = { type: event.kind };
  if (event.subscriber) item['subscriber'] = event.subscriber;
  const context = kindSpec(event.kind).context;
  if (context === 'group' && event.group) item['group'] = event.group;
  if (context === 'automation' && event.automation) item['automation'] = event.automation;
  if (context === 'campaign' && event.campaign) item['campaign'] = event.campaign;
  if (event.kind === 'campaign.click' && event.linkUrl !== undefined) item['link_url'] = event.linkUrl;
  return item;
}

export function batchBody(items: readonly Payload[]): Payload {
  return { events: items, total: items.length };
}

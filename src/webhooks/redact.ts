/**
 * Redacting erased subscribers' personal data inside stored delivery bodies. The row, its status and
 * its `body_sha256` (the hash of the bytes received, the dedupe key) stay: a redelivery of the same
 * bytes is still recognised as a duplicate.
 *
 * Bodies are rewritten through lossless JSON: ids beyond 2^53 must survive the round trip
 * (invariant 6).
 */
import { isLosslessNumber, parse, stringify } from 'lossless-json';
import type { Queryable } from '../ground/queryable.js';
import { deliveriesMentioning, replaceDeliveryBody } from './inbox.js';

/** Subscriber keys that are not personal data; every other key of a matching subscriber object goes. */
const KEPT_KEYS = new Set([
  'id',
  'status',
  'source',
  'type',
  'sent',
  'opens_count',
  'clicks_count',
  'open_rate',
  'click_rate',
  'subscribed_at',
  'unsubscribed_at',
  'created_at',
  'updated_at',
  'date_created',
  'date_updated',
  'date_subscribe',
  'date_unsubscribe',
  'deleted_at',
  'forget_at',
  'opted_in_at',
]);

/**
 * Keys whose presence marks an object as a subscriber, not a group or campaign with the same id
 * (`name` is not one: groups and campaigns have names).
 */
const PERSONAL_KEYS = ['email', 'fields', 'ip_address', 'optin_ip'];

/** Emptied rather than removed, so the body keeps the shape the parser expects (like a forget upstream). */
const EMPTIED: Record<string, unknown> = { email: '', name: null, fields: {}, ip_address: null, optin_ip: null };

function idText(value: unknown): string | null {
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || isLosslessNumber(value)) return String(value);
  return null;
}

/** Returns the body with the personal data of `ids` removed, or null when it carries none of them. */
export function redactBody(text: string, ids: ReadonlySet<string>): string | null {
  const body = parse(text);
  let changed = false;
  const visit = (value: unknown): void => {
    if (Array.isArray(value)) return value.forEach(visit);
    if (typeof value !== 'object' || value === null || isLosslessNumber(value)) return;
    const object = value as Record<string, unknown>;
    const id = idText(object.id);
    if (id !== null && ids.has(id) && PERSONAL_KEYS.some((k) => k in object)) {
      for (const key of Object.keys(object)) {
        if (KEPT_KEYS.has(key)) continue;
        if (key in EMPTIED) object[key] = EMPTIED[key];
        else delete object[key];
      }
      changed = true;
    }
    for (const child of Object.values(object)) visit(child);
  };
  visit(body);
  return changed ? (stringify(body) ?? null) : null;
}

/**
 * Redacts every stored delivery that carries one of `subscriberIds`; returns how many were rewritten.
 * The inbox finds the candidates in SQL (any `id` anywhere equal to one of the ids), paging by id.
 */
export async function redactDeliveries(pool: Queryable, subscriberIds: readonly string[], batch = 200): Promise<number> {
  if (subscriberIds.length === 0) return 0;
  const ids = new Set(subscriberIds);
  let cursor = '0';
  let rewritten = 0;
  for (;;) {
    const rows = await deliveriesMentioning(pool, subscriberIds, cursor, batch);
    for (const row of rows) {
      const redacted = redactBody(row.body, ids);
      if (redacted === null) continue;
      await replaceDeliveryBody(pool, row.id, redacted);
      rewritten += 1;
    }
    if (rows.length < batch) return rewritten;
    cursor = (rows[rows.length - 1] as { id: string }).id;
  }
}

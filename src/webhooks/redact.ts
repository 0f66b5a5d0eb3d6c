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
import {
  deliveriesMentioning,
  deliveriesMentioningErasedSince,
  deliveryBody,
  emailsOfSubscribers,
  replaceDeliveryBody,
} from './inbox/erasure.js';
import { linkWithoutPersonalData, SUBSCRIBER_EMPTIED, SUBSCRIBER_KEPT_KEYS, SUBSCRIBER_MARKER_KEYS } from '../mirror/personal-data.js';
import { canonicalIdOrNull } from '../mirror/rules.js';
import { LINK_URL_KEY } from './payloads.js';

/** Subscriber keys that are not personal data; every other key of a matching subscriber object goes. */
const KEPT_KEYS = SUBSCRIBER_KEPT_KEYS;

/**
 * Keys whose presence marks an object as a subscriber, not a group or campaign with the same id
 * (`name` is not one: groups and campaigns have names).
 */
const PERSONAL_KEYS = SUBSCRIBER_MARKER_KEYS;

/** Emptied rather than removed, so the body keeps the shape the parser expects (like a forget upstream). */
const EMPTIED = SUBSCRIBER_EMPTIED;

/** Whether `value` already is what a redaction leaves (an already redacted body is not rewritten). */
function isEmptied(value: unknown, emptied: unknown): boolean {
  if (emptied === null || typeof emptied !== 'object') return value === emptied;
  return typeof value === 'object' && value !== null && !Array.isArray(value) && Object.keys(value).length === 0;
}

/** Empties or removes the personal keys of one subscriber object; true when something changed. */
function redactSubscriber(object: Record<string, unknown>): boolean {
  let changed = false;
  for (const key of Object.keys(object)) {
    if (KEPT_KEYS.has(key)) continue;
    if (!(key in EMPTIED)) {
      delete object[key];
      changed = true;
    } else if (!isEmptied(object[key], EMPTIED[key])) {
      object[key] = EMPTIED[key];
      changed = true;
    }
  }
  return changed;
}

/** An event's link (`link_url` of a click) beside a redacted subscriber loses what can carry personal data. */
function redactLink(object: Record<string, unknown>): boolean {
  const link = object[LINK_URL_KEY];
  if (typeof link !== 'string') return false;
  const stripped = linkWithoutPersonalData(link);
  if (stripped === link) return false;
  object[LINK_URL_KEY] = stripped;
  return true;
}

/**
 * A subscriber object of one of `ids`: a matching id and a key only subscribers have. Ids are compared
 * as the normalizer reads them (`007` is subscriber 7), never as text.
 */
function isSubscriberOf(value: unknown, ids: ReadonlySet<string>): value is Record<string, unknown> {
  if (!isPlainObject(value)) return false;
  const id = canonicalIdOrNull(value.id) ?? (typeof value.id === 'string' ? value.id : null);
  return id !== null && ids.has(id) && PERSONAL_KEYS.some((k) => k in value);
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !isLosslessNumber(value);
}

/** Calls `each` on every object in `value`, depth first. */
function everyObject(value: unknown, each: (object: Record<string, unknown>) => void): void {
  if (Array.isArray(value)) return value.forEach((v) => everyObject(v, each));
  if (!isPlainObject(value)) return;
  each(value);
  for (const child of Object.values(value)) everyObject(child, each);
}

/** Matches any of `emails` (lower-cased), plain or URL-encoded, in any case. */
function emailPattern(emails: ReadonlySet<string>): RegExp | null {
  const forms = [...emails].filter((e) => e !== '').flatMap((e) => [e, encodeURIComponent(e)]);
  if (forms.length === 0) return null;
  const escaped = [...new Set(forms)].sort((a, b) => b.length - a.length).map((f) => f.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  return new RegExp(escaped.join('|'), 'gi');
}

/**
 * Scrubs the emails from every string and key of `value` (keys nobody declared, free text, links);
 * true when something changed.
 */
function scrubEmails(value: unknown, pattern: RegExp): boolean {
  let changed = false;
  everyObject(value, (object) => {
    for (const [key, child] of Object.entries(object)) {
      pattern.lastIndex = 0;
      if (pattern.test(key)) {
        delete object[key];
        changed = true;
        continue;
      }
      if (typeof child === 'string') {
        const scrubbed = child.replace(pattern, '');
        if (scrubbed !== child) {
          object[key] = scrubbed;
          changed = true;
        }
      } else if (Array.isArray(child)) {
        child.forEach((item, i) => {
          if (typeof item !== 'string') return;
          const scrubbed = item.replace(pattern, '');
          if (scrubbed !== item) {
            child[i] = scrubbed;
            changed = true;
          }
        });
      }
    }
  });
  return changed;
}

/**
 * Returns the body with the personal data of `ids` removed, or null when it carries none still there:
 * their subscriber objects, the links of the events that carry them (query string and any path
 * segment with an email), and their emails wherever else they appear in the body, in any case, plain
 * or URL-encoded (`knownEmails`, lower-cased, adds the ones other bodies gave them).
 */
export function redactBody(text: string, ids: ReadonlySet<string>, knownEmails: ReadonlySet<string> = new Set()): string | null {
  const body = parse(text);
  const emails = new Set(knownEmails);
  everyObject(body, (object) => {
    if (isSubscriberOf(object, ids) && typeof object.email === 'string') emails.add(object.email.toLowerCase());
  });
  let changed = false;
  everyObject(body, (object) => {
    if (isSubscriberOf(object, ids) && redactSubscriber(object)) changed = true;
    if (Object.values(object).some((child) => isSubscriberOf(child, ids)) && redactLink(object)) changed = true;
  });
  const pattern = emailPattern(emails);
  if (pattern && scrubEmails(body, pattern)) changed = true;
  return changed ? (stringify(body) ?? null) : null;
}

/**
 * Redacts every stored delivery that carries one of `subscriberIds`; returns how many were rewritten.
 * The inbox finds the candidates in SQL (any `id` anywhere equal to one of the ids), paging by id.
 */
export async function redactDeliveries(
  pool: Queryable,
  subscriberIds: readonly string[],
  { batch = 200, emails: known = [] }: { batch?: number; emails?: readonly string[] } = {},
): Promise<number> {
  if (subscriberIds.length === 0) return 0;
  const ids = new Set(subscriberIds);
  // Read before any body is rewritten: a body may carry the email in a key nobody declared while
  // only another body carries it in the subscriber object. `known`: emails the caller knows besides.
  const emails = new Set([...known.map((e) => e.toLowerCase()), ...(await emailsOfSubscribers(pool, subscriberIds))]);
  let cursor = '0';
  let rewritten = 0;
  for (;;) {
    const rows = await deliveriesMentioning(pool, subscriberIds, cursor, batch);
    for (const row of rows) {
      const redacted = redactBody(row.body, ids, emails);
      if (redacted === null) continue;
      await replaceDeliveryBody(pool, row.id, redacted);
      rewritten += 1;
    }
    if (rows.length < batch) return rewritten;
    cursor = (rows[rows.length - 1] as { id: string }).id;
  }
}

/**
 * The re-check of an erasure run: every stored delivery received since its subscribers' last check
 * (less `marginMs`, for receipts in flight then) that mentions an erased subscriber is redacted;
 * returns how many were rewritten. Catches what arrived after the first redaction, whatever its
 * status (an applied one was redacted at its apply already, so it is not rewritten again).
 */
export async function redactDeliveriesSince(pool: Queryable, checkedBefore: string, marginMs: number, batch = 200): Promise<number> {
  let cursor = '0';
  let rewritten = 0;
  for (;;) {
    const rows = await deliveriesMentioningErasedSince(pool, checkedBefore, marginMs, cursor, batch);
    const emails = new Set(rows.length === 0 ? [] : await emailsOfSubscribers(pool, [...new Set(rows.flatMap((r) => r.ids))]));
    for (const row of rows) {
      const redacted = redactBody(row.body, new Set(row.ids), emails);
      if (redacted === null) continue;
      await replaceDeliveryBody(pool, row.id, redacted);
      rewritten += 1;
    }
    if (rows.length < batch) return rewritten;
    cursor = (rows[rows.length - 1] as { id: string }).id;
  }
}

/** Redacts one delivery for `subscriberIds` (an apply found them forgotten); true when rewritten. */
export async function redactDelivery(pool: Queryable, id: string, subscriberIds: readonly string[]): Promise<boolean> {
  const body = await deliveryBody(pool, id);
  if (body === null) return false;
  const redacted = redactBody(body, new Set(subscriberIds), new Set(await emailsOfSubscribers(pool, subscriberIds)));
  if (redacted === null) return false;
  await replaceDeliveryBody(pool, id, redacted);
  return true;
}

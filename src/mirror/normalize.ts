/**
 * Upstream shapes → the row shapes `store/` writes (docs/architecture.md, "Modules and what they may import": upstream → normalize →
 * store). Pure functions: no I/O, no clock, no config reads (the source timezone is an argument).
 * The validation and the mapping are the schemas of `schemas.ts` (the same ones the webhook receiver
 * validates deliveries with); the row shapes are in `rows.ts` (re-exported here); this module turns a
 * schema's first issue into a {@link NormalizeError} naming the upstream field.
 *
 * Two subscriber shapes exist upstream: the legacy Single Subscriber of the poll path (docs/upstream.md, "Legacy Single Subscriber") and the Subscriber object (docs/upstream.md) embedded in webhook payloads. Both become a {@link SubscriberRow}
 * whose `provided` list says which columns that payload actually carried, so the store never nulls a
 * column only the other path knows (e.g. `source` from webhooks, the legacy-only keys in `extra`).
 *
 * Decisions (documented once here, referred to elsewhere):
 * - **Timestamps** are canonical UTC strings with six fractional digits (see `time.ts`); JS Dates
 *   would drop the microseconds that order versions (invariant 2).
 * - **`updated_at` is required.** It is the only clock that orders versions. When it is missing or
 *   null the row falls back to `created_at` (a subscriber never updated has updated = created);
 *   with neither, the row is rejected with a {@link NormalizeError} naming the field.
 * - **Legacy `subscribedAt`**: `signup_timestamp` (a full timestamp) when present, otherwise
 *   `date_subscribe` (a day only) at 00:00 in the source zone. When `signup_timestamp` wins and
 *   `date_subscribe` is also set, the raw `date_subscribe` is kept in `extra` so nothing is lost.
 * - **`fields`** is an object `{key: string | null}` in both shapes. An `email` key is dropped: the
 *   address lives in the `email` column, webhook `fields` never carry it, and keeping it would make
 *   the two paths' rows differ (a spurious write on every tie) and leave a copy of personal data
 *   outside the column forgetting erases. Non-string scalar values become strings (docs/upstream.md, "Subscriber object": "all values
 *   are strings"); `name` stays in `fields` as well as in the `name` column.
 * - **Unknown keys** go to `extra` with their values as received (a lossless-json `LosslessNumber`
 *   or a bigint is fine: the store serializes them without loss). Webhook envelope keys of flat
 *   payloads (`event`, `account_id`) are not subscriber data and are dropped.
 * - **NUL characters** are removed from strings: Postgres `text` and `jsonb` reject them, and one bad
 *   row would otherwise fail its whole page forever.
 * - **Ids** are canonical decimal strings (invariant 6): a string of digits, a safe-integer number,
 *   a bigint or a lossless-json number; anything else (including an unsafe JS number, the sign of a
 *   lossy `JSON.parse`) is a {@link NormalizeError}.
 */
import { isLosslessNumber } from 'lossless-json';
import type { z } from 'zod';
import { assertTimeZone, TimezoneError } from '../ground/time.js';
import { describeValue, idRule } from './rules.js';
import type { AutomationRow, CampaignRow, GroupRow, SubscriberRow } from './rows.js';
import {
  automationRow,
  automationSchema,
  campaignRow,
  campaignSchema,
  groupRow,
  groupSchema,
  currentSubscriberRowSchema,
  legacySubscriberRowOf,
  legacySubscriberRowSchema,
  upstreamKeysOf,
  webhookSubscriberRowSchema,
} from './schemas.js';
import { PERSONAL_FIELDS } from '../db/subscriber-columns.js';

export { isCanonicalTimestamp } from '../ground/time.js';
export { LEGACY_KNOWN_KEYS, WEBHOOK_ENVELOPE_KEYS, WEBHOOK_KNOWN_KEYS } from './schemas.js';
export * from './rows.js';

// ---------------------------------------------------------------------------------------------
// Errors

/**
 * Upstream field names whose values are personal data and so never appear in error text: the keys
 * (webhook and legacy) of the personal columns.
 */
const PERSONAL_KEYS: ReadonlySet<string> = new Set(upstreamKeysOf(PERSONAL_FIELDS));

/**
 * An upstream object that cannot be mirrored: names the upstream field (`date_updated`,
 * `fields[3].key`, …) and, when known, the subscriber id. Values of personal fields are never
 * quoted in the message.
 */
export class NormalizeError extends Error {
  constructor(
    /** The upstream field at fault, in upstream naming. */
    readonly field: string,
    /** What is wrong with it. */
    readonly reason: string,
    /** The object's id when it could be read. */
    readonly objectId?: string,
  ) {
    super(`${objectId === undefined ? 'object' : `id ${objectId}`}: field "${field}": ${reason}`);
    this.name = 'NormalizeError';
  }
}

function preview(field: string, value: unknown): string {
  if (PERSONAL_KEYS.has(field.split(/[.[]/)[0] ?? field)) return '';
  let text: string;
  if (typeof value === 'string') text = JSON.stringify(value);
  else if (typeof value === 'bigint') text = `${value}n`;
  else if (isLosslessNumber(value)) text = value.value;
  else {
    try {
      text = JSON.stringify(value) ?? String(value);
    } catch {
      text = typeof value;
    }
  }
  return ` (got ${text.length > 60 ? `${text.slice(0, 57)}...` : text})`;
}

// ---------------------------------------------------------------------------------------------
// From the schemas' issues to a NormalizeError

type Raw = Record<string, unknown>;

/** The value at a zod issue path inside `raw` (for the error text). */
function valueAt(raw: unknown, path: readonly PropertyKey[]): unknown {
  let value = raw;
  for (const key of path) {
    if (typeof value !== 'object' || value === null) return undefined;
    value = (value as Record<PropertyKey, unknown>)[key];
  }
  return value;
}

function joinPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const segment of path) out += typeof segment === 'number' ? `[${segment}]` : out === '' ? String(segment) : `.${String(segment)}`;
  return out;
}

/** The first issue of a failed parse of `raw`, as a {@link NormalizeError} naming the upstream field. */
function fromZod(error: z.ZodError, raw: unknown, prefix = ''): NormalizeError {
  const first = error.issues[0];
  const field = `${prefix}${joinPath(first?.path ?? [])}` || 'object';
  const value = valueAt(raw, first?.path ?? []);
  const id = typeof raw === 'object' && raw !== null ? idRule.safeParse((raw as Raw).id) : undefined;
  const reason = `${first?.message ?? 'invalid'}${value === undefined || value === null ? '' : preview(field, value)}`;
  return new NormalizeError(field, reason, id?.success ? id.data : undefined);
}

function parseWith<T>(schema: z.ZodType<T>, raw: unknown, prefix = ''): T {
  const result = schema.safeParse(raw);
  if (!result.success) throw fromZod(result.error, raw, prefix);
  return result.data;
}

function asObject(raw: unknown, what: string): Raw {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw) || isLosslessNumber(raw)) {
    throw new NormalizeError(what, `expected an object, got ${describeValue(raw)}`);
  }
  return raw as Raw;
}

// ---------------------------------------------------------------------------------------------
// The normalizers (each one schema of `schemas.ts`)

/**
 * Canonical decimal id from a string of digits, a safe-integer number, a bigint or a lossless-json
 * number. Throws {@link NormalizeError} naming `field`.
 */
export function normalizeId(value: unknown, field = 'id'): string {
  const result = idRule.safeParse(value);
  if (result.success) return result.data;
  throw new NormalizeError(
    field,
    `${result.error.issues[0]?.message ?? 'not an id'}${value === undefined || value === null ? '' : preview(field, value)}`,
  );
}

export interface LegacyNormalizeOptions {
  /** IANA zone of legacy `Y-m-d H:i:s` values (`MAILER_SOURCE_TZ`), e.g. `UTC`, `Pacific/Kiritimati`. */
  sourceTimezone: string;
}

/**
 * A legacy Single Subscriber (poll path; docs/upstream.md, "Legacy Single Subscriber", `test/fixtures/mirror/legacy-single-subscriber.json`)
 * → {@link SubscriberRow} with `via: 'poll'`.
 *
 * Mapping: `type`→status, `opened`/`clicked`→opensCount/clicksCount, `opened_rate`/`clicked_rate`→
 * openRate/clickRate, `signup_ip`→ipAddress, `confirmation_timestamp`/`confirmation_ip`→
 * optedInAt/optinIp, `signup_timestamp` (else `date_subscribe` at 00:00)→subscribedAt,
 * `date_unsubscribe`/`date_created`/`date_updated`→unsubscribedAt/createdAt/updatedAt, `fields`
 * array→object. Never provides `source`, `deletedAt`, `forgetAt`.
 *
 * @throws {NormalizeError} for a missing or non-numeric id, an unknown `sourceTimezone`, a malformed
 *   timestamp, a wrongly typed value, or neither `date_updated` nor `date_created`.
 */
export function normalizeLegacySubscriber(raw: Record<string, unknown>, opts: LegacyNormalizeOptions): SubscriberRow {
  const obj = asObject(raw, 'subscriber');
  assertSourceTimezone(opts.sourceTimezone);
  return legacySubscriberRowOf(obj, opts.sourceTimezone) ?? parseWith(legacySubscriberRowSchema(opts.sourceTimezone), obj);
}

/**
 * A subscriber object (docs/upstream.md, "Subscriber object"; the `subscriber` of a nested or batched item, or a flat payload itself) →
 * {@link SubscriberRow} with `via: 'webhook'`.
 *
 * Timestamps are ISO 8601 with a zone and keep all six fractional digits. The `name` column comes
 * from a top-level `name` when present, else from `fields.name`. Each column is provided only when
 * its key is present, so a payload that omits e.g. `deleted_at` keeps the stored value.
 *
 * @throws {NormalizeError} for a missing or non-numeric id, a malformed timestamp, a wrongly typed
 *   value, or neither `updated_at` nor `created_at`.
 */
export function normalizeWebhookSubscriber(raw: Record<string, unknown>): SubscriberRow {
  return parseWith(webhookSubscriberRowSchema, asObject(raw, 'subscriber'));
}

/** An unknown `sourceTimezone` is a NormalizeError naming the option, like every other bad input. */
function assertSourceTimezone(zone: string): void {
  try {
    assertTimeZone(zone);
  } catch (err) {
    if (err instanceof TimezoneError) throw new NormalizeError('sourceTimezone', err.message);
    throw err;
  }
}

/**
 * A member as the current API lists it (docs/upstream-current.md, "Subscriber objects") →
 * {@link SubscriberRow} with `via: 'current'`: the webhook mapping above, with list dates
 * (`Y-m-d H:i:s`, zoneless) read in `sourceTimezone` (`MAILER_SOURCE_TZ`).
 *
 * @throws {NormalizeError} as {@link normalizeWebhookSubscriber}, and for an unknown `sourceTimezone`.
 */
export function normalizeCurrentSubscriber(raw: Record<string, unknown>, opts: LegacyNormalizeOptions): SubscriberRow {
  const obj = asObject(raw, 'subscriber');
  assertSourceTimezone(opts.sourceTimezone);
  return parseWith(currentSubscriberRowSchema(opts.sourceTimezone), obj);
}

/** A payload `group` object `{id, name}` → {@link GroupRow}. @throws {NormalizeError} */
export function normalizeGroup(raw: unknown): GroupRow {
  return groupRow(parseWith(groupSchema, asObject(raw, 'group'), 'group.'));
}

/** A payload `automation` object `{id, name}` → {@link AutomationRow}. @throws {NormalizeError} */
export function normalizeAutomation(raw: unknown): AutomationRow {
  return automationRow(parseWith(automationSchema, asObject(raw, 'automation'), 'automation.'));
}

/**
 * A payload `campaign` object, or a flat `campaign.sent` payload (its `event`/`account_id` are
 * ignored) → {@link CampaignRow}. With `sent: true` (a `campaign.sent` event) `sentAt` is the
 * campaign `date`; otherwise `sentAt` is null (unknown: the store keeps a stored value).
 *
 * @throws {NormalizeError}
 */
export function normalizeCampaign(raw: unknown, opts: { sent?: boolean } = {}): CampaignRow {
  return campaignRow(parseWith(campaignSchema, asObject(raw, 'campaign'), 'campaign.'), opts);
}

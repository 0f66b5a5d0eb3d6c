/**
 * Upstream shapes → the row shapes `store.ts` writes (DESIGN.md "Layout": upstream → normalize →
 * store). Pure functions: no I/O, no clock, no config reads (the source timezone is an argument).
 *
 * Two subscriber shapes exist upstream: the legacy Single Subscriber of the poll path (DESIGN.md
 * "Facts") and the §2.2 Subscriber embedded in webhook payloads. Both become a {@link SubscriberRow}
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
 *   outside the column forgetting erases. Non-string scalar values become strings (§2.2: "all values
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
import type { MirrorSource } from '../db/schema.js';
import { parseIsoTimestamp, parseLegacyTimestamp, TimestampError, TimezoneError, zoneFormatter } from '../time.js';

export { isCanonicalTimestamp } from '../time.js';

// ---------------------------------------------------------------------------------------------
// Row shapes

/**
 * Every data column of `subscribers`, keyed like the drizzle schema. Timestamps are canonical UTC
 * strings (`2024-05-28T10:30:29.000000Z`).
 */
export interface SubscriberValues {
  /** Canonical decimal id (invariant 6). */
  id: string;
  email: string | null;
  name: string | null;
  status: string | null;
  source: string | null;
  sent: number | null;
  opensCount: number | null;
  clicksCount: number | null;
  openRate: number | null;
  clickRate: number | null;
  ipAddress: string | null;
  subscribedAt: string | null;
  unsubscribedAt: string | null;
  createdAt: string | null;
  /** Upstream version time; never null (see the module note on the `created_at` fallback). */
  updatedAt: string;
  deletedAt: string | null;
  forgetAt: string | null;
  optedInAt: string | null;
  optinIp: string | null;
  fields: Record<string, string | null>;
  /** Upstream keys with no column. Merged key-by-key into the stored object by the store. */
  extra: Record<string, unknown>;
}

/** A data column other than the key. */
export type SubscriberField = Exclude<keyof SubscriberValues, 'id'>;

/** All {@link SubscriberField}s in table order. */
export const SUBSCRIBER_FIELDS = [
  'email',
  'name',
  'status',
  'source',
  'sent',
  'opensCount',
  'clicksCount',
  'openRate',
  'clickRate',
  'ipAddress',
  'subscribedAt',
  'unsubscribedAt',
  'createdAt',
  'updatedAt',
  'deletedAt',
  'forgetAt',
  'optedInAt',
  'optinIp',
  'fields',
  'extra',
] as const satisfies readonly SubscriberField[];

/**
 * Columns erased when a subscriber is forgotten (DESIGN.md "SQL contract": a forgotten subscriber
 * keeps its id and timestamps; its personal data is erased). `extra` is erased whole: its keys are
 * unknown to us, so none can be vouched for as non-personal (e.g. legacy `user_agent`).
 */
export const PERSONAL_FIELDS = ['email', 'name', 'ipAddress', 'optinIp', 'fields', 'extra'] as const satisfies readonly SubscriberField[];

/**
 * One subscriber version as one path saw it.
 *
 * `values` holds every column; only the ones listed in `provided` are written (a column whose
 * upstream key was absent keeps its stored value, so a webhook never nulls a poll-only column and
 * vice versa). Columns not provided are `null` in `values` and must be ignored. `updatedAt` and
 * `extra` are always provided; `fields` and `extra` are merged key by key into the stored objects.
 */
export interface SubscriberRow {
  /** Which path brought it; stored in `mirrored_via`. */
  via: MirrorSource;
  values: SubscriberValues;
  /** Columns this payload carried, in {@link SUBSCRIBER_FIELDS} order, without duplicates. */
  provided: readonly SubscriberField[];
}

/** A group as embedded in payloads (§2.3). A null name means "not known", never "erase". */
export interface GroupRow {
  id: string;
  name: string | null;
}

/** An automation as embedded in payloads (§2.3). */
export interface AutomationRow {
  id: string;
  name: string | null;
}

/** A campaign as embedded in payloads or the flat `campaign.sent` payload (§2.3). Nulls mean "not known". */
export interface CampaignRow {
  id: string;
  name: string | null;
  totalRecipients: number | null;
  previewUrl: string | null;
  /** The payload's `date`. */
  date: string | null;
  /** Set from `date` when normalized from a `campaign.sent` event. */
  sentAt: string | null;
}

/**
 * One applied event: each item of each delivery is one row, keyed by (`deliveryId`, `itemIndex`), so
 * applying the same delivery again writes nothing while two identical items are two events.
 */
export interface ActivityRow {
  /** The event kind, e.g. `campaign.open`. */
  kind: string;
  subscriberId: string | null;
  groupId?: string | null;
  automationId?: string | null;
  campaignId?: string | null;
  linkUrl?: string | null;
  /**
   * When the event reached us: the receipt time of its delivery. Payloads carry no event time, so
   * for an open or a click this is the best time the service gives. Null when not known.
   */
  occurredAt: string | null;
  /** The subscriber's `updated_at` in the event (an open or a click does not move it). */
  subscriberUpdatedAt?: string | null;
  /** `webhook_deliveries.id` the event came from. */
  deliveryId?: string | bigint | null;
  /** Position of the event in its delivery (0 for an unbatched one). */
  itemIndex?: number | null;
}

// ---------------------------------------------------------------------------------------------
// Errors

/** Field names whose values are personal data and so never appear in error text. */
const PERSONAL_KEYS = new Set(['email', 'name', 'signup_ip', 'confirmation_ip', 'ip_address', 'optin_ip', 'fields']);

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
// Scalar readers

type Raw = Record<string, unknown>;

/** Context for error messages. */
interface Ctx {
  id: string | undefined;
}

const NO_VALUE: unique symbol = Symbol('no value');

/** Throws a {@link NormalizeError}; quotes `value` (unless personal) when given. */
function fail(ctx: Ctx, field: string, reason: string, value: unknown = NO_VALUE): never {
  throw new NormalizeError(field, value === NO_VALUE ? reason : `${reason}${preview(field, value)}`, ctx.id);
}

function present(raw: Raw, key: string): boolean {
  return Object.hasOwn(raw, key) && raw[key] !== undefined;
}

function stripNul(text: string): string {
  return text.includes('\u0000') ? text.replaceAll('\u0000', '') : text;
}

const INT4_MIN = -2_147_483_648;
const INT4_MAX = 2_147_483_647;
const DIGITS = /^\d+$/;

/**
 * Canonical decimal id from a string of digits, a safe-integer number, a bigint or a lossless-json
 * number. Throws {@link NormalizeError} naming `field`.
 */
export function normalizeId(value: unknown, field = 'id'): string {
  const ctx: Ctx = { id: undefined };
  if (typeof value === 'string' || isLosslessNumber(value)) {
    const text = typeof value === 'string' ? value.trim() : value.value;
    if (!DIGITS.test(text)) fail(ctx, field, 'not a non-negative integer id', value);
    return BigInt(text).toString();
  }
  if (typeof value === 'bigint') {
    if (value < 0n) fail(ctx, field, 'negative id', value);
    return value.toString();
  }
  if (typeof value === 'number') {
    if (!Number.isInteger(value) || value < 0) fail(ctx, field, 'not a non-negative integer id', value);
    if (!Number.isSafeInteger(value)) {
      // DESIGN.md "Traps": JSON.parse corrupts legacy ids above 2^53; the digits are already wrong.
      fail(ctx, field, 'id above 2^53 arrived as a JS number; parse the body losslessly (lossless-json)', value);
    }
    return String(value);
  }
  if (value === null || value === undefined) fail(ctx, field, 'missing');
  return fail(ctx, field, 'not an id', value);
}

/** Reads every key of `map` that is present into its column, and marks the column provided. */
function readMapped<C extends SubscriberField>(
  raw: Raw,
  map: Readonly<Record<string, C>>,
  read: (raw: Raw, key: string, ctx: Ctx) => SubscriberValues[C],
  into: { values: SubscriberValues; provided: Set<SubscriberField> },
  ctx: Ctx,
): void {
  for (const [key, column] of Object.entries(map)) {
    if (!present(raw, key)) continue;
    into.values[column] = read(raw, key, ctx);
    into.provided.add(column);
  }
}

function readText(raw: Raw, key: string, ctx: Ctx): string | null {
  const value = raw[key];
  if (value === null || value === undefined) return null;
  if (typeof value !== 'string') fail(ctx, key, `expected a string, got ${describe(value)}`);
  return stripNul(value);
}

function describe(value: unknown): string {
  if (Array.isArray(value)) return 'an array';
  if (isLosslessNumber(value)) return 'a number';
  return `a ${typeof value}`;
}

/** Integer column (Postgres `integer`). Numeric strings and lossless numbers are accepted; "" is null. */
function readInt(raw: Raw, key: string, ctx: Ctx): number | null {
  const value = raw[key];
  if (value === null || value === undefined || value === '') return null;
  let n: number;
  if (typeof value === 'number') n = value;
  else if (typeof value === 'bigint') n = Number(value);
  else if (typeof value === 'string' || isLosslessNumber(value)) {
    const text = typeof value === 'string' ? value.trim() : value.value;
    if (!/^-?\d+$/.test(text)) fail(ctx, key, 'expected an integer', value);
    n = Number(text);
  } else return fail(ctx, key, 'expected an integer', value);
  if (!Number.isInteger(n) || n < INT4_MIN || n > INT4_MAX) fail(ctx, key, 'expected a 32-bit integer', value);
  return n;
}

/** Double column. Numeric strings and lossless numbers are accepted; "" is null. */
function readFloat(raw: Raw, key: string, ctx: Ctx): number | null {
  const value = raw[key];
  if (value === null || value === undefined || value === '') return null;
  let n: number;
  if (typeof value === 'number') n = value;
  else if (typeof value === 'bigint') n = Number(value);
  else if (typeof value === 'string' || isLosslessNumber(value)) {
    const text = typeof value === 'string' ? value.trim() : value.value;
    if (!/^-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/.test(text)) fail(ctx, key, 'expected a number', value);
    n = Number(text);
  } else return fail(ctx, key, 'expected a number', value);
  if (!Number.isFinite(n)) fail(ctx, key, 'expected a finite number', value);
  return n;
}

function readLegacyTime(raw: Raw, key: string, ctx: Ctx, timeZone: string): string | null {
  const value = raw[key];
  if (value === null || value === undefined) return null;
  if (typeof value !== 'string') fail(ctx, key, 'expected a "Y-m-d H:i:s" string', value);
  try {
    return parseLegacyTimestamp(value, timeZone);
  } catch (err) {
    if (err instanceof TimezoneError) throw new NormalizeError('sourceTimezone', err.message, ctx.id);
    if (err instanceof TimestampError) fail(ctx, key, err.message, value);
    throw err;
  }
}

function readIsoTime(raw: Raw, key: string, ctx: Ctx): string | null {
  const value = raw[key];
  if (value === null || value === undefined || value === '') return null;
  if (typeof value !== 'string') fail(ctx, key, 'expected an ISO 8601 string', value);
  try {
    return parseIsoTimestamp(value);
  } catch (err) {
    if (err instanceof TimestampError) return fail(ctx, key, err.message, value);
    throw err;
  }
}

function fieldValue(value: unknown, field: string, ctx: Ctx): string | null {
  if (value === null || value === undefined) return null;
  if (typeof value === 'string') return stripNul(value);
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') return String(value);
  if (isLosslessNumber(value)) return value.value;
  return fail(ctx, field, `expected a scalar value, got ${describe(value)}`);
}

/**
 * `fields` as an object. Accepts the legacy array of `{key, value, type}` and the webhook object;
 * drops an `email` key (see the module note). A later duplicate key wins.
 */
function readFields(raw: Raw, key: string, ctx: Ctx): Record<string, string | null> {
  const value = raw[key];
  const out: Record<string, string | null> = {};
  if (value === null || value === undefined) return out;
  if (Array.isArray(value)) {
    value.forEach((item: unknown, i) => {
      if (typeof item !== 'object' || item === null || Array.isArray(item)) {
        fail(ctx, `${key}[${i}]`, 'expected an object {key, value, type}');
      }
      const entry = item as Raw;
      if (typeof entry.key !== 'string' || entry.key === '') fail(ctx, `${key}[${i}].key`, 'expected a non-empty string');
      const name = stripNul(entry.key);
      if (name === 'email') return;
      out[name] = fieldValue(entry.value, `${key}[${i}].value`, ctx);
    });
    return out;
  }
  if (typeof value === 'object' && !isLosslessNumber(value)) {
    for (const [name, v] of Object.entries(value as Raw)) {
      if (name === 'email') continue;
      out[stripNul(name)] = fieldValue(v, `${key}.${name}`, ctx);
    }
    return out;
  }
  return fail(ctx, key, `expected an array or an object, got ${describe(value)}`);
}

/** Removes NUL characters from strings inside an `extra` value; returns the same object when clean. */
function cleanExtraValue(value: unknown): unknown {
  if (typeof value === 'string') return stripNul(value);
  if (Array.isArray(value)) {
    const mapped = value.map(cleanExtraValue);
    return mapped.some((v, i) => v !== value[i]) ? mapped : value;
  }
  if (typeof value === 'object' && value !== null && !isLosslessNumber(value)) {
    let changed = false;
    const out: Raw = {};
    for (const [k, v] of Object.entries(value as Raw)) {
      const ck = stripNul(k);
      const cv = cleanExtraValue(v);
      if (ck !== k || cv !== v) changed = true;
      out[ck] = cv;
    }
    return changed ? out : value;
  }
  return value;
}

function collectExtra(raw: Raw, known: ReadonlySet<string>): Record<string, unknown> {
  const extra: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(raw)) {
    if (known.has(key) || value === undefined) continue;
    extra[stripNul(key)] = cleanExtraValue(value);
  }
  return extra;
}

function asObject(raw: unknown, what: string): Raw {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw) || isLosslessNumber(raw)) {
    throw new NormalizeError(what, `expected an object, got ${raw === null ? 'null' : describe(raw)}`);
  }
  return raw as Raw;
}

/** A row with only its id and version: every other column null (objects empty). */
export function emptyValues(id: string, updatedAt: string): SubscriberValues {
  return {
    id,
    email: null,
    name: null,
    status: null,
    source: null,
    sent: null,
    opensCount: null,
    clicksCount: null,
    openRate: null,
    clickRate: null,
    ipAddress: null,
    subscribedAt: null,
    unsubscribedAt: null,
    createdAt: null,
    updatedAt,
    deletedAt: null,
    forgetAt: null,
    optedInAt: null,
    optinIp: null,
    fields: {},
    extra: {},
  };
}

function orderProvided(set: ReadonlySet<SubscriberField>): SubscriberField[] {
  return SUBSCRIBER_FIELDS.filter((f) => set.has(f));
}

// ---------------------------------------------------------------------------------------------
// Legacy

/** Legacy key → column, for the keys that map one-to-one. */
const LEGACY_SIMPLE = {
  email: 'email',
  name: 'name',
  type: 'status',
  signup_ip: 'ipAddress',
  confirmation_ip: 'optinIp',
} as const satisfies Record<string, SubscriberField>;
const LEGACY_INT = { sent: 'sent', opened: 'opensCount', clicked: 'clicksCount' } as const satisfies Record<string, SubscriberField>;
const LEGACY_FLOAT = { opened_rate: 'openRate', clicked_rate: 'clickRate' } as const satisfies Record<string, SubscriberField>;
const LEGACY_TIME = {
  date_unsubscribe: 'unsubscribedAt',
  date_created: 'createdAt',
  confirmation_timestamp: 'optedInAt',
} as const satisfies Record<string, SubscriberField>;

/** Legacy keys consumed by a column; every other key goes to `extra`. */
export const LEGACY_KNOWN_KEYS: ReadonlySet<string> = new Set([
  'id',
  ...Object.keys(LEGACY_SIMPLE),
  ...Object.keys(LEGACY_INT),
  ...Object.keys(LEGACY_FLOAT),
  ...Object.keys(LEGACY_TIME),
  'signup_timestamp',
  'date_subscribe',
  'date_updated',
  'fields',
]);

export interface LegacyNormalizeOptions {
  /** IANA zone of legacy `Y-m-d H:i:s` values (`MAILER_SOURCE_TZ`), e.g. `UTC`, `Pacific/Kiritimati`. */
  sourceTimezone: string;
}

/**
 * A legacy Single Subscriber (poll path; DESIGN.md "Facts", `spec/examples/legacy-single-subscriber.json`)
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
  const ctx: Ctx = { id: undefined };
  try {
    zoneFormatter(opts.sourceTimezone);
  } catch (err) {
    if (err instanceof TimezoneError) throw new NormalizeError('sourceTimezone', err.message);
    throw err;
  }
  const id = normalizeId(obj.id);
  ctx.id = id;
  const tz = opts.sourceTimezone;
  const provided = new Set<SubscriberField>(['updatedAt', 'extra']);

  const createdAt = readLegacyTime(obj, 'date_created', ctx, tz);
  const updatedAt = readLegacyTime(obj, 'date_updated', ctx, tz) ?? createdAt;
  if (updatedAt === null) fail(ctx, 'date_updated', 'missing, and no date_created to fall back to');
  const values = emptyValues(id, updatedAt);

  const into = { values, provided };
  readMapped(obj, LEGACY_SIMPLE, readText, into, ctx);
  readMapped(obj, LEGACY_INT, readInt, into, ctx);
  readMapped(obj, LEGACY_FLOAT, readFloat, into, ctx);
  readMapped(obj, LEGACY_TIME, (o, key, c) => (key === 'date_created' ? createdAt : readLegacyTime(o, key, c, tz)), into, ctx);

  const extra = collectExtra(obj, LEGACY_KNOWN_KEYS);
  if (present(obj, 'signup_timestamp') || present(obj, 'date_subscribe')) {
    const signup = readLegacyTime(obj, 'signup_timestamp', ctx, tz);
    const day = readLegacyTime(obj, 'date_subscribe', ctx, tz);
    values.subscribedAt = signup ?? day;
    // The day is then not what the column shows: keep it so nothing the service sent is lost.
    if (signup !== null && day !== null) extra.date_subscribe = obj.date_subscribe;
    provided.add('subscribedAt');
  }
  if (present(obj, 'fields')) {
    values.fields = readFields(obj, 'fields', ctx);
    provided.add('fields');
  }
  values.extra = extra;
  return { via: 'poll', values, provided: orderProvided(provided) };
}

// ---------------------------------------------------------------------------------------------
// Webhook

const WEBHOOK_TEXT = {
  email: 'email',
  status: 'status',
  source: 'source',
  ip_address: 'ipAddress',
  optin_ip: 'optinIp',
} as const satisfies Record<string, SubscriberField>;
const WEBHOOK_INT = { sent: 'sent', opens_count: 'opensCount', clicks_count: 'clicksCount' } as const satisfies Record<
  string,
  SubscriberField
>;
const WEBHOOK_FLOAT = { open_rate: 'openRate', click_rate: 'clickRate' } as const satisfies Record<string, SubscriberField>;
const WEBHOOK_TIME = {
  subscribed_at: 'subscribedAt',
  unsubscribed_at: 'unsubscribedAt',
  created_at: 'createdAt',
  deleted_at: 'deletedAt',
  forget_at: 'forgetAt',
  opted_in_at: 'optedInAt',
} as const satisfies Record<string, SubscriberField>;

/** Keys of flat payloads (§6.2) that belong to the envelope, not the subscriber. */
export const WEBHOOK_ENVELOPE_KEYS: ReadonlySet<string> = new Set(['event', 'account_id']);

/** §2.2 keys consumed by a column (plus the envelope keys); every other key goes to `extra`. */
export const WEBHOOK_KNOWN_KEYS: ReadonlySet<string> = new Set([
  'id',
  'name',
  ...Object.keys(WEBHOOK_TEXT),
  ...Object.keys(WEBHOOK_INT),
  ...Object.keys(WEBHOOK_FLOAT),
  ...Object.keys(WEBHOOK_TIME),
  'updated_at',
  'fields',
  ...WEBHOOK_ENVELOPE_KEYS,
]);

/**
 * A §2.2 Subscriber (the `subscriber` of a nested or batched item, or a flat payload itself) →
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
  const obj = asObject(raw, 'subscriber');
  const id = normalizeId(obj.id);
  const ctx: Ctx = { id };
  const provided = new Set<SubscriberField>(['updatedAt', 'extra']);

  const createdAt = readIsoTime(obj, 'created_at', ctx);
  const updatedAt = readIsoTime(obj, 'updated_at', ctx) ?? createdAt;
  if (updatedAt === null) fail(ctx, 'updated_at', 'missing, and no created_at to fall back to');
  const values = emptyValues(id, updatedAt);

  const into = { values, provided };
  readMapped(obj, WEBHOOK_TEXT, readText, into, ctx);
  readMapped(obj, WEBHOOK_INT, readInt, into, ctx);
  readMapped(obj, WEBHOOK_FLOAT, readFloat, into, ctx);
  readMapped(obj, WEBHOOK_TIME, (o, key, c) => (key === 'created_at' ? createdAt : readIsoTime(o, key, c)), into, ctx);
  if (present(obj, 'fields')) {
    values.fields = readFields(obj, 'fields', ctx);
    provided.add('fields');
  }
  if (present(obj, 'name')) {
    values.name = readText(obj, 'name', ctx);
    provided.add('name');
  } else if (provided.has('fields') && Object.hasOwn(values.fields, 'name')) {
    values.name = values.fields.name ?? null;
    provided.add('name');
  }
  values.extra = collectExtra(obj, WEBHOOK_KNOWN_KEYS);
  return { via: 'webhook', values, provided: orderProvided(provided) };
}

// ---------------------------------------------------------------------------------------------
// Groups, automations, campaigns (§2.3)

function readNamed(raw: unknown, what: string): { obj: Raw; ctx: Ctx; id: string; name: string | null } {
  const obj = asObject(raw, what);
  const id = normalizeId(obj.id, `${what}.id`);
  const ctx: Ctx = { id };
  return { obj, ctx, id, name: readText(obj, 'name', ctx) };
}

/** A payload `group` object `{id, name}` → {@link GroupRow}. @throws {NormalizeError} */
export function normalizeGroup(raw: unknown): GroupRow {
  const { id, name } = readNamed(raw, 'group');
  return { id, name };
}

/** A payload `automation` object `{id, name}` → {@link AutomationRow}. @throws {NormalizeError} */
export function normalizeAutomation(raw: unknown): AutomationRow {
  const { id, name } = readNamed(raw, 'automation');
  return { id, name };
}

/**
 * A payload `campaign` object, or a flat `campaign.sent` payload (its `event`/`account_id` are
 * ignored) → {@link CampaignRow}. With `sent: true` (a `campaign.sent` event) `sentAt` is the
 * campaign `date`; otherwise `sentAt` is null (unknown: the store keeps a stored value).
 *
 * @throws {NormalizeError}
 */
export function normalizeCampaign(raw: unknown, opts: { sent?: boolean } = {}): CampaignRow {
  const { obj, ctx, id, name } = readNamed(raw, 'campaign');
  const date = readIsoTime(obj, 'date', ctx);
  return {
    id,
    name,
    totalRecipients: readInt(obj, 'total_recipients', ctx),
    previewUrl: readText(obj, 'preview_url', ctx),
    date,
    sentAt: opts.sent ? date : null,
  };
}

// ---------------------------------------------------------------------------------------------
// Forgetting

/**
 * A copy of `values` with the {@link PERSONAL_FIELDS} erased (null, or `{}` for `fields`/`extra`);
 * id, status, counters and timestamps stay. The store applies this to every row whose resulting
 * `forget_at` is set.
 */
export function erasePersonalData(values: SubscriberValues): SubscriberValues {
  return { ...values, email: null, name: null, ipAddress: null, optinIp: null, fields: {}, extra: {} };
}

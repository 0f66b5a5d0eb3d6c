/**
 * One zod schema per upstream shape, built from the rules of `rules.ts`, and the transforms that
 * turn what they validated into the rows the store writes (docs/architecture.md, "Modules and what they may import": upstream → normalize
 * → store). The webhook receiver validates deliveries with these same schemas (`parseDelivery`), so
 * what it accepts is exactly what the consumer can mirror; the poll normalizes legacy rows with them.
 *
 * Shapes: the legacy Single Subscriber (poll), the subscriber object (docs/upstream.md; the `subscriber` of a nested or
 * batched item, or a flat payload without its envelope keys), and the group, automation and
 * campaign objects of docs/upstream.md, "Objects in payloads" (also the flat `campaign.sent` payload). Mapping decisions are documented once in
 * `normalize.ts`.
 */
import { z } from 'zod';
import type { MirrorSource } from '../db/schema.js';
import type { AutomationRow, CampaignRow, GroupRow, SubscriberRow } from './rows.js';
import { emptyValues, SUBSCRIBER_FIELDS, type SubscriberField, type SubscriberValues } from '../db/subscriber-columns.js';
import {
  fieldsRule,
  floatRule,
  forward,
  idRule,
  int4Rule,
  isoTimestampRule,
  legacyFieldsRule,
  legacyTimestampRule,
  plainRuleOf,
  stripNul,
  textRule,
  type NumberForm,
  type PlainRule,
} from './rules.js';

const WEBHOOK_NUMBERS = { numericStrings: false };
const LEGACY_NUMBERS = { numericStrings: true };

/** A clear message for an object that is missing or not an object (zod's default names no field). */
const objectError = (name: string) => (issue: { input?: unknown }) =>
  issue.input === undefined
    ? `${name} is missing`
    : `${name} must be an object, got ${issue.input === null ? 'null' : Array.isArray(issue.input) ? 'an array' : `a ${typeof issue.input}`}`;

/**
 * Versions are ordered by the upstream clock (invariant 2): a subscriber without `updated`, or the
 * `created` time it falls back to, cannot be placed. Reported on `updated`.
 */
function requireClock(updated: string, created: string, message: string) {
  return (ctx: z.core.ParsePayload<Record<string, unknown>>): void => {
    if (!ctx.value[updated] && !ctx.value[created]) ctx.issues.push({ code: 'custom', input: ctx.value, path: [updated], message });
  };
}

// ---------------------------------------------------------------------------------------------
// Webhook subscriber (docs/upstream.md, "Subscriber object")

const WEBHOOK_TEXT = { email: 'email', status: 'status', source: 'source', ip_address: 'ipAddress', optin_ip: 'optinIp' } as const;
const WEBHOOK_INT = { sent: 'sent', opens_count: 'opensCount', clicks_count: 'clicksCount' } as const;
const WEBHOOK_FLOAT = { open_rate: 'openRate', click_rate: 'clickRate' } as const;
const WEBHOOK_TIME = {
  subscribed_at: 'subscribedAt',
  unsubscribed_at: 'unsubscribedAt',
  created_at: 'createdAt',
  deleted_at: 'deletedAt',
  forget_at: 'forgetAt',
  opted_in_at: 'optedInAt',
} as const;
const WEBHOOK_COLUMNS: Readonly<Record<string, SubscriberField>> = { ...WEBHOOK_TEXT, ...WEBHOOK_INT, ...WEBHOOK_FLOAT, ...WEBHOOK_TIME };

/** Keys of flat payloads (docs/upstream.md, "Payload shapes") that belong to the envelope, not the subscriber. */
export const WEBHOOK_ENVELOPE_KEYS: ReadonlySet<string> = new Set(['event', 'account_id']);

/** Subscriber object keys (docs/upstream.md) consumed by a column (plus the envelope keys); every other key goes to `extra`. */
export const WEBHOOK_KNOWN_KEYS: ReadonlySet<string> = new Set([
  'id',
  'name',
  ...Object.keys(WEBHOOK_COLUMNS),
  'updated_at',
  'fields',
  ...WEBHOOK_ENVELOPE_KEYS,
]);

const rulesOf = <K extends string>(keys: Record<K, unknown>, rule: z.ZodType) =>
  Object.fromEntries(Object.keys(keys).map((k) => [k, rule])) as Record<K, z.ZodType>;

interface ColumnKeys {
  text: Readonly<Record<string, SubscriberField>>;
  int: Readonly<Record<string, SubscriberField>>;
  float: Readonly<Record<string, SubscriberField>>;
  time: Readonly<Record<string, SubscriberField>>;
}

/** A subscriber object of one path: the id, each column key with its rule, and the path's own keys. */
function subscriberObject(keys: ColumnKeys, rules: { numbers: NumberForm; time: z.ZodType }, own: Record<string, z.ZodType>) {
  return z.looseObject(
    {
      id: idRule,
      ...rulesOf(keys.text, textRule),
      ...rulesOf(keys.int, int4Rule(rules.numbers)),
      ...rulesOf(keys.float, floatRule(rules.numbers)),
      ...rulesOf(keys.time, rules.time),
      ...own,
    },
    { error: objectError('subscriber') },
  );
}

/** The subscriber object (docs/upstream.md, "Subscriber object"), values canonical, unknown keys kept as received. */
export const subscriberSchema = subscriberObject(
  { text: WEBHOOK_TEXT, int: WEBHOOK_INT, float: WEBHOOK_FLOAT, time: WEBHOOK_TIME },
  { numbers: WEBHOOK_NUMBERS, time: isoTimestampRule },
  { name: textRule, updated_at: isoTimestampRule, fields: fieldsRule },
).check(requireClock('updated_at', 'created_at', 'the subscriber has neither updated_at nor created_at, so its version cannot be ordered'));

/** As validated: ids, timestamps, numbers and texts canonical; unknown keys as received. */
export type WebhookSubscriber = z.output<typeof subscriberSchema>;

/** A validated subscriber object (docs/upstream.md) → its {@link SubscriberRow} (`via: 'webhook'`). */
export function webhookSubscriberRow(s: WebhookSubscriber): SubscriberRow {
  return subscriberRowOf(s, 'webhook');
}

/** The subscriber mapping of docs/upstream.md, "Subscriber object", for the webhook payloads and the current API's lists alike. */
function subscriberRowOf(s: WebhookSubscriber, via: MirrorSource): SubscriberRow {
  const o = s as Record<string, unknown>;
  const createdAt = (o.created_at as string | null | undefined) ?? null;
  const values = emptyValues(s.id, ((o.updated_at as string | null | undefined) ?? createdAt) as string);
  const provided = new Set<SubscriberField>(['updatedAt', 'extra']);
  copyColumns(o, WEBHOOK_COLUMNS, values, provided);
  if (o.fields !== undefined) {
    values.fields = withoutEmail(o.fields as Record<string, string | null> | null);
    provided.add('fields');
  }
  if (o.name !== undefined) {
    values.name = o.name as string | null;
    provided.add('name');
  } else if (provided.has('fields') && Object.hasOwn(values.fields, 'name')) {
    values.name = values.fields.name ?? null;
    provided.add('name');
  }
  values.extra = collectExtra(o, WEBHOOK_KNOWN_KEYS);
  return { via, values, provided: SUBSCRIBER_FIELDS.filter((f) => provided.has(f)) };
}

/** The webhook subscriber shape, validated and normalized in one parse. */
export const webhookSubscriberRowSchema = subscriberSchema.transform(webhookSubscriberRow);

// ---------------------------------------------------------------------------------------------
// Current API list subscriber (docs/upstream-current.md): the webhook subscriber shape with zoneless dates

const currentSchemas = new Map<string, z.ZodType<SubscriberRow>>();

/**
 * A member as the current API lists it, read in `timeZone` (checked by the caller) → its
 * {@link SubscriberRow} (`via: 'current'`). The webhook subscriber keys and mapping, with the dates of lists
 * (`Y-m-d H:i:s`, read like the legacy ones; a value with a zone is read by its own zone).
 */
export function currentSubscriberRowSchema(timeZone: string): z.ZodType<SubscriberRow> {
  let schema = currentSchemas.get(timeZone);
  if (schema) return schema;
  const time = legacyTimestampRule(timeZone);
  schema = subscriberObject(
    { text: WEBHOOK_TEXT, int: WEBHOOK_INT, float: WEBHOOK_FLOAT, time: WEBHOOK_TIME },
    { numbers: WEBHOOK_NUMBERS, time },
    { name: textRule, updated_at: time, fields: fieldsRule },
  )
    .check(
      requireClock('updated_at', 'created_at', 'the subscriber has neither updated_at nor created_at, so its version cannot be ordered'),
    )
    .transform((s) => subscriberRowOf(s, 'current'));
  currentSchemas.set(timeZone, schema);
  return schema;
}

// ---------------------------------------------------------------------------------------------
// Legacy Single Subscriber (poll)

const LEGACY_TEXT = { email: 'email', name: 'name', type: 'status', signup_ip: 'ipAddress', confirmation_ip: 'optinIp' } as const;
const LEGACY_INT = { sent: 'sent', opened: 'opensCount', clicked: 'clicksCount' } as const;
const LEGACY_FLOAT = { opened_rate: 'openRate', clicked_rate: 'clickRate' } as const;
const LEGACY_TIME = { date_unsubscribe: 'unsubscribedAt', date_created: 'createdAt', confirmation_timestamp: 'optedInAt' } as const;
const LEGACY_COLUMNS: Readonly<Record<string, SubscriberField>> = { ...LEGACY_TEXT, ...LEGACY_INT, ...LEGACY_FLOAT, ...LEGACY_TIME };

/** Legacy keys consumed by a column; every other key goes to `extra`. */
export const LEGACY_KNOWN_KEYS: ReadonlySet<string> = new Set([
  'id',
  ...Object.keys(LEGACY_COLUMNS),
  'signup_timestamp',
  'date_subscribe',
  'date_updated',
  'fields',
]);

const WEBHOOK_KEY_FIELD: Readonly<Record<string, SubscriberField>> = {
  ...WEBHOOK_COLUMNS,
  name: 'name',
  updated_at: 'updatedAt',
  fields: 'fields',
};
const LEGACY_KEY_FIELD: Readonly<Record<string, SubscriberField>> = {
  ...LEGACY_COLUMNS,
  signup_timestamp: 'subscribedAt',
  date_subscribe: 'subscribedAt',
  date_updated: 'updatedAt',
  fields: 'fields',
};

const keysOf = (map: Readonly<Record<string, SubscriberField>>, fields: readonly SubscriberField[]) =>
  Object.entries(map).filter(([, field]) => fields.includes(field));

/** The "Subscriber object" (docs/upstream.md) (webhook) keys that fill one of `fields`, each with its field. */
export function webhookKeysOf(fields: readonly SubscriberField[]): [string, SubscriberField][] {
  return keysOf(WEBHOOK_KEY_FIELD, fields);
}

/** Every upstream key (webhook and legacy naming) that fills one of `fields`. */
export function upstreamKeysOf(fields: readonly SubscriberField[]): string[] {
  return [...new Set([...keysOf(WEBHOOK_KEY_FIELD, fields), ...keysOf(LEGACY_KEY_FIELD, fields)].map(([key]) => key))];
}

/** The legacy Single Subscriber in one time zone: the schema, and its checks as one plain function. */
interface LegacyReading {
  schema: z.ZodType<SubscriberRow>;
  plain: (raw: Record<string, unknown>) => SubscriberRow | null;
}

const legacyReadings = new Map<string, LegacyReading>();

function legacyReading(timeZone: string): LegacyReading {
  let reading = legacyReadings.get(timeZone);
  if (reading) return reading;
  const time = legacyTimestampRule(timeZone);
  const object = subscriberObject(
    { text: LEGACY_TEXT, int: LEGACY_INT, float: LEGACY_FLOAT, time: LEGACY_TIME },
    { numbers: LEGACY_NUMBERS, time },
    { date_updated: time, signup_timestamp: time, date_subscribe: time, fields: legacyFieldsRule },
  );
  const clock = requireClock('date_updated', 'date_created', 'missing, and no date_created to fall back to');
  const fieldsSchema = object.check(clock);
  const plainObject = plainLooseObject(object.shape);
  reading = {
    schema: z.unknown().transform((raw, ctx) => legacyRow(forward(ctx, fieldsSchema.safeParse(raw)), raw as Record<string, unknown>)),
    plain: (raw) => {
      const o = plainObject(raw);
      return o === null || !hasClock(o, 'date_updated', 'date_created') ? null : legacyRow(o, raw);
    },
  };
  legacyReadings.set(timeZone, reading);
  return reading;
}

/** The legacy Single Subscriber read in `timeZone` (checked by the caller) → its {@link SubscriberRow} (`via: 'poll'`). */
export function legacySubscriberRowSchema(timeZone: string): z.ZodType<SubscriberRow> {
  return legacyReading(timeZone).schema;
}

/**
 * The same reading without zod's machinery: the row the schema gives, or null when any check refuses a
 * value (the caller then parses with the schema, for its error). A pass reads every member this way.
 */
export function legacySubscriberRowOf(raw: Record<string, unknown>, timeZone: string): SubscriberRow | null {
  return legacyReading(timeZone).plain(raw);
}

/**
 * A loose object schema's checks (each a `rule` of rules.ts) as one plain function: the object zod
 * outputs (the shape's keys present, in its order, then every other key as received), or null when a
 * check refuses a value. Only the zod schema says why, so a refusal goes back to it.
 */
function plainLooseObject(shape: Readonly<Record<string, z.ZodType>>): (raw: Record<string, unknown>) => Record<string, unknown> | null {
  const checks: Array<[string, PlainRule]> = Object.entries(shape).map(([key, schema]) => {
    const plain = plainRuleOf(schema);
    if (!plain) throw new Error(`the rule of "${key}" has no plain form (make it with rule() in rules.ts)`);
    return [key, plain];
  });
  const known = new Set(Object.keys(shape));
  return (raw) => {
    let refused = false;
    const ctx = { addIssue: () => (refused = true) } as unknown as z.core.$RefinementCtx;
    const out: Record<string, unknown> = {};
    for (const [key, { check, optional }] of checks) {
      const value = Object.hasOwn(raw, key) ? raw[key] : undefined;
      if (value === undefined && optional) continue;
      const result = check(value, ctx);
      if (refused) return null;
      out[key] = result;
    }
    for (const key of Object.keys(raw)) {
      if (known.has(key)) continue;
      // Assigning it would set the prototype: zod's own handling decides.
      if (key === '__proto__') return null;
      out[key] = raw[key];
    }
    return out;
  };
}

/** `requireClock` as a plain test. */
function hasClock(o: Record<string, unknown>, updated: string, created: string): boolean {
  return Boolean(o[updated]) || Boolean(o[created]);
}

function legacyRow(o: Record<string, unknown>, raw: Record<string, unknown>): SubscriberRow {
  const values = emptyValues(o.id as string, ((o.date_updated as string | null | undefined) ?? o.date_created) as string);
  const provided = new Set<SubscriberField>(['updatedAt', 'extra']);
  copyColumns(o, LEGACY_COLUMNS, values, provided);
  const extra = collectExtra(o, LEGACY_KNOWN_KEYS);
  if (o.signup_timestamp !== undefined || o.date_subscribe !== undefined) {
    const signup = (o.signup_timestamp as string | null | undefined) ?? null;
    const day = (o.date_subscribe as string | null | undefined) ?? null;
    values.subscribedAt = signup ?? day;
    // The day is then not what the column shows: keep it so nothing the service sent is lost.
    if (signup !== null && day !== null) extra.date_subscribe = raw.date_subscribe;
    provided.add('subscribedAt');
  }
  if (o.fields !== undefined) {
    values.fields = withoutEmail(o.fields as Record<string, string | null> | null);
    provided.add('fields');
  }
  values.extra = extra;
  return { via: 'poll', values, provided: SUBSCRIBER_FIELDS.filter((f) => provided.has(f)) };
}

// ---------------------------------------------------------------------------------------------
// Groups, automations, campaigns (docs/upstream.md, "Objects in payloads")

export const groupSchema = z.looseObject({ id: idRule, name: textRule }, { error: objectError('group') });
export const automationSchema = z.looseObject({ id: idRule, name: textRule }, { error: objectError('automation') });
export const campaignSchema = z.looseObject(
  { id: idRule, name: textRule, total_recipients: int4Rule(WEBHOOK_NUMBERS), preview_url: textRule, date: isoTimestampRule },
  { error: objectError('campaign') },
);

export type WebhookGroup = z.output<typeof groupSchema>;
export type WebhookAutomation = z.output<typeof automationSchema>;
export type WebhookCampaign = z.output<typeof campaignSchema>;

export function groupRow(g: WebhookGroup): GroupRow {
  return { id: g.id, name: g.name ?? null };
}

export function automationRow(a: WebhookAutomation): AutomationRow {
  return { id: a.id, name: a.name ?? null };
}

/** With `sent: true` (a `campaign.sent` event) `sentAt` is the campaign `date`; otherwise unknown (null). */
export function campaignRow(c: WebhookCampaign, opts: { sent?: boolean } = {}): CampaignRow {
  const date = c.date ?? null;
  return {
    id: c.id,
    name: c.name ?? null,
    totalRecipients: c.total_recipients ?? null,
    previewUrl: c.preview_url ?? null,
    date,
    sentAt: opts.sent ? date : null,
  };
}

// ---------------------------------------------------------------------------------------------
// Helpers

const ENTRIES = new WeakMap<object, ReadonlyArray<[string, SubscriberField]>>();

/** `Object.entries` of a constant map, made once: it runs for every member of every page. */
function entriesOf(map: Readonly<Record<string, SubscriberField>>): ReadonlyArray<[string, SubscriberField]> {
  let entries = ENTRIES.get(map);
  if (!entries) ENTRIES.set(map, (entries = Object.entries(map)));
  return entries;
}

/** Copies every carried key of `map` into its column and marks the column provided. */
function copyColumns(
  o: Record<string, unknown>,
  map: Readonly<Record<string, SubscriberField>>,
  values: SubscriberValues,
  provided: Set<SubscriberField>,
): void {
  const into = values as unknown as Record<SubscriberField, unknown>;
  for (const [key, column] of entriesOf(map)) {
    const value = o[key];
    if (value === undefined) continue;
    into[column] = value;
    provided.add(column);
  }
}

/** `fields` without an `email` key: the address lives in the `email` column (see `normalize.ts`). */
function withoutEmail(fields: Record<string, string | null> | null): Record<string, string | null> {
  if (fields === null) return {};
  if (!Object.hasOwn(fields, 'email')) return fields;
  const { email: _dropped, ...rest } = fields;
  return rest;
}

/** Removes NUL characters from strings inside an `extra` value; returns the same object when clean. */
function cleanExtraValue(value: unknown): unknown {
  if (typeof value === 'string') return stripNul(value);
  if (Array.isArray(value)) {
    const mapped = value.map(cleanExtraValue);
    return mapped.some((v, i) => v !== value[i]) ? mapped : value;
  }
  if (typeof value === 'object' && value !== null && Object.getPrototypeOf(value) === Object.prototype) {
    let changed = false;
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      const ck = stripNul(k);
      const cv = cleanExtraValue(v);
      if (ck !== k || cv !== v) changed = true;
      out[ck] = cv;
    }
    return changed ? out : value;
  }
  return value;
}

function collectExtra(o: Record<string, unknown>, known: ReadonlySet<string>): Record<string, unknown> {
  const extra: Record<string, unknown> = {};
  for (const key of Object.keys(o)) {
    const value = o[key];
    if (known.has(key) || value === undefined) continue;
    extra[stripNul(key)] = cleanExtraValue(value);
  }
  return extra;
}

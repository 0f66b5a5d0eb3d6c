/**
 * Every delivery shape (docs/upstream.md, "Webhook deliveries") → a list of typed events.
 *
 * The 14 kinds are one table (`EVENT_REGISTRY`): which shapes a kind may arrive in and what it
 * carries. Parsers and the `WebhookEvent` type are both derived from it. A new kind is one entry
 * here, one in `EFFECTS` (apply.ts) and one in the simulator's `EVENT_KINDS`; the event-kinds unit
 * test fails until the three agree (docs/architecture.md, "Conventions").
 *
 * Liberal where harmless: unknown keys are kept (inside the subscriber/campaign objects for flat
 * shapes, in `extra` for nested items), any kind may arrive inside a batch, flat subscriber kinds are
 * also accepted nested. Strict where it matters, with the mirror's own schemas (src/mirror/schemas.ts,
 * one per shape, built from the rules of src/mirror/rules.ts): ids become canonical decimal strings
 * (a number beyond 2^53 has already lost digits, invariant 6); a subscriber needs an id and an
 * `updated_at` or `created_at` (invariant 2: versions are ordered by them); timestamps need a zone;
 * known fields must have the types of docs/upstream.md, "Subscriber object" and "Objects in payloads" and fit their columns. So what the consumer
 * could not apply is caught here and stored `failed` at once. An unknown kind is not an error: it is
 * reported so the delivery can be stored and left unapplied (invariant 9).
 *
 * No I/O and no config: the receiver and the consumer both call `parseDelivery`.
 */
import { z } from 'zod';
import { describeValue as describe } from '../mirror/rules.js';
import {
  automationSchema,
  campaignSchema,
  groupSchema,
  subscriberSchema,
  type WebhookAutomation,
  type WebhookCampaign,
  type WebhookGroup,
  type WebhookSubscriber,
} from '../mirror/schemas.js';

export type PayloadShape = 'flat' | 'nested' | 'campaign';
export type CarriedPart = 'subscriber' | 'group' | 'automation' | 'campaign' | 'linkUrl';

export interface KindSpec {
  /**
   * Shapes the kind may arrive in, alone or as an item of a batch (docs/upstream.md, "Payload shapes" and "Batched payloads"):
   * `flat` = subscriber fields at top level + `event`; `nested` = `type` + `subscriber` (+ objects);
   * `campaign` = campaign fields at top level + `event` (`campaign.sent`).
   */
  readonly shapes: readonly PayloadShape[];
  /** What an event of this kind carries; each is required in the payload except `linkUrl`. */
  readonly carries: readonly CarriedPart[];
  /** docs/upstream.md, "Event kinds": the service only delivers this kind to webhooks registered with `batchable: true`. */
  readonly requiresBatchable: boolean;
}

const subscriberFact = { shapes: ['flat', 'nested'], carries: ['subscriber'], requiresBatchable: false } as const;
const groupFact = { shapes: ['nested'], carries: ['subscriber', 'group'], requiresBatchable: false } as const;
const automationFact = { shapes: ['nested'], carries: ['subscriber', 'automation'], requiresBatchable: false } as const;

/** The event kinds (docs/upstream.md, "Event kinds"). */
export const EVENT_REGISTRY = {
  'subscriber.created': subscriberFact,
  'subscriber.updated': subscriberFact,
  'subscriber.unsubscribed': subscriberFact,
  'subscriber.added_to_group': groupFact,
  'subscriber.removed_from_group': groupFact,
  'subscriber.bounced': subscriberFact,
  'subscriber.automation_triggered': automationFact,
  'subscriber.automation_completed': automationFact,
  'subscriber.spam_reported': subscriberFact,
  'subscriber.deleted': { shapes: ['nested'], carries: ['subscriber'], requiresBatchable: true },
  'subscriber.active': subscriberFact,
  'campaign.sent': { shapes: ['campaign'], carries: ['campaign'], requiresBatchable: false },
  'campaign.click': { shapes: ['nested'], carries: ['subscriber', 'campaign', 'linkUrl'], requiresBatchable: true },
  'campaign.open': { shapes: ['nested'], carries: ['subscriber', 'campaign'], requiresBatchable: true },
} as const satisfies Record<string, KindSpec>;

export type EventKind = keyof typeof EVENT_REGISTRY;
export const EVENT_KINDS: readonly EventKind[] = Object.keys(EVENT_REGISTRY) as EventKind[];

export function isEventKind(kind: string): kind is EventKind {
  return Object.hasOwn(EVENT_REGISTRY, kind);
}

// ---------------------------------------------------------------------------------------------
// Field schemas (docs/upstream.md, "Subscriber object" and "Objects in payloads"): the mirror's, so the receiver accepts exactly what it can mirror

/**
 * account_id is an integer per docs/upstream.md, "Payload shapes", kept as text like every id; absent inside batches. Nothing
 * is keyed on it, so an integer beyond 2^53 (already imprecise once parsed) gives null rather than
 * failing the delivery; the stored body keeps its exact digits.
 */
const accountIdSchema = z.unknown().transform((value, ctx): string | null => {
  if (value === undefined || value === null) return null;
  if (typeof value === 'string' && value.trim() !== '') return value.trim();
  if (typeof value === 'number' && Number.isInteger(value)) return Number.isSafeInteger(value) ? String(value) : null;
  ctx.addIssue({ code: 'custom', message: `account_id must be an integer or a string, got ${describe(value)}` });
  return z.NEVER;
});

export { automationSchema, campaignSchema, groupSchema, subscriberSchema } from '../mirror/schemas.js';
export type { WebhookAutomation, WebhookCampaign, WebhookGroup, WebhookSubscriber } from '../mirror/schemas.js';

// ---------------------------------------------------------------------------------------------
// Events (derived from the registry)

interface CarriedTypes {
  subscriber: WebhookSubscriber;
  group: WebhookGroup;
  automation: WebhookAutomation;
  campaign: WebhookCampaign;
  /** `link_url` of `campaign.click`; null when the payload has none. */
  linkUrl: string | null;
}

type Carried<K extends EventKind> = (typeof EVENT_REGISTRY)[K]['carries'][number];
type Simplify<T> = { [P in keyof T]: T[P] } & {};

export type EventOf<K extends EventKind> = Simplify<
  {
    kind: K;
    /** The shape the event arrived in. */
    shape: PayloadShape;
    /** True when the event was an item of a batched envelope (docs/upstream.md, "Batched payloads"). */
    batched: boolean;
    /** Position inside the delivery (0 for an unbatched one). */
    index: number;
    /** `account_id` as text; null inside batches, whose items carry none. */
    accountId: string | null;
    /** Top-level keys of a nested item that are not part of the shape (kept, never interpreted). */
    extra: Record<string, unknown>;
  } & Pick<CarriedTypes, Carried<K>>
>;

/** Discriminated by `kind` over the 14 kinds (docs/upstream.md, "Event kinds"). */
export type WebhookEvent = { [K in EventKind]: EventOf<K> }[EventKind];

export interface ParsedDelivery {
  events: WebhookEvent[];
  /** Kinds not in the registry, each once, in order of appearance: stored, reported, never applied. */
  unknownKinds: string[];
  /** Whether the delivery was a batched envelope. */
  batched: boolean;
}

export interface PayloadIssue {
  /** Where in the delivery, e.g. `events[2].subscriber.id` (empty for the delivery itself). */
  path: string;
  message: string;
}

/** The delivery is signed but does not have a shape we can apply. Messages never contain values. */
export class PayloadError extends Error {
  override name = 'PayloadError';
  constructor(
    message: string,
    readonly issues: PayloadIssue[] = [],
  ) {
    super(issues.length === 0 ? message : `${message}: ${formatIssues(issues)}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Parsers, built once from the registry

/** Where an event carries its link (`campaign.click`). */
export const LINK_URL_KEY = 'link_url';

const NESTED_KEYS: Record<CarriedPart, string> = {
  subscriber: 'subscriber',
  group: 'group',
  automation: 'automation',
  campaign: 'campaign',
  linkUrl: LINK_URL_KEY,
};
const PART_SCHEMAS = {
  subscriber: subscriberSchema,
  group: groupSchema,
  automation: automationSchema,
  campaign: campaignSchema,
  linkUrl: z.string({ error: 'link_url must be a string or null' }).nullable().optional(),
} as const;

type ItemResult = { ok: true; data: Record<string, unknown> } | { ok: false; issues: PayloadIssue[] };
/** `ownKeys`: the keys that frame the event (its kind key, `account_id`), not part of what it carries. */
type ItemParser = (item: Record<string, unknown>, ownKeys: ReadonlySet<string>, path: string) => ItemResult;

function nestedParser(spec: KindSpec): ItemParser {
  const shape: Record<string, z.ZodType> = { account_id: accountIdSchema.optional() };
  for (const part of spec.carries) shape[NESTED_KEYS[part]] = PART_SCHEMAS[part];
  const schema = z.looseObject(shape);
  return (item, _ownKeys, path) => {
    const result = schema.safeParse(item);
    return result.success ? { ok: true, data: result.data } : { ok: false, issues: toIssues(result.error, path) };
  };
}

/** Flat shapes: the carried object's fields sit at top level next to the kind and `account_id`. */
function flatParser(objectSchema: z.ZodType): ItemParser {
  return (item, ownKeys, path) => {
    const object = objectSchema.safeParse(withoutKeys(item, ownKeys));
    const accountId = accountIdSchema.safeParse(item.account_id);
    if (object.success && accountId.success) {
      return { ok: true, data: { object: object.data, account_id: accountId.data } };
    }
    const issues = [
      ...(object.error ? toIssues(object.error, path) : []),
      ...(accountId.error ? toIssues(accountId.error, joinPath(path, ['account_id'])) : []),
    ];
    return { ok: false, issues };
  };
}

/**
 * `campaign.sent`: the campaign's fields at top level (docs/upstream.md, "Payload shapes"), or, as an item of a batch, wrapped
 * in a `campaign` object (docs/upstream.md, "Batched payloads", calls batch items "nested-shape items, each with type, subscriber,
 * campaign"; the simulator batches it so). Rejecting the wrapped form failed whole batches.
 */
function campaignParser(): ItemParser {
  const flat = flatParser(campaignSchema);
  return (item, ownKeys, path) => {
    const wrapped = item.campaign;
    if (!isPlainObject(wrapped) || 'id' in item) return flat(item, ownKeys, path);
    return flat({ ...wrapped, account_id: item.account_id }, ownKeys, joinPath(path, ['campaign']));
  };
}

const SHAPE_PARSERS: Record<PayloadShape, (spec: KindSpec) => ItemParser> = {
  nested: nestedParser,
  flat: () => flatParser(subscriberSchema),
  campaign: campaignParser,
};

const PARSERS = new Map<EventKind, Map<PayloadShape, ItemParser>>(
  EVENT_KINDS.map((kind) => {
    const spec: KindSpec = EVENT_REGISTRY[kind];
    return [kind, new Map(spec.shapes.map((shape) => [shape, SHAPE_PARSERS[shape](spec)] as const))];
  }),
);

const SHAPE_DESCRIPTIONS: Record<PayloadShape, string> = {
  flat: 'flat (subscriber fields at top level with "event")',
  nested: 'nested ("type" with a "subscriber" object)',
  campaign: 'flat campaign (campaign fields at top level with "event")',
};

// ---------------------------------------------------------------------------------------------
// parseDelivery

/**
 * Turns any delivery (flat, nested, `campaign.sent`, batched) into typed events.
 * Throws `PayloadError` when the delivery, or any item of it, is not a shape we can apply: one bad
 * item fails the whole delivery, which stays stored for inspection and replay.
 */
export function parseDelivery(body: unknown): ParsedDelivery {
  if (!isPlainObject(body)) {
    throw new PayloadError(`a delivery must be a JSON object, got ${describe(body)}`);
  }
  const events: WebhookEvent[] = [];
  const unknown = new Set<string>();
  const batched = isEnvelope(body);
  if (batched) {
    const items = body.events;
    if (!Array.isArray(items)) {
      throw new PayloadError('invalid batched delivery', [{ path: 'events', message: `expected an array, got ${describe(items)}` }]);
    }
    if (body.total !== undefined && !(typeof body.total === 'number' && Number.isInteger(body.total))) {
      throw new PayloadError('invalid batched delivery', [{ path: 'total', message: `expected an integer, got ${describe(body.total)}` }]);
    }
    items.forEach((item, index) => parseItem(item, index, `events[${index}]`, true, events, unknown));
  } else {
    parseItem(body, 0, '', false, events, unknown);
  }
  return { events, unknownKinds: [...unknown], batched };
}

/** Every kind of the delivery, known and unknown, each once (what the inbox's `kinds` column holds). */
export function deliveryKinds(parsed: ParsedDelivery): string[] {
  return [...new Set([...parsed.events.map((e) => e.kind as string), ...parsed.unknownKinds])];
}

/**
 * The kinds a delivery names, read without validating anything else: lets a delivery that fails
 * validation still be stored with the kinds it claimed, for inspection.
 */
export function peekKinds(body: unknown): string[] {
  if (!isPlainObject(body)) return [];
  const items = isEnvelope(body) ? (Array.isArray(body.events) ? body.events : []) : [body];
  const kinds = new Set<string>();
  for (const item of items) {
    if (!isPlainObject(item)) continue;
    const kind = item.event ?? item.type;
    if (typeof kind === 'string' && kind.trim() !== '') kinds.add(kind);
  }
  return [...kinds];
}

/** A batched envelope names no kind of its own; `events` next to a kind is just an unknown key. */
function isEnvelope(body: Record<string, unknown>): boolean {
  return 'events' in body && body.event == null && body.type == null;
}

function parseItem(item: unknown, index: number, path: string, batched: boolean, events: WebhookEvent[], unknownKinds: Set<string>): void {
  if (!isPlainObject(item)) {
    throw new PayloadError('invalid delivery', [{ path, message: `expected an event object, got ${describe(item)}` }]);
  }
  const { kind, kindKey } = readKind(item, path);
  if (!isEventKind(kind)) {
    unknownKinds.add(kind);
    return;
  }
  const spec: KindSpec = EVENT_REGISTRY[kind];
  const shape = detectShape(item, spec);
  const parser = PARSERS.get(kind)?.get(shape);
  if (!parser) {
    const expected = spec.shapes.map((s) => SHAPE_DESCRIPTIONS[s]).join(' or ');
    throw new PayloadError(`invalid ${kind} payload`, [{ path, message: `${kind} arrives ${expected}, got ${SHAPE_DESCRIPTIONS[shape]}` }]);
  }
  const ownKeys = new Set([kindKey, 'account_id']);
  const result = parser(item, ownKeys, path);
  if (!result.ok) throw new PayloadError(`invalid ${kind} payload`, result.issues);
  events.push(buildEvent(kind, spec, shape, result.data, item, ownKeys, index, batched));
}

/** docs/upstream.md, "Payload shapes": flat payloads name the kind in `event`, nested ones in `type`. */
function readKind(item: Record<string, unknown>, path: string): { kind: string; kindKey: 'event' | 'type' } {
  const kindKey = item.event != null ? 'event' : 'type';
  const kind = item[kindKey];
  if (typeof kind === 'string' && kind.trim() !== '') return { kind, kindKey };
  const at = path === '' ? '' : `${path}.`;
  const message =
    kind === undefined || kind === null
      ? `no event kind ("event" or "type")${path === '' ? ' and no "events" array' : ''}`
      : `the event kind must be a non-empty string, got ${describe(kind)}`;
  throw new PayloadError('invalid delivery', [{ path: kind == null ? path : `${at}${kindKey}`, message }]);
}

function detectShape(item: Record<string, unknown>, spec: KindSpec): PayloadShape {
  if ('subscriber' in item) return 'nested';
  return spec.shapes.includes('campaign') ? 'campaign' : 'flat';
}

function buildEvent(
  kind: EventKind,
  spec: KindSpec,
  shape: PayloadShape,
  data: Record<string, unknown>,
  item: Record<string, unknown>,
  ownKeys: ReadonlySet<string>,
  index: number,
  batched: boolean,
): WebhookEvent {
  const event: Record<string, unknown> = {
    kind,
    shape,
    batched,
    index,
    accountId: data.account_id ?? null,
    extra: {},
  };
  if (shape === 'nested') {
    for (const part of spec.carries) {
      const value = data[NESTED_KEYS[part]];
      event[part] = part === 'linkUrl' ? (value ?? null) : value;
    }
    const consumed = new Set<string>([...ownKeys, ...spec.carries.map((p) => NESTED_KEYS[p])]);
    event.extra = withoutKeys(item, consumed);
  } else {
    // Flat shapes carry exactly one object: the subscriber, or the campaign of `campaign.sent`.
    event[shape === 'flat' ? 'subscriber' : 'campaign'] = data.object;
  }
  // The registry guarantees the carried parts are present and validated for this kind.
  return event as WebhookEvent;
}

// ---------------------------------------------------------------------------------------------
// Helpers

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function withoutKeys(object: Record<string, unknown>, keys: Iterable<string>): Record<string, unknown> {
  const skip = keys instanceof Set ? keys : new Set(keys);
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(object)) {
    // An own "__proto__" key (possible from a plain JSON.parse) would set the prototype, not a key.
    if (!skip.has(key) && key !== '__proto__') out[key] = object[key];
  }
  return out;
}

function toIssues(error: z.ZodError, base: string): PayloadIssue[] {
  return error.issues.map((issue) => ({ path: joinPath(base, issue.path), message: issue.message }));
}

function joinPath(base: string, path: readonly PropertyKey[]): string {
  let out = base;
  for (const segment of path) {
    if (typeof segment === 'number') out += `[${segment}]`;
    else out += out === '' ? String(segment) : `.${String(segment)}`;
  }
  return out;
}

const MAX_ISSUES_IN_MESSAGE = 5;

function formatIssues(issues: PayloadIssue[]): string {
  const shown = issues.slice(0, MAX_ISSUES_IN_MESSAGE).map((i) => (i.path ? `${i.path}: ${i.message}` : i.message));
  const more = issues.length - shown.length;
  return more > 0 ? `${shown.join('; ')}; and ${more} more` : shown.join('; ');
}

/**
 * The 14 event kinds (docs/upstream.md, "Event kinds") as one table: how each is shaped on the wire and which ones
 * require a batchable webhook. Payload building and webhook validation both read this table.
 */

export const SUBSCRIBER_TYPES = ['active', 'unsubscribed', 'bounced', 'junk', 'unconfirmed'] as const;
export type SubscriberType = (typeof SUBSCRIBER_TYPES)[number];

export function isSubscriberType(value: string): value is SubscriberType {
  return (SUBSCRIBER_TYPES as readonly string[]).includes(value);
}

/** `flat`: subscriber fields at top level + event; `nested`: type + subscriber + context object; `campaign`: campaign.sent. */
export type PayloadShape = 'flat' | 'nested' | 'campaign';
export type ContextObject = 'group' | 'automation' | 'campaign' | null;

export interface KindSpec {
  readonly shape: PayloadShape;
  readonly context: ContextObject;
  /** docs/upstream.md, "Event kinds": the webhook must be created with batchable true to subscribe to this kind. */
  readonly batchOnly: boolean;
}

export const EVENT_KINDS = {
  'subscriber.created': { shape: 'flat', context: null, batchOnly: false },
  'subscriber.updated': { shape: 'flat', context: null, batchOnly: false },
  'subscriber.unsubscribed': { shape: 'flat', context: null, batchOnly: false },
  'subscriber.added_to_group': { shape: 'nested', context: 'group', batchOnly: false },
  'subscriber.removed_from_group': { shape: 'nested', context: 'group', batchOnly: false },
  'subscriber.bounced': { shape: 'flat', context: null, batchOnly: false },
  'subscriber.automation_triggered': { shape: 'nested', context: 'automation', batchOnly: false },
  'subscriber.automation_completed': { shape: 'nested', context: 'automation', batchOnly: false },
  'subscriber.spam_reported': { shape: 'flat', context: null, batchOnly: false },
  'subscriber.deleted': { shape: 'nested', context: null, batchOnly: true },
  'subscriber.active': { shape: 'flat', context: null, batchOnly: false },
  'campaign.sent': { shape: 'campaign', context: 'campaign', batchOnly: false },
  'campaign.click': { shape: 'nested', context: 'campaign', batchOnly: true },
  'campaign.open': { shape: 'nested', context: 'campaign', batchOnly: true },
} as const satisfies Record<string, KindSpec>;

export type EventKind = keyof typeof EVENT_KINDS;
export const ALL_EVENT_KINDS = Object.keys(EVENT_KINDS) as EventKind[];
export const BATCH_ONLY_KINDS = ALL_EVENT_KINDS.filter((kind) => EVENT_KINDS[kind].batchOnly);

export function isEventKind(value: unknown): value is EventKind {
  return typeof value === 'string' && Object.hasOwn(EVENT_KINDS, value);
}

export function kindSpec(kind: EventKind): KindSpec {
  return EVENT_KINDS[kind];
}

/** Custom fields carried by every subscriber (docs/upstream.md, "Subscriber object": `fields`). */
export const FIELD_KEYS = ['name', 'last_name', 'company', 'country', 'city', 'phone', 'state', 'zip'] as const;
export type FieldKey = (typeof FIELD_KEYS)[number];
/** The eight documented keys, and any key an account defined (`World.defineField`). */
export type SubscriberFields = Record<FieldKey, string> & Record<string, string>;

/** A custom field as the service defines it (docs/upstream.md, "Field definitions"). */
export type FieldType = 'text' | 'number' | 'date';
export interface FieldDefinition {
  id: string;
  key: string;
  title: string;
  type: FieldType;
}

/** docs/upstream.md, "Subscriber object": the subscriber as embedded in webhook payloads. */
export interface WebhookSubscriber {
  id: string;
  email: string;
  status: SubscriberType;
  source: string;
  sent: number;
  opens_count: number;
  clicks_count: number;
  open_rate: number;
  click_rate: number;
  ip_address: string | null;
  subscribed_at: string | null;
  unsubscribed_at: string | null;
  created_at: string;
  updated_at: string;
  deleted_at: string | null;
  forget_at: string | null;
  fields: SubscriberFields;
  opted_in_at: string | null;
  optin_ip: string | null;
}

export interface LegacyField {
  key: string;
  value: string;
  type: 'TEXT' | 'NUMBER' | 'DATE';
}

/**
 * The legacy Single Subscriber (spec examples). `id` is a decimal string here; on the wire it is a
 * bare JSON number, possibly above 2^53 (see renderLegacyJson).
 */
export interface LegacySubscriber {
  id: string;
  name: string;
  email: string;
  sent: number;
  opened: number;
  opened_rate: number;
  clicked: number;
  clicked_rate: number;
  type: SubscriberType;
  country_id: number;
  signup_ip: string | null;
  signup_timestamp: string | null;
  confirmation_ip: string | null;
  confirmation_timestamp: string | null;
  fields: LegacyField[];
  webform_subscribe_date: null;
  date_subscribe: string | null;
  date_unsubscribe: string | null;
  date_created: string;
  date_updated: string;
  user_agent: null;
}

export interface GroupInfo {
  readonly id: string;
  readonly name: string;
}

export interface AutomationInfo {
  readonly id: string;
  readonly name: string;
}

/** Campaign object (docs/upstream.md, "Objects in payloads") (also the flat campaign.sent fields). */
export interface CampaignInfo {
  readonly id: string;
  readonly name: string;
  readonly total_recipients: number;
  readonly preview_url: string;
  readonly date: string;
}

/** One thing that happened in the world, with everything a payload needs, captured at that moment. */
export interface WorldEvent {
  readonly seq: number;
  readonly kind: EventKind;
  /** Epoch µs of the change (equals the subscriber's new updated_at when there is one). */
  readonly atUs: number;
  readonly subscriberId: string | null;
  /** The subscriber as it is after the change (null only for campaign.sent). */
  readonly subscriber: WebhookSubscriber | null;
  readonly group?: GroupInfo;
  readonly automation?: AutomationInfo;
  readonly campaign?: CampaignInfo;
  readonly linkUrl?: string;
}

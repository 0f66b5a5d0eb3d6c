/**
 * The row shapes the store writes, what the normalizers and the schemas of `schemas.ts` produce.
 * Their own module so that `schemas.ts` and `normalize.ts` both depend on it rather than on each
 * other (no file cycle; `normalize.ts` re-exports everything here for its importers).
 */
import type { MirrorSource } from '../db/schema.js';

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

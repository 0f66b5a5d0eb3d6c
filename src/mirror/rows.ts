/**
 * The row shapes the store writes, what the normalizers and the schemas of `schemas.ts` produce.
 * Their own module so that `schemas.ts` and `normalize.ts` both depend on it rather than on each
 * other (no file cycle; `normalize.ts` re-exports everything here for its importers).
 */
import type { RowOf } from '../db/columns.js';
import type { automations, campaigns, groups, MirrorSource, subscriberActivity } from '../db/schema.js';

// ---------------------------------------------------------------------------------------------
// Row shapes

// The subscriber row shape, its fields and what forgetting erases derive from the registry of
// columns (`src/db/schema.ts`): a forgotten subscriber keeps its id and timestamps; its personal
// data is erased.
export {
  emptyValues,
  erasePersonalData,
  PERSONAL_FIELDS,
  SUBSCRIBER_FIELDS,
  type SubscriberField,
  type SubscriberValues,
} from '../db/subscriber-columns.js';
import { SUBSCRIBER_FIELDS as FIELDS, type SubscriberField, type SubscriberValues } from '../db/subscriber-columns.js';

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

/**
 * A version read from a list (a pass, the audit): alive. The service lists only subscribers that
 * are not deleted, so the version asserts `deleted_at` null: newer than a stored deletion (a restore
 * the webhooks did not announce) it makes the subscriber current again; an older one is skipped by
 * the version guard and the deletion stands.
 */
export function listedRow(row: SubscriberRow): SubscriberRow {
  if (row.provided.includes('deletedAt')) return row;
  return { ...row, provided: FIELDS.filter((f) => f === 'deletedAt' || row.provided.includes(f)) };
}

/** A group as embedded in payloads (docs/upstream.md, "Objects in payloads"). A null name means "not known", never "erase". */
export type GroupRow = Omit<RowOf<typeof groups>, 'account' | 'mirroredAt'>;

/** An automation as embedded in payloads (docs/upstream.md, "Objects in payloads"). */
export type AutomationRow = Omit<RowOf<typeof automations>, 'account' | 'mirroredAt'>;

/**
 * A campaign as embedded in payloads or the flat `campaign.sent` payload (docs/upstream.md, "Objects
 * in payloads"). Nulls mean "not known"; `date` is the payload's, `sentAt` is set from it when
 * normalized from a `campaign.sent` event.
 */
export type CampaignRow = Omit<RowOf<typeof campaigns>, 'account' | 'mirroredAt'>;

/**
 * One applied event: each item of each delivery is one row, keyed by (`deliveryId`, `itemIndex`), so
 * applying the same delivery again writes nothing while two identical items are two events.
 */
export type ActivityRow = Required<Pick<ActivityColumns, 'kind' | 'subscriberId' | 'occurredAt'>> &
  Omit<ActivityColumns, 'id' | 'mirroredAt' | 'kind' | 'subscriberId' | 'occurredAt' | 'deliveryId'> & {
    /** `webhook_deliveries.id` the event came from, as text or as node-postgres gives it. */
    deliveryId?: string | bigint | null;
  };

/** `subscriber_activity`'s columns as written (drizzle's insert type: nullable ones optional). */
type ActivityColumns = (typeof subscriberActivity)['$inferInsert'];

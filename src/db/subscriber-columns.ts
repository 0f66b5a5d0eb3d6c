/**
 * Everything the code needs to know about the columns of `subscribers`, derived from the registry
 * in `schema.ts` (the table and {@link SUBSCRIBER_COLUMN_ROLES}): the row type the normalizers fill,
 * the data fields in table order with their SQL names and types, and what forgetting erases. Nothing
 * here lists a column by hand.
 */
import { paramTypeOf, type PgType } from './columns.js';
import {
  SUBSCRIBER_COLUMN_ROLES,
  subscriberKeysOfRole,
  subscribers,
  type SubscriberColumnRole,
  type SubscriberKeyOfRole,
} from './schema.js';

type Select = typeof subscribers.$inferSelect;

/** A data column of `subscribers` (upstream data: content or current), keyed like the drizzle schema. */
export type SubscriberField = SubscriberKeyOfRole<'content' | 'latest'>;

/**
 * Every data column of `subscribers` plus the id. Timestamps are canonical UTC strings
 * (`2024-05-28T10:30:29.000000Z`); `updatedAt` is never null (the version clock: rows fall back to
 * `created_at`, see `src/mirror/normalize.ts`).
 */
export type SubscriberValues = { id: string; updatedAt: string } & Omit<Pick<Select, SubscriberField>, 'updatedAt'>;

/** All {@link SubscriberField}s in table order. */
export const SUBSCRIBER_FIELDS: readonly SubscriberField[] = subscriberKeysOfRole('content', 'latest');

export type { PgType } from './columns.js';

/** A column of `subscribers` as the store, history and erasure use it. */
export interface SubscriberColumn<F extends keyof Select = keyof Select> {
  /** The drizzle key, as in {@link SubscriberValues}. */
  field: F;
  /** The SQL name. */
  column: string;
  type: PgType;
  role: SubscriberColumnRole;
  /** Erased when the subscriber is forgotten or erased. */
  personal: boolean;
  /** jsonb merged key by key into the stored object instead of replacing it. */
  merge: boolean;
}

function describe<F extends keyof Select>(field: F): SubscriberColumn<F> {
  const column = subscribers[field];
  const type = paramTypeOf(column);
  const info: { role: SubscriberColumnRole; personal?: true; merge?: true } = SUBSCRIBER_COLUMN_ROLES[field];
  return { field, column: column.name, type, role: info.role, personal: info.personal === true, merge: info.merge === true };
}

/** Every column of `subscribers`, in table order. */
export const SUBSCRIBER_TABLE_COLUMNS: readonly SubscriberColumn[] = subscriberKeysOfRole(
  'key',
  'content',
  'latest',
  'version',
  'bookkeeping',
).map((f) => describe(f));

/** The SQL names of every column of `subscribers`, in table order (e.g. a COPY column list). */
export const SUBSCRIBER_COLUMN_NAMES: readonly string[] = SUBSCRIBER_TABLE_COLUMNS.map((c) => c.column);

/** The data columns (content and latest), in table order. */
export const SUBSCRIBER_DATA_COLUMNS: readonly SubscriberColumn<SubscriberField>[] = SUBSCRIBER_FIELDS.map((f) => describe(f));

/** The content columns (kept in every version), in table order. */
export const SUBSCRIBER_CONTENT: readonly SubscriberColumn<SubscriberKeyOfRole<'content'>>[] = subscriberKeysOfRole('content').map((f) =>
  describe(f),
);

/** SQL name of each {@link SubscriberField}. */
export const SUBSCRIBER_COLUMN_OF: Readonly<Record<SubscriberField, string>> = Object.fromEntries(
  SUBSCRIBER_DATA_COLUMNS.map((c) => [c.field, c.column]),
) as Record<SubscriberField, string>;

/** The columns erased when a subscriber is forgotten or erased (id, status, counters and timestamps stay). */
export const PERSONAL_FIELDS: readonly SubscriberField[] = SUBSCRIBER_DATA_COLUMNS.filter((c) => c.personal).map((c) => c.field);

/** A column's erased value as SQL: `'{}'` for jsonb objects, null otherwise. */
export function erasedSql(column: Pick<SubscriberColumn, 'type'>): string {
  return column.type === 'jsonb' ? `'{}'::jsonb` : 'null';
}

/** SQL: true when `alias`'s row still holds a value in one of `columns` (the erased value excluded). */
export function holdsAnySql(alias: string, columns: readonly SubscriberColumn[]): string {
  return `(${columns.map((c) => (c.type === 'jsonb' ? `${alias}.${c.column} <> '{}'::jsonb` : `${alias}.${c.column} is not null`)).join(' or ')})`;
}

/** SQL `SET` list erasing `columns`. */
export function eraseSetSql(columns: readonly SubscriberColumn[]): string {
  return columns.map((c) => `${c.column} = ${erasedSql(c)}`).join(', ');
}

/** A row with only its id and version: every other column null (objects empty). */
export function emptyValues(id: string, updatedAt: string): SubscriberValues {
  const values: Record<string, unknown> = { id };
  for (const c of SUBSCRIBER_DATA_COLUMNS) values[c.field] = c.type === 'jsonb' ? {} : null;
  values.updatedAt = updatedAt;
  return values as SubscriberValues;
}

/** A copy of `values` with the {@link PERSONAL_FIELDS} erased (null, or `{}` for jsonb objects). */
export function erasePersonalData(values: SubscriberValues): SubscriberValues {
  const out: Record<string, unknown> = { ...values };
  for (const c of SUBSCRIBER_DATA_COLUMNS) if (c.personal) out[c.field] = c.type === 'jsonb' ? {} : null;
  return out as SubscriberValues;
}

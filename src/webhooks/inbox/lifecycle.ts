/**
 * A stored delivery after its receipt: the consumer's statements (lock, mark done, record a failed
 * attempt), the replay's and the sweeper's (reopen, pending), and the retention purge. The inbox
 * (this folder) is the only writer of `webhook_deliveries`; the others call these.
 */
import type pg from 'pg';
import { canonicalTimestampSql, type RowOf } from '../../db/columns.js';
import type { DeliveryStatus, webhookDeliveries } from '../../db/schema.js';
import type { Queryable } from '../../ground/queryable.js';

/** An apply's locked row. */
export type LockedDelivery = Pick<RowOf<typeof webhookDeliveries>, 'status' | 'body' | 'receivedAt'>;

/**
 * The `select … for update` that opens an apply, as text to send after `begin` and the
 * transaction's settings in one simple query (the id is a validated string of digits, inlined).
 */
export function lockDeliverySql(id: string): string {
  return `select status, body, ${canonicalTimestampSql('received_at')} as "receivedAt" from webhook_deliveries where id = ${id} for update`;
}

/**
 * Marks the row done and commits, in one simple query (statements after a failing one are not run,
 * so a failed mark never commits). Returns `applied_at − received_at` in ms as `lagMs`. The id is a
 * validated string of digits; texts go through `escapeLiteral`. `beforeCommit`: one more statement
 * (a query whose result the caller reads, second in the results), run in the transaction.
 */
export function finishDeliverySql(
  client: pg.ClientBase,
  id: string,
  status: 'applied' | 'ignored',
  note: string | null,
  kinds: readonly string[],
  eventCount: number,
  beforeCommit: string | null = null,
): string {
  // Postgres text cannot hold NUL; the writer above replaces it the same way.
  const literal = (text: string) => client.escapeLiteral(text.replaceAll('\u0000', '\ufffd'));
  const kindsSql = kinds.length === 0 ? `'{}'::text[]` : `array[${kinds.map(literal).join(', ')}]::text[]`;
  return `
update webhook_deliveries
   set status = '${status}', applied_at = ${status === 'applied' ? 'clock_timestamp()' : 'applied_at'},
       updated_at = clock_timestamp(), attempts = attempts + 1, error = ${note === null ? 'null' : literal(note)},
       kinds = ${kindsSql}, event_count = ${Math.trunc(eventCount)}
 where id = ${id}
returning (extract(epoch from (coalesce(applied_at, clock_timestamp()) - received_at)) * 1000)::float8 as "lagMs";${beforeCommit === null ? '' : `\n${beforeCommit};`}
commit`;
}

const FAILED_SQL = `
update webhook_deliveries
   set attempts = attempts + 1, error = $2, updated_at = clock_timestamp(),
       status = case when $3 then 'failed' else status end
 where id = $1 and status = 'pending'
returning attempts, status`;

/**
 * Records a failed apply on a row still `pending`: one more attempt, its error, and `failed` when
 * `markFailed`. Undefined when the row is no longer pending (another apply finished it).
 */
export async function recordFailedAttempt(
  pool: Queryable,
  id: string,
  error: string,
  markFailed: boolean,
): Promise<{ attempts: number; status: DeliveryStatus } | undefined> {
  const { rows } = await pool.query<{ attempts: number; status: DeliveryStatus }>({
    name: 'sm_consumer_failed',
    text: FAILED_SQL,
    values: [id, error, markFailed],
  });
  return rows[0];
}

export async function deliveryStatus(pool: Queryable, id: string): Promise<DeliveryStatus | 'missing'> {
  const { rows } = await pool.query<{ status: DeliveryStatus }>('select status from webhook_deliveries where id = $1', [id]);
  return rows[0]?.status ?? 'missing';
}

/** Which rows a replay considers: received at or after `since`, and among `ids`; null: no bound. */
export interface ReplayFilter {
  since: string | null;
  ids: string[] | null;
}

const REOPEN_FAILED_SQL = `
update webhook_deliveries set status = 'pending', updated_at = clock_timestamp()
 where status = 'failed'
   and ($1::timestamptz is null or received_at >= $1::timestamptz)
   and ($2::bigint[] is null or id = any($2::bigint[]))
returning id::text as id`;

const IGNORED_SQL = `
select d.id::text as id, d.body from webhook_deliveries d
 where d.status = 'ignored'
   and ($1::timestamptz is null or d.received_at >= $1::timestamptz)
   and ($2::bigint[] is null or d.id = any($2::bigint[]))
 order by d.id`;

const REOPEN_IGNORED_SQL = `
update webhook_deliveries set status = 'pending', updated_at = clock_timestamp()
 where status = 'ignored' and id = any($1::bigint[])
returning id::text as id`;

/** Sets matching `failed` rows back to `pending`; returns their ids (attempts are kept). */
export async function reopenFailed(pool: Queryable, filter: ReplayFilter): Promise<string[]> {
  const { rows } = await pool.query<{ id: string }>(REOPEN_FAILED_SQL, [filter.since, filter.ids]);
  return rows.map((r) => r.id);
}

/** Matching `ignored` rows with their bodies, in id order. */
export async function ignoredDeliveries(pool: Queryable, filter: ReplayFilter): Promise<Array<{ id: string; body: unknown }>> {
  return (await pool.query<{ id: string; body: unknown }>(IGNORED_SQL, [filter.since, filter.ids])).rows;
}

/** Sets these `ignored` rows back to `pending`; returns the ids that were still ignored. */
export async function reopenIgnored(pool: Queryable, ids: readonly string[]): Promise<string[]> {
  if (ids.length === 0) return [];
  const { rows } = await pool.query<{ id: string }>(REOPEN_IGNORED_SQL, [ids]);
  return rows.map((r) => r.id);
}

// Qualified names: a bare id in ORDER BY would be the text output column, and "10" < "5".
const PENDING_SQL = `
select d.id::text as id, d.received_at::text as "receivedAt" from webhook_deliveries d
 where d.status = 'pending' and d.received_at < now() - make_interval(secs => $1::float8 / 1000)
   and ($2::timestamptz is null or (d.received_at, d.id) > ($2::timestamptz, $3::bigint))
 order by d.received_at, d.id
 limit $4`;

/** A position in the pending rows, in (received_at, id) order. */
export interface PendingCursor {
  receivedAt: string;
  id: string;
}

/** Up to `limit` pending rows received more than `graceMs` ago, after `cursor`, in (received_at, id) order. */
export async function pendingDeliveries(
  pool: Queryable,
  graceMs: number,
  cursor: PendingCursor | null,
  limit: number,
): Promise<PendingCursor[]> {
  const { rows } = await pool.query<PendingCursor>(PENDING_SQL, [graceMs, cursor?.receivedAt ?? null, cursor?.id ?? null, limit]);
  return rows;
}

// Batched by id so one purge never holds many row locks or one huge transaction; the status index
// (status, received_at) finds the candidates.
// The hash of each purged row stays (`webhook_delivery_hashes`): a replay of the same bytes after the
// retention is still a duplicate, and its personal data is not stored again.
const PURGE_SQL = `
with purged as (
  delete from webhook_deliveries where id in (
    select id from webhook_deliveries
     where (status in ('applied', 'ignored') and received_at < now() - make_interval(secs => $1::float8 / 1000))
        or (status in ('failed', 'pending') and received_at < now() - make_interval(secs => $3::float8 / 1000))
     limit $2)
  returning id, body_sha256, status, received_at
)
insert into webhook_delivery_hashes (body_sha256, delivery_id, status, received_at)
select decode(body_sha256, 'hex'), id, status, received_at from purged
on conflict (body_sha256) do nothing`;

/**
 * Deletes applied and ignored deliveries received more than `olderThanMs` ago, and failed and pending
 * ones received more than `failedOlderThanMs` ago (never, when unset), `batch` rows per statement
 * until none is left; returns how many. Applied rows' effects are in the mirrored tables; what is
 * left in the raw bodies is personal data (of forgotten subscribers too). Failed and pending rows
 * are kept longer for `webhooks replay`, but a row nobody replayed in that time never will be.
 */
export async function purgeDeliveries(
  pool: Queryable,
  olderThanMs: number,
  options: { failedOlderThanMs?: number; batch?: number } = {},
): Promise<number> {
  const batch = options.batch ?? 5_000;
  // Infinity is not a float8 parameter; a century stands for "never".
  const failedMs = options.failedOlderThanMs ?? 100 * 365 * 86_400_000;
  let total = 0;
  for (;;) {
    const deleted = (await pool.query(PURGE_SQL, [olderThanMs, batch, failedMs])).rowCount ?? 0;
    total += deleted;
    if (deleted < batch) return total;
  }
}

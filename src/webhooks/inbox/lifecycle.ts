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
  return `select status, body, ${canonicalTimestampSql('received_at')} as "receivedAt" from webhook_deliveries where id = ${id} and account = mirror_account() for update`;
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
 where id = ${id} and account = mirror_account()
returning (extract(epoch from (coalesce(applied_at, clock_timestamp()) - received_at)) * 1000)::float8 as "lagMs";${beforeCommit === null ? '' : `\n${beforeCommit};`}
commit`;
}

/** How often a delivery is tried and how long it waits between tries. */
export interface RetryPolicy {
  /** Tries per delivery, first one included (default 8): the last failed one marks it `failed`. */
  attempts: number;
  /** First wait; doubles per failed try (default 1 s: 1, 2, 4 … 64 s, about two minutes in all). */
  backoffMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { attempts: 8, backoffMs: 1_000 };

// The rule of every failed try, in one statement: one more attempt and try, the error, the next try
// after backoff × 2^(tries so far), and `failed` when the error is permanent or this was the last try.
const FAILED_SQL = `
update webhook_deliveries
   set attempts = attempts + 1, tries = tries + 1, error = $2, updated_at = clock_timestamp(),
       next_attempt_at = clock_timestamp() + make_interval(secs => $5::float8 * power(2, least(tries, 30)) / 1000),
       status = case when $3 or tries + 1 >= $4 then 'failed' else status end
 where id = $1 and account = mirror_account() and status = 'pending'
returning attempts, status, (extract(epoch from next_attempt_at - clock_timestamp()) * 1000)::float8 as "retryInMs"`;

/** What a failed try left: the row's attempts and status, and how long until it is due again. */
export interface FailedAttempt {
  attempts: number;
  status: DeliveryStatus;
  retryInMs: number;
}

/**
 * Records a failed apply on a row still `pending` (see FAILED_SQL): `permanent` marks it `failed`
 * at once. Undefined when the row is no longer pending (another apply finished it).
 */
export async function recordFailedAttempt(
  pool: Queryable,
  id: string,
  error: string,
  permanent: boolean,
  retry: RetryPolicy = DEFAULT_RETRY,
): Promise<FailedAttempt | undefined> {
  const { rows } = await pool.query<FailedAttempt>({
    name: 'sm_consumer_failed',
    text: FAILED_SQL,
    values: [id, error, permanent, retry.attempts, retry.backoffMs],
  });
  return rows[0];
}

export async function deliveryStatus(pool: Queryable, id: string): Promise<DeliveryStatus | 'missing'> {
  const { rows } = await pool.query<{ status: DeliveryStatus }>(
    'select status from webhook_deliveries where id = $1 and account = mirror_account()',
    [id],
  );
  return rows[0]?.status ?? 'missing';
}

/** Which rows a replay considers: received at or after `since`, and among `ids`; null: no bound. */
export interface ReplayFilter {
  since: string | null;
  ids: string[] | null;
}

const REOPEN_FAILED_SQL = `
update webhook_deliveries set status = 'pending', updated_at = clock_timestamp(), tries = 0, next_attempt_at = null
 where account = mirror_account() and status = 'failed'
   and ($1::timestamptz is null or received_at >= $1::timestamptz)
   and ($2::bigint[] is null or id = any($2::bigint[]))
returning id::text as id`;

const IGNORED_SQL = `
select d.id::text as id, d.body from webhook_deliveries d
 where d.account = mirror_account() and d.status = 'ignored'
   and ($1::timestamptz is null or d.received_at >= $1::timestamptz)
   and ($2::bigint[] is null or d.id = any($2::bigint[]))
 order by d.id`;

const REOPEN_IGNORED_SQL = `
update webhook_deliveries set status = 'pending', updated_at = clock_timestamp(), tries = 0, next_attempt_at = null
 where account = mirror_account() and status = 'ignored' and id = any($1::bigint[])
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

/**
 * A row (alias `d`) that a claim takes now: pending, and not waiting for its next try. The claim
 * and the safety-net poll share it, so the poll never wakes an account for rows no claim would take.
 */
const DUE_SQL = `d.status = 'pending' and (d.next_attempt_at is null or d.next_attempt_at <= clock_timestamp())`;

/*
 * The claim that opens a batch: the oldest due pending rows, locked until the batch commits;
 * rows another worker holds are skipped, not waited for (SKIP LOCKED), so replicas share the inbox
 * without ever applying a row twice at once. Bodies up to `inlineBytes` (as stored) come with it;
 * larger ones are read one by one within the batch's byte budget (`deliveryBody`).
 */
const CLAIM_SQL = (limit: number, inlineBytes: number) => `
select d.id::text as id, ${canonicalTimestampSql('d.received_at')} as "receivedAt", pg_column_size(d.body) as size,
       case when pg_column_size(d.body) <= ${Math.trunc(inlineBytes)} then d.body end as body
  from webhook_deliveries d
 where d.account = mirror_account() and ${DUE_SQL}
 order by d.received_at, d.id
 limit ${Math.trunc(limit)}
   for update skip locked`;

/** A claimed row: its body when small enough to come with the claim, else null (read it when its turn comes). */
export interface ClaimedDelivery {
  id: string;
  receivedAt: string;
  /** Stored size of the body in bytes. */
  size: number;
  body: unknown;
}

/** The claim as text to send after `begin` and the transaction's settings in one simple query. */
export function claimDeliveriesSql(limit: number, inlineBytes: number): string {
  return CLAIM_SQL(Math.max(1, limit), Math.max(0, inlineBytes));
}

/** The body of a row this transaction holds (a large one the claim left out). */
export async function claimedBody(client: Queryable, id: string): Promise<unknown> {
  const { rows } = await client.query<{ body: unknown }>(
    'select body from webhook_deliveries where id = $1 and account = mirror_account()',
    [id],
  );
  return rows[0]?.body ?? null;
}

/** What a batch sets on each row it applied or found nothing to apply in. */
export interface FinishedDelivery {
  id: string;
  status: 'applied' | 'ignored';
  note: string | null;
  kinds: readonly string[];
  eventCount: number;
}

/**
 * Marks a batch's rows done, as one statement (text; ids are validated digits, texts go through
 * `escapeLiteral`). Returns, per applied row, `applied_at − received_at` in ms as `lagMs`.
 */
export function finishDeliveriesSql(client: pg.ClientBase, rows: readonly FinishedDelivery[]): string {
  const literal = (text: string) => client.escapeLiteral(text.replaceAll('\u0000', '\ufffd'));
  const values = rows.map((r) => {
    const kinds = r.kinds.length === 0 ? `'{}'::text[]` : `array[${r.kinds.map(literal).join(', ')}]::text[]`;
    return `(${r.id}::bigint, '${r.status}', ${r.note === null ? 'null::text' : literal(r.note)}, ${kinds}, ${Math.trunc(r.eventCount)})`;
  });
  return `
update webhook_deliveries d
   set status = v.status, applied_at = case when v.status = 'applied' then clock_timestamp() else d.applied_at end,
       updated_at = clock_timestamp(), attempts = d.attempts + 1, error = v.note, kinds = v.kinds,
       event_count = v.event_count, next_attempt_at = null
  from (values ${values.join(',\n         ')}) as v(id, status, note, kinds, event_count)
 where d.id = v.id and d.account = mirror_account()
returning d.id::text as id, (extract(epoch from (coalesce(d.applied_at, clock_timestamp()) - d.received_at)) * 1000)::float8 as "lagMs"`;
}

/**
 * Which of `accounts` have a pending row due now: what a claim of each would find. Deployment-wide
 * (it names the accounts, never the session's); one probe of the status index per account, so a
 * large inbox of applied rows costs nothing here.
 */
export async function accountsWithDueDeliveries(db: Queryable, accounts: readonly string[]): Promise<string[]> {
  if (accounts.length === 0) return [];
  const { rows } = await db.query<{ account: string }>(
    `select a.name as account from unnest($1::text[]) as a(name)
      where exists (select 1 from webhook_deliveries d where d.account = a.name and ${DUE_SQL})`,
    [accounts],
  );
  return rows.map((r) => r.account);
}

/** Milliseconds until the earliest pending row that waits for its next try is due; null when none waits. */
export async function nextRetryInMs(pool: Queryable): Promise<number | null> {
  const { rows } = await pool.query<{ ms: number | null }>(
    `select (extract(epoch from min(next_attempt_at) - clock_timestamp()) * 1000)::float8 as ms
       from webhook_deliveries where account = mirror_account() and status = 'pending' and next_attempt_at is not null`,
  );
  return rows[0]?.ms ?? null;
}

// Batched by id so one purge never holds many row locks or one huge transaction; the status index
// (account, status, received_at) finds the candidates of each account in turn.
// The hash of each purged row stays (`webhook_delivery_hashes`), under the row's own account: a
// replay of the same bytes after the retention is still a duplicate, and its personal data is not
// stored again.
// Deployment-wide: the retention is one setting for every account, so the statement goes over every
// account and names each row's account itself; it never asks the session for one, and is the same on
// a pool of any account or of none.
const PURGE_SQL = `
with purged as (
  delete from webhook_deliveries where id in (
    select d.id from accounts a
     cross join lateral (
       select id from webhook_deliveries d
        where d.account = a.name
          and ((d.status in ('applied', 'ignored') and d.received_at < now() - make_interval(secs => $1::float8 / 1000))
            or (d.status in ('failed', 'pending') and d.received_at < now() - make_interval(secs => $3::float8 / 1000)))
        limit $2) d
     limit $2)
  returning account, id, body_sha256, status, received_at
)
insert into webhook_delivery_hashes (account, body_sha256, delivery_id, status, received_at)
select account, decode(body_sha256, 'hex'), id, status, received_at from purged
on conflict (account, body_sha256) do nothing`;

/**
 * Deletes applied and ignored deliveries received more than `olderThanMs` ago, and failed and pending
 * ones received more than `failedOlderThanMs` ago (never, when unset), of every account, `batch` rows
 * per statement until none is left; returns how many. Applied rows' effects are in the mirrored tables; what is
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

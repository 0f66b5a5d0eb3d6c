/**
 * The consumer (issue #5 part 3): applies stored deliveries (`webhook_deliveries` rows in status
 * `pending`) to the mirror, one transaction per delivery, through BullMQ queue "events".
 *
 *   receiver ─onStored(id)─► enqueue ─► queue "events" (job `delivery-<id>`) ─► worker ─► applyDelivery
 *                                         ▲
 *   sweeper (at start, then every 30 s) ──┘ pending rows older than a few seconds (crash between
 *                                           store and enqueue, Redis down, a job given up on)
 *
 * Contract of one apply (`applyDelivery`), all in ONE transaction:
 * - `select … for update` the row; anything but `pending` is skipped, so applying one delivery twice
 *   concurrently (a duplicate notification, the sweeper, a replica) is harmless: the second waits for
 *   the first's commit, then sees `applied`.
 * - parse the stored body (`parseDelivery`), plan every event's effects (`apply.ts`), hand them to
 *   the store, mark the row `applied` (`applied_at`, `attempts + 1`), commit.
 * A failure rolls all of it back, then the row records the attempt and the error. Transient errors
 * (database, deadlock, anything unexpected) leave it `pending` and BullMQ retries with exponential
 * backoff; a permanent one (the body cannot be mirrored) or the last attempt marks it `failed`.
 * Failed rows stay failed until `replayDeliveries` (invariant 9: nothing is applied behind the
 * operator's back), and the sweeper never re-enqueues them. Rows `ignored` (no known kind) are not
 * applied either. Unknown kinds inside a mixed batch are skipped; their note stays in `error`.
 *
 * Throughput: the queue holds ids only, and the ids the receiver hands over in one tick are added in
 * one round trip. A `subscriber.updated` is four round trips to Postgres (begin + lock, subscriber
 * upsert, activity row, mark + commit) and commits without waiting for its WAL flush (see
 * ASYNC_COMMIT_SQL); a batch adds one statement per kind of row, not per event.
 */
import { Queue, Worker, type ConnectionOptions, type Job, type JobsOptions } from 'bullmq';
import type pg from 'pg';
import type { DeliveryStatus } from '../db/schema.js';
import type { Metrics } from '../ground/metrics.js';
import type { Logger } from '../ground/log.js';
import { NormalizeError } from '../mirror/normalize.js';
import { applyPlan, planDelivery, type ApplyCounts } from './apply.js';
import { deliveryKinds, parseDelivery, PayloadError } from './payloads.js';
import { repeat } from '../ground/repeat.js';
import { purgeDeliveries } from './inbox.js';

export const EVENTS_QUEUE = 'events';

export interface DeliveryJobData {
  /** `webhook_deliveries.id`. */
  deliveryId: string;
}

const DIGITS = /^\d+$/;

/** BullMQ job ids must not be all digits nor contain ':' (docs/architecture.md, "Traps we work around"). */
export function deliveryJobId(id: string): string {
  assertDeliveryId(id);
  return `delivery-${id}`;
}

function assertDeliveryId(id: string): void {
  if (typeof id !== 'string' || !DIGITS.test(id)) throw new TypeError(`delivery id must be a string of digits, got ${String(id)}`);
}

export interface RetryPolicy {
  /** Tries per job, first one included (default 8). */
  attempts: number;
  /** First backoff delay; doubles per retry (default 1 s: 1, 2, 4 … 64 s, about two minutes in all). */
  backoffMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { attempts: 8, backoffMs: 1_000 };

export function deliveryJobOptions(retry: RetryPolicy = DEFAULT_RETRY): JobsOptions {
  return {
    attempts: retry.attempts,
    backoff: { type: 'exponential', delay: retry.backoffMs },
    // Nothing to keep: the row holds status, attempts and error. A removed job also lets the
    // sweeper re-add a row whose job gave up while the database was down (a jobId blocks re-adding
    // only while the old job exists).
    removeOnComplete: true,
    removeOnFail: true,
  };
}

// ---------------------------------------------------------------------------------------------
// One delivery

export type ApplyResult =
  | { outcome: 'applied'; events: number; counts: ApplyCounts; /** applied_at − received_at */ lagMs: number }
  /** Not applied: the row is missing or no longer pending (applied, failed, ignored). */
  | { outcome: 'skipped'; status: DeliveryStatus | 'missing' }
  /** No known kind after re-parsing (a replayed row whose kinds are still unknown): back to `ignored`. */
  | { outcome: 'ignored' }
  /** Rolled back and marked `failed` (permanent error, or the last attempt). */
  | { outcome: 'failed'; error: string; attempts: number }
  /** Rolled back; still `pending`: try again later. */
  | { outcome: 'retry'; error: string; attempts: number };

export interface ApplyOptions {
  /** This is the last try: a transient error marks the row `failed` too. */
  finalAttempt?: boolean;
}

/*
 * The apply commits without waiting for its WAL flush (~5 ms per commit on this kind of disk, the
 * largest cost of an apply). Safe: the delivery is already durable in the inbox (invariant 1), and
 * the `applied` mark commits atomically with the effects, so a crash that loses the last few hundred
 * ms of applies leaves those rows `pending`, and the sweeper applies them again (idempotent,
 * invariant 5). The inbox write itself stays synchronous.
 */
const ASYNC_COMMIT_SQL = 'set local synchronous_commit = off';

/*
 * The store's statements are named prepared statements, but Postgres keeps planning its subscriber
 * upsert afresh on every run (plan_cache_mode auto picks custom plans for it): half of its cost for
 * a delivery's few rows (measured: ~365 → ~180 µs of Postgres CPU). A generic plan is as good for
 * these small `unnest` batches. Local to the apply's transaction; the poll's pages keep the default.
 */
const GENERIC_PLANS_SQL = 'set local plan_cache_mode = force_generic_plan';

const FAILED_SQL = `
update webhook_deliveries
   set attempts = attempts + 1, error = $2, updated_at = clock_timestamp(),
       status = case when $3 then 'failed' else status end
 where id = $1 and status = 'pending'
returning attempts, status`;

const MAX_ERROR_CHARS = 2_000;

type LockedRow = { status: DeliveryStatus; body: unknown; receivedAt: string };

/**
 * Applies one stored delivery in one transaction (see the module note). Throws only when even the
 * failure could not be recorded (database unreachable): the row is then still `pending` and the
 * caller (BullMQ, the sweeper) tries again.
 */
export async function applyDelivery(pool: pg.Pool, id: string, options: ApplyOptions = {}): Promise<ApplyResult> {
  assertDeliveryId(id);
  try {
    return await applyInTransaction(pool, id);
  } catch (error) {
    const permanent = isPermanent(error);
    const message = describeError(error).slice(0, MAX_ERROR_CHARS);
    const { rows } = await pool.query<{ attempts: number; status: DeliveryStatus }>({
      name: 'sm_consumer_failed',
      text: FAILED_SQL,
      values: [id, message, permanent || options.finalAttempt === true],
    });
    const marked = rows[0];
    // No longer pending: another apply finished it while ours failed before taking the lock.
    if (!marked) return { outcome: 'skipped', status: await currentStatus(pool, id) };
    return marked.status === 'failed'
      ? { outcome: 'failed', error: message, attempts: marked.attempts }
      : { outcome: 'retry', error: message, attempts: marked.attempts };
  }
}

/**
 * The transaction of one apply, on its own pooled connection (like `withTransaction` in the store),
 * in as few round trips as possible: on a busy machine each one waits for Postgres to be scheduled,
 * and writing to its socket is the largest CPU cost of the consumer (measured). So begin, the
 * transaction's settings and the row lock go as one simple query, and so do the final mark and the commit;
 * in between, the store's statements (one per kind of row). Values in those two queries are inlined:
 * the id is a validated string of digits, texts go through `escapeLiteral`.
 */
async function applyInTransaction(pool: pg.Pool, id: string): Promise<ApplyResult> {
  const client = await pool.connect();
  let open = false;
  let broken = false;
  try {
    open = true;
    const opened = (await client.query(
      `begin; ${ASYNC_COMMIT_SQL}; ${GENERIC_PLANS_SQL}; select status, body, to_char(received_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as "receivedAt" from webhook_deliveries where id = ${id} for update`,
    )) as unknown as pg.QueryResult<LockedRow>[];
    const row = opened[3]?.rows[0];
    if (!row || row.status !== 'pending') {
      await client.query('rollback');
      open = false;
      return { outcome: 'skipped', status: row?.status ?? 'missing' };
    }

    const parsed = parseDelivery(row.body);
    const kinds = deliveryKinds(parsed);
    const note = parsed.unknownKinds.length > 0 ? `unknown event kind(s): ${parsed.unknownKinds.join(', ')}` : null;
    if (parsed.events.length === 0) {
      await client.query(finishSql(client, id, 'ignored', note, kinds, 0));
      open = false;
      return { outcome: 'ignored' };
    }
    const counts = await applyPlan(client, planDelivery(parsed.events, id, row.receivedAt));
    const finished = (await client.query(
      finishSql(client, id, 'applied', note, kinds, parsed.events.length),
    )) as unknown as pg.QueryResult<{ lagMs: number }>[];
    open = false;
    return { outcome: 'applied', events: parsed.events.length, counts, lagMs: finished[0]?.rows[0]?.lagMs ?? 0 };
  } catch (error) {
    if (open) {
      try {
        await client.query('rollback');
      } catch {
        broken = true; // the connection is unusable: destroy it instead of returning it to the pool
      }
    }
    throw error;
  } finally {
    client.release(broken);
  }
}

/**
 * Marks the row done and commits, in one simple query (statements after a failing one are not run,
 * so a failed mark never commits). Returns `applied_at − received_at` in ms as `lagMs`.
 */
function finishSql(
  client: pg.ClientBase,
  id: string,
  status: 'applied' | 'ignored',
  note: string | null,
  kinds: readonly string[],
  eventCount: number,
): string {
  // Postgres text cannot hold NUL; the receiver's inbox replaces it the same way.
  const literal = (text: string) => client.escapeLiteral(text.replaceAll('\u0000', '\ufffd'));
  const kindsSql = kinds.length === 0 ? `'{}'::text[]` : `array[${kinds.map(literal).join(', ')}]::text[]`;
  return `
update webhook_deliveries
   set status = '${status}', applied_at = ${status === 'applied' ? 'clock_timestamp()' : 'applied_at'},
       updated_at = clock_timestamp(), attempts = attempts + 1, error = ${note === null ? 'null' : literal(note)},
       kinds = ${kindsSql}, event_count = ${Math.trunc(eventCount)}
 where id = ${id}
returning (extract(epoch from (coalesce(applied_at, clock_timestamp()) - received_at)) * 1000)::float8 as "lagMs";
commit`;
}

async function currentStatus(pool: pg.Pool, id: string): Promise<DeliveryStatus | 'missing'> {
  const { rows } = await pool.query<{ status: DeliveryStatus }>('select status from webhook_deliveries where id = $1', [id]);
  return rows[0]?.status ?? 'missing';
}

/**
 * Errors that a retry cannot fix: the stored body does not parse or normalize (the receiver accepted
 * it under an older registry, or the row was written by hand), or a value Postgres refuses (class 22
 * data exception, 23 integrity violation). Everything else (connection, deadlock, serialization,
 * timeouts, bugs) is retried, then marked failed at the last attempt.
 */
export function isPermanent(error: unknown): boolean {
  if (error instanceof PayloadError || error instanceof NormalizeError) return true;
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (code.startsWith('22') || code.startsWith('23'));
}

/** One line; PayloadError and NormalizeError messages never quote personal values. */
function describeError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const code = (error as { code?: unknown }).code;
  return `${error.name}: ${error.message}${typeof code === 'string' && !error.message.includes(code) ? ` (${code})` : ''}`;
}

// ---------------------------------------------------------------------------------------------
// Replay

export interface ReplayOptions {
  /** Which rows (default `failed`). `ignored` rows are re-parsed: only those with a now-known kind come back. */
  status?: 'failed' | 'ignored';
  /** Only rows received at or after this instant (ISO 8601). */
  since?: string;
  /** Only these ids. */
  ids?: readonly string[];
}

const REPLAY_FAILED_SQL = `
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

const REPLAY_IGNORED_SQL = `
update webhook_deliveries set status = 'pending', updated_at = clock_timestamp()
 where status = 'ignored' and id = any($1::bigint[])
returning id::text as id`;

/**
 * Sets matching `failed` (or `ignored`) rows back to `pending` and returns their ids, in id order; the
 * caller enqueues them (`DeliveryConsumer.enqueueDeliveries`; the sweeper would find them too).
 * An `ignored` row comes back only when its body now has a known kind (the registry grew); the
 * others stay ignored. Attempts are kept (they count every try), the error is replaced at the next.
 */
export async function replayDeliveries(pool: pg.Pool, options: ReplayOptions = {}): Promise<string[]> {
  const since = options.since ?? null;
  if (since !== null && Number.isNaN(Date.parse(since))) throw new TypeError(`since must be an ISO 8601 instant, got ${since}`);
  options.ids?.forEach(assertDeliveryId);
  const ids = options.ids ? [...options.ids] : null;
  let rows: Array<{ id: string }>;
  if ((options.status ?? 'failed') === 'failed') {
    rows = (await pool.query<{ id: string }>(REPLAY_FAILED_SQL, [since, ids])).rows;
  } else {
    const candidates = (await pool.query<{ id: string; body: unknown }>(IGNORED_SQL, [since, ids])).rows;
    const known = candidates.filter((r) => hasKnownEvents(r.body)).map((r) => r.id);
    rows = known.length === 0 ? [] : (await pool.query<{ id: string }>(REPLAY_IGNORED_SQL, [known])).rows;
  }
  return rows.map((r) => r.id).sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : 1));
}

function hasKnownEvents(body: unknown): boolean {
  try {
    return parseDelivery(body).events.length > 0;
  } catch (error) {
    // Now a known kind with a bad shape: replaying lets the apply record why it fails.
    if (error instanceof PayloadError) return true;
    throw error;
  }
}

// ---------------------------------------------------------------------------------------------
// Queue, worker, sweeper

export interface DeliveryConsumerDeps {
  pool: pg.Pool;
  /** BullMQ connection of the worker (blocking: `maxRetriesPerRequest: null`, docs/architecture.md, "Traps we work around"). */
  connection: ConnectionOptions;
  /**
   * Connection of the queue that `enqueue` adds to. The receiver calls `enqueue` on the HTTP path,
   * whose Redis use should fail fast (`maxRetriesPerRequest: 1`): a lost enqueue is picked up by the
   * sweeper. Defaults to `connection`.
   */
  queueConnection?: ConnectionOptions;
  prefix: string;
  logger: Logger;
  metrics?: Metrics;
  /** Run the worker and the sweeper (default true). False: an enqueue-only handle (receiver role). */
  work?: boolean;
  /** Deliveries applied at once (default 4; each holds one pooled connection while it runs). */
  concurrency?: number;
  /** Sweep interval (default 30 s; 0 disables the timer: call `sweep()` yourself). */
  sweepEveryMs?: number;
  /** Pending rows younger than this are left to their own enqueue (default 5 s). */
  pendingGraceMs?: number;
  /** Rows one sweep reads at most (default 5 000); a full sweep schedules the next one at once. */
  sweepBatch?: number;
  /** The sweeper adds nothing while this many jobs are already waiting or delayed (default 20 000). */
  maxQueued?: number;
  /** Applied and ignored deliveries older than this are deleted (WEBHOOK_RETENTION); unset keeps them. */
  retentionMs?: number;
  /**
   * Failed and pending deliveries older than this are deleted too (WEBHOOK_FAILED_RETENTION); unset
   * keeps them. Longer than `retentionMs`: they are kept for `webhooks replay`, not for ever.
   */
  failedRetentionMs?: number;
  /** How often the worker purges old deliveries (default 10 min; first purge a minute after start). */
  purgeEveryMs?: number;
  retry?: Partial<RetryPolicy>;
}

export interface DeliveryConsumer {
  /** Enqueues one stored delivery; idempotent while its job exists. Use as the receiver's `onStored`. */
  enqueue(id: string): Promise<void>;
  /** Enqueues several (after `replayDeliveries`), in one round trip per 500. */
  enqueueDeliveries(ids: readonly string[]): Promise<void>;
  /** Enqueues pending rows older than the grace period; returns how many were handed to the queue. */
  sweep(): Promise<number>;
  /** Deletes deliveries past the retention now; returns how many (0 without `retentionMs`). */
  purge(): Promise<number>;
  /** Stops the sweeper and the worker (waiting at most `timeoutMs` for running applies), closes the queue. */
  close(timeoutMs: number): Promise<void>;
  readonly queue: Queue<DeliveryJobData>;
  readonly worker: Worker<DeliveryJobData> | null;
}

// Qualified names: a bare id in ORDER BY would be the text output column, and "10" < "5".
const SWEEP_SQL = `
select d.id::text as id, d.received_at::text as "receivedAt" from webhook_deliveries d
 where d.status = 'pending' and d.received_at < now() - make_interval(secs => $1::float8 / 1000)
   and ($2::timestamptz is null or (d.received_at, d.id) > ($2::timestamptz, $3::bigint))
 order by d.received_at, d.id
 limit $4`;

const ADD_CHUNK = 500;

export function createDeliveryConsumer(deps: DeliveryConsumerDeps): DeliveryConsumer {
  const log = deps.logger.child({ component: 'webhook-consumer' });
  const retry: RetryPolicy = { ...DEFAULT_RETRY, ...deps.retry };
  const jobOptions = deliveryJobOptions(retry);
  const sweepEveryMs = deps.sweepEveryMs ?? 30_000;
  const graceMs = deps.pendingGraceMs ?? 5_000;
  const sweepBatch = Math.max(1, deps.sweepBatch ?? 5_000);
  const maxQueued = Math.max(1, deps.maxQueued ?? 20_000);

  const queue = new Queue<DeliveryJobData>(EVENTS_QUEUE, {
    connection: deps.queueConnection ?? deps.connection,
    prefix: deps.prefix,
    defaultJobOptions: jobOptions,
  });
  queue.on('error', (error) => log.warn({ err: error }, 'events queue error'));

  const addAll = async (ids: readonly string[]) => {
    for (let i = 0; i < ids.length; i += ADD_CHUNK) {
      await queue.addBulk(
        ids.slice(i, i + ADD_CHUNK).map((id) => ({
          name: 'apply',
          data: { deliveryId: id },
          opts: { ...jobOptions, jobId: deliveryJobId(id) },
        })),
      );
    }
  };

  const processJob = async (job: Job<DeliveryJobData>): Promise<ApplyResult> => {
    const id = job.data.deliveryId;
    const finalAttempt = job.attemptsMade + 1 >= (job.opts.attempts ?? 1);
    const result = await applyDelivery(deps.pool, id, { finalAttempt });
    switch (result.outcome) {
      case 'applied':
        deps.metrics?.deliveries.inc({ outcome: 'applied' });
        deps.metrics?.deliveryLag.observe(result.lagMs / 1000);
        deps.metrics?.rowsWritten.inc({ via: 'webhook', result: 'inserted' }, result.counts.subscribers.inserted);
        deps.metrics?.rowsWritten.inc({ via: 'webhook', result: 'updated' }, result.counts.subscribers.updated);
        deps.metrics?.rowsWritten.inc({ via: 'webhook', result: 'unchanged' }, result.counts.subscribers.unchanged);
        deps.metrics?.rowsWritten.inc({ via: 'webhook', result: 'skipped' }, result.counts.subscribers.skipped);
        return result;
      case 'retry':
        log.warn({ deliveryId: id, attempts: result.attempts, error: result.error }, 'applying a delivery failed; will retry');
        throw new Error(result.error);
      case 'failed':
        deps.metrics?.deliveries.inc({ outcome: 'failed' });
        log.error({ deliveryId: id, attempts: result.attempts, error: result.error }, 'delivery marked failed; replay it once fixed');
        return result;
      case 'ignored':
        deps.metrics?.deliveries.inc({ outcome: 'ignored' });
        return result;
      case 'skipped':
        return result;
    }
  };

  let worker: Worker<DeliveryJobData> | null = null;
  if (deps.work !== false) {
    worker = new Worker<DeliveryJobData>(EVENTS_QUEUE, processJob, {
      connection: deps.connection,
      prefix: deps.prefix,
      concurrency: deps.concurrency ?? 4,
      autorun: true,
    });
    worker.on('error', (error) => log.warn({ err: error }, 'events worker error'));
  }

  // Sweeper: a keyset cursor walks the pending rows across sweeps, so rows waiting in backoff (their
  // jobs exist; re-adding is a no-op) cannot hide the ones behind them.
  let cursor: { receivedAt: string; id: string } | null = null;
  let sweeping: Promise<number> | null = null;

  const sweepOnce = async (): Promise<number> => {
    // Bounded: a backlog in Postgres (after an outage) must not all move into Redis at once.
    const counts = await queue.getJobCounts('waiting', 'delayed', 'prioritized');
    const room = maxQueued - ((counts.waiting ?? 0) + (counts.delayed ?? 0) + (counts.prioritized ?? 0));
    if (room <= 0) return 0;
    const limit = Math.min(room, sweepBatch);
    const { rows } = await deps.pool.query<{ id: string; receivedAt: string }>(SWEEP_SQL, [
      graceMs,
      cursor?.receivedAt ?? null,
      cursor?.id ?? null,
      limit,
    ]);
    await addAll(rows.map((r) => r.id));
    const last = rows.at(-1);
    cursor = rows.length === limit && last ? { receivedAt: last.receivedAt, id: last.id } : null;
    if (rows.length > 0) log.info({ enqueued: rows.length, more: cursor !== null }, 'swept pending deliveries');
    return rows.length;
  };

  const sweep = (): Promise<number> => {
    sweeping ??= sweepOnce().finally(() => {
      sweeping = null;
    });
    return sweeping;
  };

  // Once at start (rows a crash left pending), then every sweepEveryMs; sooner while a full sweep
  // leaves more behind.
  const sweeper =
    worker && sweepEveryMs > 0
      ? repeat(sweep, {
          firstDelayMs: 0,
          nextDelayMs: (failed) => (!failed && cursor ? Math.min(1_000, sweepEveryMs) : sweepEveryMs),
          onError: (error) => log.warn({ err: error }, 'sweeping pending deliveries failed'),
        })
      : null;

  // Retention: every replica may purge; concurrent deletes of the same rows are harmless.
  let purging: Promise<number> | null = null;
  const purge = (): Promise<number> => {
    if (deps.retentionMs === undefined) return Promise.resolve(0);
    const retentionMs = deps.retentionMs;
    purging ??= purgeDeliveries(deps.pool, retentionMs, { failedOlderThanMs: deps.failedRetentionMs })
      .then((deleted) => {
        if (deleted > 0) {
          deps.metrics?.deliveries.inc({ outcome: 'purged' }, deleted);
          log.info({ deleted, olderThan: new Date(Date.now() - retentionMs).toISOString() }, 'purged old deliveries from the inbox');
        }
        return deleted;
      })
      .finally(() => {
        purging = null;
      });
    return purging;
  };
  const purgeEveryMs = deps.purgeEveryMs ?? 600_000;
  const purger =
    worker && deps.retentionMs !== undefined
      ? repeat(purge, {
          firstDelayMs: Math.min(60_000, purgeEveryMs),
          nextDelayMs: () => purgeEveryMs,
          onError: (error) => log.warn({ err: error }, 'purging old deliveries failed; trying again later'),
        })
      : null;

  // The receiver answers a whole inbox batch at once; its ids are added together, one round trip.
  let waiting: Array<{ id: string; resolve: () => void; reject: (error: unknown) => void }> = [];
  const adding = new Set<Promise<void>>();
  const flushAdds = () => {
    const batch = waiting;
    waiting = [];
    const added: Promise<void> = addAll(batch.map((w) => w.id))
      .then(
        () => batch.forEach((w) => w.resolve()),
        (error: unknown) => batch.forEach((w) => w.reject(error)),
      )
      .finally(() => adding.delete(added));
    adding.add(added);
  };

  return {
    queue,
    worker,
    enqueue(id) {
      return new Promise<void>((resolve, reject) => {
        deliveryJobId(id); // validates before queueing (a throw here rejects)
        if (waiting.push({ id, resolve, reject }) === 1) setImmediate(flushAdds);
      });
    },
    enqueueDeliveries: addAll,
    sweep,
    purge,
    async close(timeoutMs) {
      sweeper?.stop();
      purger?.stop();
      await sweeping?.catch(() => 0);
      await purging?.catch(() => 0);
      if (waiting.length > 0) flushAdds();
      await Promise.allSettled([...adding]);
      if (worker) {
        // worker.close() waits for active jobs forever (docs/architecture.md, "Traps we work around"): race it.
        const closing = worker.close();
        const deadline = new Promise<'timeout'>((resolve) => setTimeout(() => resolve('timeout'), timeoutMs).unref());
        if ((await Promise.race([closing.then(() => 'closed' as const), deadline])) === 'timeout') {
          log.warn({ timeoutMs }, 'events worker did not stop in time; closing forcefully');
          await worker.close(true);
        }
      }
      await queue.close();
    },
  };
}

/**
 * One stored delivery applied on its own (the consumer's batches, `apply-batch.ts`, fall back to it
 * when a whole batch transaction fails). Contract of one apply (`applyDelivery`), all in ONE transaction:
 * - `select … for update` the row; anything but `pending` is skipped, so applying one delivery twice
 *   concurrently (a batch of another replica, a replay) is harmless: the second waits for the
 *   first's commit, then sees `applied`.
 * - parse the stored body (`parseDelivery`), plan every event's effects (`apply.ts`), hand them to
 *   the store, mark the row `applied` (`applied_at`, `attempts + 1`), commit.
 * A failure rolls all of it back, then the row records the attempt and the error
 * (`recordFailedAttempt`, the one retry rule): transient errors (database, deadlock, anything
 * unexpected) leave it `pending`, due again after an exponential backoff; a permanent one (the body
 * cannot be mirrored) or the last try marks it `failed`.
 * Failed rows stay failed until `replayDeliveries` (invariant 9: nothing is applied behind the
 * operator's back). Rows `ignored` (no known kind) are not applied either. Unknown kinds inside a
 * mixed batch are skipped; their note stays in `error`.
 *
 * A `subscriber.updated` is four round trips to Postgres (begin + lock, subscriber upsert, activity
 * row, mark + commit) and commits without waiting for its WAL flush (see ASYNC_COMMIT_SQL); a batch
 * adds one statement per kind of row, not per event.
 */
import type pg from 'pg';
import type { DeliveryStatus } from '../db/schema.js';
import { NormalizeError } from '../mirror/normalize.js';
import { forgottenAmongSql } from '../mirror/erasure.js';
import { eraseActivityLinks } from '../mirror/store/activity.js';
import { rollbackOrBroken } from '../mirror/store/index.js';
import { applyPlan, planDelivery, type ApplyCounts, type EffectPlan } from './apply.js';
import {
  DEFAULT_RETRY,
  deliveryStatus,
  finishDeliverySql,
  lockDeliverySql,
  recordFailedAttempt,
  type LockedDelivery,
  type RetryPolicy,
} from './inbox/lifecycle.js';
import { deliveryKinds, parseDelivery, PayloadError } from './payloads.js';
import { redactDelivery } from './redact.js';

const DIGITS = /^\d+$/;

export function assertDeliveryId(id: string): void {
  if (typeof id !== 'string' || !DIGITS.test(id)) throw new TypeError(`delivery id must be a string of digits, got ${String(id)}`);
}

export type ApplyResult =
  | { outcome: 'applied'; events: number; counts: ApplyCounts; /** applied_at − received_at */ lagMs: number }
  /** Not applied: the row is missing or no longer pending (applied, failed, ignored). */
  | { outcome: 'skipped'; status: DeliveryStatus | 'missing' }
  /** No known kind after re-parsing (a replayed row whose kinds are still unknown): back to `ignored`. */
  | { outcome: 'ignored' }
  /** Rolled back and marked `failed` (permanent error, or the last attempt). */
  | { outcome: 'failed'; error: string; attempts: number }
  /** Rolled back; still `pending`, due again in `retryInMs`. */
  | { outcome: 'retry'; error: string; attempts: number; retryInMs: number };

export interface ApplyOptions {
  /** Tries and backoff (the row counts its tries: the last one marks it `failed`). */
  retry?: RetryPolicy;
}

/*
 * The apply commits without waiting for its WAL flush (~5 ms per commit on this kind of disk, the
 * largest cost of an apply). Safe: the delivery is already durable in the inbox (invariant 1), and
 * the `applied` mark commits atomically with the effects, so a crash that loses the last few hundred
 * ms of applies leaves those rows `pending`, and the sweeper applies them again (idempotent,
 * invariant 5). The inbox write itself stays synchronous.
 */
export const ASYNC_COMMIT_SQL = 'set local synchronous_commit = off';

/*
 * The apply runs the store's statements as named prepared statements (`keepingPlans` in
 * `applyPlan`), but Postgres would keep planning its subscriber upsert afresh on every run
 * (plan_cache_mode auto picks custom plans for it): half of its cost for a delivery's few rows
 * (measured: ~365 → ~180 µs of Postgres CPU). A generic plan is as good for these small `unnest`
 * batches. Local to the apply's transaction; a pass's pages are planned on every run.
 */
export const GENERIC_PLANS_SQL = 'set local plan_cache_mode = force_generic_plan';

export const MAX_ERROR_CHARS = 2_000;

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
    const marked = await recordFailedAttempt(pool, id, message, permanent, options.retry ?? DEFAULT_RETRY);
    // No longer pending: another apply finished it while ours failed before taking the lock.
    if (!marked) return { outcome: 'skipped', status: await deliveryStatus(pool, id) };
    return failedOutcome(message, marked);
  }
}

/**
 * The transaction of one apply, on its own pooled connection (like `withTransaction` in the store),
 * in as few round trips as possible: on a busy machine each one waits for Postgres to be scheduled,
 * and writing to its socket is the largest CPU cost of the consumer (measured). So begin, the
 * transaction's settings and the row lock go as one simple query, and so do the final mark and the commit;
 * in between, the store's statements (one per kind of row).
 */
async function applyInTransaction(pool: pg.Pool, id: string): Promise<ApplyResult> {
  const client = await pool.connect();
  let open = false;
  let broken = false;
  try {
    open = true;
    const opened = (await client.query(
      `begin; ${ASYNC_COMMIT_SQL}; ${GENERIC_PLANS_SQL}; ${lockDeliverySql(id)}`,
    )) as unknown as pg.QueryResult<LockedDelivery>[];
    const row = opened[3]?.rows[0];
    if (!row || row.status !== 'pending') {
      await client.query('rollback');
      open = false;
      return { outcome: 'skipped', status: row?.status ?? 'missing' };
    }
    const result = await applyLocked(client, id, row);
    open = false; // applyLocked committed
    return result;
  } catch (error) {
    if (open) broken = await rollbackOrBroken(client);
    throw error;
  } finally {
    client.release(broken);
  }
}

/** Applies a locked pending row and commits (the mark and the commit are one query). */
async function applyLocked(client: pg.PoolClient, id: string, row: LockedDelivery): Promise<ApplyResult> {
  const parsed = parseDelivery(row.body);
  const kinds = deliveryKinds(parsed);
  const note = parsed.unknownKinds.length > 0 ? `unknown event kind(s): ${parsed.unknownKinds.join(', ')}` : null;
  if (parsed.events.length === 0) {
    await client.query(finishDeliverySql(client, id, 'ignored', note, kinds, 0));
    return { outcome: 'ignored' };
  }
  const plan = planDelivery(parsed.events, id, row.receivedAt);
  const counts = await applyPlan(client, plan);
  const literal = (text: string) => client.escapeLiteral(text);
  const finished = (await client.query(
    finishDeliverySql(client, id, 'applied', note, kinds, parsed.events.length, forgottenAmongSql(literal, subscribersOf(plan))),
  )) as unknown as [pg.QueryResult<{ lagMs: number }>, pg.QueryResult<{ forgotten: string[] }>];
  await redactForgotten(client, id, finished[1]?.rows[0]?.forgotten ?? []);
  return { outcome: 'applied', events: parsed.events.length, counts, lagMs: finished[0]?.rows[0]?.lagMs ?? 0 };
}

/** What a recorded failed try means for its caller. */
export function failedOutcome(message: string, marked: { attempts: number; status: string; retryInMs: number }): ApplyResult {
  return marked.status === 'failed'
    ? { outcome: 'failed', error: message, attempts: marked.attempts }
    : { outcome: 'retry', error: message, attempts: marked.attempts, retryInMs: Math.max(0, marked.retryInMs) };
}

/** The subscriber ids a plan touches (its versions and its activity rows). */
export function subscribersOf(plan: EffectPlan): string[] {
  const ids = new Set(plan.subscribers.map((r) => r.values.id));
  for (const a of plan.activity) if (a.subscriberId) ids.add(a.subscriberId);
  return [...ids];
}

/**
 * A delivery that carries a forgotten subscriber (one that arrives after the forget, or the forget
 * itself) is redacted as soon as it is applied, with the links of the subscriber's activity: no
 * copy waits for the next erasure run. Right after the commit; a crash or an error in between
 * leaves it to the run's re-check (`src/webhooks/erasure-run.ts`).
 */
export async function redactForgotten(client: pg.PoolClient, id: string, forgotten: readonly string[]): Promise<void> {
  if (forgotten.length === 0) return;
  try {
    await redactDelivery(client, id, forgotten);
    await eraseActivityLinks(client, forgotten);
  } catch {
    // The delivery is applied and committed: the next erasure run redacts what is left.
  }
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
export function describeError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const code = (error as { code?: unknown }).code;
  return `${error.name}: ${error.message}${typeof code === 'string' && !error.message.includes(code) ? ` (${code})` : ''}`;
}

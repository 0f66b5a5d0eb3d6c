/**
 * The consumer's two timers: the sweeper, which hands pending rows to the queue when their own
 * enqueue was lost (a crash between store and enqueue, Redis down, a job given up on), and the purge,
 * which deletes deliveries past their retention.
 */
import type { Queue } from 'bullmq';
import type { Logger } from '../ground/log.js';
import type { Metrics } from '../ground/metrics.js';
import type { Queryable } from '../ground/queryable.js';
import { repeat, type RepeatOptions } from '../ground/repeat.js';
import { pendingDeliveries, purgeDeliveries, type PendingCursor } from './inbox/lifecycle.js';

export interface SweeperOptions {
  pool: Queryable;
  queue: Queue;
  /** Adds these ids to the queue (idempotent while their jobs exist). */
  add(ids: readonly string[]): Promise<void>;
  logger: Logger;
  /** Run on a timer (the worker role); false: `sweep()` only when called. */
  timer: boolean;
  /** Sweep interval (0 disables the timer). */
  everyMs: number;
  /** Pending rows younger than this are left to their own enqueue. */
  graceMs: number;
  /** Rows one sweep reads at most; a full sweep schedules the next one at once. */
  batch: number;
  /** Nothing is added while this many jobs are already waiting or delayed. */
  maxQueued: number;
}

export interface Timer<T> {
  /** Runs now, or joins the run in progress. */
  run(): Promise<T>;
  /** Stops the timer and waits for a run in progress (its error ignored). */
  stop(): Promise<void>;
}

/**
 * The sweeper: a keyset cursor walks the pending rows across sweeps, so rows waiting in backoff
 * (their jobs exist; re-adding is a no-op) cannot hide the ones behind them. Runs once at start
 * (rows a crash left pending), then every `everyMs`; sooner while a full sweep leaves more behind.
 */
export function createSweeper(o: SweeperOptions): Timer<number> {
  let cursor: PendingCursor | null = null;

  const sweepOnce = async (): Promise<number> => {
    // Bounded: a backlog in Postgres (after an outage) must not all move into Redis at once.
    const counts = await o.queue.getJobCounts('waiting', 'delayed', 'prioritized');
    const room = o.maxQueued - ((counts.waiting ?? 0) + (counts.delayed ?? 0) + (counts.prioritized ?? 0));
    if (room <= 0) return 0;
    const limit = Math.min(room, o.batch);
    const rows = await pendingDeliveries(o.pool, o.graceMs, cursor, limit);
    await o.add(rows.map((r) => r.id));
    const last = rows.at(-1);
    cursor = rows.length === limit && last ? { receivedAt: last.receivedAt, id: last.id } : null;
    if (rows.length > 0) o.logger.info({ enqueued: rows.length, more: cursor !== null }, 'swept pending deliveries');
    return rows.length;
  };

  return joinedTimer(sweepOnce, o.timer && o.everyMs > 0, {
    firstDelayMs: 0,
    nextDelayMs: (failed) => (!failed && cursor ? Math.min(1_000, o.everyMs) : o.everyMs),
    onError: (error) => o.logger.warn({ err: error }, 'sweeping pending deliveries failed'),
  });
}

export interface PurgerOptions {
  pool: Queryable;
  logger: Logger;
  metrics?: Metrics;
  /** Run on a timer (the worker role); false: `purge()` only when called. */
  timer: boolean;
  /** Applied and ignored deliveries older than this are deleted; unset: nothing is (and no timer). */
  retentionMs?: number;
  /** Failed and pending deliveries older than this are deleted too; unset keeps them. */
  failedRetentionMs?: number;
  /** Purge interval; the first purge comes a minute after start at most. */
  everyMs: number;
}

/** Retention: every replica may purge; concurrent deletes of the same rows are harmless. */
export function createPurger(o: PurgerOptions): Timer<number> {
  const retentionMs = o.retentionMs;
  if (retentionMs === undefined) return { run: () => Promise.resolve(0), stop: () => Promise.resolve() };
  const purgeOnce = async (): Promise<number> => {
    const deleted = await purgeDeliveries(o.pool, retentionMs, { failedOlderThanMs: o.failedRetentionMs });
    if (deleted > 0) {
      o.metrics?.deliveries.inc({ outcome: 'purged' }, deleted);
      o.logger.info({ deleted, olderThan: new Date(Date.now() - retentionMs).toISOString() }, 'purged old deliveries from the inbox');
    }
    return deleted;
  };
  return joinedTimer(purgeOnce, o.timer, {
    firstDelayMs: Math.min(60_000, o.everyMs),
    nextDelayMs: () => o.everyMs,
    onError: (error) => o.logger.warn({ err: error }, 'purging old deliveries failed; trying again later'),
  });
}

/** `task` run at most once at a time (a call during a run joins it), on a `repeat` timer when `timed`. */
function joinedTimer(task: () => Promise<number>, timed: boolean, schedule: RepeatOptions): Timer<number> {
  let running: Promise<number> | null = null;
  const run = (): Promise<number> => {
    running ??= task().finally(() => {
      running = null;
    });
    return running;
  };
  const timer = timed ? repeat(run, schedule) : null;
  return {
    run,
    async stop() {
      timer?.stop();
      await running?.catch(() => 0);
    },
  };
}

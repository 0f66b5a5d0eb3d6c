/**
 * The consumer's retention timer: the purge, which deletes deliveries past their retention.
 */
import type { Logger } from '../ground/log.js';
import type { Metrics } from '../ground/metrics.js';
import type { Queryable } from '../ground/queryable.js';
import { repeat, type RepeatOptions } from '../ground/repeat.js';
import { purgeDeliveries } from './inbox/lifecycle.js';

export interface Timer<T> {
  /** Runs now, or joins the run in progress. */
  run(): Promise<T>;
  /** Stops the timer and waits for a run in progress (its error ignored). */
  stop(): Promise<void>;
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

/**
 * Retention: every replica may purge; concurrent deletes of the same rows are harmless. The purge
 * is deployment-wide (one retention for every account): it goes over every account whatever the
 * pool's, so with one consumer per account only one of them needs `retentionMs`.
 */
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

/**
 * The consumer (docs/architecture.md, "Webhook path"): applies stored deliveries (`webhook_deliveries` rows in status
 * `pending`) to the mirror, one transaction per delivery, through BullMQ queue "events".
 *
 *   receiver ─onStored(id)─► enqueue ─► queue "events" (job `delivery-<id>`) ─► worker ─► applyDelivery
 *                                         ▲
 *   sweeper (at start, then every 30 s) ──┘ pending rows older than a few seconds (crash between
 *                                           store and enqueue, Redis down, a job given up on)
 *
 * One apply is `apply-job.ts`; failed rows stay failed until `replay.ts` brings them back, and the
 * sweeper (`sweeper.ts`) never re-enqueues them. This module is the queue and the worker around them.
 *
 * Throughput: the queue holds ids only, and the ids the receiver hands over in one tick are added in
 * one round trip.
 */
import { Queue, Worker, type ConnectionOptions, type Job, type JobsOptions } from 'bullmq';
import type pg from 'pg';
import type { Logger } from '../ground/log.js';
import type { Metrics } from '../ground/metrics.js';
import { applyDelivery, assertDeliveryId, type ApplyResult } from './apply-job.js';
import { createPurger, createSweeper } from './sweeper.js';

export const EVENTS_QUEUE = 'events';

export interface DeliveryJobData {
  /** `webhook_deliveries.id`. */
  deliveryId: string;
}

/** BullMQ job ids must not be all digits nor contain ':' (docs/architecture.md, "Traps we work around"). */
export function deliveryJobId(id: string): string {
  assertDeliveryId(id);
  return `delivery-${id}`;
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

const ADD_CHUNK = 500;

export function createDeliveryConsumer(deps: DeliveryConsumerDeps): DeliveryConsumer {
  const log = deps.logger.child({ component: 'webhook-consumer' });
  const jobOptions = deliveryJobOptions({ ...DEFAULT_RETRY, ...deps.retry });
  const queue = new Queue<DeliveryJobData>(EVENTS_QUEUE, {
    connection: deps.queueConnection ?? deps.connection,
    prefix: deps.prefix,
    defaultJobOptions: jobOptions,
  });
  queue.on('error', (error) => log.warn({ err: error }, 'events queue error'));

  const addAll = async (ids: readonly string[]) => {
    for (let i = 0; i < ids.length; i += ADD_CHUNK) {
      await queue.addBulk(
        ids
          .slice(i, i + ADD_CHUNK)
          .map((id) => ({ name: 'apply', data: { deliveryId: id }, opts: { ...jobOptions, jobId: deliveryJobId(id) } })),
      );
    }
  };

  const worker = deps.work === false ? null : startWorker(deps, log);
  const sweeper = createSweeper({
    pool: deps.pool,
    queue,
    add: addAll,
    logger: log,
    timer: worker !== null,
    everyMs: deps.sweepEveryMs ?? 30_000,
    graceMs: deps.pendingGraceMs ?? 5_000,
    batch: Math.max(1, deps.sweepBatch ?? 5_000),
    maxQueued: Math.max(1, deps.maxQueued ?? 20_000),
  });
  const purger = createPurger({
    pool: deps.pool,
    logger: log,
    metrics: deps.metrics,
    timer: worker !== null,
    retentionMs: deps.retentionMs,
    failedRetentionMs: deps.failedRetentionMs,
    everyMs: deps.purgeEveryMs ?? 600_000,
  });
  const adds = batchedAdds(addAll);

  return {
    queue,
    worker,
    enqueue: adds.enqueue.bind(adds),
    enqueueDeliveries: addAll,
    sweep: sweeper.run.bind(sweeper),
    purge: purger.run.bind(purger),
    async close(timeoutMs) {
      await Promise.all([sweeper.stop(), purger.stop()]);
      await adds.settle();
      if (worker) await closeWorker(worker, timeoutMs, log);
      await queue.close();
    },
  };
}

function startWorker(deps: DeliveryConsumerDeps, log: Logger): Worker<DeliveryJobData> {
  const worker = new Worker<DeliveryJobData>(EVENTS_QUEUE, (job) => processJob(deps, log, job), {
    connection: deps.connection,
    prefix: deps.prefix,
    concurrency: deps.concurrency ?? 4,
    autorun: true,
  });
  worker.on('error', (error) => log.warn({ err: error }, 'events worker error'));
  return worker;
}

/** One job: apply, count, and throw on a transient failure so that BullMQ retries with backoff. */
async function processJob(deps: DeliveryConsumerDeps, log: Logger, job: Job<DeliveryJobData>): Promise<ApplyResult> {
  const id = job.data.deliveryId;
  const finalAttempt = job.attemptsMade + 1 >= (job.opts.attempts ?? 1);
  const result = await applyDelivery(deps.pool, id, { finalAttempt });
  const metrics = deps.metrics;
  switch (result.outcome) {
    case 'applied':
      metrics?.deliveries.inc({ outcome: 'applied' });
      metrics?.deliveryLag.observe(result.lagMs / 1000);
      metrics?.rowsWritten.inc({ via: 'webhook', result: 'inserted' }, result.counts.subscribers.inserted);
      metrics?.rowsWritten.inc({ via: 'webhook', result: 'updated' }, result.counts.subscribers.updated);
      metrics?.rowsWritten.inc({ via: 'webhook', result: 'unchanged' }, result.counts.subscribers.unchanged);
      metrics?.rowsWritten.inc({ via: 'webhook', result: 'skipped' }, result.counts.subscribers.skipped);
      return result;
    case 'retry':
      log.warn({ deliveryId: id, attempts: result.attempts, error: result.error }, 'applying a delivery failed; will retry');
      throw new Error(result.error);
    case 'failed':
      metrics?.deliveries.inc({ outcome: 'failed' });
      log.error({ deliveryId: id, attempts: result.attempts, error: result.error }, 'delivery marked failed; replay it once fixed');
      return result;
    case 'ignored':
      metrics?.deliveries.inc({ outcome: 'ignored' });
      return result;
    case 'skipped':
      return result;
  }
}

/** The receiver answers a whole inbox batch at once; the ids enqueued in one tick are added together, one round trip. */
function batchedAdds(addAll: (ids: readonly string[]) => Promise<void>) {
  let waiting: Array<{ id: string; resolve: () => void; reject: (error: unknown) => void }> = [];
  const adding = new Set<Promise<void>>();
  const flush = () => {
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
    enqueue(id: string): Promise<void> {
      return new Promise<void>((resolve, reject) => {
        deliveryJobId(id); // validates before queueing (a throw here rejects)
        if (waiting.push({ id, resolve, reject }) === 1) setImmediate(flush);
      });
    },
    /** Sends what is waiting and waits for every add in flight (their errors go to their callers). */
    async settle(): Promise<void> {
      if (waiting.length > 0) flush();
      await Promise.allSettled([...adding]);
    },
  };
}

async function closeWorker(worker: Worker<DeliveryJobData>, timeoutMs: number, log: Logger): Promise<void> {
  // worker.close() waits for active jobs forever (docs/architecture.md, "Traps we work around"): race it.
  const closing = worker.close();
  const deadline = new Promise<'timeout'>((resolve) => setTimeout(() => resolve('timeout'), timeoutMs).unref());
  if ((await Promise.race([closing.then(() => 'closed' as const), deadline])) === 'timeout') {
    log.warn({ timeoutMs }, 'events worker did not stop in time; closing forcefully');
    await worker.close(true);
  }
}

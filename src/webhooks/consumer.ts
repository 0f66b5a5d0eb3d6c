/**
 * The consumer (docs/architecture.md, "Webhook path"): applies stored deliveries (`webhook_deliveries`
 * rows in status `pending`) to the mirror, a batch per transaction (`apply-batch.ts`), straight from
 * the inbox: no queue between the receiver and the worker, so the receiver needs no Redis.
 *
 *   receiver ─INSERT─► inbox ─trigger: NOTIFY subscriber_mirror_inbox (at commit)─► LISTEN ─► wake
 *   timer: each failed try's backoff, and every `pollEveryMs` (a notification lost with the
 *   listening connection) ──────────────────────────────────────────────────────────────────► wake
 *   wake ─► batch loop: claim due rows (FOR UPDATE SKIP LOCKED) ─► apply ─► commit ─► again while full
 *
 * One loop runs while deliveries come in; a full batch (a backlog) starts another, up to
 * `concurrency`. Replicas claim disjoint rows. Failed rows stay failed until `replay.ts` brings them
 * back (the update that makes them pending notifies too). Why no BullMQ queue any more: a job per
 * delivery cost a Redis round trip to add, one to fetch and one to complete, and the worker's
 * transaction per delivery; claimed from the inbox in batches, a delivery costs a share of one
 * transaction (docs/benchmarks.md, "freshness").
 */
import type pg from 'pg';
import type { Logger } from '../ground/log.js';
import type { Metrics } from '../ground/metrics.js';
import { repeat, type Repeating } from '../ground/repeat.js';
import { sleep } from '../ground/wait.js';
import { applyBatch, type BatchResult } from './apply-batch.js';
import { accountsWithDueDeliveries, DEFAULT_RETRY, type RetryPolicy } from './inbox/lifecycle.js';
import { createPurger } from './purger.js';

/** The channel the inbox's triggers notify (drizzle/0028_inbox_notify.sql). */
export const INBOX_CHANNEL = 'subscriber_mirror_inbox';

/** How often the safety net claims without a notification, by default. */
export const POLL_EVERY_MS = 10_000;

export interface DeliveryConsumerDeps {
  pool: pg.Pool;
  logger: Logger;
  metrics?: Metrics;
  /** Batches applied at once at most (default 2; each holds one pooled connection while it runs). */
  concurrency?: number;
  /** Deliveries claimed per batch at most (default 200). */
  batchSize?: number;
  /**
   * A loop claims at most once per this period while batches come back short (default 40 ms): at a
   * steady rate, deliveries gather into fewer, larger batches, for at most this much latency (the
   * first claim after a quiet spell is at once, and a full batch claims again at once). A batch
   * costs about 1.6 ms of Postgres CPU whatever its size (its claim, the history trigger, the mark
   * and the commit): measured at 500/s, Postgres CPU per delivery 670, 550 and 460 µs with 10, 25
   * and 40 ms, delivery → row p50 14, 14 and 25 ms, p99 far under 250 ms.
   */
  gatherMs?: number;
  /**
   * LISTEN for the inbox's notifications (default true; false: only the poll, `wake` and `drain`
   * claim, as when one {@link listenForInbox} of the process wakes every account's consumer).
   */
  listen?: boolean;
  /**
   * The safety net: claim what is due this often even without a notification (default 10 s; 0:
   * never, as when one {@link listenForInbox} of the process polls for every account).
   */
  pollEveryMs?: number;
  /** Applied and ignored deliveries of every account older than this are deleted (WEBHOOK_RETENTION); unset keeps them. */
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
  /** Resolves once the consumer listens for notifications (its first claim is under way then too). */
  readonly listening: Promise<void>;
  /** Claims what is due now (as a notification would). */
  wake(): void;
  /** Applies batches until nothing is due; returns how many deliveries they took (tests, replay). */
  drain(): Promise<number>;
  /** Deletes deliveries past the retention now; returns how many (0 without `retentionMs`). */
  purge(): Promise<number>;
  /** Stops listening and the timers, waits at most `timeoutMs` for running batches. */
  close(timeoutMs: number): Promise<void>;
}

export function createDeliveryConsumer(deps: DeliveryConsumerDeps): DeliveryConsumer {
  const log = deps.logger.child({ component: 'webhook-consumer' });
  const retry: RetryPolicy = { ...DEFAULT_RETRY, ...deps.retry };
  const limit = Math.max(1, deps.batchSize ?? 200);
  const runBatch = async (): Promise<BatchResult> => {
    const result = await applyBatch(deps.pool, { limit, retry });
    report(result, deps.metrics, log);
    return result;
  };
  const loops = createBatchLoops(runBatch, {
    concurrency: Math.max(1, deps.concurrency ?? 2),
    gatherMs: Math.max(0, deps.gatherMs ?? 40),
    log,
  });
  const listener = deps.listen === false ? null : listenForDeliveries(deps.pool, () => loops.wake(), log, 'pool');
  const pollEveryMs = deps.pollEveryMs ?? POLL_EVERY_MS;
  const safetyNet: Repeating | null =
    pollEveryMs > 0
      ? repeat(async () => loops.wake(), {
          firstDelayMs: pollEveryMs,
          nextDelayMs: () => pollEveryMs,
          onError: () => {},
        })
      : null;
  const purger = createPurger({
    pool: deps.pool,
    logger: log,
    metrics: deps.metrics,
    timer: true,
    retentionMs: deps.retentionMs,
    failedRetentionMs: deps.failedRetentionMs,
    everyMs: deps.purgeEveryMs ?? 600_000,
  });

  return {
    listening: listener?.ready ?? Promise.resolve(),
    wake: loops.wake,
    async drain() {
      let total = 0;
      for (;;) {
        const { claimed } = await runBatch();
        total += claimed;
        if (claimed === 0) return total;
      }
    },
    purge: purger.run.bind(purger),
    async close(timeoutMs) {
      safetyNet?.stop();
      await listener?.stop();
      await Promise.all([purger.stop(), loops.stop(timeoutMs)]);
    },
  };
}

interface LoopOptions {
  concurrency: number;
  gatherMs: number;
  log: Logger;
}

/** After a batch that could not even reach the database, the next claim waits this long. */
const UNREACHABLE_RETRY_MS = 2_000;

/**
 * The batch loops: `wake` starts one when none runs (else the running one goes round once more); a
 * full batch starts another, up to `concurrency`; a loop ends when its claim came back short and no
 * wake came meanwhile. Rows that failed a try are due after their backoff: a timer wakes the loops then.
 */
function createBatchLoops(runBatch: () => Promise<BatchResult>, o: LoopOptions) {
  let requested = false;
  let closing = false;
  let retryTimer: { at: number; timer: NodeJS.Timeout } | null = null;
  const running = new Set<Promise<void>>();

  const wakeIn = (ms: number) => {
    const at = Date.now() + ms;
    if (closing || (retryTimer && retryTimer.at <= at)) return;
    if (retryTimer) clearTimeout(retryTimer.timer);
    const timer = setTimeout(() => {
      retryTimer = null;
      wake();
    }, ms);
    timer.unref();
    retryTimer = { at, timer };
  };

  const loop = async () => {
    while (!closing && requested) {
      requested = false;
      const started = performance.now();
      let result: BatchResult;
      try {
        result = await runBatch();
      } catch (error) {
        o.log.warn({ err: error }, 'claiming stored deliveries failed; trying again shortly');
        wakeIn(UNREACHABLE_RETRY_MS);
        return;
      }
      const retryIn = result.results.reduce((min, r) => (r.result.outcome === 'retry' ? Math.min(min, r.result.retryInMs) : min), Infinity);
      if (retryIn !== Infinity) wakeIn(retryIn);
      if (result.full) {
        requested = true;
        if (running.size < o.concurrency) spawn();
      } else if (requested) {
        await sleep(o.gatherMs - (performance.now() - started));
      }
    }
  };

  const spawn = () => {
    const run: Promise<void> = loop().finally(() => running.delete(run));
    running.add(run);
  };

  const wake = () => {
    if (closing) return;
    requested = true;
    if (running.size === 0) spawn();
  };

  return {
    wake,
    async stop(timeoutMs: number) {
      closing = true;
      if (retryTimer) clearTimeout(retryTimer.timer);
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, timeoutMs);
        timer.unref();
      });
      // A batch left running past the deadline commits or rolls back on its own; its rows stay pending if not.
      await Promise.race([Promise.allSettled([...running]), deadline]);
      clearTimeout(timer);
    },
  };
}

/** How long a lost listening connection waits before it connects again (then claims what is due). */
const RELISTEN_MS = 1_000;

/** A held LISTEN: `ready` once it listens (its first wake made), `stop` to let the connection go. */
export interface InboxListener {
  ready: Promise<void>;
  stop(): Promise<void>;
}

/** The safety net of a process's one listener: the accounts it polls for, and how often. */
export interface InboxPoll {
  accounts: readonly string[];
  /** Default {@link POLL_EVERY_MS}. */
  everyMs?: number;
}

/**
 * LISTEN on one connection of `pool` (serving any account or none), held until stopped, for every
 * account's deliveries: `notified` gets the account of each notification (its payload), and null at
 * every (re)connection, since notifications sent while nobody listened are gone. A worker serving
 * several accounts listens once for all of them and wakes the consumer of each (whose own `listen`
 * is false), so that it holds one listening connection, not one per account.
 *
 * With `poll`, it is their safety net too (each consumer's own poll is then off): every `everyMs`,
 * one statement on `pool` names the accounts with deliveries due, and `notified` gets each of them.
 * A consumer's own poll claimed on its account's pool every 10 s, as often as node-postgres closes
 * an idle connection, so every account held a connection for ever (20 accounts, 20 idle sessions
 * per worker replica); now an account's pool holds none between its passes and deliveries.
 */
export function listenForInbox(pool: pg.Pool, notified: (account: string | null) => void, log: Logger, poll?: InboxPoll): InboxListener {
  const listener = listenForDeliveries(pool, notified, log, 'every');
  const safetyNet = poll ? pollForDue(pool, poll, notified, log) : null;
  return {
    ready: listener.ready,
    async stop() {
      safetyNet?.stop();
      await listener.stop();
    },
  };
}

function pollForDue(pool: pg.Pool, poll: InboxPoll, notified: (account: string) => void, log: Logger): Repeating {
  const everyMs = poll.everyMs ?? POLL_EVERY_MS;
  return repeat(
    async () => {
      for (const account of await accountsWithDueDeliveries(pool, poll.accounts)) notified(account);
    },
    {
      firstDelayMs: everyMs,
      nextDelayMs: () => everyMs,
      onError: (error) => log.debug({ err: error }, 'the safety-net poll for deliveries failed; trying again at the next'),
    },
  );
}

/**
 * LISTEN on one pooled connection, held for the consumer's life (`scope` pool: only notifications of
 * the pool's account wake it) or the listener's (`every`: every account's). Every (re)connection
 * wakes too, with null.
 */
function listenForDeliveries(pool: pg.Pool, wake: (account: string | null) => void, log: Logger, scope: 'pool' | 'every'): InboxListener {
  let client: pg.PoolClient | null = null;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;

  const lost = (lostClient: pg.PoolClient, error: unknown) => {
    if (client !== lostClient) return;
    client = null;
    lostClient.release(true);
    if (stopped) return;
    log.warn({ err: error }, 'lost the connection listening for deliveries; listening again shortly');
    timer = setTimeout(() => void connect(), RELISTEN_MS);
    timer.unref();
  };

  const connect = async (): Promise<void> => {
    while (!stopped) {
      let next: pg.PoolClient | null = null;
      try {
        next = await pool.connect();
        const held = next;
        held.on('error', (error) => lost(held, error));
        // Every account's inbox notifies one channel with its account as payload (migration 0029); a
        // consumer claims only its pool's account, so another account's deliveries wake nobody there.
        const account =
          scope === 'pool' ? (await held.query<{ account: string }>('select mirror_account() as account')).rows[0]?.account : null;
        held.on('notification', (message) => {
          const payload = message.payload ?? null;
          if (scope === 'every' || payload === account) wake(payload);
        });
        await held.query(`listen ${INBOX_CHANNEL}`);
        if (stopped) {
          held.release();
          return;
        }
        client = held;
        wake(null);
        return;
      } catch (error) {
        next?.release(true);
        log.warn({ err: error }, 'cannot listen for deliveries yet; the safety-net poll claims them meanwhile');
        await new Promise((resolve) => {
          timer = setTimeout(resolve, RELISTEN_MS);
          timer.unref();
        });
      }
    }
  };

  const ready = connect();
  return {
    ready,
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await ready;
      const held = client;
      client = null;
      if (held) {
        await held.query(`unlisten ${INBOX_CHANNEL}`).catch(() => undefined);
        held.release();
      }
    },
  };
}

/** Metrics and log lines of one batch. */
function report(batch: BatchResult, metrics: Metrics | undefined, log: Logger): void {
  if (batch.fellBack) log.warn({ claimed: batch.claimed }, 'a batch of deliveries failed as a whole; applied them one by one');
  const counts = batch.counts.subscribers;
  metrics?.rowsWritten.inc({ via: 'webhook', result: 'inserted' }, counts.inserted);
  metrics?.rowsWritten.inc({ via: 'webhook', result: 'updated' }, counts.updated);
  metrics?.rowsWritten.inc({ via: 'webhook', result: 'unchanged' }, counts.unchanged);
  metrics?.rowsWritten.inc({ via: 'webhook', result: 'skipped' }, counts.skipped);
  for (const { id, result } of batch.results) {
    switch (result.outcome) {
      case 'applied':
        metrics?.deliveries.inc({ outcome: 'applied' });
        metrics?.deliveryLag.observe(result.lagMs / 1000);
        break;
      case 'retry':
        log.warn({ deliveryId: id, attempts: result.attempts, error: result.error }, 'applying a delivery failed; will retry');
        break;
      case 'failed':
        metrics?.deliveries.inc({ outcome: 'failed' });
        log.error({ deliveryId: id, attempts: result.attempts, error: result.error }, 'delivery marked failed; replay it once fixed');
        break;
      case 'ignored':
        metrics?.deliveries.inc({ outcome: 'ignored' });
        break;
      case 'skipped':
        break;
    }
  }
}

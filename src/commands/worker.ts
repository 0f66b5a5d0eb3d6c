/**
 * The worker role's parts (docs/architecture.md, "Several accounts in one worker"): every declared
 * account runs here with its own pool (on the process's connections), consumer, queue and erasure
 * chores; the poll path (limiter, read source, schedules, sync worker, audit, field refresh) of each
 * account that reads runs on the replicas that read it (`spreadReads`, "Accounts spread over
 * replicas"); and the deployment's parts run once: the accounts declared, the one listener of the
 * inbox, the history and delivery purges.
 *
 * Fair by construction: each account has its own BullMQ queue and sync worker under its own Redis
 * prefix (`accountConfig`, `accountRedisPrefix`), with the concurrency one account has always had,
 * so a long pass of one account holds only that account's slots; the replicas that read an account
 * share its queue through Redis. What accounts share in a process is bounded per page, never per
 * pass: the page gate (rooms shared between accounts by the bytes of their pages) and the event
 * loop. Their Redis connections are the process's too (`Shared`): a connection costs about 0.2 MB,
 * and four for each limiter made a worker of twenty accounts hold some 500. So are their Postgres
 * connections (`openAccountPools`): with a pool of its own for each account, twenty accounts on
 * three replicas could open some 200.
 */
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { Redis } from 'ioredis';
import type pg from 'pg';
import { accountConfig, type Config } from '../config.js';
import { declareAccounts } from '../db/accounts.js';
import { openAccountPools, openDatabase, type AccountPools, type Database } from '../db/client.js';
import type { Logger } from '../ground/log.js';
import type { Metrics } from '../ground/metrics.js';
import { repeat, type Repeating } from '../ground/repeat.js';
import { purgeHistory } from '../mirror/history.js';
import { createLimiterConnections } from '../ratelimit/connections.js';
import { isPaused, readAuthPause, type AuthPause } from '../sync/auth-pause.js';
import { accountsDeclaredApart, accountsToRead, joinReplicas, liveReplicaServes, type ReplicaSpread } from '../sync/replicas.js';
import { createPageGate, PAGES_IN_MEMORY, type SharedPageGate } from '../upstream/page-gate.js';
import { createDeliveryConsumer, listenForInbox, type InboxListener } from '../webhooks/consumer.js';
import { ERASURE_EVERY_MS, runErasure } from '../webhooks/erasure-run.js';
import { createPurger, type Timer } from '../webhooks/purger.js';
import { describeConnectionError } from './connection-error.js';
import { openSyncQueue, readsOf, startPolling, type Polling, type ProcessParts, type SyncQueue } from './polling.js';

/**
 * Connections a worker's accounts hold together at most (`openAccountPools`). When all are busy a
 * checkout waits for one: twenty accounts reading at once on one replica kept all 16 busy and were
 * mirrored as fast as with 20 shared or a pool for each account (docs/benchmarks.md, "accounts").
 * With the worker's 6 others a replica opens at most 22, so three replicas and the receiver's 20
 * fit in Postgres's default 100 slots (97 for roles that are not superusers).
 */
export const WORKER_POOL_MAX = 16;

/** The HTTP path must fail fast when Redis is down (readiness), unlike BullMQ's blocking connections. */
export function connectRedis(config: Config): Redis {
  const redis = new Redis(config.redisUrl, { maxRetriesPerRequest: 1, enableOfflineQueue: false, lazyConnect: true });
  redis.on('error', () => {});
  redis.connect().catch(() => {});
  return redis;
}

/**
 * BullMQ's client for every queue and sync worker of the process, named for `CLIENT LIST` as BullMQ
 * names the blocking ones (`<prefix>:<queue>`). Their own handlers log its errors (with the
 * account); until the first of them is created, one here keeps ioredis from printing them raw.
 */
function queueConnection(config: Config): Redis {
  const connection = new Redis(config.redisUrl, { maxRetriesPerRequest: null, connectionName: `${config.redisNamespace}:queues` });
  connection.on('error', () => {});
  return connection;
}

/** Warns at most every 30 s: while Redis is away, every reconnection attempt errors. */
function throttledWarn(log: Logger, message: string): (error: unknown) => void {
  let lastAt = 0;
  return (error) => {
    const now = Date.now();
    if (now - lastAt < 30_000) return;
    lastAt = now;
    log.warn({ err: describeConnectionError(error) }, message);
  };
}

/** One account as the worker serves it. */
export interface ServedAccount {
  /** Claims the account's due deliveries now (a notification of its inbox, a reconnection). */
  wake(): void;
  /** `accountConfig` of the account: its settings and its Redis prefix. */
  config: Config;
  /** A pool serving the account (its statements keep to it). */
  pool: pg.Pool;
  /** The key of its auth pause; null when the account reconciles nothing (webhook-only). */
  pauseKey: string | null;
  /** Its sync queue (the admin pages queue backfills to it, the gauges count it), whoever reads it. */
  syncQueue: SyncQueue;
  stop(timeoutMs: number): Promise<void>;
}

/** What the replicas' spread does with an account that reads: start or stop its poll path here. */
interface ReadingAccount {
  account: ServedAccount;
  /** Starts the poll path (when `on` and not running) or stops it (when not `on` and running). */
  read(on: boolean): Promise<void>;
}

/** What a worker runs besides the HTTP listeners: Redis, every account's parts and the deployment's chores. */
export interface WorkerParts {
  redis: Redis;
  /** In the declared order. */
  accounts: readonly ServedAccount[];
  stop(timeoutMs: number): Promise<void>;
}

/**
 * What every account's parts share in one worker process: its Redis connections (a few for the
 * process, not a few per account: each costs about 0.2 MB) and its page gate.
 */
interface Shared extends ProcessParts {
  connection: Redis;
  pageGate: SharedPageGate;
  log: Logger;
  metrics: Metrics;
  /** The process's connections, shared by its accounts. */
  pools: AccountPools;
}

/**
 * Declares every account, then starts each one's parts, then the deployment's chores. A failure to
 * declare is a StartupError of the caller's kind (`toStartupError`).
 */
export async function startWorkerParts(
  config: Config,
  log: Logger,
  metrics: Metrics,
  toStartupError: (message: string) => Error,
): Promise<WorkerParts> {
  // Deployment-wide work names its accounts itself: a pool serving none (a statement that asks the
  // session for its account fails there).
  const deployment = openDatabase(config.databaseUrl, { applicationName: 'subscriber-mirror-worker', max: 2 });
  try {
    await declareAccounts(
      deployment.pool,
      config.accounts.map((a) => a.name),
    );
  } catch (error) {
    await deployment.close();
    throw toStartupError(`cannot declare the accounts: ${describeConnectionError(error)}`);
  }
  const shared: Shared = {
    redis: connectRedis(config),
    // BullMQ's connections must retry forever (maxRetriesPerRequest: null, docs/architecture.md, "Traps
    // we work around"). One client for every queue and sync worker; each worker duplicates it for
    // its blocking one.
    connection: queueConnection(config),
    limiterConnections: createLimiterConnections({
      redisUrl: config.redisUrl,
      redisOptions: { connectionName: `${config.redisNamespace}:limiters` },
      onError: throttledWarn(log, 'limiter connection error'),
    }),
    pageGate: createPageGate(PAGES_IN_MEMORY),
    log,
    metrics,
    pools: openAccountPools(config.databaseUrl, {
      applicationName: 'subscriber-mirror-worker',
      max: WORKER_POOL_MAX,
      watch: {
        waited: (account, seconds) => metrics.forAccount(account).dbCheckoutWait.observe(seconds),
        failed: (account, reason) => metrics.forAccount(account).dbCheckoutFailures.inc({ reason }),
      },
    }),
  };
  const unwatchConnections = metrics.watchConnections(() => shared.pools.stats());
  const started = config.accounts.map(({ name }) => startAccount(accountConfig(config, name), shared, config.shutdownTimeoutMs));
  const accounts = started.map((s) => s.served);
  const inbox = listenOnceForAll(deployment, accounts, log);
  const chores = startDeploymentChores(config, deployment, accounts, log, metrics);
  const reading = started.flatMap((s) => (s.reads ? [s.reads] : []));
  const spread = await spreadReads(config, shared, reading);
  return {
    redis: shared.redis,
    accounts,
    async stop(timeoutMs) {
      await spread.leave();
      await inbox.stop();
      await Promise.all(accounts.map((account) => account.stop(timeoutMs)));
      await chores.stop();
      unwatchConnections();
      await shared.pools.close();
      await deployment.close();
      await shared.limiterConnections.close();
      shared.connection.disconnect();
      shared.redis.disconnect();
    },
  };
}

/**
 * One account's parts: its consumer and its erasure chores; when it reconciles, the switch of its
 * poll path, which the replicas' spread turns on where the account is read.
 */
function startAccount(config: Config, shared: Shared, handOverTimeoutMs: number): { served: ServedAccount; reads: ReadingAccount | null } {
  const log = shared.log.child({ account: config.account });
  const metrics = shared.metrics.forAccount(config.account);
  const pool = shared.pools.forAccount(config.account);
  // The worker's one listener wakes it and polls for it (listenOnceForAll); the purge of old
  // deliveries is the deployment's (startDeploymentChores): no retention here.
  const consumer = createDeliveryConsumer({ pool, logger: log, metrics, listen: false, pollEveryMs: 0 });
  const reads = readsOf(config, log);
  // Open wherever the account is read: the admin pages show (and backfills queue to) its queue.
  const syncQueue = openSyncQueue(config, shared.connection, log, reads ? 'warn' : 'debug');
  const erasure = startErasure(config, pool, log);
  let polling: Polling | null = null;
  const served: ServedAccount = {
    wake: () => consumer.wake(),
    config,
    pool,
    pauseKey: reads?.pauseKey ?? null,
    syncQueue,
    async stop(timeoutMs) {
      erasure.stop();
      await Promise.all([polling?.stop(timeoutMs), consumer.close(timeoutMs)]);
      polling = null;
      await syncQueue.close();
      await pool.end();
    },
  };
  if (!reads) return { served, reads: null };
  // Its pages wait in a line of its own at the process's gate: rooms go to accounts by the bytes they brought.
  const parts: ProcessParts = { ...shared, pageGate: shared.pageGate.forAccount(config.account) };
  const read = async (on: boolean): Promise<void> => {
    if (on && !polling) polling = await startPolling(config, pool, parts, log, metrics, syncQueue);
    if (!on && polling) {
      const running = polling;
      polling = null;
      // Its passes stop at their next checkpoint; the replica that reads it now resumes them.
      await running.stop(handOverTimeoutMs);
    }
  };
  return { served, reads: { account: served, read } };
}

/**
 * The accounts that read, in the order every replica deals them out (`accountsToRead`): by source,
 * then by name, so that each kind is spread over the replicas (a replica of three reading only
 * legacy accounts at full speed would hold far more than one reading current ones on their budget).
 */
function inDealingOrder(reading: readonly ReadingAccount[]): ReadingAccount[] {
  const key = (r: ReadingAccount) => `${r.account.config.sync.source ?? ''}\u0000${r.account.config.account}`;
  return [...reading].sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
}

/**
 * The gauge of the accounts this replica reads, per read source: each source of the deployment's
 * reading accounts has its series, at 0 where this replica reads none of them.
 */
function countRead(metrics: Metrics, ordered: readonly ReadingAccount[], mine: readonly ReadingAccount[]): void {
  const sourceOf = (r: ReadingAccount) => r.account.config.sync.source;
  for (const source of new Set(ordered.map(sourceOf))) {
    metrics.accountsRead.set({ source }, mine.filter((r) => sourceOf(r) === source).length);
  }
}

/** This process among the deployment's worker replicas: unique however many share a host. */
function replicaId(): string {
  return `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
}

/**
 * Joins the deployment's worker replicas and runs the poll path of the accounts this replica reads
 * (src/sync/replicas.ts), handing accounts over as replicas come and go: those it no longer reads
 * stop first (their passes at a checkpoint), then those it reads now start.
 */
async function spreadReads(config: Config, shared: Shared, reading: readonly ReadingAccount[]): Promise<ReplicaSpread> {
  const ordered = inDealingOrder(reading);
  const id = replicaId();
  const log = shared.log.child({ component: 'replicas' });
  let before = 0;
  const warned = { apart: '' };
  return joinReplicas({
    redis: shared.redis,
    namespace: config.redisNamespace,
    id,
    serves: config.accounts.map((a) => a.name),
    logger: log,
    // One account that reads is read by every replica, whoever else is there.
    settle: ordered.length > 1,
    async onReplicas(replicas) {
      const mine = accountsToRead(ordered, replicas, id);
      await Promise.all(ordered.filter((r) => !mine.includes(r)).map((r) => r.read(false)));
      for (const r of mine) await r.read(true);
      countRead(shared.metrics, ordered, mine);
      const names = mine.map((r) => r.account.config.account);
      // One replica reading its one account has nothing to say.
      if (replicas.length > 1 || before > 1) {
        log.info(
          { replica: id, replicas: replicas.length, reads: names },
          `this worker replica reads ${names.length} of ${ordered.length} accounts`,
        );
      }
      before = replicas.length;
      await warnIfDeclaredApart(shared.redis, config.redisNamespace, log, warned);
      return names;
    },
  });
}

/**
 * Says when the live replicas do not all declare the same accounts (a settings change that reached
 * some replicas only), once per difference: they deal the accounts out over different lists.
 */
async function warnIfDeclaredApart(redis: Redis, namespace: string, log: Logger, warned: { apart: string }): Promise<void> {
  const serves = await liveReplicaServes(redis, namespace).catch(() => null);
  if (!serves) return;
  const apart = accountsDeclaredApart(serves);
  const key = apart.join(',');
  if (key === warned.apart) return;
  warned.apart = key;
  if (apart.length === 0) return;
  log.warn(
    { accounts: apart, replicas: serves.size },
    `the worker replicas do not all declare ${apart.join(', ')} (ACCOUNTS): restart every worker replica with the same settings; ` +
      'until then such an account may be read by two replicas or by none (status says NOT READ)',
  );
}

/**
 * One LISTEN for every account's inbox, on the pool serving none: a notification wakes the consumer
 * of its account, a (re)connection every consumer (notifications sent meanwhile are gone). Its
 * safety-net poll, one statement for every account, wakes those with deliveries due.
 */
function listenOnceForAll(deployment: Database, accounts: readonly ServedAccount[], log: Logger): InboxListener {
  const byName = new Map(accounts.map((a) => [a.config.account, a]));
  return listenForInbox(
    deployment.pool,
    (account) => {
      if (account === null) for (const a of accounts) a.wake();
      else byName.get(account)?.wake();
    },
    log.child({ component: 'webhook-consumer' }),
    { accounts: [...byName.keys()] },
  );
}

/** The deployment's chores, once per worker: deliveries and history past their retention. */
function startDeploymentChores(
  config: Config,
  deployment: Database,
  accounts: readonly ServedAccount[],
  log: Logger,
  metrics: Metrics,
): { stop(): Promise<void> } {
  // Deployment-wide: the purge goes over every account's deliveries (purger.ts).
  const deliveries: Timer<number> = createPurger({
    pool: deployment.pool,
    logger: log.child({ component: 'webhook-consumer' }),
    metrics,
    timer: true,
    retentionMs: config.webhookRetentionMs,
    failedRetentionMs: config.webhookFailedRetentionMs,
    everyMs: DELIVERY_PURGE_EVERY_MS,
  });
  const history = startHistoryPurge(accounts, config.history.retentionMs, log);
  return {
    async stop() {
      history?.stop();
      await deliveries.stop();
    },
  };
}

const DELIVERY_PURGE_EVERY_MS = 600_000;

/**
 * The erasure chores of one account (docs/security.md, "Personal data and erasure"): forgotten subscribers' data redacted
 * in stored deliveries, and subscribers out of every configured group past the period erased.
 */
function startErasure(config: Config, pool: pg.Pool, log: Logger): Repeating {
  return repeat(
    async () => {
      const result = await runErasure(pool, {
        groups: config.sync.groups,
        types: config.sync.types,
        outOfGroupsAfterMs: config.eraseOutOfGroupsAfterMs,
      });
      if (result.erased > 0 || result.redactedDeliveries > 0) log.info(result, 'erased personal data');
    },
    {
      firstDelayMs: 60_000,
      nextDelayMs: () => ERASURE_EVERY_MS,
      onError: (error) => log.warn({ err: describeConnectionError(error) }, 'erasure run failed; retrying at the next tick'),
    },
  );
}

/**
 * HISTORY_RETENTION: every worker replica purges closed history hourly, one account after the other,
 * each on its own pool (the purge keeps to the session's account); concurrent deletes are harmless.
 */
function startHistoryPurge(accounts: readonly ServedAccount[], retentionMs: number | undefined, log: Logger): Repeating | null {
  if (retentionMs === undefined) return null;
  return repeat(
    async () => {
      for (const { config, pool } of accounts) {
        const deleted = await purgeHistory(pool, retentionMs);
        if (deleted > 0)
          log.info(
            { account: config.account, deleted, olderThan: new Date(Date.now() - retentionMs).toISOString() },
            'purged history past HISTORY_RETENTION',
          );
      }
    },
    {
      firstDelayMs: 60_000,
      nextDelayMs: () => 3_600_000,
      onError: (error) => log.warn({ err: error }, 'purging history failed; trying again later'),
    },
  );
}

/** The accounts whose polling is paused by a rejected credential now, with their pauses. */
export async function pausedAccounts(parts: WorkerParts): Promise<Array<{ account: string; pause: AuthPause }>> {
  const paused: Array<{ account: string; pause: AuthPause }> = [];
  for (const { config, pauseKey } of parts.accounts) {
    if (pauseKey === null) continue;
    const pause = await readAuthPause(parts.redis, pauseKey);
    if (isPaused(pause)) paused.push({ account: config.account, pause });
  }
  return paused;
}

/**
 * The readiness of polling: not ready when every account that polls is paused by a rejected
 * credential (the worker then reads nothing). One account paused among others that read is that
 * account's problem alone: it shows in `status`, the metrics and the alerts, and the replica stays
 * ready for the others (and, in role `all`, for every account's deliveries).
 */
export async function checkPolling(parts: WorkerParts): Promise<void> {
  const polling = parts.accounts.filter((a) => a.pauseKey !== null).length;
  const paused = await pausedAccounts(parts);
  if (polling === 0 || paused.length < polling) return;
  const several = parts.accounts.length > 1;
  const reasons = paused.map(
    ({ account, pause }) =>
      `${several ? `account ${account}: ` : ''}polling paused until ${new Date(pause.until).toISOString()}: ${pause.message}`,
  );
  throw new Error(reasons.join('; '));
}

/**
 * The poll path of one account in a worker role (docs/architecture.md, "Poll path" and "Several
 * accounts"): the account's shared limiter and read source, its job schedulers and the resumes of
 * its open full passes, its sync worker, the watch that puts back what went missing from Redis, the
 * audit loop and the field refresh. Everything here is the account's: its config (`accountConfig`,
 * whose Redis prefix is the account's), a pool serving it, metrics labelled with it. Only the page
 * gate is the process's.
 */
import type { ConnectionOptions } from 'bullmq';
import type { Redis } from 'ioredis';
import type pg from 'pg';
import { startAuditLoop } from '../audit/loop.js';
import { NOTHING_RECONCILES, readCredentialOf, type Config } from '../config.js';
import type { Logger } from '../ground/log.js';
import type { Metrics } from '../ground/metrics.js';
import { repeat, type Repeating } from '../ground/repeat.js';
import { BUDGET_MODELS } from '../ratelimit/budget-model.js';
import type { LimiterConnections } from '../ratelimit/connections.js';
import type { Limiter } from '../ratelimit/limiter.js';
import { authPauseKey, isPaused, readAuthPause } from '../sync/auth-pause.js';
import { createSyncQueue, restoreMissingSchedules, syncSchedules, type ScheduleConfig } from '../sync/schedule.js';
import { createOrphanResumer, createSyncWorker, lastFullPasses, resumeOpenFullPasses, type SyncWorker } from '../sync/worker.js';
import { auditLoopDeps } from './audit-run.js';
import { formatPeriod } from '../audit/core.js';
import { auditSettings, configuredAuditSchedule } from './audit-settings.js';
import { describeConnectionError } from './connection-error.js';
import { startFieldRefresh } from '../sync/fields.js';
import type { PageGate } from '../upstream/page-gate.js';
import { createReadSource, createSharedLimiter, fieldReader, upstreamHooks } from './reads.js';

/** Upper bound on how often a poll role checks that its job schedulers still exist in Redis. */
const SCHEDULE_CHECK_MAX_MS = 30_000;
const FIRST_SCHEDULE_CHECK_MS = 5_000;

/** What the poll paths of a worker's accounts share: the process's Redis connections and page gate. */
export interface ProcessParts {
  /** Plain commands that must fail fast (maxRetriesPerRequest 1): pauses, locks, schedules. */
  redis: Redis;
  /** Every queue's and sync worker's connection (BullMQ opens each worker's blocking one beside it). */
  connection: ConnectionOptions;
  /** Every limiter's (connections.ts). */
  limiterConnections: LimiterConnections;
  pageGate?: PageGate;
}

export type SyncQueue = ReturnType<typeof createSyncQueue>;

/** The account's poll path as one replica runs it; stopping it leaves the account's queue to the others. */
export interface Polling {
  stop(timeoutMs: number): Promise<void>;
}

/**
 * The account's queue, which the replicas that read it share and the admin pages and gauges use
 * whether or not this replica reads it.
 */
export function openSyncQueue(config: Config, connection: ConnectionOptions, log: Logger, level: 'warn' | 'debug'): SyncQueue {
  const queue = createSyncQueue(connection, config.redisPrefix);
  // Without a listener, a Redis hiccup is printed raw to stderr instead of through the logger (an
  // account that reads nothing only says so at debug: its queue is the admin pages').
  queue.on('error', (error) => log[level]({ err: describeConnectionError(error) }, 'sync queue error'));
  return queue;
}

/** The key of the account's auth pause; null for a webhook-only account, which says once that nothing reconciles. */
export function readsOf(config: Config, log: Logger): { pauseKey: string } | null {
  const credential = readCredentialOf(config);
  if (credential === undefined) {
    log.warn(NOTHING_RECONCILES);
    return null;
  }
  return { pauseKey: authPauseKey(config.redisPrefix, credential) };
}

/**
 * Schedules passes for the configured groups, resumes open full passes, and runs the sync worker on
 * the account's `queue`, which stays open when it stops.
 */
export async function startPolling(
  config: Config,
  pool: pg.Pool,
  shared: ProcessParts,
  log: Logger,
  metrics: Metrics,
  queue: SyncQueue,
): Promise<Polling> {
  const { redis, connection, pageGate } = shared;
  const credential = readCredentialOf(config) as string;
  const limiter = createSharedLimiter(config, redis, log, shared.limiterConnections);
  const unwatchBudgets = metrics.watchBudgets(BUDGET_MODELS, () => limiter.report());
  const source = createReadSource(config, limiter, log, metrics);
  const { groups, types } = config.sync;
  const scheduleConfig: ScheduleConfig = {
    groups,
    types,
    everyMs: config.sync.everyMs,
    reconcileEveryMs: config.sync.reconcileEveryMs,
    incremental: source.incremental,
  };
  const changes = await syncSchedules(queue, scheduleConfig, await lastFullPasses(pool));
  const resumed = await resumeOpenFullPasses(queue, pool, groups, types);
  log.info(
    { source: source.name, schedulers: changes.upserted.length, removed: changes.removed, resumed: resumed.length },
    'poll schedules in place',
  );
  const resumeOrphans = createOrphanResumer({ queue, pool, redis, prefix: config.redisPrefix, groups, types });
  const pauseKey = authPauseKey(config.redisPrefix, credential);
  const scheduleWatch = watchSchedules(queue, pool, scheduleConfig, log, async () => {
    // While the credential is rejected, a resume would only be skipped: leave it to the end of the pause.
    if (isPaused(await readAuthPause(redis, pauseKey))) return [];
    return resumeOrphans();
  });
  const worker: SyncWorker = createSyncWorker({
    pool,
    redis,
    connection,
    prefix: config.redisPrefix,
    apiKey: credential,
    source,
    logger: log,
    sourceTimezone: config.legacy.sourceTimezone,
    lookbackMs: config.sync.lookbackMs,
    pageSize: config.sync.pageSize,
    historyRetentionMs: config.sync.historyRetentionMs,
    groups,
    types,
    metrics,
    // One pass per type at once: with a budget per endpoint, the types of a group are read side by side.
    concurrency: Math.max(2, types.length),
    ...(pageGate ? { pageGate } : {}),
  });
  const audit = startAudit(config, { pool, redis, limiter, queue, log, metrics });
  const fieldRefresh = startFieldRefresh({
    pool,
    redis,
    prefix: config.redisPrefix,
    read: fieldReader(config, limiter, log, upstreamHooks(config.sync.source, limiter, metrics)),
    logger: log,
    everyMs: config.sync.reconcileEveryMs,
  });
  return {
    async stop(timeoutMs: number) {
      scheduleWatch.stop();
      fieldRefresh.stop();
      audit?.stop();
      await worker.close(timeoutMs);
      unwatchBudgets();
      await limiter.close();
    },
  };
}

/** The audit loop (docs/operations.md, "The audit"), unless AUDIT_EVERY=off. */
function startAudit(
  config: Config,
  parts: { pool: pg.Pool; redis: Redis; limiter: Limiter; queue: ReturnType<typeof createSyncQueue>; log: Logger; metrics: Metrics },
): Repeating | null {
  const settings = auditSettings(config);
  if (settings.everyMs === null) {
    parts.log.info('AUDIT_EVERY=off: the mirror is not checked against the service between full passes');
    return null;
  }
  const hooks = upstreamHooks(config.sync.source, parts.limiter, parts.metrics);
  const deps = auditLoopDeps({ config, settings, ...parts, logger: parts.log, hooks }, settings.everyMs);
  logAuditSchedule(config, parts.log);
  return startAuditLoop(deps);
}

/** Says once, at start, when AUDIT_EVERY cannot be honoured within AUDIT_BUDGET, and at what period each pair is really audited. */
function logAuditSchedule(config: Config, log: Logger): void {
  const schedule = configuredAuditSchedule(config);
  if (!schedule || schedule.honoured) return;
  const asked = formatPeriod(schedule.askedMs);
  const budget = `${Math.round(config.audit.budgetShare * 10_000) / 100}%`;
  const effective = schedule.effectiveMs === null ? 'never' : `every ${formatPeriod(schedule.effectiveMs)}`;
  const remedy =
    schedule.shareNeeded === null
      ? 'no AUDIT_BUDGET up to 100% honours it: lengthen AUDIT_EVERY or raise API_RATE_LIMIT'
      : `AUDIT_BUDGET=${Math.round(schedule.shareNeeded * 100)}% would honour it`;
  log.warn(
    {
      auditEvery: asked,
      auditBudget: budget,
      apiRateLimit: config.apiRateLimit,
      effectivePeriodMs: schedule.effectiveMs,
      shareNeeded: schedule.shareNeeded,
    },
    `AUDIT_EVERY=${asked} cannot be honoured within AUDIT_BUDGET=${budget} of API_RATE_LIMIT=${config.apiRateLimit}/min: each group × type is audited ${effective}; ${remedy}`,
  );
}

/**
 * Puts back what the poll path needs in Redis when it went missing, so a running service keeps
 * polling without a restart: job schedulers that vanished with Redis's data, and jobs for open full
 * passes that nothing runs any more (their checkpoints are in Postgres). Checks every SYNC_EVERY, at
 * most every 30 s.
 */
function watchSchedules(
  queue: ReturnType<typeof createSyncQueue>,
  pool: pg.Pool,
  config: ScheduleConfig,
  log: Logger,
  resumeOrphans: () => Promise<string[]>,
): Repeating {
  const check = async (): Promise<void> => {
    const restored = await restoreMissingSchedules(queue, config, () => lastFullPasses(pool));
    if (restored.length > 0) {
      log.warn({ restored }, 'job schedulers were missing from Redis (restarted empty or flushed?); re-created them');
    }
    const resumed = await resumeOrphans();
    if (resumed.length > 0) log.warn({ jobs: resumed }, 'open full passes had no job running them; resuming them from their checkpoints');
  };
  const everyMs = Math.min(config.everyMs, SCHEDULE_CHECK_MAX_MS);
  return repeat(check, {
    // The first check comes soon after start: BullMQ fails a job that stalled twice in the worker's
    // first stalled-job check, after start already tried to resume its pass into that very job.
    firstDelayMs: Math.min(everyMs, FIRST_SCHEDULE_CHECK_MS),
    nextDelayMs: () => everyMs,
    onError: (error) => log.debug({ err: describeConnectionError(error) }, 'schedule check failed; retrying at the next tick'),
  });
}

/**
 * `subscriber-mirror start`: migrate, then run the chosen role until SIGTERM/SIGINT.
 *
 * This is (with cli.ts) the only place that reads config and starts things; everything it wires
 * takes its dependencies as arguments.
 *
 * Roles: `receiver` serves the webhook route and stores deliveries (enqueueing them); `worker` runs
 * the poll passes and applies stored deliveries; `all` does both. Every role serves /healthz and
 * /readyz on PORT; /metrics, the detailed /readyz and (with ADMIN_TOKEN) the admin API are on OPS_PORT
 * when it is set, on PORT with ADMIN_ON_PUBLIC_PORT=true, and nowhere otherwise.
 */
import type { ConnectionOptions } from 'bullmq';
import { Redis } from 'ioredis';
import type pg from 'pg';
import type { Config, Role } from './config.js';
import { NOTHING_RECONCILES, readCredentialOf, secretsOf } from './config.js';
import { openDatabase, type Database } from './db/client.js';
import { INSUFFICIENT_PRIVILEGE, migrationsPending, runMigrations } from './db/migrate.js';
import { configureHistory, purgeHistory } from './mirror/history.js';
import { repeat, type Repeating } from './ground/repeat.js';
import { registerAdminRoutes } from './http/admin.js';
import { createSessionStore } from './http/sessions.js';
import { createMetrics, initSeries, type Metrics } from './ground/metrics.js';
import { DELIVERY_STATUSES } from './db/schema.js';
import { countDeliveriesByStatus } from './webhooks/inbox.js';
import { buildServer, closeWithin, type ReadinessCheck } from './http/server.js';
import { createLogger, type Logger } from './ground/log.js';
import { authPauseKey, isPaused, readAuthPause } from './sync/auth-pause.js';
import { createSyncQueue, restoreMissingSchedules, syncSchedules, type ScheduleConfig } from './sync/schedule.js';
import { collectStatus } from './sync/status.js';
import { createOrphanResumer, createSyncWorker, lastFullPasses, resumeOpenFullPasses, type SyncWorker } from './sync/worker.js';
import { createLegacyClient } from './upstream/legacy/client.js';
import { createCurrentClient } from './upstream/current/client.js';
import { legacySource, type ReadSource } from './sync/source.js';
import { currentSource } from './sync/current-pass.js';
import type { Limiter } from './upstream/limiter.js';
import { createBudgetLimiter, rateBudgetsKey, readRateBudgets, type BudgetLimiter } from './upstream/budget-limiter.js';
import { BUDGET_MODELS } from './upstream/budget-model.js';
import { createDeliveryConsumer, type DeliveryConsumer } from './webhooks/consumer.js';
import { registerWebhookRoute, type ReceiverOutcome } from './webhooks/receiver.js';
import { ERASURE_EVERY_MS, runErasure } from './webhooks/erasure-run.js';
import { auditSettings } from './audit-settings.js';
import { auditLoopDeps } from './audit-run.js';
import { startAuditLoop } from './sync/audit-loop.js';
import { auditWindow } from './sync/audit-state.js';
import { accuracy } from './sync/audit-core.js';

export interface RunningService {
  logger: Logger;
  /** Stops everything in order; resolves when closed. */
  stop(reason: string): Promise<void>;
  /** The bound HTTP port (useful with PORT=0 in tests). */
  port: number;
  /** The bound ops port (OPS_PORT), `port` when everything shares PORT, null when nothing serves it. */
  opsPort: number | null;
}

export class StartupError extends Error {
  override name = 'StartupError';
}

/** Upper bound on how often a poll role checks that its job schedulers still exist in Redis. */
const SCHEDULE_CHECK_MAX_MS = 30_000;
const FIRST_SCHEDULE_CHECK_MS = 5_000;

/** Receiver outcomes as the deliveries metric names them. */
const OUTCOME_LABEL: Record<ReceiverOutcome, string> = {
  stored: 'received',
  duplicate: 'duplicate',
  ignored: 'ignored',
  failed: 'received_invalid',
  unauthorized: 'rejected',
  bad_request: 'rejected',
  too_large: 'rejected',
  unavailable: 'unavailable',
};

/**
 * Workers migrate; so does a receiver whose database role may (one role for everything). Under its
 * own least-privilege role (`subscriber_mirror_receiver`, docs/security.md) a receiver may not, and
 * waits until a worker has applied every migration instead.
 */
async function migrateOrWait(databaseUrl: string, role: Role, log: Logger): Promise<void> {
  try {
    const { applied } = await runMigrations(databaseUrl);
    log.info({ applied }, 'migrations up to date');
    return;
  } catch (error) {
    const denied = sqlStateOf(error) === INSUFFICIENT_PRIVILEGE;
    if (!(role === 'receiver' && denied)) throw new StartupError(`cannot migrate the database: ${describeConnectionError(error)}`);
  }
  const database = openDatabase(databaseUrl, { applicationName: `subscriber-mirror-${role}`, max: 1 });
  try {
    for (let round = 0; ; round++) {
      const pending = await migrationsPending(database.pool);
      if (pending === 0) return;
      if (round % 30 === 0) log.info({ pending }, 'this role may not migrate: waiting for a worker to apply the migrations');
      await new Promise((resolve) => setTimeout(resolve, MIGRATION_WAIT_MS));
    }
  } catch (error) {
    throw new StartupError(`cannot read the migration state: ${describeConnectionError(error)}`);
  } finally {
    await database.close();
  }
}

const MIGRATION_WAIT_MS = 1_000;

/** The SQLSTATE of a Postgres error, also when drizzle wrapped it (its `cause`). */
function sqlStateOf(error: unknown): string | undefined {
  for (let e = error, depth = 0; e && typeof e === 'object' && depth < 3; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string') return code;
  }
  return undefined;
}

/** Migrates (or waits for a worker to) and opens the pool with HISTORY applied; a clear StartupError otherwise. */
async function openMigratedDatabase(config: Config, role: Role, log: Logger): Promise<Database> {
  await migrateOrWait(config.databaseUrl, role, log);
  const database = openDatabase(config.databaseUrl, { applicationName: `subscriber-mirror-${role}`, max: 20 });
  try {
    // The receiver writes no mirrored row (and its own role may not write the setting).
    if (role !== 'receiver') await configureHistory(database.pool, { enabled: config.history.enabled });
  } catch (error) {
    await database.close();
    throw new StartupError(`cannot apply HISTORY: ${describeConnectionError(error)}`);
  }
  return database;
}

interface AdminDeps {
  pool: Database['pool'];
  redis: Redis;
  syncQueue: Parameters<typeof registerAdminRoutes>[1]['syncQueue'];
  consumer: DeliveryConsumer;
  log: Logger;
  metrics: Metrics;
}

/** The status page, bull-board and the admin API, on the ops listener (or the public one when opted in). */
async function registerAdmin(
  ops: Parameters<typeof registerAdminRoutes>[0],
  config: Config,
  token: string,
  deps: AdminDeps,
): Promise<void> {
  const apiKey = readCredentialOf(config);
  await registerAdminRoutes(ops, {
    token,
    pool: deps.pool,
    syncQueue: deps.syncQueue,
    extraQueues: [deps.consumer.queue],
    configured: { groups: config.sync.groups, types: config.sync.types },
    authPause: apiKey ? () => readAuthPause(deps.redis, authPauseKey(config.redisPrefix, apiKey)) : undefined,
    rateBudgets: () => readRateBudgets(deps.redis, config.redisPrefix),
    syncEveryMs: passIntervalMs(config),
    ...(config.sync.reconciles ? {} : { notice: NOTHING_RECONCILES }),
    sessions: createSessionStore(deps.redis, { prefix: config.redisPrefix, token }),
    logger: deps.log,
    metrics: deps.metrics,
    cookieInsecure: config.adminCookieInsecure,
    dashboardWrite: config.dashboardWrite,
  });
}

/**
 * The public listener (webhooks, bare /readyz) and the ops listener (admin, /metrics, detailed
 * /readyz): a separate one on OPS_PORT, the public one when admin is opted in there, else none.
 */
function buildListeners(config: Config, log: Logger, readiness: ReadinessCheck[], metrics: Metrics) {
  const trustProxy = config.trustProxy;
  const server = buildServer({
    logger: log,
    readiness,
    metrics,
    limits: config.http,
    public: !config.opsOnPublicPort,
    name: 'public',
    trustProxy,
  });
  // The ops listener is internal (never published): default limits, and no body budget (no webhook
  // route). No proxy sits in front of it, so it never believes X-Forwarded-*: TRUST_PROXY is for the
  // public port only (a neighbour on the network would otherwise pick its own address per guess).
  const ops =
    config.opsPort !== undefined
      ? buildServer({ logger: log, readiness, metrics, name: 'ops', trustProxy: false })
      : config.opsOnPublicPort
        ? server
        : null;
  return { server, ops };
}

export async function startService(config: Config, role: Role): Promise<RunningService> {
  const { logger } = createLogger({ level: config.logLevel, secrets: secretsOf(config), format: config.logFormat });
  const log = logger.child({ role });

  const database = await openMigratedDatabase(config, role, log);
  const polls = role === 'all' || role === 'worker';
  const receives = role === 'all' || role === 'receiver';
  const historyPurger = polls ? startHistoryPurge(database.pool, config.history.retentionMs, log) : null;
  // The HTTP path must fail fast when Redis is down (readiness), unlike BullMQ's blocking connections.
  const redis = new Redis(config.redisUrl, { maxRetriesPerRequest: 1, enableOfflineQueue: false, lazyConnect: true });
  redis.on('error', () => {});
  redis.connect().catch(() => {});
  const metrics = createMetrics();
  initSeries(metrics, DELIVERY_STATUSES);
  // BullMQ's blocking connections must retry forever (maxRetriesPerRequest: null, docs/architecture.md, "Traps we work around");
  // the queues that the HTTP path adds to fail fast instead.
  const workerConnection = { url: config.redisUrl, maxRetriesPerRequest: null };
  const queueConnection = { url: config.redisUrl, maxRetriesPerRequest: 1 };

  const consumer: DeliveryConsumer = createDeliveryConsumer({
    pool: database.pool,
    connection: workerConnection,
    queueConnection,
    prefix: config.redisPrefix,
    logger: log,
    metrics,
    work: polls,
    retentionMs: config.webhookRetentionMs,
    failedRetentionMs: config.webhookFailedRetentionMs,
  });
  const polling = polls ? await startReads(config, database.pool, redis, workerConnection, log, metrics) : null;
  const syncQueue = polling?.queue ?? createSyncQueue(queueConnection, config.redisPrefix);
  // The receiver runs without Redis (readiness ignores it): its errors go through the logger, not raw to stderr.
  if (!polling) syncQueue.on('error', (error) => log.debug({ err: describeConnectionError(error) }, 'sync queue error'));

  const refreshGauges = async () => {
    await recordQueueDepths(metrics, [syncQueue, consumer.queue]);
    await recordInboxGauges(metrics, database.pool);
    if (polls) await recordSyncGauges(metrics, database.pool, config);
  };
  const gauges = repeat(refreshGauges, { firstDelayMs: 0, nextDelayMs: () => config.metricsRefreshMs, onError: () => {} });
  const erasure = polls ? startErasure(config, database.pool, log) : null;

  const readiness = readinessChecks(database.pool, redis, polling, receives && !polls);
  const { server, ops } = buildListeners(config, log, readiness, metrics);
  const route = receives
    ? registerWebhookRoute(server, {
        path: config.webhookPath,
        maxBodyBytes: config.webhookMaxBodyBytes,
        bodyMemoryBytes: config.webhookBodyMemoryBytes,
        secrets: () => config.webhookSecrets,
        pool: database.pool,
        logger: log,
        onStored: (id) => consumer.enqueue(id),
        onOutcome: (outcome) => metrics.deliveries.inc({ outcome: OUTCOME_LABEL[outcome] }),
      })
    : null;
  // Config refuses ADMIN_TOKEN without somewhere to serve it; `ops` is set whenever the token is.
  if (config.adminToken && ops)
    await registerAdmin(ops, config, config.adminToken, { pool: database.pool, redis, syncQueue, consumer, log, metrics });

  await server.listen({ port: config.port, host: config.host });
  const port = boundPort(server, config.port);
  if (ops && ops !== server) await ops.listen({ port: config.opsPort, host: config.opsHost });
  const opsPort = ops === null ? null : ops === server ? port : boundPort(ops, config.opsPort ?? 0);
  log.info({ port, opsPort, receives, polls, admin: Boolean(config.adminToken) }, 'service started');
  if (!ops) log.info('no OPS_PORT: /metrics, the admin pages and the detailed /readyz are not served');

  let stopping: Promise<void> | undefined;
  const stop = (reason: string) => {
    stopping ??= (async () => {
      log.info({ reason }, 'shutting down');
      gauges.stop();
      erasure?.stop();
      // 1. No new HTTP requests (503 while closing); in-flight deliveries finish their inbox write.
      //    A third of the deadline at most: then open connections (a dripping upload) are closed.
      const drained = await closeWithin(server, Math.max(500, Math.floor(config.shutdownTimeoutMs / 3)));
      if (drained === 'forced') log.warn('closed HTTP connections still open at the shutdown deadline');
      if (ops && ops !== server) await closeWithin(ops, 1_000);
      await route?.writer.close();
      // 2. A running pass stops at its next checkpoint; running applies finish.
      await Promise.all([polling?.stop(config.shutdownTimeoutMs), consumer.close(config.shutdownTimeoutMs)]);
      historyPurger?.stop();
      if (!polling) await syncQueue.close();
      redis.disconnect();
      await database.close();
      log.info('stopped');
    })();
    return stopping;
  };

  return { logger: log, stop, port, opsPort };
}

function boundPort(app: { server: { address(): unknown } }, fallback: number): number {
  const address = app.server.address() as { port?: number } | string | null;
  return typeof address === 'object' && address?.port !== undefined ? address.port : fallback;
}

/**
 * The erasure chores of the worker (docs/security.md, "Personal data and erasure"): forgotten subscribers' data redacted
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

/** HISTORY_RETENTION: every worker replica purges closed history hourly; concurrent deletes are harmless. */
function startHistoryPurge(pool: pg.Pool, retentionMs: number | undefined, log: Logger): Repeating | null {
  if (retentionMs === undefined) return null;
  return repeat(
    async () => {
      const deleted = await purgeHistory(pool, retentionMs);
      if (deleted > 0)
        log.info({ deleted, olderThan: new Date(Date.now() - retentionMs).toISOString() }, 'purged history past HISTORY_RETENTION');
    },
    {
      firstDelayMs: 60_000,
      nextDelayMs: () => 3_600_000,
      onError: (error) => log.warn({ err: error }, 'purging history failed; trying again later'),
    },
  );
}

/**
 * The receiver alone needs only Postgres: its inbox is there, and deliveries it could not hand to the
 * queue are swept from the inbox by the workers (invariant 1). Other roles need Redis too.
 */
function readinessChecks(pool: pg.Pool, redis: Redis, polling: Polling | null, receiverOnly: boolean): ReadinessCheck[] {
  const checks: ReadinessCheck[] = [
    {
      name: 'postgres',
      check: async () => {
        await pool.query('select 1');
        const pending = await migrationsPending(pool);
        if (pending > 0) throw new Error(`${pending} migration(s) not applied`);
      },
    },
  ];
  if (!receiverOnly) {
    checks.push({
      name: 'redis',
      check: async () => {
        if (redis.status !== 'ready') throw new Error(`redis is ${redis.status}`);
        await redis.ping();
      },
    });
  }
  if (polling) {
    checks.push({
      name: 'upstream-auth',
      check: async () => {
        const pause = await readAuthPause(redis, polling.pauseKey);
        if (isPaused(pause)) {
          throw new Error(`polling paused until ${new Date(pause.until).toISOString()}: ${pause.message}`);
        }
      },
    });
  }
  return checks;
}

async function recordQueueDepths(
  metrics: Metrics,
  queues: Array<{ name: string; getJobCounts(...types: string[]): Promise<Record<string, number>> }>,
): Promise<void> {
  for (const queue of queues) {
    try {
      const counts = await queue.getJobCounts('waiting', 'active', 'delayed', 'failed', 'prioritized');
      for (const [state, n] of Object.entries(counts)) metrics.queueDepth.set({ queue: queue.name, state }, n);
    } catch {
      // Redis unavailable: readiness reports it; the gauge keeps its last value.
    }
  }
}

/** How often a pass of each group × type is due: SYNC_EVERY, or RECONCILE_EVERY for the current API (full passes only). */
function passIntervalMs(config: Config): number {
  return config.sync.source === 'current' ? config.sync.reconcileEveryMs : config.sync.everyMs;
}

/** Cursor age and drift per group × type, from our own tables (no upstream requests). */
async function recordSyncGauges(metrics: Metrics, pool: pg.Pool, config: Config): Promise<void> {
  try {
    const rows = await collectStatus(pool, { groups: config.sync.groups, types: config.sync.types });
    const audits = await auditWindow(pool);
    const now = Date.now();
    for (const r of rows) {
      const labels = { group: r.groupId, type: r.type };
      metrics.syncInterval.set(labels, passIntervalMs(config) / 1000);
      metrics.mirrored.set(labels, r.mirrored);
      if (r.cursor) metrics.cursorAge.set(labels, Math.max(0, (now - Date.parse(r.cursor)) / 1000));
      if (r.lastSuccessAt) metrics.lastSuccess.set(labels, Date.parse(r.lastSuccessAt) / 1000);
      if (r.upstreamCount !== null) metrics.upstreamCount.set(labels, r.upstreamCount);
      if (r.drift !== null) metrics.drift.set(labels, r.drift);
      metrics.membersAwaitingProof.set(labels, r.awaitingProof);
      const window = audits.get(`${r.groupId}:${r.type}`);
      const share = window ? accuracy(window.rowsChecked, window.content + window.missing + window.extra) : null;
      if (share !== null) metrics.auditAccuracy.set(labels, share);
      for (const kind of ['content', 'missing', 'extra', 'count']) metrics.auditMismatches.inc({ ...labels, kind }, 0);
      metrics.auditRowsChecked.inc(labels, 0);
      metrics.auditUnrepaired.inc(labels, 0);
      // The series exists from the first scrape (dashboards and alerts read 0, not "no data").
      metrics.passStepBacks.inc(labels, 0);
    }
  } catch {
    // Postgres unavailable: readiness reports it.
  }
}

async function recordInboxGauges(metrics: Metrics, pool: pg.Pool): Promise<void> {
  try {
    for (const [status, n] of Object.entries(await countDeliveriesByStatus(pool))) metrics.inbox.set({ status }, n);
  } catch {
    // Postgres unavailable: readiness reports it.
  }
}

interface Polling {
  pauseKey: string;
  queue: ReturnType<typeof createSyncQueue>;
  stop(timeoutMs: number): Promise<void>;
}

/**
 * The rate limiter every replica shares (invariant 7): the budgets the service's headers show, one per
 * endpoint or one for the account (budget-limiter.ts), each used up to API_RATE_LIMIT (60 a minute
 * legacy, 120 current). What it learned is published for `status` and the status page.
 */
function createSharedLimiter(config: Config, redis: Redis, log: Logger): BudgetLimiter {
  return createBudgetLimiter({
    mode: 'redis',
    redisUrl: config.redisUrl,
    prefix: config.redisPrefix,
    perMinute: config.apiRateLimitAuto ? 'auto' : config.apiRateLimit,
    autoStart: config.apiRateLimit,
    publish: { client: redis, key: rateBudgetsKey(config.redisPrefix) },
    // A replica killed mid-request holds its shared concurrency slot until this expires; one attempt
    // never outlives MAILER_TIMEOUT, so a little more than that frees the slot as soon as it can.
    jobExpirationMs: config.upstreamTimeoutMs + 5_000,
    logger: log,
  });
}

/** Upstream request metrics and the limiter's waits, for the clients of either source. */
function upstreamHooks(api: 'legacy' | 'current', limiter: Limiter, metrics: Metrics) {
  let lastWaitMsTotal = 0;
  return {
    onResponse: (info: { status: number }) => {
      metrics.upstreamRequests.inc({ api, outcome: String(info.status) });
      // The limiter reports a running total of wait time; record what accrued since.
      const total = limiter.stats().waitMsTotal;
      if (total > lastWaitMsTotal) metrics.limiterWait.observe((total - lastWaitMsTotal) / 1000);
      lastWaitMsTotal = total;
    },
  };
}

/** SYNC_SOURCE's read source (docs/architecture.md, "Read sources"), with a fresh client per pass. */
function createReadSource(config: Config, limiter: Limiter, log: Logger, metrics: Metrics): ReadSource {
  const common = { sourceTimezone: config.legacy.sourceTimezone, pageSize: config.sync.pageSize };
  if (config.sync.source === 'current') {
    const hooks = upstreamHooks('current', limiter, metrics);
    const clientFactory = () =>
      createCurrentClient({
        baseUrl: config.currentApi.url as string,
        token: config.currentApi.token as string,
        limiter,
        http: { timeoutMs: config.upstreamTimeoutMs, hooks },
      });
    return currentSource({ ...common, clientFactory });
  }
  const hooks = upstreamHooks('legacy', limiter, metrics);
  const legacyFactory = () =>
    createLegacyClient({
      baseUrl: config.legacy.url as string,
      apiKey: config.legacy.apiKey as string,
      apiKeyHeader: config.legacy.apiKeyHeader,
      limiter,
      logger: log,
      http: { timeoutMs: config.upstreamTimeoutMs, hooks },
    });
  return legacySource({ ...common, legacyFactory, lookbackMs: config.sync.lookbackMs });
}

/** The poll path when read settings are given; a webhook-only install says that nothing reconciles. */
async function startReads(...args: Parameters<typeof startPolling>): Promise<Polling | null> {
  const [config, , , , log] = args;
  if (config.sync.reconciles) return startPolling(...args);
  log.warn(NOTHING_RECONCILES);
  return null;
}

/** Schedules passes for the configured groups, resumes open full passes, and runs the sync worker. */
async function startPolling(
  config: Config,
  pool: pg.Pool,
  redis: Redis,
  connection: ConnectionOptions,
  log: Logger,
  metrics: Metrics,
): Promise<Polling> {
  const credential = readCredentialOf(config) as string;
  const limiter = createSharedLimiter(config, redis, log);
  metrics.watchBudgets(BUDGET_MODELS, () => limiter.report());
  const source = createReadSource(config, limiter, log, metrics);
  const queue = createSyncQueue(connection, config.redisPrefix);
  // Without a listener, a Redis hiccup is printed raw to stderr instead of through the logger.
  queue.on('error', (error) => log.warn({ err: describeConnectionError(error) }, 'sync queue error'));
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
  });
  const audit = startAudit(config, { pool, redis, limiter, queue, log, metrics });
  return {
    pauseKey,
    queue,
    async stop(timeoutMs: number) {
      scheduleWatch.stop();
      audit?.stop();
      await worker.close(timeoutMs);
      await queue.close();
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
  return startAuditLoop(deps);
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

/** Turns pg/network errors into one line without stack, host credentials or internals. */
export function describeConnectionError(error: unknown): string {
  const e = error as { message?: string; code?: string; errors?: Array<{ message?: string }>; cause?: unknown };
  // drizzle wraps a failed statement as "Failed query: <the whole SQL>" with Postgres's own error
  // (which says what to do, e.g. the missing role) as its cause: print the cause, not the SQL.
  if (e.code === undefined && e.cause instanceof Error) return describeConnectionError(e.cause);
  // AggregateError (both IPv4 and IPv6 refused) has an empty message; its children say why.
  const message = e.message || e.errors?.map((x) => x.message).join('; ') || String(error);
  return e.code && !message.includes(e.code) ? `${message} (${e.code})` : message;
}

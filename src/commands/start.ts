/**
 * `subscriber-mirror start`: migrate, then run the chosen role until SIGTERM/SIGINT.
 *
 * The commands (this folder) are the only place that reads config and starts things; everything it
 * wires takes its dependencies as arguments. The poll path is wired in `polling.ts`, the read clients
 * and the shared limiter in `reads.ts`, the gauges in `gauges.ts`.
 *
 * Roles: `receiver` serves the webhook route and stores deliveries in the inbox, with Postgres only
 * (no Redis: docs/security.md, "Who reaches what"); `worker` runs the poll passes and applies stored
 * deliveries, woken by the inbox's notifications; `all` does both. Every role serves /healthz and
 * /readyz on PORT; /metrics, the detailed /readyz and (with ADMIN_TOKEN) the admin API are on OPS_PORT
 * when it is set, on PORT with ADMIN_ON_PUBLIC_PORT=true, and nowhere otherwise.
 */
import { Redis } from 'ioredis';
import type pg from 'pg';
import {
  accountConfig,
  findAccount,
  loadConfig,
  needsForRole,
  NOTHING_RECONCILES,
  readCredentialOf,
  ROLES,
  secretsOf,
  type Config,
  type Role,
} from '../config.js';
import { openDatabase, type Database } from '../db/client.js';
import { INSUFFICIENT_PRIVILEGE, migrationsPending, runMigrations } from '../db/migrate.js';
import { DELIVERY_STATUSES } from '../db/schema.js';
import { createLogger, type Logger } from '../ground/log.js';
import { createMetrics, initSeries, type Metrics } from '../ground/metrics.js';
import { UsageError } from '../ground/usage-error.js';
import { sleep } from '../ground/wait.js';
import { registerAdminRoutes } from '../http/admin.js';
import { buildServer, closeWithin, type ReadinessCheck } from '../http/server.js';
import { createSessionStore } from '../http/sessions.js';
import { configureHistory } from '../mirror/history.js';
import { readRateBudgets } from '../ratelimit/budget-limiter.js';
import { authPauseKey, readAuthPause } from '../sync/auth-pause.js';
import { createSyncQueue } from '../sync/schedule.js';
import { registerAccountRoutes } from '../webhooks/account-routes.js';
import type { ReceiverOutcome } from '../webhooks/receiver.js';
import { parseOptions, type Command } from './args.js';
import { describeConnectionError } from './connection-error.js';
import { statusSources } from './status-sources.js';
import { passIntervalMs, startGauges } from './gauges.js';
import type { SyncQueue } from './polling.js';
import { checkPolling, connectRedis, startWorkerParts, type WorkerParts } from './worker.js';
import { configuredAuditSchedule } from './audit-settings.js';

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
      await sleep(MIGRATION_WAIT_MS);
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
  // The first account's pool: the receiver stores under it, the admin pages show it. A worker's
  // accounts have pools of their own, on connections they share (worker.ts); a worker needs few here.
  const database = openDatabase(config.databaseUrl, {
    applicationName: `subscriber-mirror-${role}`,
    max: role === 'worker' ? 4 : 20,
    account: config.account,
  });
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
  queues: readonly AdminQueue[];
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
    accounts: deps.queues.map(({ account, syncQueue }) => {
      const served = accountConfig(config, account);
      return { name: account, syncQueue, configured: { groups: served.sync.groups, types: served.sync.types } };
    }),
    chooseAccount: (name) => findAccount(config, name).name,
    configured: { groups: config.sync.groups, types: config.sync.types, auditSchedule: configuredAuditSchedule(config) },
    authPause: apiKey ? () => readAuthPause(deps.redis, authPauseKey(config.redisPrefix, apiKey)) : undefined,
    rateBudgets: () => readRateBudgets(deps.redis, config.redisPrefix),
    syncEveryMs: passIntervalMs(config),
    ...(config.sync.reconciles ? {} : { notice: NOTHING_RECONCILES }),
    // Every account on the status page and /admin/status, each with its own pause and budgets.
    statusSources: statusSources(config, deps.redis),
    sessions: createSessionStore(deps.redis, { prefix: config.redisNamespace, token }),
    logger: deps.log,
    metrics: deps.metrics,
    cookieInsecure: config.adminCookieInsecure,
    dashboardWrite: config.dashboardWrite,
  });
}

/** The public listener's accept queue (see its listen). */
const PUBLIC_BACKLOG = 4096;

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
  const metrics = createMetrics();
  initSeries(
    metrics,
    DELIVERY_STATUSES,
    config.accounts.map((a) => a.name),
    { receiver: receives, worker: polls },
  );
  // The receiver alone never connects to Redis: it holds no Redis credential (docs/security.md).
  const workerParts = polls ? await startWorkerParts(config, log, metrics, (message) => new StartupError(message)) : null;
  const workerQueues = workerParts?.accounts.map((a) => ({ account: a.config.account, syncQueue: a.syncQueue })) ?? [];

  // Every account read by the same few statements on the deployment-wide pool (the status reader).
  const gauges = startGauges(metrics, {
    pool: database.pool,
    queues: workerQueues,
    config,
    polls,
    ...(workerParts ? { redis: workerParts.redis } : {}),
  });
  const readiness = readinessChecks(database.pool, workerParts);
  const { server, ops } = buildListeners(config, log, readiness, metrics);
  // Every account's route, on this one pool: the receiver names each route's account in its statements.
  const route = receives
    ? registerAccountRoutes(server, config, {
        pool: database.pool,
        logger: log,
        // A request no account's route took (none matched, or before routing) counts without one.
        onOutcome: (outcome, _durationMs, account) =>
          metrics.deliveries.inc({ outcome: OUTCOME_LABEL[outcome], ...(account === null ? {} : { account }) }),
      })
    : null;
  // Config refuses ADMIN_TOKEN without somewhere to serve it; `ops` is set whenever the token is.
  // The admin pages keep their sessions in Redis: a receiver alone connects to it only for them, so
  // one without ADMIN_TOKEN (as compose runs it) never does.
  const receiverAdmin = config.adminToken && ops && !workerParts ? connectAdminRedis(config, log) : null;
  const adminRedis = workerParts ? { redis: workerParts.redis, queues: workerQueues } : receiverAdmin;
  if (config.adminToken && ops && adminRedis)
    await registerAdmin(ops, config, config.adminToken, {
      pool: database.pool,
      redis: adminRedis.redis,
      queues: adminRedis.queues,
      log,
      metrics,
    });

  // A long accept queue: a client reconnecting as fast as it is refused fills Node's default 511,
  // and the kernel then drops a real client's SYN, which it retries only after a second
  // (docs/operations.md, "Public surface"; the kernel caps it at net.core.somaxconn).
  await server.listen({ port: config.port, host: config.host, backlog: PUBLIC_BACKLOG });
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
      // 1. No new HTTP requests (503 while closing); in-flight deliveries finish their inbox write.
      //    A third of the deadline at most: then open connections (a dripping upload) are closed.
      const drained = await closeWithin(server, Math.max(500, Math.floor(config.shutdownTimeoutMs / 3)));
      if (drained === 'forced') log.warn('closed HTTP connections still open at the shutdown deadline');
      if (ops && ops !== server) await closeWithin(ops, 1_000);
      await route?.writer.close();
      // 2. A running pass stops at its next checkpoint; running batches finish.
      await workerParts?.stop(config.shutdownTimeoutMs);
      await receiverAdmin?.stop();
      await database.close();
      log.info('stopped');
    })();
    return stopping;
  };

  return { logger: log, stop, port, opsPort };
}

/** What the admin pages need of Redis: its sessions (and the rate budgets, the auth pause) and each account's sync queue. */
interface AdminRedis {
  redis: Redis;
  queues: readonly AdminQueue[];
  stop(): Promise<void>;
}

/** One account's sync queue, for the admin pages. */
interface AdminQueue {
  account: string;
  syncQueue: SyncQueue;
}

/** A receiver's Redis for its admin pages only (with ADMIN_TOKEN); its errors go through the logger. */
function connectAdminRedis(config: Config, log: Logger): AdminRedis {
  const redis = connectRedis(config);
  const queues = config.accounts.map(({ name }) => {
    const syncQueue = createSyncQueue({ url: config.redisUrl, maxRetriesPerRequest: 1 }, accountConfig(config, name).redisPrefix);
    syncQueue.on('error', (error) => log.debug({ err: describeConnectionError(error) }, 'sync queue error'));
    return { account: name, syncQueue };
  });
  return {
    redis,
    queues,
    async stop() {
      await Promise.all(queues.map((q) => q.syncQueue.close()));
      redis.disconnect();
    },
  };
}

function boundPort(app: { server: { address(): unknown } }, fallback: number): number {
  const address = app.server.address() as { port?: number } | string | null;
  return typeof address === 'object' && address?.port !== undefined ? address.port : fallback;
}

/**
 * The receiver alone needs only Postgres: its inbox is there, and the workers learn of what it
 * stores from Postgres too (invariant 1). Workers need Redis as well, and at least one account
 * whose polling is not paused by a rejected credential (worker.ts, `checkPolling`).
 */
function readinessChecks(pool: pg.Pool, worker: WorkerParts | null): ReadinessCheck[] {
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
  if (worker) {
    const { redis } = worker;
    checks.push({
      name: 'redis',
      check: async () => {
        if (redis.status !== 'ready') throw new Error(`redis is ${redis.status}`);
        await redis.ping();
      },
    });
  }
  if (worker?.accounts.some((a) => a.pauseKey !== null)) checks.push({ name: 'upstream-auth', check: () => checkPolling(worker) });
  return checks;
}

/** `start [--role all|worker|receiver]`: runs until SIGTERM/SIGINT (a second signal exits at once). */
export const startCommand: Command = async (args) => {
  const { values } = parseOptions(args, { role: { type: 'string', default: 'all' } });
  const role = values.role;
  if (!(ROLES as readonly string[]).includes(role)) {
    throw new UsageError(`--role must be one of ${ROLES.join(', ')}, got "${role}"`);
  }
  const config = loadConfig(process.env, needsForRole(role as Role));
  // Installed before any start-up work: a SIGTERM while migrations run or while Redis is unreachable
  // must stop the process at once, not wait for Docker's SIGKILL. Nothing is half-done by exiting then:
  // each migration is a transaction Postgres rolls back when the connection goes, and nothing has been
  // received or applied yet.
  // eslint-disable-next-line prefer-const -- assigned once start-up is done; the signal handler reads it before
  let service: RunningService | undefined;
  let stopped: () => void = () => {};
  const done = new Promise<void>((resolve) => (stopped = resolve));
  let signals = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    signals += 1;
    // A second signal means "now": the operator does not want to wait for a graceful stop.
    if (signals > 1) process.exit(1);
    if (!service) {
      process.stderr.write(
        `${JSON.stringify({ level: 'info', time: new Date().toISOString(), signal, msg: 'stopped during start-up' })}\n`,
      );
      process.exit(0);
    }
    const running = service;
    const timer = setTimeout(() => {
      running.logger.error({ timeoutMs: config.shutdownTimeoutMs }, 'graceful shutdown timed out');
      process.exit(1);
    }, config.shutdownTimeoutMs);
    timer.unref();
    running.stop(signal).then(stopped, (error: unknown) => {
      running.logger.error({ err: error }, 'error during shutdown');
      stopped();
    });
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  service = await startService(config, role as Role);
  await done;
  return 0;
};

/**
 * `subscriber-mirror start`: migrate, then run the chosen role until SIGTERM/SIGINT.
 *
 * This is (with cli.ts) the only place that reads config and starts things; everything it wires
 * takes its dependencies as arguments.
 */
import { Redis } from 'ioredis';
import type { Config, Role } from './config.js';
import { secretsOf } from './config.js';
import { openDatabase } from './db/client.js';
import { migrationsPending, runMigrations } from './db/migrate.js';
import { createMetrics } from './http/metrics.js';
import { buildServer, type ReadinessCheck } from './http/server.js';
import { createLogger, type Logger } from './log.js';
import { authPauseKey, isPaused, readAuthPause } from './sync/auth-pause.js';
import { createSyncQueue, syncSchedules } from './sync/schedule.js';
import { createSyncWorker, resumeOpenFullPasses, type SyncWorker } from './sync/worker.js';
import { createLegacyClient } from './upstream/legacy.js';
import { createLimiter, type Limiter } from './upstream/limiter.js';

export interface RunningService {
  logger: Logger;
  /** Stops everything in order; resolves when closed. */
  stop(reason: string): Promise<void>;
  /** The bound HTTP port (useful with PORT=0 in tests). */
  port: number;
}

export class StartupError extends Error {
  override name = 'StartupError';
}

export async function startService(config: Config, role: Role): Promise<RunningService> {
  const { logger } = createLogger({ level: config.logLevel, secrets: secretsOf(config) });
  const log = logger.child({ role });

  try {
    const { applied } = await runMigrations(config.databaseUrl);
    log.info({ applied }, 'migrations up to date');
  } catch (error) {
    throw new StartupError(`cannot migrate the database: ${describeConnectionError(error)}`);
  }

  const database = openDatabase(config.databaseUrl, { applicationName: `subscriber-mirror-${role}` });
  // The HTTP path must fail fast when Redis is down (readiness), unlike BullMQ's blocking connections.
  const redis = new Redis(config.redisUrl, { maxRetriesPerRequest: 1, enableOfflineQueue: false, lazyConnect: true });
  redis.on('error', () => {});
  redis.connect().catch(() => {});

  const metrics = createMetrics();
  const polling = role === 'all' || role === 'worker' ? await startPolling(config, database.pool, redis, log, metrics) : null;

  const readiness: ReadinessCheck[] = [
    {
      name: 'postgres',
      check: async () => {
        await database.pool.query('select 1');
        const pending = await migrationsPending(database.pool);
        if (pending > 0) throw new Error(`${pending} migration(s) not applied`);
      },
    },
    {
      name: 'redis',
      check: async () => {
        if (redis.status !== 'ready') throw new Error(`redis is ${redis.status}`);
        await redis.ping();
      },
    },
  ];
  if (polling) {
    readiness.push({
      name: 'upstream-auth',
      check: async () => {
        const pause = await readAuthPause(redis, polling.pauseKey);
        if (isPaused(pause)) {
          throw new Error(`polling paused until ${new Date(pause.until).toISOString()}: ${pause.message}`);
        }
      },
    });
  }

  const server = buildServer({ logger: log, readiness, metrics });
  await server.listen({ port: config.port, host: '0.0.0.0' });
  const address = server.server.address();
  const port = typeof address === 'object' && address ? address.port : config.port;
  log.info({ port }, 'service started');

  let stopping: Promise<void> | undefined;
  const stop = (reason: string) => {
    stopping ??= (async () => {
      log.info({ reason }, 'shutting down');
      await server.close();
      if (polling) await polling.stop(config.shutdownTimeoutMs);
      redis.disconnect();
      await database.close();
      log.info('stopped');
    })();
    return stopping;
  };

  return { logger: log, stop, port };
}

interface Polling {
  pauseKey: string;
  stop(timeoutMs: number): Promise<void>;
}

/** Schedules passes for the configured groups, resumes open full passes, and runs the sync worker. */
async function startPolling(
  config: Config,
  pool: import('pg').Pool,
  redis: Redis,
  log: Logger,
  metrics: ReturnType<typeof createMetrics>,
): Promise<Polling> {
  const legacyUrl = config.legacy.url as string;
  const apiKey = config.legacy.apiKey as string;
  // BullMQ's blocking connections must retry forever (maxRetriesPerRequest: null, DESIGN.md "Traps").
  const connection = { url: config.redisUrl, maxRetriesPerRequest: null };
  const limiter: Limiter = createLimiter({
    mode: 'redis',
    redisUrl: config.redisUrl,
    prefix: config.redisPrefix,
    perMinute: config.apiRateLimit,
    logger: log,
  });
  const queue = createSyncQueue(connection, config.redisPrefix);
  const changes = await syncSchedules(queue, {
    groups: config.sync.groups,
    types: config.sync.types,
    everyMs: config.sync.everyMs,
    reconcileEveryMs: config.sync.reconcileEveryMs,
  });
  const resumed = await resumeOpenFullPasses(queue, pool, config.sync.groups, config.sync.types);
  log.info({ schedulers: changes.upserted.length, removed: changes.removed, resumed: resumed.length }, 'poll schedules in place');

  const worker: SyncWorker = createSyncWorker({
    pool,
    redis,
    connection,
    prefix: config.redisPrefix,
    apiKey,
    legacyFactory: () =>
      createLegacyClient({
        baseUrl: legacyUrl,
        apiKey,
        apiKeyHeader: config.legacy.apiKeyHeader,
        limiter,
        logger: log,
        http: {
          hooks: {
            onResponse: (info) => metrics.upstreamRequests.inc({ api: 'legacy', outcome: String(info.status) }),
          },
        },
      }),
    logger: log,
    sourceTimezone: config.legacy.sourceTimezone,
    lookbackMs: config.sync.lookbackMs,
    pageSize: config.sync.pageSize,
    types: config.sync.types,
    metrics,
  });
  return {
    pauseKey: authPauseKey(config.redisPrefix, apiKey),
    async stop(timeoutMs: number) {
      await worker.close(timeoutMs);
      await queue.close();
      await limiter.close();
    },
  };
}

/** Turns pg/network errors into one line without stack, host credentials or internals. */
export function describeConnectionError(error: unknown): string {
  const e = error as { message?: string; code?: string; errors?: Array<{ message?: string }> };
  // AggregateError (both IPv4 and IPv6 refused) has an empty message; its children say why.
  const message = e.message || e.errors?.map((x) => x.message).join('; ') || String(error);
  return e.code && !message.includes(e.code) ? `${message} (${e.code})` : message;
}

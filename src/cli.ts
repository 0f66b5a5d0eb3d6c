#!/usr/bin/env node
/**
 * The `subscriber-mirror` command. Errors exit non-zero with one clear line: 2 for bad usage or
 * configuration, 1 for failures while doing the work.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import dotenv from 'dotenv';
import {
  ConfigError,
  loadConfig,
  loadDatabaseUrl,
  needsForRole,
  NOTHING_RECONCILES,
  readCredentialOf,
  ROLES,
  secretsOf,
  secretValuesIn,
  type Role,
} from './config.js';
import { runMigrations } from './db/migrate.js';
import { SUBSCRIBER_TYPES, type SubscriberType } from './db/schema.js';
import { openDatabase } from './db/client.js';
import { createScrubber } from './ground/log.js';
import { UsageError } from './ground/usage-error.js';
import { describeConnectionError, startService, type RunningService } from './start.js';
import { enqueueBackfills, waitForPass, type BackfillTarget } from './sync/backfill.js';
import { createSyncQueue, type PassJobResult } from './sync/schedule.js';
import { collectStatus, formatStatusTable, webhookHealth } from './sync/status.js';
import { authPauseKey, isPaused, readAuthPause } from './sync/auth-pause.js';
import { formatBudgetReport, readRateBudgets, type BudgetReport } from './upstream/budget-limiter.js';

const USAGE = `usage: subscriber-mirror <command> [options]

commands:
  start [--role all|worker|receiver]   migrate, then run the service (default role: all)
  migrate                              apply database migrations and exit
  healthcheck                          exit 0 when the local service is ready (as dist/healthcheck.js)
  backfill (--group ID | --all) [--type T] [--wait]
                                       enqueue full passes (all configured types unless --type)
  status [--json]                      per group × type: cursor, last run, rows, drift, audit accuracy
  audit [--group G] [--type T] [--json]
                                       check the mirror against the service now and repair what differs
  webhooks list|get|register|adopt|update|delete
                                       manage the service-side webhooks
  webhooks replay [--status failed|ignored] [--since DATE]
                                       re-apply stored deliveries
  simulator [options]                  run the mailing-service simulator
  demo [--subscribers N] [--churn N] [--source legacy|current]
                                       simulator + service + webhooks on this machine
  help                                 show this text

configuration comes from the environment (and .env); see docs/operations.md.`;

type Handler = (args: string[]) => Promise<number>;

function parse<T extends NonNullable<ParseArgsConfig['options']>>(args: string[], options: T) {
  try {
    return parseArgs({ args, options, strict: true, allowPositionals: false });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}

const start: Handler = async (args) => {
  const { values } = parse(args, { role: { type: 'string', default: 'all' } });
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

/**
 * `healthcheck`: exits 0 when this container's service is ready (the image's HEALTHCHECK). Asks the
 * ops port when OPS_PORT is set (the detailed readiness), PORT otherwise.
 */
const healthcheck: Handler = async (args) => {
  parse(args, {});
  // The same code as the image's HEALTHCHECK (dist/healthcheck.js), here with .env read too.
  const { runHealthcheck } = await import('./healthcheck.js');
  const { code, message } = await runHealthcheck(process.env);
  if (code === 2) throw new ConfigError([message]);
  process.stdout.write(`${message}\n`);
  return code;
};

const migrate: Handler = async (args) => {
  parse(args, {});
  const databaseUrl = loadDatabaseUrl(process.env);
  try {
    const { applied } = await runMigrations(databaseUrl);
    process.stdout.write(applied > 0 ? `applied ${applied} migration(s)\n` : 'database is up to date\n');
    return 0;
  } catch (error) {
    throw new Error(`cannot migrate the database: ${describeConnectionError(error)}`);
  }
};

function backfillTargets(
  values: { group?: string; type?: string; all?: boolean },
  config: ReturnType<typeof loadConfig>,
): BackfillTarget[] {
  if (values.all && values.group) throw new UsageError('use either --group ID or --all, not both');
  if (!values.all && !values.group) throw new UsageError('backfill needs --group ID (or --all for every SYNC_GROUPS group)');
  if (values.group !== undefined && !/^\d{1,30}$/.test(values.group)) {
    throw new UsageError(`--group must be a numeric group id, got "${values.group}"`);
  }
  if (values.type !== undefined && !(SUBSCRIBER_TYPES as readonly string[]).includes(values.type)) {
    throw new UsageError(`--type must be one of ${SUBSCRIBER_TYPES.join(', ')}, got "${values.type}"`);
  }
  const groups = values.all ? config.sync.groups : [values.group as string];
  if (groups.length === 0) throw new UsageError('--all needs SYNC_GROUPS to name at least one group');
  // Only what the service is configured to mirror: a backfill must not pull in another group's people.
  if (values.group !== undefined && !config.sync.groups.includes(values.group)) {
    throw new UsageError(
      `--group ${values.group} is not configured; configured groups (SYNC_GROUPS): ${config.sync.groups.join(', ') || 'none'}`,
    );
  }
  if (values.type !== undefined && !(config.sync.types as readonly string[]).includes(values.type)) {
    throw new UsageError(`--type ${values.type} is not configured; configured types (SYNC_TYPES): ${config.sync.types.join(', ')}`);
  }
  const types: SubscriberType[] = values.type ? [values.type as SubscriberType] : [...config.sync.types];
  return groups.flatMap((groupId) => types.map((type) => ({ groupId, type })));
}

/** What a backfill's pass proved: members ended (with its confirming passes) and any still awaiting proof. */
function endedText(result: PassJobResult): string {
  if (result.removed === undefined) return '';
  const confirming = result.confirmingPasses
    ? ` after ${result.confirmingPasses} confirming pass${result.confirmingPasses > 1 ? 'es' : ''}`
    : '';
  const awaiting = result.awaitingProof ? `; ${result.awaitingProof} still awaiting proof (the next full pass confirms)` : '';
  return `, ${result.removed} member${result.removed === 1 ? '' : 's'} ended${confirming}${awaiting}`;
}

const backfill: Handler = async (args) => {
  const { values } = parse(args, {
    group: { type: 'string' },
    type: { type: 'string' },
    all: { type: 'boolean', default: false },
    wait: { type: 'boolean', default: false },
  });
  const config = loadConfig(process.env, ['database']);
  const targets = backfillTargets(values, config);
  const queue = createSyncQueue({ url: config.redisUrl, maxRetriesPerRequest: 1 }, config.redisPrefix);
  try {
    const jobs = await enqueueBackfills(queue, targets);
    for (const j of jobs) process.stdout.write(`queued full pass of group ${j.groupId} ${j.type} (job ${j.jobId})\n`);
    if (!values.wait) return 0;
    const { default: cliProgress } = await import('cli-progress');
    let failed = 0;
    for (const j of jobs) {
      const bar = new cliProgress.SingleBar(
        {
          format: `group ${j.groupId} ${j.type.padEnd(12)} [{bar}] {value}/{total} {state}`,
          hideCursor: true,
          noTTYOutput: true,
          notTTYSchedule: 5_000,
        },
        cliProgress.Presets.shades_classic,
      );
      bar.start(1, 0, { state: 'waiting' });
      const outcome = await waitForPass(queue, j.jobId, {
        onProgress: (p, state) => {
          const total = p?.total ?? Math.max(1, p?.rowsSeen ?? 0);
          bar.setTotal(Math.max(total, p?.rowsSeen ?? 0, 1));
          bar.update(p?.rowsSeen ?? 0, { state: state === 'waiting' || state === 'delayed' ? 'waiting for a worker' : state });
        },
      });
      bar.stop();
      if (outcome.state === 'completed') {
        process.stdout.write(
          `group ${j.groupId} ${j.type}: done, ${outcome.result.rowsSeen} rows read, ${outcome.result.rowsWritten} written${endedText(outcome.result)}\n`,
        );
      } else {
        failed += 1;
        process.stderr.write(`subscriber-mirror: group ${j.groupId} ${j.type}: pass failed: ${outcome.error}\n`);
      }
    }
    return failed > 0 ? 1 : 0;
  } finally {
    await queue.close();
  }
};

const status: Handler = async (args) => {
  const { values } = parse(args, { json: { type: 'boolean', default: false } });
  const config = loadConfig(process.env, ['database']);
  const database = openDatabase(config.databaseUrl, { max: 1 });
  try {
    const rows = await collectStatus(database.pool, { groups: config.sync.groups, types: config.sync.types });
    const webhooks = await webhookHealth(database.pool);
    let pause = null;
    let rateBudgets: BudgetReport | null = null;
    const credential = readCredentialOf(config);
    if (credential) {
      const { Redis } = await import('ioredis');
      const redis = new Redis(config.redisUrl, { maxRetriesPerRequest: 1, lazyConnect: true });
      try {
        await redis.connect();
        const p = await readAuthPause(redis, authPauseKey(config.redisPrefix, credential));
        pause = isPaused(p) ? p : null;
        rateBudgets = await readRateBudgets(redis, config.redisPrefix);
      } finally {
        redis.disconnect();
      }
    }
    if (values.json) {
      const reads = config.sync.reconciles ? { source: config.sync.source } : { source: null, notice: NOTHING_RECONCILES };
      process.stdout.write(`${JSON.stringify({ ...reads, authPause: pause, rateBudgets, passes: rows, webhooks }, null, 2)}\n`);
    } else {
      if (!config.sync.reconciles) process.stdout.write(`${NOTHING_RECONCILES}\n\n`);
      if (pause) {
        process.stdout.write(
          `POLLING PAUSED until ${new Date(pause.until).toISOString()} after ${pause.failures} auth failure(s): ${pause.message}\n\n`,
        );
      }
      process.stdout.write(rows.length > 0 ? `${formatStatusTable(rows)}\n` : 'no groups configured and no passes recorded yet\n');
      if (rateBudgets) process.stdout.write(`\n${formatBudgetReport(rateBudgets)}\n`);
      for (const w of webhooks.filter((h) => h.problems.length > 0)) {
        process.stdout.write(
          `WEBHOOK ${w.id}: ${w.problems.join(', ')}${w.missingEvents.length > 0 ? ` (missing ${w.missingEvents.join(', ')})` : ''}\n`,
        );
      }
    }
    return 0;
  } catch (error) {
    throw new Error(`cannot read status: ${describeConnectionError(error)}`);
  } finally {
    await database.close();
  }
};

/** `webhooks replay`: stored deliveries back to pending, then onto the consumer's queue. */
const replay: Handler = async (args) => {
  const { values } = parse(args, { status: { type: 'string', default: 'failed' }, since: { type: 'string' } });
  if (values.status !== 'failed' && values.status !== 'ignored') {
    throw new UsageError(`--status must be failed or ignored, got "${values.status}"`);
  }
  if (values.since !== undefined && !/^\d{4}-\d{2}-\d{2}([T ][\d:.]+(Z|[+-]\d{2}:?\d{2})?)?$/.test(values.since)) {
    throw new UsageError(`--since must be a date like 2026-01-31 or an ISO 8601 instant, got "${values.since}"`);
  }
  if (values.since !== undefined && Number.isNaN(Date.parse(values.since))) {
    throw new UsageError(`--since is not a real date: "${values.since}"`);
  }
  const config = loadConfig(process.env, ['database']);
  const { createDeliveryConsumer } = await import('./webhooks/consumer.js');
  const { replayDeliveries } = await import('./webhooks/replay.js');
  const { createLogger } = await import('./ground/log.js');
  const database = openDatabase(config.databaseUrl, { max: 2 });
  const consumer = createDeliveryConsumer({
    pool: database.pool,
    connection: { url: config.redisUrl, maxRetriesPerRequest: 1 },
    prefix: config.redisPrefix,
    logger: createLogger({ level: 'silent' }).logger,
    work: false,
  });
  try {
    const since = values.since === undefined ? undefined : new Date(Date.parse(values.since)).toISOString();
    const ids = await replayDeliveries(database.pool, { status: values.status, ...(since ? { since } : {}) });
    await consumer.enqueueDeliveries(ids);
    process.stdout.write(
      ids.length > 0
        ? `replaying ${ids.length} ${values.status} deliveries (a running worker applies them)\n`
        : `no ${values.status} deliveries to replay\n`,
    );
    return 0;
  } finally {
    await consumer.close(5_000);
    await database.close();
  }
};

/** `audit`: one audit of the configured pairs (or one group / type) now. */
const audit: Handler = async (args) => {
  const { values } = parse(args, { group: { type: 'string' }, type: { type: 'string' }, json: { type: 'boolean', default: false } });
  const config = loadConfig(process.env, ['poll']);
  if (values.group !== undefined && !config.sync.groups.includes(values.group)) {
    throw new UsageError(
      `--group ${values.group} is not configured; configured groups (SYNC_GROUPS): ${config.sync.groups.join(', ') || 'none'}`,
    );
  }
  if (values.type !== undefined && !(config.sync.types as readonly string[]).includes(values.type)) {
    throw new UsageError(`--type must be one of the configured types (SYNC_TYPES): ${config.sync.types.join(', ')}, got "${values.type}"`);
  }
  const { runAuditCli } = await import('./audit-cli.js');
  const target = { ...(values.group ? { groupId: values.group } : {}), ...(values.type ? { type: values.type as SubscriberType } : {}) };
  return runAuditCli(config, target, values.json);
};

const COMMANDS: Record<string, Handler> = {
  start,
  audit,
  healthcheck,
  migrate,
  backfill,
  status,
  webhooks: async (args) => {
    if (args[0] === 'replay') return replay(args.slice(1));
    const config = loadConfig(process.env, ['manage-webhooks']);
    const { runWebhooksCli } = await import('./webhooks-cli.js');
    const database = openDatabase(config.databaseUrl, { max: 2 });
    try {
      return await runWebhooksCli(args, { config, pool: database.pool });
    } finally {
      await database.close();
    }
  },
  simulator: async (args) => {
    // Loaded on demand: the service itself never needs the simulator's code.
    const { runSimulatorCli } = await import('./simulator/cli.js');
    await runSimulatorCli(args);
    return 0;
  },
  demo: async (args) => {
    const { runDemo } = await import('./demo.js');
    await runDemo(args);
    return 0;
  },
  help: async () => {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  },
};

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  const scrub = createScrubber();
  try {
    if (command === '--help' || command === '-h') {
      process.stdout.write(`${USAGE}\n`);
      return 0;
    }
    // No command is a usage error: the usage goes to stderr, so a script's stdout stays clean.
    if (!command) throw new UsageError('no command given');
    const handler = COMMANDS[command];
    if (!handler) throw new UsageError(`unknown command "${command}"`);
    return await handler(rest);
  } catch (error) {
    if (error instanceof UsageError) {
      // A subcommand's own usage error already explains its options.
      process.stderr.write(`subscriber-mirror: ${error.message}\n${error.printUsage ? `\n${USAGE}\n` : ''}`);
      return 2;
    }
    if (error instanceof ConfigError) {
      process.stderr.write(`subscriber-mirror: ${error.message}\n`);
      return 2;
    }
    // Secrets from the environment may appear in upstream error text; never print them.
    try {
      for (const s of secretsOf(loadConfig(process.env))) scrub.add(s);
    } catch {
      // Config is invalid; the raw variables are still the values to hide.
      for (const s of secretValuesIn(process.env)) scrub.add(s);
    }
    process.stderr.write(`subscriber-mirror: ${scrub((error as Error).message ?? String(error))}\n`);
    return 1;
  }
}

function invokedDirectly(): boolean {
  const script = process.argv[1];
  if (!script) return false;
  try {
    // npm's bin entry is a symlink; compare real paths.
    return realpathSync(script) === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

if (invokedDirectly()) {
  dotenv.config({ quiet: true });
  main(process.argv.slice(2)).then(
    (code) => {
      // `start` returns after a graceful stop; other commands leave no handles they need.
      process.exit(code);
    },
    (error: unknown) => {
      process.stderr.write(`subscriber-mirror: ${(error as Error).message}\n`);
      process.exit(1);
    },
  );
}

#!/usr/bin/env node
/**
 * The `subscriber-mirror` command. Errors exit non-zero with one clear line: 2 for bad usage or
 * configuration, 1 for failures while doing the work.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import dotenv from 'dotenv';
import { ConfigError, loadConfig, needsForRole, ROLES, secretsOf, type Role } from './config.js';
import { runMigrations } from './db/migrate.js';
import { createScrubber } from './log.js';
import { describeConnectionError, startService } from './start.js';

export class UsageError extends Error {
  override name = 'UsageError';
}

const USAGE = `usage: subscriber-mirror <command> [options]

commands:
  start [--role all|worker|receiver]   migrate, then run the service (default role: all)
  migrate                              apply database migrations and exit
  backfill --group ID [--type T] [--wait]
                                       enqueue a full pass for a group
  status                               per group × type: cursor, last run, rows, drift
  webhooks list|get|register|update|delete
                                       manage the service-side webhooks
  simulator [options]                  run the mailing-service simulator
  help                                 show this text

configuration comes from the environment (and .env); see README.md.`;

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
  const role = values.role as string;
  if (!(ROLES as readonly string[]).includes(role)) {
    throw new UsageError(`--role must be one of ${ROLES.join(', ')}, got "${role}"`);
  }
  const config = loadConfig(process.env, needsForRole(role as Role));
  const service = await startService(config, role as Role);
  await new Promise<void>((resolve) => {
    let signals = 0;
    const onSignal = (signal: NodeJS.Signals) => {
      signals += 1;
      // A second signal means "now": the operator does not want to wait for a graceful stop.
      if (signals > 1) process.exit(1);
      const timer = setTimeout(() => {
        service.logger.error({ timeoutMs: config.shutdownTimeoutMs }, 'graceful shutdown timed out');
        process.exit(1);
      }, config.shutdownTimeoutMs);
      timer.unref();
      service.stop(signal).then(resolve, (error: unknown) => {
        service.logger.error({ err: error }, 'error during shutdown');
        resolve();
      });
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
  });
  return 0;
};

const migrate: Handler = async (args) => {
  parse(args, {});
  const config = loadConfig(process.env, ['database']);
  try {
    const { applied } = await runMigrations(config.databaseUrl);
    process.stdout.write(applied > 0 ? `applied ${applied} migration(s)\n` : 'database is up to date\n');
    return 0;
  } catch (error) {
    throw new Error(`cannot migrate the database: ${describeConnectionError(error)}`);
  }
};

const notImplemented =
  (name: string): Handler =>
  async () => {
    process.stderr.write(`subscriber-mirror: "${name}" is not implemented yet\n`);
    return 1;
  };

const COMMANDS: Record<string, Handler> = {
  start,
  migrate,
  backfill: notImplemented('backfill'),
  status: notImplemented('status'),
  webhooks: notImplemented('webhooks'),
  simulator: async (args) => {
    // Loaded on demand: the service itself never needs the simulator's code.
    const { runSimulatorCli } = await import('./simulator/cli.js');
    await runSimulatorCli(args);
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
    if (!command || command === '--help' || command === '-h') {
      process.stdout.write(`${USAGE}\n`);
      return command ? 0 : 2;
    }
    const handler = COMMANDS[command];
    if (!handler) throw new UsageError(`unknown command "${command}"`);
    return await handler(rest);
  } catch (error) {
    if (error instanceof UsageError) {
      process.stderr.write(`subscriber-mirror: ${error.message}\n\n${USAGE}\n`);
      return 2;
    }
    if ((error as Error).name === 'UsageError') {
      // A subcommand's own usage error already explains its options.
      process.stderr.write(`subscriber-mirror: ${(error as Error).message}\n`);
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
      for (const name of ['MAILER_API_KEY', 'MAILER_WEBHOOKS_TOKEN', 'ADMIN_TOKEN']) {
        const v = process.env[name];
        if (v) scrub.add(v);
      }
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

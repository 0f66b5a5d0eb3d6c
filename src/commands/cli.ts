/**
 * The `subscriber-mirror` command: one module per command in this folder, chosen from {@link COMMANDS}
 * and loaded when run. Errors exit non-zero with one clear line: 2 for bad usage or configuration,
 * 1 for failures while doing the work. `src/cli.ts` (`dist/cli.js`, the package's bin and the image's
 * entry point) runs {@link runCli}.
 */
import dotenv from 'dotenv';
import { ConfigError, loadConfig, secretsOf, secretValuesIn } from '../config.js';
import { createScrubber } from '../ground/log.js';
import { printable } from '../ground/terminal.js';
import { UsageError } from '../ground/usage-error.js';
import { parseOptions, type Command } from './args.js';

const USAGE = `usage: subscriber-mirror <command> [options]

commands:
  start [--role all|worker|receiver]   migrate, then run the service (default role: all)
  migrate                              apply database migrations and exit
  healthcheck                          exit 0 when the local service is ready (as dist/healthcheck.js)
  backfill (--group ID | --all) [--type T] [--wait] [--account NAME]
                                       enqueue full passes (all configured types unless --type)
  status [--json] [--account NAME]     per group × type: cursor, last run, rows, drift, audit accuracy
                                       (every account when several are declared and none is named)
  audit [--group G] [--type T] [--json] [--verify] [--account NAME]
                                       check the mirror against the service now and repair what differs;
                                       --verify: exit 3 when it still differs after the repair
  fields [--refresh] [--json] [--account NAME]
                                       the custom field definitions (subscriber_fields); --refresh reads them now
  erase (--email E | --id I) [--account NAME]
                                       erase a person's personal data from the mirror now (not the service's)
  analysts list|limit ROLE --account A[,B]|unlimit ROLE
                                       which accounts an analyst's login may read
  accounts list|remove NAME [--yes]    the accounts the database holds; remove one no longer declared,
                                       with all its rows (without --yes: what it would remove)
  webhooks list|get|register|adopt|update|delete [--account NAME]
                                       manage the service-side webhooks (of one account)
  webhooks replay [--status failed|ignored] [--since DATE] [--account NAME]
                                       re-apply stored deliveries (of one account)
  simulator [options]                  run the mailing-service simulator
  demo [--subscribers N] [--churn N] [--source legacy|current]
                                       simulator + service + webhooks on this machine
  help                                 show this text

--account NAME: the account a command serves, needed when ACCOUNTS declares several.
configuration comes from the environment (and .env); see docs/operations.md.`;

/**
 * `healthcheck`: exits 0 when this container's service is ready (the image's HEALTHCHECK). Asks the
 * ops port when OPS_PORT is set (the detailed readiness), PORT otherwise. The same code as
 * `dist/healthcheck.js`, here with .env read too.
 */
const healthcheck: Command = async (args) => {
  parseOptions(args, {});
  const { runHealthcheck } = await import('./healthcheck.js');
  const { code, message } = await runHealthcheck(process.env);
  if (code === 2) throw new ConfigError([message]);
  process.stdout.write(`${message}\n`);
  return code;
};

/** Each command, loaded when it runs: the service itself never loads the simulator, `status` no HTTP server. */
const COMMANDS: Record<string, () => Promise<Command>> = {
  start: async () => (await import('./start.js')).startCommand,
  audit: async () => (await import('./audit.js')).auditCommand,
  fields: async () => (await import('./fields.js')).fieldsCommand,
  healthcheck: async () => healthcheck,
  migrate: async () => (await import('./migrate.js')).migrateCommand,
  backfill: async () => (await import('./backfill.js')).backfillCommand,
  status: async () => (await import('./status.js')).statusCommand,
  erase: async () => (await import('./erase.js')).eraseCommand,
  analysts: async () => (await import('./analysts.js')).analystsCommand,
  accounts: async () => (await import('./accounts.js')).accountsCommand,
  webhooks: async () => (await import('./webhooks.js')).webhooksCommand,
  simulator: async () => {
    const { runSimulatorCli } = await import('../simulator/cli.js');
    return async (args) => {
      await runSimulatorCli(args);
      return 0;
    };
  },
  demo: async () => {
    const { runDemo } = await import('./demo.js');
    return async (args) => {
      await runDemo(args);
      return 0;
    };
  },
  help: async () => async () => {
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
    const load = COMMANDS[command];
    if (!load) throw new UsageError(`unknown command "${command}"`);
    return await (
      await load()
    )(rest);
  } catch (error) {
    if (error instanceof UsageError) {
      // A subcommand's own usage error already explains its options.
      process.stderr.write(`subscriber-mirror: ${printable(error.message)}\n${error.printUsage ? `\n${USAGE}\n` : ''}`);
      return 2;
    }
    if (error instanceof ConfigError) {
      process.stderr.write(`subscriber-mirror: ${printable(error.message)}\n`);
      return 2;
    }
    // Secrets from the environment may appear in upstream error text; never print them.
    try {
      for (const s of secretsOf(loadConfig(process.env))) scrub.add(s);
    } catch {
      // Config is invalid; the raw variables are still the values to hide.
      for (const s of secretValuesIn(process.env)) scrub.add(s);
    }
    process.stderr.write(`subscriber-mirror: ${printable(scrub((error as Error).message ?? String(error)))}\n`);
    return 1;
  }
}

/** Runs the command line as a program: reads .env, then exits with the command's code. */
export function runCli(): void {
  dotenv.config({ quiet: true });
  main(process.argv.slice(2)).then(
    (code) => {
      // `start` returns after a graceful stop; other commands leave no handles they need.
      process.exit(code);
    },
    (error: unknown) => {
      process.stderr.write(`subscriber-mirror: ${printable((error as Error).message)}\n`);
      process.exit(1);
    },
  );
}

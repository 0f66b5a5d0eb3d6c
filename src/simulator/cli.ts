/**
 * `subscriber-mirror simulator`: runs the simulator until SIGINT/SIGTERM. Bad flags throw a
 * UsageError naming every bad value; the main CLI turns that into exit code 2.
 */
import { parseArgs } from 'node:util';
import { UsageError } from '../ground/usage-error.js';
import { isBoundary } from './filters.js';
import { ALL_EVENT_KINDS, BATCH_ONLY_KINDS } from './kinds.js';
import { parseZone } from './time.js';
import { startSimulator } from './index.js';
import type { Simulator, SimulatorOptions } from './index.js';
import { RATE_LIMIT_MODELS, type RateLimitScope } from './server.js';
import type { Webhook } from './webhooks.js';

export const SIMULATOR_USAGE = `Usage: subscriber-mirror simulator [options]

  --port N              listening port (default 4010; 0 = any free port)
  --host ADDR           listening address (default 127.0.0.1)
  --api-key KEY         legacy API key (default sim-key)
  --api-key-header NAME header carrying it (default X-Service-ApiKey)
  --webhooks-token T    bearer token of /api/webhooks (default sim-token)
  --subscribers N       subscribers to seed (default 1000)
  --groups N            groups to create (default 3)
  --large-ids           ids above 2^53
  --seed N              PRNG seed (default 1)
  --churn N             random mutations per second (default 0)
  --time-scale X        multiplies batch interval, retry delays, rate-limit window (default 1)
  --rate-limit N|off    legacy requests per minute per budget (default 60)
  --rate-limit-model M  endpoint (default: a budget per endpoint) | account (one budget) |
                        mixed (lists per endpoint, counts share one budget)
  --page-cap N          silently cap legacy pages at N rows
  --current-page-cap N  silently cap current-API member pages at N rows (default 100)
  --moved-account       legacy group endpoints answer 404 as for an account moved to the current platform
  --timezone TZ         IANA name or offset like +14:00 (default UTC)
  --boundary B          midnight | whole-day (default midnight)
  --webhook-target URL  register webhooks for every event kind, delivering to URL
  --help                show this text`;

const FLAGS = {
  port: { type: 'string' },
  host: { type: 'string' },
  'api-key': { type: 'string' },
  'api-key-header': { type: 'string' },
  'webhooks-token': { type: 'string' },
  subscribers: { type: 'string' },
  groups: { type: 'string' },
  'large-ids': { type: 'boolean' },
  seed: { type: 'string' },
  churn: { type: 'string' },
  'time-scale': { type: 'string' },
  'rate-limit': { type: 'string' },
  'rate-limit-model': { type: 'string' },
  'page-cap': { type: 'string' },
  'current-page-cap': { type: 'string' },
  'moved-account': { type: 'boolean' },
  timezone: { type: 'string' },
  boundary: { type: 'string' },
  'webhook-target': { type: 'string' },
  help: { type: 'boolean' },
} as const;

export interface CliIo {
  /** Where lines go (default stdout). */
  print?: (line: string) => void;
  /** Stops the simulator when aborted (in addition to SIGINT/SIGTERM). */
  signal?: AbortSignal;
  /** Called once the simulator listens (tests use it to reach the instance). */
  onStarted?: (sim: Simulator) => void;
}

export interface CliConfig {
  options: SimulatorOptions;
  webhookTarget: string | null;
  help: boolean;
}

/** Parses and validates flags; throws one UsageError listing every problem. */
export function parseSimulatorArgs(argv: readonly string[]): CliConfig {
  let values;
  try {
    ({ values } = parseArgs({ args: [...argv], options: FLAGS, strict: true, allowPositionals: false }));
  } catch (error) {
    throw new UsageError(`${error instanceof Error ? error.message : String(error)}\n\n${SIMULATOR_USAGE}`, { printUsage: false });
  }
  const problems: string[] = [];
  const integer = (flag: string, raw: string | undefined, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number => {
    if (raw === undefined) return fallback;
    const value = Number(raw);
    if (!/^\d+$/.test(raw) || value < min || value > max) {
      problems.push(`--${flag} must be an integer from ${min} to ${max}, got "${raw}"`);
      return fallback;
    }
    return value;
  };
  const number = (flag: string, raw: string | undefined, fallback: number, positiveOnly: boolean): number => {
    if (raw === undefined) return fallback;
    const value = Number(raw);
    if (raw.trim() === '' || !Number.isFinite(value) || value < 0 || (positiveOnly && value === 0)) {
      problems.push(`--${flag} must be a ${positiveOnly ? 'positive' : 'non-negative'} number, got "${raw}"`);
      return fallback;
    }
    return value;
  };

  const options: SimulatorOptions = {
    port: integer('port', values.port, 4010, 0, 65535),
    host: values.host ?? '127.0.0.1',
    apiKey: nonEmpty('api-key', values['api-key'], 'sim-key', problems),
    apiKeyHeader: headerName(values['api-key-header'], problems),
    webhooksToken: nonEmpty('webhooks-token', values['webhooks-token'], 'sim-token', problems),
    subscribers: integer('subscribers', values.subscribers, 1000, 0, 50_000_000),
    groups: integer('groups', values.groups, 3, 1, 10_000),
    largeIds: values['large-ids'] ?? false,
    seed: integer('seed', values.seed, 1, 0, 2 ** 32 - 1),
    churn: number('churn', values.churn, 0, false),
    timeScale: number('time-scale', values['time-scale'], 1, true),
  };
  const rateLimit = values['rate-limit'];
  if (rateLimit === 'off' || rateLimit === 'false') options.rateLimit = false;
  else options.rateLimit = integer('rate-limit', rateLimit, 60, 1);
  const model = values['rate-limit-model'];
  if (model !== undefined) {
    if ((RATE_LIMIT_MODELS as readonly string[]).includes(model)) options.rateLimitScope = model as RateLimitScope;
    else problems.push(`--rate-limit-model must be one of ${RATE_LIMIT_MODELS.join(', ')}, got "${model}"`);
  }
  if (values['page-cap'] !== undefined) options.pageCap = integer('page-cap', values['page-cap'], 100, 1);
  if (values['current-page-cap'] !== undefined) options.currentPageCap = integer('current-page-cap', values['current-page-cap'], 100, 1);
  if (values['moved-account']) options.movedAccount = true;
  if (values.timezone !== undefined) {
    try {
      parseZone(values.timezone);
      options.timezone = values.timezone;
    } catch {
      problems.push(`--timezone must be an IANA name or an offset like +14:00, got "${values.timezone}"`);
    }
  }
  if (values.boundary !== undefined) {
    if (isBoundary(values.boundary)) options.boundary = values.boundary;
    else problems.push(`--boundary must be midnight or whole-day, got "${values.boundary}"`);
  }
  const webhookTarget = values['webhook-target'] ?? null;
  if (webhookTarget !== null && !isHttpUrl(webhookTarget)) {
    problems.push(`--webhook-target must be an http(s) URL, got "${webhookTarget}"`);
  }
  if (problems.length > 0) throw new UsageError(problems.join('\n'), { printUsage: false });
  return { options, webhookTarget, help: values.help ?? false };
}

function nonEmpty(flag: string, raw: string | undefined, fallback: string, problems: string[]): string {
  if (raw === undefined) return fallback;
  if (raw.trim() === '') problems.push(`--${flag} must not be empty`);
  return raw;
}

function headerName(raw: string | undefined, problems: string[]): string {
  if (raw === undefined) return 'X-Service-ApiKey';
  if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(raw)) problems.push(`--api-key-header must be an HTTP header name, got "${raw}"`);
  return raw;
}

function isHttpUrl(text: string): boolean {
  try {
    const url = new URL(text);
    return url.protocol === 'http:' || url.protocol === 'https:';
  } catch {
    return false;
  }
}

/** docs/upstream.md, "Event kinds": deleted/open/click need a batchable webhook, so the target gets two webhooks. */
export function registerTargetWebhooks(sim: Simulator, url: string): Webhook[] {
  const direct = ALL_EVENT_KINDS.filter((kind) => !BATCH_ONLY_KINDS.includes(kind));
  return [
    sim.webhooks.register({ name: 'simulator target', url, events: direct, batchable: false }),
    sim.webhooks.register({ name: 'simulator target (batched)', url, events: BATCH_ONLY_KINDS, batchable: true }),
  ];
}

export async function runSimulatorCli(argv: string[], io: CliIo = {}): Promise<void> {
  const print = io.print ?? ((line: string) => process.stdout.write(`${line}\n`));
  const config = parseSimulatorArgs(argv);
  if (config.help) {
    print(SIMULATOR_USAGE);
    return;
  }
  const sim = await startSimulator(config.options);
  const groups = sim.world.groupIds();
  print(
    `simulator listening on ${sim.url} (legacy ${sim.url}/api/v2, webhooks ${sim.url}/api/webhooks) ` +
      `key header ${sim.apiKeyHeader}, groups ${groups.join(',')}, ${sim.world.count()} subscribers`,
  );
  print(`  try: curl -H '${sim.apiKeyHeader}: ${sim.apiKey}' '${sim.url}/api/v2/groups/${groups[0] ?? '1'}/subscribers?limit=2'`);
  print(
    `  current API: curl -H 'Authorization: Bearer ${sim.webhooksToken}' '${sim.url}/api/groups/${groups[0] ?? '1'}/subscribers?filter[status]=active&limit=2'`,
  );
  if (config.webhookTarget !== null) {
    for (const hook of registerTargetWebhooks(sim, config.webhookTarget)) {
      print(`  webhook ${hook.id} (${hook.batchable ? 'batchable' : 'direct'}) -> ${hook.url} secret ${hook.secret}`);
    }
  }
  io.onStarted?.(sim);
  await untilStopped(io.signal);
  await sim.close();
}

function untilStopped(signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const stop = (): void => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      signal?.removeEventListener('abort', stop);
      resolve();
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
    if (signal?.aborted) stop();
    else signal?.addEventListener('abort', stop);
  });
}

/**
 * `subscriber-mirror demo` (`npm run demo`): the whole product on one machine without Docker.
 *
 * Starts the simulator with churn, the service (role all) against it with the real rate limit,
 * registers the two webhooks exactly as an operator would, and prints SQL to try. Subscribers appear
 * in Postgres within a minute and keep changing through both paths.
 */
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { loadConfig } from '../config.js';
import { DEFAULT_ACCOUNT, openDatabase } from '../db/client.js';
import { UsageError } from '../ground/usage-error.js';
import { startSimulator } from '../simulator/index.js';
import type { World } from '../simulator/world.js';
import { startService } from './start.js';
import { createWebhooksApi } from '../upstream/webhooks-api.js';
import { registerWebhooks } from '../webhooks/manage.js';

/** The demo's own usage errors say all there is: the CLI prints them without its usage. */
function demoUsageError(message: string): UsageError {
  return new UsageError(message, { printUsage: false });
}

const DEMO_DATABASE = 'subscriber_mirror_demo';

function positiveInt(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!/^\d+$/.test(value)) throw demoUsageError(`--${name} must be a whole number, got "${value}"`);
  return Number(value);
}

/** Without an explicit DATABASE_URL the demo uses its own database on the local server. */
async function demoDatabaseUrl(): Promise<string> {
  if (process.env.DATABASE_URL) return process.env.DATABASE_URL;
  const server = 'postgres://postgres@127.0.0.1:5432/postgres';
  const client = new pg.Client({ connectionString: server });
  await client.connect();
  try {
    const { rowCount } = await client.query('select 1 from pg_database where datname = $1', [DEMO_DATABASE]);
    if (!rowCount) await client.query(`create database ${DEMO_DATABASE}`);
  } finally {
    await client.end();
  }
  return server.replace(/\/postgres$/, `/${DEMO_DATABASE}`);
}

/**
 * The read settings of each source against the simulator. The current platform reads and manages
 * webhooks on one host with one token; it has no date filter, so its full passes are the only reads.
 */
function readSettings(source: 'legacy' | 'current', sim: { url: string; apiKey: string; webhooksToken: string }): Record<string, string> {
  const webhooks = { MAILER_WEBHOOKS_URL: sim.url, MAILER_WEBHOOKS_TOKEN: sim.webhooksToken };
  if (source === 'current') return { ...webhooks, SYNC_SOURCE: 'current' };
  return { ...webhooks, SYNC_SOURCE: 'legacy', MAILER_LEGACY_URL: sim.url, MAILER_API_KEY: sim.apiKey };
}

interface DemoOptions {
  subscribers: number;
  churn: number;
  port: number;
  source: 'legacy' | 'current';
}

function parseDemoArgs(argv: string[]): DemoOptions {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: { subscribers: { type: 'string' }, churn: { type: 'string' }, port: { type: 'string' }, source: { type: 'string' } },
      strict: true,
      allowPositionals: false,
    }));
  } catch (error) {
    throw demoUsageError(
      `${(error as Error).message}\nusage: subscriber-mirror demo [--subscribers N] [--churn N] [--port N] [--source legacy|current]`,
    );
  }
  const source = values.source ?? 'legacy';
  if (source !== 'legacy' && source !== 'current') throw demoUsageError(`--source must be legacy or current, got "${source}"`);
  return {
    subscribers: positiveInt('subscribers', values.subscribers, 5_000),
    churn: positiveInt('churn', values.churn, 5),
    port: positiveInt('port', values.port, 8080),
    source,
  };
}

/**
 * Two typed custom fields for the demo's SQL (docs/sql.md, "Custom fields as columns"): a number and
 * a date on every seventh member of the first group, a few of them values that do not parse (shown
 * as null in `subscriber_fields`). Set before the webhooks exist, so the first full pass reads them.
 */
function defineDemoFields(world: World): void {
  world.defineField('score', 'number', 'Score');
  world.defineField('birthday', 'date', 'Birthday');
  const firstGroup = world.groupIds()[0];
  if (firstGroup === undefined) return;
  world.members(firstGroup).forEach((id, i) => {
    if (i % 7 !== 0) return;
    const n = i / 7;
    const unparsable = n % 25 === 24;
    world.updateFields(id, {
      score: unparsable ? 'n/a' : String((n * 37) % 100) + (n % 3 === 0 ? '.5' : ''),
      birthday: unparsable
        ? `${1970 + (n % 40)}-02-30`
        : `${1960 + (n % 45)}-${String(1 + (n % 12)).padStart(2, '0')}-${String(1 + (n % 28)).padStart(2, '0')}`,
    });
  });
}

export async function runDemo(argv: string[]): Promise<void> {
  const { subscribers, churn, port, source } = parseDemoArgs(argv);

  // Service-side delays (batch interval, delivery retries) run 20x faster so changes show quickly;
  // the legacy rate limit stays the real 60 per minute.
  const sim = await startSimulator({
    subscribers,
    groups: 2,
    churn,
    timeScale: 0.05,
    rateLimitWindowMs: 60_000,
  });
  defineDemoFields(sim.world);
  const databaseUrl = await demoDatabaseUrl();
  // A fresh token per run unless one is set: the status page needs one, and a fixed one would be
  // guessable on any machine running the demo.
  const adminToken = process.env.ADMIN_TOKEN || randomBytes(18).toString('base64url');
  const config = loadConfig(
    {
      ...process.env,
      DATABASE_URL: databaseUrl,
      ...readSettings(source, sim),
      SYNC_GROUPS: sim.world.groupIds().join(','),
      SYNC_EVERY: process.env.SYNC_EVERY ?? '30s',
      RECONCILE_EVERY: process.env.RECONCILE_EVERY ?? '15m',
      REDIS_PREFIX: process.env.REDIS_PREFIX ?? 'subscriber-mirror-demo',
      PORT: String(port),
      // On this machine only: the demo serves its admin page (and /metrics) on its one port, over
      // plain http, so it must not listen on the network.
      HOST: process.env.HOST || '127.0.0.1',
      ...(process.env.OPS_PORT ? {} : { ADMIN_ON_PUBLIC_PORT: 'true' }),
      ADMIN_COOKIE_INSECURE: process.env.ADMIN_COOKIE_INSECURE || 'true',
      ADMIN_TOKEN: adminToken,
      LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn',
    },
    ['poll', 'receive', 'manage-webhooks'],
  );
  const service = await startService(config, 'all');
  const database = openDatabase(config.databaseUrl, { max: 2, account: DEFAULT_ACCOUNT });
  try {
    const api = createWebhooksApi({ baseUrl: sim.url, token: sim.webhooksToken });
    await registerWebhooks(api, database.pool, {
      url: `http://127.0.0.1:${service.port}${config.webhookPath}`,
      name: 'demo',
    });
  } finally {
    await database.close();
  }

  const psql = `psql '${databaseUrl}'`;
  // Every table holds the account (docs/sql.md); the examples name the demo's.
  const account = `account = '${DEFAULT_ACCOUNT}'`;
  process.stdout.write(
    [
      '',
      `subscriber-mirror demo is running (Ctrl-C to stop)`,
      `  simulator: ${sim.url}  (${source} API, ${subscribers} subscribers, groups ${sim.world.groupIds().join(', ')}, ${churn} changes/s)`,
      `  service:   http://127.0.0.1:${service.port}  (/readyz${service.opsPort === service.port ? ', /metrics' : ''}; webhooks at ${config.webhookPath})`,
      `  status:    http://127.0.0.1:${service.opsPort ?? service.port}/admin/  (log in with the admin token ${adminToken})`,
      `  database:  ${databaseUrl}`,
      '',
      'Subscribers appear within a minute. Try:',
      `  ${psql} -c "select status, count(*) from subscribers where ${account} group by status"`,
      `  ${psql} -c "select group_id, type, count(*) from group_members where ${account} and removed_at is null group by 1, 2 order by 1, 2"`,
      `  ${psql} -c "select id, email, status, updated_at, mirrored_via from subscribers where ${account} order by mirrored_at desc limit 10"`,
      `  ${psql} -c "select kind, count(*) from subscriber_activity where ${account} group by kind order by 2 desc"`,
      `  ${psql} -c "select id, score, birthday from subscriber_fields where ${account} and score > 50 order by score desc limit 10"`,
      `  DATABASE_URL='${databaseUrl}' SYNC_GROUPS=${sim.world.groupIds().join(',')} npm run cli -- status`,
      '',
    ].join('\n'),
  );

  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  await service.stop('demo stopped');
  await sim.close();
}

/**
 * `subscriber-mirror accounts list | remove NAME [--yes]` (docs/operations.md, "Removing an
 * account"): the accounts the database holds, and the removal of one the settings no longer declare,
 * with every row keyed by it (the references to `accounts` cascade, migration 0032) and its Redis
 * keys. An agency whose client leaves keeps nothing of the client's audience.
 *
 * Without `--yes`, `remove` only says what it would remove. It refuses (exit 2, nothing changed) an
 * account the settings still declare, one the database does not hold, one a worker still serves
 * (a live worker replica declares it, or its sync queue has a worker connected: a worker not
 * restarted since the settings changed), and one an analyst may read alone.
 */
import { parseArgs } from 'node:util';
import { QueueGetters, type KeyPrefixOptions, type QueueBaseOptions } from 'bullmq';
import { Redis } from 'ioredis';
import type pg from 'pg';
import { accountRedisPrefix, loadConfig, type Config } from '../config.js';
import { accountRows, accountSubscribers, listAccounts, noSuchAccount, removeAccount, type TableRows } from '../db/accounts.js';
import { checkedAccountName, openDatabase } from '../db/client.js';
import { printable } from '../ground/terminal.js';
import { UsageError } from '../ground/usage-error.js';
import { liveReplicaServes } from '../sync/replicas.js';
import { SYNC_QUEUE } from '../sync/schedule.js';
import type { Command } from './args.js';

const USAGE = 'usage: subscriber-mirror accounts list | remove NAME [--yes]';

const out = (text: string) => process.stdout.write(printable(text));

type AccountsAction = { action: 'list' } | { action: 'remove'; account: string; yes: boolean };

/** The options → what to do, or a UsageError (exit 2) before anything is read. */
export function parseAccountsArgs(args: string[]): AccountsAction {
  let parsed;
  try {
    parsed = parseArgs({ args, options: { yes: { type: 'boolean', default: false } }, strict: true, allowPositionals: true });
  } catch (error) {
    throw new UsageError(`${(error as Error).message}\n${USAGE}`, { printUsage: false });
  }
  const [action, account, ...extra] = parsed.positionals;
  if (action === 'list' && account === undefined && !parsed.values.yes) return { action: 'list' };
  if (action !== 'remove' || account === undefined || extra.length > 0) throw new UsageError(USAGE, { printUsage: false });
  try {
    checkedAccountName(account);
  } catch (error) {
    throw new UsageError(`accounts remove: ${(error as Error).message}; nothing changed`, { printUsage: false });
  }
  return { action: 'remove', account, yes: parsed.values.yes };
}

export const accountsCommand: Command = async (args) => {
  const parsed = parseAccountsArgs(args);
  const config = loadConfig(process.env, ['database']);
  // Deployment-wide: the statements name their account themselves.
  const database = openDatabase(config.databaseUrl, { applicationName: 'subscriber-mirror-accounts', max: 1 });
  try {
    if (parsed.action === 'list') return await listCommand(database.pool, config);
    return await removeCommand(database.pool, config, parsed.account, parsed.yes);
  } finally {
    await database.close();
  }
};

async function listCommand(pool: pg.Pool, config: Config): Promise<number> {
  const declared = config.accounts.map((a) => a.name);
  const held = await accountSubscribers(pool);
  const rows = [
    ['ACCOUNT', 'DECLARED', 'SUBSCRIBERS'],
    ...held.map((a) => [a.name, declared.includes(a.name) ? 'yes' : 'no (accounts remove removes it)', String(a.subscribers)]),
    ...declared.filter((name) => !held.some((a) => a.name === name)).map((name) => [name, 'yes (a worker adds it when it starts)', '-']),
  ];
  const widths = [0, 1].map((i) => Math.max(...rows.map((r) => (r[i] as string).length)));
  for (const [name, isDeclared, subscribers] of rows) {
    out(`${(name as string).padEnd(widths[0] as number)}  ${(isDeclared as string).padEnd(widths[1] as number)}  ${subscribers}\n`);
  }
  return 0;
}

async function removeCommand(pool: pg.Pool, config: Config, account: string, yes: boolean): Promise<number> {
  if (config.accounts.some((a) => a.name === account)) {
    throw new UsageError(
      `account ${account} is still declared (ACCOUNTS): take it out of the settings and restart the workers first; nothing changed`,
      { printUsage: false },
    );
  }
  const held = await listAccounts(pool);
  if (!held.includes(account)) throw noSuchAccount(account, held);
  const prefix = accountRedisPrefix(config.redisNamespace, account);
  await refuseWhileServed(config, prefix, account);
  if (!yes) {
    const rows = await accountRows(pool, account);
    out(`account ${account} holds:\n${tableLines(rows)}nothing removed: run again with --yes to remove the account and these rows\n`);
    return 0;
  }
  const removed = await removeAccount(pool, account);
  out(`removed account ${account}:\n${tableLines(removed)}`);
  out(await removeKeysOf(config, account, prefix));
  return 0;
}

/** Removes the Redis keys of a removed account; what it did, as a line. */
async function removeKeysOf(config: Config, account: string, prefix: string): Promise<string> {
  // Account `default`'s are under REDIS_PREFIX itself, beside the deployment's own keys and every other account's namespace.
  if (prefix === config.redisNamespace) {
    return `its Redis keys (its queue and budgets, no personal data) are under ${prefix}: beside the deployment's own, so they stay; nothing serves them\n`;
  }
  const keys = await withRedis(config, (redis) => removeAccountKeys(redis, prefix)).catch((error: unknown) => {
    // The rows are gone, so running the command again would find no account: say what is left.
    throw new Error(
      `account ${account}'s rows are removed, but not its Redis keys (its queue and budgets, no personal data) under ` +
        `${prefix}: and b_${prefix}: (${String(error)}); nothing serves them, and redis-cli --scan --pattern '${prefix}:*' lists them`,
    );
  });
  return `and ${keys} Redis keys (under ${prefix}: and b_${prefix}:)\n`;
}

/** Runs `use` on a client of its own, disconnected after. */
async function withRedis<T>(config: Config, use: (redis: Redis) => Promise<T>): Promise<T> {
  const redis = new Redis(config.redisUrl, { maxRetriesPerRequest: 1, lazyConnect: true });
  // Its failures reach the caller through the commands that meet them; unhandled, ioredis prints them raw.
  redis.on('error', () => {});
  try {
    return await use(redis);
  } finally {
    redis.disconnect();
  }
}

/**
 * A worker with the old settings still serves the account: its consumer or its passes would write
 * again. Live worker replicas say which accounts they serve (a webhook-only one included) with each
 * heartbeat; a sync worker on the account's queue is asked too, since a replica that is stopping has
 * left the list before its passes have ended.
 */
async function refuseWhileServed(config: Config, prefix: string, account: string): Promise<void> {
  const serving = await replicasServing(config, account);
  if (serving > 0) {
    throw new UsageError(
      `${serving} worker replica(s) still serve account ${account} (their ACCOUNTS declare it): restart the workers with the new settings first; nothing changed`,
      { printUsage: false },
    );
  }
  // The getters, not a Queue: a Queue writes its meta key when it opens, and a dry run or a refusal changes nothing.
  // QueueGetters' options type leaves out the prefix its base class reads, as a Queue's has it.
  const options: QueueBaseOptions & KeyPrefixOptions = { connection: { url: config.redisUrl, maxRetriesPerRequest: 1 }, prefix };
  const queue = new QueueGetters(SYNC_QUEUE, options);
  try {
    const workers = await queue.getWorkersCount();
    if (workers > 0) {
      throw new UsageError(
        `a worker still serves account ${account} (${workers} connected to its queue): restart the workers with the new settings first; nothing changed`,
        { printUsage: false },
      );
    }
  } finally {
    await queue.close();
  }
}

/** How many live worker replicas declare `account` (a replica that has not said what it serves counts: it may). */
async function replicasServing(config: Config, account: string): Promise<number> {
  const serves = await withRedis(config, (redis) => liveReplicaServes(redis, config.redisNamespace));
  return [...serves.values()].filter((accounts) => accounts === null || accounts.includes(account)).length;
}

function tableLines(rows: readonly TableRows[]): string {
  const width = Math.max(...rows.map((r) => r.table.length));
  return rows.map((r) => `  ${r.table.padEnd(width)}  ${r.rows}\n`).join('');
}

/** The account's keys: its queue, pass locks and pauses under its prefix, its budgets under `b_` and the prefix (the limiter's). */
async function removeAccountKeys(redis: Redis, prefix: string): Promise<number> {
  return (await removeKeysUnder(redis, prefix)) + (await removeKeysUnder(redis, `b_${prefix}`));
}

/**
 * Deletes every key under `prefix:`, a page of SCAN at a time. The
 * pattern escapes the prefix, whose characters are the operator's (REDIS_PREFIX), and ends with the
 * separator, so account `shop` never matches `shop_eu`'s keys.
 */
async function removeKeysUnder(redis: Redis, prefix: string): Promise<number> {
  const pattern = `${prefix.replace(/[*?[\]\\]/g, '\\$&')}:*`;
  let removed = 0;
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 500);
    if (keys.length > 0) removed += await redis.unlink(...keys);
    cursor = next;
  } while (cursor !== '0');
  return removed;
}

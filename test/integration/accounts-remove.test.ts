/**
 * Removing an account (docs/operations.md, "Removing an account"): `accounts remove NAME --yes`
 * deletes an account the settings no longer declare with every row keyed by it, in every table,
 * and its Redis keys; the other accounts keep every row and key. Refusals change nothing.
 */
import { Worker } from 'bullmq';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accountRedisPrefix } from '../../src/config.js';
import { accountRows, declareAccounts, listAccounts, removeAccount } from '../../src/db/accounts.js';
import { limitAnalyst, listAnalystLimits, unlimitAnalyst } from '../../src/db/analyst-accounts.js';
import { openDatabase, type Database } from '../../src/db/client.js';
import { replicasKey } from '../../src/sync/replicas.js';
import { SYNC_QUEUE } from '../../src/sync/schedule.js';
import { populateAccount } from '../helpers/account-rows.js';
import { runCli } from '../helpers/cli.js';
import { whileReplicaBeats } from '../helpers/replica-beat.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';

let db: TestDatabase;
const pools: Database[] = [];
const prefix = uniquePrefix('accounts-remove');
const suffix = `${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
const ANALYST = `sm_rm_analyst_${suffix}`;

/** Rows per table of every account (the tables whose reference to `accounts` cascades). */
async function rowsByAccount(): Promise<Record<string, Record<string, number>>> {
  const result: Record<string, Record<string, number>> = {};
  for (const account of await listAccounts(db.pool)) {
    result[account] = Object.fromEntries((await accountRows(db.pool, account)).map((t) => [t.table, t.rows]));
  }
  return result;
}

/** Declares `account` and fills every table with a row of it. */
async function addAccount(account: string): Promise<void> {
  await declareAccounts(db.pool, [account]);
  const database = openDatabase(db.url, { max: 2, account });
  pools.push(database);
  await populateAccount(database.pool, account);
}

/** The accounts' keys as the worker writes them: its queue's and locks under its prefix, its budgets under `b_`. */
async function writeKeys(redis: Redis, account: string): Promise<string[]> {
  const at = accountRedisPrefix(prefix, account);
  const keys = [`${at}:${SYNC_QUEUE}:id`, `${at}:pass-wanted:g10:active`, `b_${at}:legacy_settings`];
  for (const key of keys) await redis.set(key, '1');
  return keys;
}

const cli = (args: string[], accounts: string) =>
  runCli(
    ['accounts', ...args],
    { DATABASE_URL: db.url, REDIS_URL: redisUrl(), REDIS_PREFIX: prefix, ACCOUNTS: accounts },
    { timeoutMs: 60_000 },
  );

beforeAll(async () => {
  db = await createTestDatabase();
  await populateAccount(db.pool, 'default');
  for (const account of ['shop', 'shop_eu', 'brand']) await addAccount(account);
  await db.pool.query(`create role ${ANALYST} login in role subscriber_mirror_analyst`);
}, 60_000);

afterAll(async () => {
  for (const database of pools) await database.close();
  await deleteInstallKeys(prefix);
  await db?.drop();
  const admin = new pg.Client({ connectionString: db.url.replace(/\/[^/?]+(\?|$)/, '/postgres$1') });
  await admin.connect();
  await admin.query(`drop role if exists ${ANALYST}`).catch(() => {});
  await admin.end();
});

describe('removeAccount', () => {
  it('removes every row of the account in every table, and no row of another account', async () => {
    const before = await rowsByAccount();
    // Not vacuous: the account has a row in every table the removal covers.
    expect(Object.entries(before['brand'] ?? {}).filter(([, n]) => n === 0)).toEqual([]);
    expect(Object.keys(before['brand'] ?? {})).toEqual(
      expect.arrayContaining(['subscribers', 'subscriber_versions_past', 'group_members', 'webhook_deliveries', 'sync_passes', 'erasures']),
    );

    const removed = await removeAccount(db.pool, 'brand');

    expect(Object.fromEntries(removed.map((t) => [t.table, t.rows]))).toEqual(before['brand']);
    const after = await rowsByAccount();
    expect(after['brand']).toBeUndefined();
    expect(await listAccounts(db.pool)).toEqual(['default', 'shop', 'shop_eu']);
    for (const account of ['default', 'shop', 'shop_eu']) expect(after[account], account).toEqual(before[account]);
    // Nothing of it is left in any table or view with an account column, however it was reached.
    const { rows } = await db.pool.query<{ relation: string }>(
      `select table_name as relation from information_schema.columns where table_schema = 'public' and column_name = 'account' order by 1`,
    );
    for (const { relation } of rows) {
      const { rows: left } = await db.pool.query<{ n: number }>(`select count(*)::int as n from ${relation} where account = 'brand'`);
      expect(left[0]?.n, relation).toBe(0);
    }
    await addAccount('brand');
  });

  it('refuses an account an analyst may read alone, and changes nothing; a wider limit only narrows', async () => {
    await limitAnalyst(db.pool, ANALYST, ['brand']);
    const before = await rowsByAccount();
    await expect(removeAccount(db.pool, 'brand')).rejects.toThrow(
      new RegExp(`analyst login\\(s\\) ${ANALYST} may read account brand alone`),
    );
    expect(await rowsByAccount()).toEqual(before);
    // The database holds the same line itself: a limit never vanishes with its account.
    await expect(db.pool.query(`delete from accounts where name = 'brand'`)).rejects.toThrow(/analyst_accounts/);

    await limitAnalyst(db.pool, ANALYST, ['brand', 'shop']);
    await removeAccount(db.pool, 'brand');
    expect(await listAnalystLimits(db.pool)).toEqual([{ role: ANALYST, accounts: ['shop'] }]);
    await unlimitAnalyst(db.pool, ANALYST);
    await addAccount('brand');
  });

  it('a write of the account waits for the removal, then fails; one committed before it is removed with the rest', async () => {
    await addAccount('late');
    const late = openDatabase(db.url, { max: 2, account: 'late' });
    try {
      // Committed while the removal waits for the account's row: counted and removed.
      const early = await late.pool.connect();
      await early.query('begin');
      await early.query(`insert into groups (id, name) values ('11', 'written before')`);
      const removing = removeAccount(db.pool, 'late');
      await new Promise((resolve) => setTimeout(resolve, 200));
      await early.query('commit');
      early.release();
      const removed = await removing;
      expect(removed.find((t) => t.table === 'groups')?.rows).toBe(2);

      // Started while the removal holds the row: waits, then fails; nothing of the account is left.
      // removeAccount's own statements, by hand, to hold its transaction open at that point.
      await addAccount('late');
      const holder = await db.pool.connect();
      await holder.query('begin');
      await holder.query(`select 1 from accounts where name = 'late' for update`);
      // Its failure is caught at once: it may arrive while the commit below is still being awaited,
      // before any assertion is attached, and would then count as an unhandled rejection.
      const writing = late.pool.query(`insert into groups (id, name) values ('12', 'written during')`).then(
        () => new Error('the write succeeded'),
        (error: unknown) => error,
      );
      await new Promise((resolve) => setTimeout(resolve, 200));
      await holder.query(`delete from accounts where name = 'late'`);
      await holder.query('commit');
      holder.release();
      expect(String(await writing)).toMatch(/violates foreign key constraint/);
      const { rows } = await db.pool.query<{ n: number }>(`select count(*)::int as n from groups where account = 'late'`);
      expect(rows[0]?.n).toBe(0);
    } finally {
      await late.close();
    }
  });

  it('refuses an account the database does not hold', async () => {
    await expect(removeAccount(db.pool, 'nosuch')).rejects.toThrow(
      /the database holds no account nosuch \(it holds: brand, default, shop, shop_eu\); nothing changed/,
    );
  });
});

describe('subscriber-mirror accounts', () => {
  it('lists the accounts the database holds, and which the settings declare', async () => {
    const run = await cli(['list'], 'default,shop,shop_eu,fresh');
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toBe(
      [
        'ACCOUNT  DECLARED                               SUBSCRIBERS',
        'brand    no (accounts remove removes it)        1',
        'default  yes                                    1',
        'shop     yes                                    1',
        'shop_eu  yes                                    1',
        'fresh    yes (a worker adds it when it starts)  -',
        '',
      ].join('\n'),
    );
  }, 60_000);

  it('refuses a declared account, an unknown one, a bad name and bad usage; nothing changes', async () => {
    const before = await rowsByAccount();
    const cases: Array<{ args: string[]; message: RegExp }> = [
      {
        args: ['remove', 'shop', '--yes'],
        message: /account shop is still declared \(ACCOUNTS\): take it out of the settings and restart the workers first; nothing changed/,
      },
      {
        args: ['remove', 'nosuch', '--yes'],
        message: /the database holds no account nosuch \(it holds: brand, default, shop, shop_eu\); nothing changed/,
      },
      { args: ['remove', 'Shop!', '--yes'], message: /accounts remove: invalid account name "Shop!"/ },
      { args: ['remove'], message: /usage: subscriber-mirror accounts list \| remove NAME \[--yes\]/ },
      { args: ['list', '--yes'], message: /usage: subscriber-mirror accounts/ },
      { args: ['drop', 'brand'], message: /usage: subscriber-mirror accounts/ },
    ];
    for (const { args, message } of cases) {
      const run = await cli(args, 'default,shop');
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stderr, args.join(' ')).toMatch(message);
    }
    expect(await rowsByAccount()).toEqual(before);
  }, 120_000);

  it('refuses while a worker still serves the account (its settings not reloaded)', async () => {
    const worker = new Worker(SYNC_QUEUE, async () => undefined, {
      connection: { url: redisUrl() },
      prefix: accountRedisPrefix(prefix, 'brand'),
    });
    try {
      await worker.waitUntilReady();
      const before = await rowsByAccount();
      const run = await cli(['remove', 'brand', '--yes'], 'default,shop,shop_eu');
      expect(run.code).toBe(2);
      expect(run.stderr).toMatch(
        /a worker still serves account brand \(1 connected to its queue\): restart the workers with the new settings first; nothing changed/,
      );
      expect(await rowsByAccount()).toEqual(before);
    } finally {
      await worker.close();
    }
  }, 60_000);

  it('refuses while a live worker replica declares the account, one that only takes webhooks included', async () => {
    const redis = new Redis(redisUrl());
    const replica = 'replica-with-old-settings';
    try {
      const before = await rowsByAccount();
      // A replica serving other accounts only does not hold the removal back (the dry run goes through).
      const other = await whileReplicaBeats(redis, prefix, replica, { serves: ['default', 'shop', 'shop_eu'] }, () =>
        cli(['remove', 'brand'], 'default,shop,shop_eu'),
      );
      expect(other.code, other.stderr).toBe(0);
      // Declared there, even read by no replica (no queue, no sync worker: a webhook-only account).
      const run = await whileReplicaBeats(redis, prefix, replica, { serves: ['default', 'brand'] }, () =>
        cli(['remove', 'brand', '--yes'], 'default,shop,shop_eu'),
      );
      expect(run.code).toBe(2);
      expect(run.stderr).toMatch(
        /1 worker replica\(s\) still serve account brand \(their ACCOUNTS declare it\): restart the workers with the new settings first; nothing changed/,
      );
      expect(await rowsByAccount()).toEqual(before);
    } finally {
      // The list and the hashes beside it: the next test counts every key under the prefix.
      const keys = await redis.keys(`${replicasKey(prefix)}*`);
      if (keys.length > 0) await redis.del(...keys);
      redis.disconnect();
    }
  }, 60_000);

  it('says what it would remove without --yes, then removes the rows and the Redis keys of that account alone', async () => {
    const redis = new Redis(redisUrl());
    try {
      const gone = await writeKeys(redis, 'shop');
      // shop_eu's prefix starts like shop's; account default's is the bare prefix.
      const kept = [...(await writeKeys(redis, 'shop_eu')), ...(await writeKeys(redis, 'default'))];
      const before = await rowsByAccount();

      const keysBefore = (await redis.keys(`*${prefix}*`)).sort();
      const dry = await cli(['remove', 'shop'], 'default,shop_eu');
      expect(dry.code, dry.stderr).toBe(0);
      // Not a key written either (a BullMQ Queue would write its meta key when it opens).
      expect((await redis.keys(`*${prefix}*`)).sort()).toEqual(keysBefore);
      expect(dry.stdout).toMatch(/^account shop holds:\n {2}audit_results +1\n/);
      expect(dry.stdout).toMatch(
        / {2}subscribers +1\n[\s\S]*nothing removed: run again with --yes to remove the account and these rows\n$/,
      );
      expect(await rowsByAccount()).toEqual(before);
      expect(await redis.exists(...gone)).toBe(gone.length);

      const run = await cli(['remove', 'shop', '--yes'], 'default,shop_eu');
      expect(run.code, run.stderr).toBe(0);
      expect(run.stdout).toMatch(/^removed account shop:\n[\s\S]* {2}subscribers +1\n[\s\S]*\nand 3 Redis keys \(under /);
      const after = await rowsByAccount();
      expect(after['shop']).toBeUndefined();
      for (const account of ['default', 'shop_eu', 'brand']) expect(after[account], account).toEqual(before[account]);
      expect(await redis.exists(...gone)).toBe(0);
      expect(await redis.exists(...kept)).toBe(kept.length);
    } finally {
      redis.disconnect();
    }
  }, 120_000);

  it("removes account default's rows but leaves every key under REDIS_PREFIX itself, which the deployment and other accounts share", async () => {
    const redis = new Redis(redisUrl());
    try {
      const own = await writeKeys(redis, 'default');
      const others = await writeKeys(redis, 'shop_eu');
      const before = await rowsByAccount();
      const keysBefore = (await redis.keys(`*${prefix}*`)).sort();

      const run = await cli(['remove', 'default', '--yes'], 'shop_eu');
      expect(run.code, run.stderr).toBe(0);
      expect(run.stdout).toMatch(/^removed account default:\n[\s\S]* {2}subscribers +1\n/);
      expect(run.stdout).toMatch(
        /its Redis keys \(its queue and budgets, no personal data\) are under \S+: beside the deployment's own, so they stay/,
      );
      const after = await rowsByAccount();
      expect(after['default']).toBeUndefined();
      expect(after['shop_eu']).toEqual(before['shop_eu']);
      expect(await redis.exists(...own, ...others)).toBe(own.length + others.length);
      expect((await redis.keys(`*${prefix}*`)).sort()).toEqual(keysBefore);
    } finally {
      redis.disconnect();
    }
  }, 120_000);
});

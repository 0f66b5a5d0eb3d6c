/**
 * Analysts limited to some accounts (docs/sql.md, "Roles"; migration 0030): a login listed in
 * `analyst_accounts` reads no row of another account through any table, view or function; a login
 * not listed reads every account; the service's own role is not limited.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase, type Database } from '../../src/db/client.js';
import { declareAccounts } from '../../src/db/accounts.js';
import { limitAnalyst, listAnalystLimits, unlimitAnalyst } from '../../src/db/analyst-accounts.js';
import { populateAccount as populate } from '../helpers/account-rows.js';
import { runCli } from '../helpers/cli.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

let db: TestDatabase;
let shop: Database;
const suffix = `${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
const LIMITED = `sm_ana_limited_${suffix}`;
const UNLIMITED = `sm_ana_all_${suffix}`;

/** Every relation of the schema that has an account column the analyst role may read. */
async function accountRelations(): Promise<string[]> {
  const { rows } = await db.pool.query<{ relation: string }>(
    `select c.table_name as relation from information_schema.columns c
      where c.table_schema = 'public' and c.column_name = 'account' and c.table_name <> 'analyst_accounts'
        and has_column_privilege('subscriber_mirror_analyst', quote_ident(c.table_name), 'account', 'SELECT')
      order by 1`,
  );
  return rows.map((r) => r.relation);
}

/** Runs `sql` as `role` (as a login would) in a transaction that is rolled back. */
async function as<R extends pg.QueryResultRow>(role: string, sql: string): Promise<R[]> {
  const client = await db.pool.connect();
  try {
    await client.query('begin');
    await client.query(`set local role ${role}`);
    return (await client.query<R>(sql)).rows;
  } finally {
    await client.query('rollback').catch(() => {});
    client.release();
  }
}

/** Rows of each account `role` reads in `relation` (columns it may not read are left out). */
async function countsAs(role: string, relation: string): Promise<Record<string, number>> {
  const rows = await as<{ account: string; n: number }>(role, `select account, count(*)::int as n from ${relation} group by account`);
  return Object.fromEntries(rows.map((r) => [r.account, r.n]));
}

beforeAll(async () => {
  db = await createTestDatabase();
  await declareAccounts(db.pool, ['shop']);
  shop = openDatabase(db.url, { max: 2, account: 'shop' });
  await populate(db.pool, 'default');
  await populate(shop.pool, 'shop');
  await db.pool.query(`create role ${LIMITED} login in role subscriber_mirror_analyst`);
  await db.pool.query(`create role ${UNLIMITED} login in role subscriber_mirror_analyst`);
  await limitAnalyst(db.pool, LIMITED, ['default']);
}, 60_000);

afterAll(async () => {
  await shop?.close();
  await db?.drop();
  const admin = new pg.Client({ connectionString: db.url.replace(/\/[^/?]+(\?|$)/, '/postgres$1') });
  await admin.connect();
  await admin.query(`drop role if exists ${LIMITED}`).catch(() => {});
  await admin.query(`drop role if exists ${UNLIMITED}`).catch(() => {});
  await admin.end();
});

describe('an analyst limited to one account', () => {
  it('reads no row of another account in any table or view, and every row of its own', async () => {
    const relations = await accountRelations();
    // Every mirrored table and view has the account: the list is the contract this test holds.
    expect(relations).toEqual(
      expect.arrayContaining([
        'subscribers',
        'group_members',
        'current_group_members',
        'subscriber_versions',
        'suppressions',
        'sync_status',
      ]),
    );
    expect(relations).not.toContain('webhook_delivery_hashes'); // not the analyst's to read at all (0012)
    const seen: Record<string, Record<string, number>> = {};
    for (const relation of relations) {
      seen[relation] = await countsAs(LIMITED, relation);
    }
    const leaks = Object.entries(seen).filter(([, counts]) => (counts['shop'] ?? 0) > 0);
    expect(leaks).toEqual([]);
    // Not vacuous: the analyst reads its own account's rows in every relation this test filled.
    const empty = Object.entries(seen)
      .filter(([, counts]) => !counts['default'])
      .map(([relation]) => relation);
    expect(empty).toEqual([]);
    // The service's own role (the owner, here a superuser) sees both accounts in the same tables.
    const owner = await db.pool.query<{ account: string }>(`select distinct account from subscribers order by 1`);
    expect(owner.rows.map((r) => r.account)).toEqual(['default', 'shop']);
  });

  it('reads no row of another account through the as-of functions nor the accounts list', async () => {
    const asOf = await as<{ account: string }>(LIMITED, `select distinct account from subscribers_as_of(now() + interval '1 day')`);
    expect(asOf.map((r) => r.account)).toEqual(['default']);
    const members = await as<{ account: string }>(LIMITED, `select distinct account from group_members_as_of(now())`);
    expect(members.map((r) => r.account)).toEqual(['default']);
    const names = await as<{ name: string }>(LIMITED, `select name from accounts order by 1`);
    expect(names.map((r) => r.name)).toEqual(['default']);
  });

  it('cannot lift its own limit', async () => {
    await expect(as(LIMITED, `delete from analyst_accounts`)).rejects.toThrow(/permission denied/);
    await expect(as(LIMITED, `set local row_security = off; select count(*) from subscribers`)).rejects.toThrow(/row-level security/);
  });
});

describe('an analyst not limited', () => {
  it('reads every account', async () => {
    expect(await countsAs(UNLIMITED, 'subscribers')).toEqual({ default: 1, shop: 1 });
    expect(await countsAs(UNLIMITED, 'current_group_members')).toEqual({ default: 1, shop: 1 });
  });
});

describe('limits are kept by subscriber-mirror analysts', () => {
  it('lists, widens and lifts a limit; refuses an undeclared account and changes nothing', async () => {
    expect(await listAnalystLimits(db.pool)).toEqual([{ role: LIMITED, accounts: ['default'] }]);
    await expect(limitAnalyst(db.pool, LIMITED, ['nope'])).rejects.toThrow(/no account "nope" is declared/);
    expect(await listAnalystLimits(db.pool)).toEqual([{ role: LIMITED, accounts: ['default'] }]);
    await limitAnalyst(db.pool, LIMITED, ['default', 'shop']);
    expect(await countsAs(LIMITED, 'subscribers')).toEqual({ default: 1, shop: 1 });
    await limitAnalyst(db.pool, LIMITED, ['shop']);
    expect(await countsAs(LIMITED, 'subscribers')).toEqual({ shop: 1 });
    await unlimitAnalyst(db.pool, LIMITED);
    expect(await listAnalystLimits(db.pool)).toEqual([]);
    expect(await countsAs(LIMITED, 'subscribers')).toEqual({ default: 1, shop: 1 });
    await limitAnalyst(db.pool, LIMITED, ['default']);
  });

  it('refuses a role that is not an analyst', async () => {
    await expect(limitAnalyst(db.pool, 'postgres', ['default'])).rejects.toThrow(/not a member of subscriber_mirror_analyst/);
  });
});

describe('subscriber-mirror analysts', () => {
  const analysts = (args: string[]) => runCli(['analysts', ...args], { DATABASE_URL: db.url }, { timeoutMs: 60_000 });

  it('limits, lists and lifts from the command line', async () => {
    const limited = await analysts(['limit', UNLIMITED, '--account', 'shop']);
    expect(limited.code).toBe(0);
    expect(limited.stdout).toBe(`${UNLIMITED} now reads accounts shop only\n`);
    const list = await analysts(['list']);
    expect(list.stdout).toBe(`${UNLIMITED}  shop\n${LIMITED}  default\n`); // by role name
    expect(await countsAs(UNLIMITED, 'subscribers')).toEqual({ shop: 1 });
    const lifted = await analysts(['unlimit', UNLIMITED]);
    expect(lifted.stdout).toBe(`${UNLIMITED} reads every account again\n`);
    expect(await countsAs(UNLIMITED, 'subscribers')).toEqual({ default: 1, shop: 1 });
  }, 120_000);

  it('exits 2 on bad usage or an undeclared account, and changes nothing', async () => {
    const before = await listAnalystLimits(db.pool);
    for (const args of [[], ['limit', LIMITED], ['limit', '--account', 'shop'], ['list', '--account', 'shop'], ['drop', LIMITED]]) {
      const run = await analysts(args);
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stderr, args.join(' ')).toMatch(/usage: subscriber-mirror analysts|needs --account|belongs to limit only/);
    }
    const unknown = await analysts(['limit', LIMITED, '--account', 'nope']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/no account "nope" is declared \(accounts: default, shop\)/);
    expect(await listAnalystLimits(db.pool)).toEqual(before);
  }, 120_000);
});

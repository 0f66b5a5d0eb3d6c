/**
 * The worker's accounts on one set of connections (`openAccountPools`, src/db/client.ts): every
 * checkout names its account on the connection before the caller sees it, so accounts taking turns
 * on one connection each write and read only their own rows, and a process holds at most `max`
 * connections however many accounts it serves.
 */
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accountRows, declareAccounts } from '../../src/db/accounts.js';
import { openAccountPools, type AccountPools, type CheckoutFailure } from '../../src/db/client.js';
import { withTransaction } from '../../src/mirror/store/executor.js';
import { populateAccount } from '../helpers/account-rows.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

let db: TestDatabase;
let pools: AccountPools;

/** The account the session serves and which connection served it. */
async function whoAmI(pool: pg.Pool): Promise<{ account: string; pid: number }> {
  const { rows } = await pool.query<{ account: string; pid: number }>('select mirror_account() as account, pg_backend_pid() as pid');
  return rows[0] as { account: string; pid: number };
}

/** Runs `fn` on account pools of their own (`options.max` shared connections), closed after it. */
async function withAccountPools(
  options: Parameters<typeof openAccountPools>[1],
  fn: (shared: AccountPools) => Promise<void>,
): Promise<void> {
  const shared = openAccountPools(db.url, options);
  try {
    await fn(shared);
  } finally {
    await shared.close();
  }
}

beforeAll(async () => {
  db = await createTestDatabase();
  await declareAccounts(db.pool, ['pool_a', 'pool_b', 'pool_c']);
});

afterAll(async () => {
  await pools?.close();
  await db?.drop();
});

describe('accounts sharing one connection', () => {
  beforeAll(() => {
    pools = openAccountPools(db.url, { max: 1 });
  });

  it('names the account of each checkout on the connection it takes', async () => {
    const a = pools.forAccount('pool_a');
    const b = pools.forAccount('pool_b');
    const first = await whoAmI(a);
    const second = await whoAmI(b);
    const third = await whoAmI(a);
    expect([first.account, second.account, third.account]).toEqual(['pool_a', 'pool_b', 'pool_a']);
    // One connection served all three: the account moved with each checkout.
    expect(new Set([first.pid, second.pid, third.pid]).size).toBe(1);
  });

  it('keeps each account to its rows in every table, turn by turn on the one connection', async () => {
    const a = pools.forAccount('pool_a');
    const b = pools.forAccount('pool_b');
    // Side by side: with one connection, their statements alternate on it.
    await Promise.all([populateAccount(a, 'pool_a'), populateAccount(b, 'pool_b')]);
    const rowsOf = async (account: string) => (await accountRows(db.pool, account)).filter((t) => t.rows > 0).map((t) => t.table);
    const ofA = await rowsOf('pool_a');
    const ofB = await rowsOf('pool_b');
    expect(ofA.length).toBeGreaterThan(5);
    expect(ofB).toEqual(ofA);
    // Reading through a pool sees its account's rows only (the statements filter on mirror_account()).
    const { rows } = await b.query<{ n: string }>('select count(*) as n from subscribers where account = mirror_account()');
    const { rows: all } = await db.pool.query<{ account: string; n: string }>(
      `select account, count(*) as n from subscribers where account in ('pool_a', 'pool_b') group by account order by account`,
    );
    expect(all.map((r) => r.account)).toEqual(['pool_a', 'pool_b']);
    expect(rows[0]?.n).toBe(all[1]?.n);
  });

  it('holds the account through a transaction, whatever the other accounts ask meanwhile', async () => {
    const a = pools.forAccount('pool_a');
    const c = pools.forAccount('pool_c');
    const waitingForC = whoAmI(c);
    const inside = await withTransaction(a, async (client) => {
      const { rows } = await client.query<{ account: string }>('select mirror_account() as account');
      return rows[0]?.account;
    });
    expect(inside).toBe('pool_a');
    expect((await waitingForC).account).toBe('pool_c');
  });

  it("a statement kept with a generic plan (the webhook apply's) reads each execution's account", async () => {
    const named = { name: 'account_pools_whoami', text: 'select mirror_account() as account, pg_backend_pid() as pid' };
    const run = (pool: pg.Pool) =>
      withTransaction(pool, async (client) => {
        await client.query('set local plan_cache_mode = force_generic_plan');
        return (await client.query<{ account: string; pid: number }>(named)).rows[0];
      });
    const seen = [];
    for (const account of ['pool_a', 'pool_b', 'pool_a', 'pool_c', 'pool_b', 'pool_a']) seen.push(await run(pools.forAccount(account)));
    expect(seen.map((s) => s?.account)).toEqual(['pool_a', 'pool_b', 'pool_a', 'pool_c', 'pool_b', 'pool_a']);
    expect(new Set(seen.map((s) => s?.pid)).size).toBe(1);
  });
});

describe('bounds and ends', () => {
  it('opens at most max connections for any number of accounts', () =>
    withAccountPools({ max: 2 }, async (shared) => {
      const accounts = ['pool_a', 'pool_b', 'pool_c'].map((name) => shared.forAccount(name));
      const seen = await Promise.all(Array.from({ length: 30 }, (_, i) => whoAmI(accounts[i % 3] as pg.Pool)));
      expect(new Set(seen.map((s) => s.pid)).size).toBeLessThanOrEqual(2);
      expect(seen.map((s) => s.account)).toEqual(Array.from({ length: 30 }, (_, i) => ['pool_a', 'pool_b', 'pool_c'][i % 3]));
    }));

  it('an ended account pool waits for its clients, then refuses checkouts; the others go on', () =>
    withAccountPools({ max: 2 }, async (shared) => {
      const a = shared.forAccount('pool_a');
      const b = shared.forAccount('pool_b');
      const held = await a.connect();
      let ended = false;
      const ending = a.end().then(() => (ended = true));
      // A second stop (a shutdown racing a hand-over) waits for the same clients.
      const again = a.end();
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(ended).toBe(false);
      held.release();
      await Promise.all([ending, again]);
      expect(ended).toBe(true);
      await expect(a.query('select 1')).rejects.toThrow(/after calling end on the pool \(account pool_a\)/);
      expect((await whoAmI(b)).account).toBe('pool_b');
    }));

  it('never hands another account a connection left inside a transaction', () =>
    withAccountPools({ max: 1 }, async (shared) => {
      const a = shared.forAccount('pool_a');
      const b = shared.forAccount('pool_b');
      const leaked = await a.connect();
      const leakedPid = (await leaked.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]?.pid;
      await leaked.query('begin');
      // A caller's bug: released with its transaction open. A set_config in it would roll back with it.
      leaked.release();
      const next = await whoAmI(b);
      expect(next.account).toBe('pool_b');
      expect(next.pid).not.toBe(leakedPid);
      expect((await whoAmI(a)).account).toBe('pool_a');
    }));

  it('tells its watch how long each account waited for a connection, and why a checkout got none', () => {
    const waits: Array<[string, number]> = [];
    const failures: Array<[string, CheckoutFailure]> = [];
    const watch = {
      waited: (account: string, s: number) => waits.push([account, s]),
      failed: (account: string, why: CheckoutFailure) => failures.push([account, why]),
    };
    // B is held up for 150 ms, well within the timeout even on a busy machine.
    return withAccountPools({ max: 1, connectionTimeoutMillis: 2_000, watch }, async (shared) => {
      const a = shared.forAccount('pool_a');
      const b = shared.forAccount('pool_b');
      const held = await a.connect();
      expect(shared.stats()).toEqual({ busy: 1, idle: 0, waiting: 0 });
      const waiting = whoAmI(b);
      await new Promise((resolve) => setTimeout(resolve, 150));
      expect(shared.stats()).toEqual({ busy: 1, idle: 0, waiting: 1 });
      held.release();
      expect((await waiting).account).toBe('pool_b');
      expect(shared.stats()).toEqual({ busy: 0, idle: 1, waiting: 0 });
      const waitedByB = waits.filter(([account]) => account === 'pool_b').map(([, s]) => s);
      expect(waitedByB).toHaveLength(1);
      expect(waitedByB[0]).toBeGreaterThanOrEqual(0.14);
      // Every checkout is told, A's (the first opened the connection) as well.
      expect(waits.filter(([account]) => account === 'pool_a')).toHaveLength(1);
      expect(failures).toEqual([]);

      // Every connection busy for longer than connectionTimeoutMillis: the checkout fails, and says why.
      const busy = await a.connect();
      await expect(b.query('select 1')).rejects.toThrow(/timeout exceeded when trying to connect/);
      busy.release();
      expect(failures).toEqual([['pool_b', 'timeout']]);
    });
  });

  it('tells its watch of a checkout that could not connect', async () => {
    const failures: Array<[string, CheckoutFailure]> = [];
    // Nothing listens on port 1: connecting fails at once.
    const shared = openAccountPools('postgres://postgres@127.0.0.1:1/none', {
      max: 1,
      watch: { waited: () => {}, failed: (account, why) => failures.push([account, why]) },
    });
    try {
      await expect(shared.forAccount('pool_c').query('select 1')).rejects.toThrow();
      expect(failures).toEqual([['pool_c', 'error']]);
    } finally {
      await shared.close();
    }
  });

  it('refuses an account name that is not one', () =>
    withAccountPools({ max: 1 }, async (shared) => {
      expect(() => shared.forAccount('Pool-A')).toThrow(/invalid account name/);
    }));
});

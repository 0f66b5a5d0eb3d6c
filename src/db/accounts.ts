/**
 * The `accounts` table: the accounts this deployment declares (docs/operations.md, "Several
 * accounts"). The worker writes them at start, before any pool of an account opens, so the foreign
 * key of every mirrored table accepts that account's rows and refuses any other's. `accounts
 * remove` deletes one that is no longer declared, and the database removes its rows with it.
 */
import type pg from 'pg';
import type { Queryable } from '../ground/queryable.js';
import { UsageError } from '../ground/usage-error.js';
import { dropLimitsOn } from './analyst-accounts.js';
import { checkedAccountName, inTransaction } from './client.js';

/**
 * Adds the declared accounts that the table does not hold yet. An account no longer declared keeps
 * its row and its mirrored rows (nothing serves it any more) until `accounts remove` deletes them.
 */
export async function declareAccounts(db: Queryable, names: readonly string[]): Promise<void> {
  for (const name of names) checkedAccountName(name);
  await db.query(`insert into accounts (name) select unnest($1::text[]) on conflict (name) do nothing`, [names]);
}

/** The accounts the table holds, by name. */
export async function listAccounts(db: Queryable): Promise<string[]> {
  const { rows } = await db.query<{ name: string }>(`select name from accounts order by name`);
  return rows.map((r) => r.name);
}

/** The refusal of an account the table does not hold, naming those it holds (exit 2: nothing changes). */
export function noSuchAccount(account: string, held: readonly string[]): UsageError {
  return new UsageError(`the database holds no account ${account} (it holds: ${held.join(', ') || 'none'}); nothing changed`, {
    printUsage: false,
  });
}

/** The accounts the table holds, each with its subscribers (deleted ones included: they are rows it holds). */
export async function accountSubscribers(db: Queryable): Promise<Array<{ name: string; subscribers: number }>> {
  const { rows } = await db.query<{ name: string; subscribers: string }>(
    `select a.name, (select count(*) from subscribers s where s.account = a.name) as subscribers from accounts a order by a.name`,
  );
  return rows.map((r) => ({ name: r.name, subscribers: Number(r.subscribers) }));
}

/** How many rows of one account a table holds. */
export interface TableRows {
  table: string;
  rows: number;
}

/**
 * The rows of `account` in every table whose reference to `accounts` cascades: what removing the
 * account removes. The catalog names the tables, so a table added later is counted without a list
 * here to keep up to date.
 */
export async function accountRows(db: Queryable, account: string): Promise<TableRows[]> {
  const { rows: tables } = await db.query<{ table: string }>(
    `select conrelid::regclass::text as table from pg_constraint
      where contype = 'f' and confrelid = 'accounts'::regclass and confdeltype = 'c' order by 1`,
  );
  const counts: TableRows[] = [];
  // `table` comes from the catalog as a quoted identifier; only the account is a parameter.
  for (const { table } of tables) {
    const { rows } = await db.query<{ n: string }>(`select count(*) as n from ${table} where account = $1`, [account]);
    counts.push({ table, rows: Number(rows[0]?.n ?? 0) });
  }
  return counts;
}

/**
 * Deletes `account` and, by the cascading references, every row keyed by it, in one transaction;
 * returns what it removed. The account's row is locked first, so no write of the account lands
 * while its rows are counted and removed (each waits on the lock, then fails on the missing
 * account). An account the table does not hold, or one an analyst may read alone (`dropLimitsOn`),
 * is a UsageError and nothing changes. Whether the settings still declare it is the caller's check.
 */
export async function removeAccount(pool: pg.Pool, account: string): Promise<TableRows[]> {
  checkedAccountName(account);
  return inTransaction(pool, async (client) => {
    const { rowCount } = await client.query(`select 1 from accounts where name = $1 for update`, [account]);
    if (!rowCount) throw noSuchAccount(account, await listAccounts(client));
    const removed = await accountRows(client, account);
    await dropLimitsOn(client, account);
    await client.query(`delete from accounts where name = $1`, [account]);
    return removed;
  });
}

/**
 * The `accounts` table: the accounts this deployment declares (docs/operations.md, "Several
 * accounts"). The worker writes them at start, before any pool of an account opens, so the foreign
 * key of every mirrored table accepts that account's rows and refuses any other's.
 */
import type { Queryable } from '../ground/queryable.js';
import { checkedAccountName } from './client.js';

/**
 * Adds the declared accounts that the table does not hold yet. An account no longer declared keeps
 * its row, since its mirrored rows still reference it; nothing serves it any more.
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

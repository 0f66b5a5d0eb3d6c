/**
 * Several accounts on one test database (docs/operations.md, "Several accounts"): the test
 * database's pool serves account `default`; a further account is declared on it and gets a pool of
 * its own, whose connections serve that account as the worker's would.
 */
import { declareAccounts } from '../../src/db/accounts.js';
import { openDatabase, type Database } from '../../src/db/client.js';
import type { TestDatabase } from './db.js';

export interface AccountDatabase extends Database {
  account: string;
}

/** Declares `account` on the test database and opens a pool serving it; the caller closes it. */
export async function openAccountDatabase(database: TestDatabase, account: string, max = 5): Promise<AccountDatabase> {
  await declareAccounts(database.pool, [account]);
  return { account, ...openDatabase(database.url, { account, max }) };
}

/**
 * Runs `run` for every account at once and returns their results in order. Waits for every account
 * to finish before it fails, so that no account's passes still run into the next test's clean-up,
 * then throws the first failure, its message prefixed with the account it happened in.
 */
export async function forEachAccount<A extends { account: string }, T>(
  accounts: readonly A[],
  run: (account: A) => Promise<T>,
): Promise<T[]> {
  const settled = await Promise.allSettled(accounts.map(run));
  const failures = settled.flatMap((s, i) => (s.status === 'rejected' ? [labelled(accounts[i]!.account, s.reason)] : []));
  if (failures.length > 0) {
    if (failures.length > 1) failures[0]!.message += ` (and ${failures.length - 1} more account(s) failed)`;
    throw failures[0]!;
  }
  return settled.map((s) => (s as PromiseFulfilledResult<T>).value);
}

function labelled(account: string, reason: unknown): Error {
  const error = reason instanceof Error ? reason : new Error(String(reason));
  error.message = `account ${account}: ${error.message}`;
  return error;
}

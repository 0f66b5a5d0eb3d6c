/**
 * Postgres pools. Callers own the pool's lifetime (`close()`).
 *
 * No drizzle handle comes with a pool: the service's statements are SQL built from the schema's
 * column names (columns.ts), and a handle built with the schema holds a query builder and the
 * relations' config for every table. A worker opens a pool for each account, so that was about
 * 19 KB of heap an account for nothing (docs/benchmarks.md, "accounts").
 */
import pg from 'pg';

export interface Database {
  pool: pg.Pool;
  close(): Promise<void>;
}

export interface DatabaseOptions {
  /**
   * The account every connection of the pool serves (docs/operations.md, "Several accounts"): set as
   * the session's `subscriber_mirror.account`, which the account columns default to and the
   * service's statements filter on (`mirror_account()`, migration 0029). Omitted: a pool for
   * deployment-wide work, whose statements must name accounts themselves (a statement that asks the
   * session for its account fails there).
   */
  account?: string;
  max?: number;
  applicationName?: string;
  /** Fail fast instead of hanging when Postgres is unreachable. */
  connectionTimeoutMillis?: number;
}

/** The session setting that names the account a connection serves (read by `mirror_account()`). */
export const ACCOUNT_SETTING = 'subscriber_mirror.account';

/** The account an install that declares none serves, and every row an upgrade from one account keeps. */
export const DEFAULT_ACCOUNT = 'default';

const ACCOUNT_NAME = /^[a-z][a-z0-9_]{0,30}$/;

/** An account name as the `accounts` table's check allows it; anything else never reaches a connection string. */
export function checkedAccountName(name: string): string {
  if (!ACCOUNT_NAME.test(name) || name.includes('__')) {
    throw new Error(
      `invalid account name ${JSON.stringify(name)}: 1-31 lowercase letters, digits or "_", starting with a letter, without "__"`,
    );
  }
  return name;
}

export function openDatabase(url: string, options: DatabaseOptions = {}): Database {
  const pool = new pg.Pool({
    connectionString: url,
    max: options.max ?? 10,
    application_name: options.applicationName ?? 'subscriber-mirror',
    connectionTimeoutMillis: options.connectionTimeoutMillis ?? 10_000,
    ...(options.account === undefined ? {} : { options: `-c ${ACCOUNT_SETTING}=${checkedAccountName(options.account)}` }),
  });
  // An idle client that loses its connection (Postgres restart) emits 'error' on the pool; without a
  // listener that would crash the process. The next checkout reconnects.
  pool.on('error', () => {});
  // A checked-out client that loses its connection between queries (inside a transaction while our
  // code runs) emits 'error' with no listener, which crashes the process; the query in flight, if
  // any, still rejects. Found by the fault suite cutting Postgres under webhook load.
  pool.on('connect', (client) => {
    client.on('error', () => {});
  });
  return {
    pool,
    close: () => pool.end(),
  };
}

/** Runs `fn` on one client of `pool` in a transaction: committed when it resolves, rolled back when it throws. */
export async function inTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    const result = await fn(client);
    await client.query('commit');
    return result;
  } catch (error) {
    await client.query('rollback').catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}

/**
 * Postgres pools. Callers own the pool's lifetime (`close()`).
 *
 * No drizzle handle comes with a pool: the service's statements are SQL built from the schema's
 * column names (columns.ts), and a handle built with the schema holds a query builder and the
 * relations' config for every table. A worker opens a pool for each account, so that was about
 * 19 KB of heap an account for nothing (docs/benchmarks.md, "accounts").
 */
import pg from 'pg';
import type { ConnectionsSnapshot } from '../ground/metrics.js';

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
  const pool = createPool(url, {
    ...options,
    ...(options.account === undefined ? {} : { options: `-c ${ACCOUNT_SETTING}=${checkedAccountName(options.account)}` }),
  });
  return {
    pool,
    close: () => pool.end(),
  };
}

function createPool(url: string, options: Omit<DatabaseOptions, 'account'> & { options?: string }): pg.Pool {
  const pool = new pg.Pool({
    connectionString: url,
    max: options.max ?? 10,
    application_name: options.applicationName ?? 'subscriber-mirror',
    connectionTimeoutMillis: options.connectionTimeoutMillis ?? 10_000,
    ...(options.options === undefined ? {} : { options: options.options }),
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
  return pool;
}

/**
 * One set of connections for every account of a process (the worker): `forAccount` gives each
 * account a pool whose checkouts come from the shared connections, each naming the account on its
 * connection first (`subscriber_mirror.account`, set for the session unless that connection last
 * served the same account). So a process opens at most `max` connections however many accounts it
 * serves: with a pool of its own for each account (at least 3 connections each) twenty accounts on
 * three replicas needed `max_connections` raised to 300 (docs/operations.md, "Several accounts").
 */
export interface AccountPools {
  /** The pool of `account`: its statements keep to it. Ending it ends only the account's use. */
  forAccount(account: string): pg.Pool;
  /** The shared connections now (the worker's metrics read it when scraped). */
  stats(): ConnectionsSnapshot;
  /** Ends the shared connections (after every account's pool has ended). */
  close(): Promise<void>;
}

/**
 * Why a checkout got no connection: `timeout` when every shared connection stayed busy for
 * `connectionTimeoutMillis` (the accounts of the process need more than it holds), `error` when
 * connecting failed (Postgres away, out of slots).
 */
export type CheckoutFailure = 'timeout' | 'error';

/**
 * What a process learns of its accounts' waits for the shared connections. Accounts wait for each
 * other there, and a checkout that waits past `connectionTimeoutMillis` fails its pass or batch:
 * without this, a worker holding too many accounts for its connections shows only those failures.
 */
export interface CheckoutWatch {
  /** A checkout of `account` got a connection after waiting `seconds`. */
  waited(account: string, seconds: number): void;
  failed(account: string, why: CheckoutFailure): void;
}

export function openAccountPools(url: string, options: Omit<DatabaseOptions, 'account'> & { watch?: CheckoutWatch } = {}): AccountPools {
  const { watch, ...poolOptions } = options;
  const shared = createPool(url, poolOptions);
  // The account each connection's session names now. A client the pool replaced is a new key.
  const named = new WeakMap<pg.PoolClient, string>();
  return {
    forAccount: (account) => new AccountPool(shared, checkedAccountName(account), named, watch),
    stats: () => ({ busy: shared.totalCount - shared.idleCount, idle: shared.idleCount, waiting: shared.waitingCount }),
    close: () => shared.end(),
  };
}

/** pg-pool's error for a checkout that waited `connectionTimeoutMillis` for a connection in vain. */
const POOL_TIMEOUT_MESSAGE = 'timeout exceeded when trying to connect';

function checkoutFailure(error: unknown): CheckoutFailure {
  return error instanceof Error && error.message === POOL_TIMEOUT_MESSAGE ? 'timeout' : 'error';
}

type ConnectCallback = (err: Error | undefined, client: pg.PoolClient | undefined, done: (release?: unknown) => void) => void;

/**
 * A `pg.Pool` as its users see it (`query`, `connect`, `end`), backed by the process's shared
 * connections. pg-pool's own `query` checks out through `connect`, so overriding it covers both.
 */
class AccountPool extends pg.Pool {
  private checkedOut = 0;
  private stopped = false;
  private drained: (() => void) | null = null;
  private drain: Promise<void> | null = null;

  constructor(
    private readonly shared: pg.Pool,
    private readonly account: string,
    private readonly named: WeakMap<pg.PoolClient, string>,
    private readonly watch: CheckoutWatch | undefined,
  ) {
    // Its own connection settings are never used: it opens no connection of its own.
    super({ max: 1 });
  }

  override connect(): Promise<pg.PoolClient>;
  override connect(callback: ConnectCallback): void;
  override connect(callback?: ConnectCallback): Promise<pg.PoolClient> | void {
    const checkout = this.checkout();
    if (!callback) return checkout;
    checkout.then(
      (client) => callback(undefined, client, (release?: unknown) => client.release(release instanceof Error ? release : release === true)),
      (error: unknown) => callback(error instanceof Error ? error : new Error(String(error)), undefined, () => {}),
    );
  }

  override end(): Promise<void>;
  override end(callback: () => void): void;
  override end(callback?: () => void): Promise<void> | void {
    this.stopped = true;
    this.drain ??= this.checkedOut === 0 ? Promise.resolve() : new Promise<void>((resolve) => (this.drained = resolve));
    const done = this.drain;
    if (!callback) return done;
    void done.then(callback);
  }

  private async checkout(): Promise<pg.PoolClient> {
    if (this.stopped) throw new Error(`Cannot use a pool after calling end on the pool (account ${this.account})`);
    const client = await this.idleClient();
    if (this.named.get(client) !== this.account) {
      try {
        await client.query('select set_config($1, $2, false)', [ACCOUNT_SETTING, this.account]);
      } catch (error) {
        // A session whose account is in doubt is not handed out again.
        this.named.delete(client);
        client.release(true);
        throw error;
      }
      this.named.set(client, this.account);
    }
    this.checkedOut += 1;
    // pg-pool gives every checkout a release of its own; this one also counts the account's clients back.
    const release = client.release.bind(client);
    let released = false;
    client.release = (err?: Error | boolean) => {
      if (!released) {
        released = true;
        this.checkedOut -= 1;
        if (this.checkedOut === 0) this.drained?.();
      }
      release(err);
    };
    return client;
  }

  /**
   * A shared client outside any transaction. One released inside a transaction (a caller's bug)
   * would carry it to the next account, and the account set in it could roll back with it: it is
   * closed instead of reused, and the pool opens another.
   */
  private async idleClient(): Promise<pg.PoolClient> {
    for (let tries = 1; ; tries++) {
      const client = await this.sharedClient();
      const status = client.getTransactionStatus();
      if (status === 'I' || status === null) return client;
      client.release(true);
      if (tries >= 3) throw new Error(`no idle connection for account ${this.account}: ${tries} in a transaction in a row`);
    }
  }

  /** One of the shared connections, its wait told to the watch. */
  private async sharedClient(): Promise<pg.PoolClient> {
    const startedAt = performance.now();
    let client: pg.PoolClient;
    try {
      client = await this.shared.connect();
    } catch (error) {
      this.watch?.failed(this.account, checkoutFailure(error));
      throw error;
    }
    this.watch?.waited(this.account, (performance.now() - startedAt) / 1000);
    return client;
  }
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

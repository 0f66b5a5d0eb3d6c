/**
 * Postgres pool and drizzle handle. Callers own the pool's lifetime (`close()`).
 */
import { drizzle, type NodePgDatabase } from './orm.js';
import pg from 'pg';
import * as schema from './schema.js';

export type Db = NodePgDatabase<typeof schema>;

export interface Database {
  pool: pg.Pool;
  db: Db;
  close(): Promise<void>;
}

export interface DatabaseOptions {
  max?: number;
  applicationName?: string;
  /** Fail fast instead of hanging when Postgres is unreachable. */
  connectionTimeoutMillis?: number;
}

export function openDatabase(url: string, options: DatabaseOptions = {}): Database {
  const pool = new pg.Pool({
    connectionString: url,
    max: options.max ?? 10,
    application_name: options.applicationName ?? 'subscriber-mirror',
    connectionTimeoutMillis: options.connectionTimeoutMillis ?? 10_000,
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
  const db = drizzle(pool, { schema });
  return {
    pool,
    db,
    close: () => pool.end(),
  };
}

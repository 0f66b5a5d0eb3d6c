/**
 * Per-file isolation: each test file gets its own database cloned from the migrated template.
 */
import { inject } from 'vitest';
import pg from 'pg';
import { DEFAULT_ACCOUNT, openDatabase, type Database } from '../../src/db/client.js';
import { drizzle, type NodePgDatabase } from '../../src/db/orm.js';
import * as schema from '../../src/db/schema.js';
import { withDatabase } from './global-setup.js';

export interface TestDatabase extends Database {
  /** Drizzle over `pool`, for tests that read the declared tables and views through the schema. */
  db: NodePgDatabase<typeof schema>;
  url: string;
  name: string;
  /** Drops the database; call from afterAll. */
  drop(): Promise<void>;
}

let counter = 0;

/** A fresh, migrated database. `migrated: false` gives an empty one (for migration tests). */
export async function createTestDatabase(options: { migrated?: boolean } = {}): Promise<TestDatabase> {
  const baseUrl = inject('databaseUrl');
  const runId = inject('runId');
  const name = `sm_t_${runId}_${process.pid}_${++counter}_${Math.random().toString(36).slice(2, 6)}`;
  const template = options.migrated === false ? 'template0' : inject('templateDatabase');
  await withAdmin(baseUrl, (c) => c.query(`create database "${name}" template "${template}"`));
  const url = withDatabase(baseUrl, name);
  const database = openDatabase(url, { max: 5, account: DEFAULT_ACCOUNT });
  return {
    ...database,
    db: drizzle(database.pool, { schema }),
    url,
    name,
    async drop() {
      await database.close().catch(() => {});
      await withAdmin(baseUrl, (c) => c.query(`drop database if exists "${name}" with (force)`));
    },
  };
}

async function withAdmin<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/**
 * A throwaway migrated database for a benchmark run, dropped afterwards (also on failure).
 */
import pg from 'pg';
import { ACCOUNT_SETTING, DEFAULT_ACCOUNT } from '../../../src/db/client.js';
import { runMigrations } from '../../../src/db/migrate.js';

export interface ScratchDatabase {
  url: string;
  name: string;
  pool: pg.Pool;
  drop(): Promise<void>;
}

function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

async function admin<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

export async function createScratchDatabase(baseUrl: string, label: string): Promise<ScratchDatabase> {
  const name = `sm_bench_${label}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`;
  await admin(baseUrl, (c) => c.query(`create database "${name}"`));
  const url = withDatabase(baseUrl, name);
  try {
    await runMigrations(url);
  } catch (err) {
    await admin(baseUrl, (c) => c.query(`drop database if exists "${name}" with (force)`));
    throw err;
  }
  // Scoped to the one account a single-account install has, as the service's pools are (src/db/client.ts).
  const pool = new pg.Pool({ connectionString: url, max: 2, options: `-c ${ACCOUNT_SETTING}=${DEFAULT_ACCOUNT}` });
  pool.on('error', () => {});
  return {
    url,
    name,
    pool,
    async drop() {
      await pool.end().catch(() => {});
      await admin(baseUrl, (c) => c.query(`drop database if exists "${name}" with (force)`));
    },
  };
}

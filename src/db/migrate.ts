/**
 * Applies the committed drizzle migrations under a Postgres advisory lock.
 *
 * drizzle's `migrate()` takes no lock and concurrent replicas starting at once were seen to fail
 * (docs/architecture.md, "Traps we work around"), so every replica serializes on one session-level advisory lock held on a
 * dedicated connection; the ones that wait then find nothing left to apply.
 */
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { drizzle, migrate, readMigrationFiles } from './orm.js';
import pg from 'pg';

/** Resolved from this module (src/db or dist/db), never from the working directory. */
export const MIGRATIONS_FOLDER = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../drizzle');

/** An arbitrary constant shared by every replica: "subscriber-mirror migrations". */
const MIGRATION_LOCK_KEY = 727_110_001;

export interface MigrateResult {
  applied: number;
}

export async function runMigrations(databaseUrl: string, folder = MIGRATIONS_FOLDER): Promise<MigrateResult> {
  const client = new pg.Client({ connectionString: databaseUrl, connectionTimeoutMillis: 10_000 });
  client.on('error', () => {});
  await client.connect();
  try {
    await client.query('select pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
    try {
      const before = await countApplied(client);
      await migrate(drizzle(client), { migrationsFolder: folder });
      const after = await countApplied(client);
      return { applied: after - before };
    } finally {
      await client.query('select pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]);
    }
  } finally {
    await client.end();
  }
}

async function countApplied(client: pg.Client): Promise<number> {
  const exists = await client.query<{ present: boolean }>(`select to_regclass('drizzle.__drizzle_migrations') is not null as present`);
  if (!exists.rows[0]?.present) return 0;
  const res = await client.query<{ n: string }>('select count(*)::text as n from drizzle.__drizzle_migrations');
  return Number(res.rows[0]?.n ?? 0);
}

/** True when every committed migration has been applied (used by /readyz). */
export async function migrationsPending(pool: pg.Pool, folder = MIGRATIONS_FOLDER): Promise<number> {
  const expected = readMigrationFiles({ migrationsFolder: folder }).length;
  try {
    const exists = await pool.query<{ present: boolean }>(`select to_regclass('drizzle.__drizzle_migrations') is not null as present`);
    if (!exists.rows[0]?.present) return expected;
    const res = await pool.query<{ n: string }>('select count(*)::text as n from drizzle.__drizzle_migrations');
    return Math.max(0, expected - Number(res.rows[0]?.n ?? 0));
  } catch (error) {
    // A worker migrating a new database creates the schema before the migration that lets other
    // roles read it: until that one is applied, a role without the grant sees "permission denied".
    if ((error as { code?: unknown }).code === INSUFFICIENT_PRIVILEGE) return expected;
    throw error;
  }
}

/** SQLSTATE 42501: the role may not run a statement (DDL as the receiver, or read the journal yet). */
export const INSUFFICIENT_PRIVILEGE = '42501';

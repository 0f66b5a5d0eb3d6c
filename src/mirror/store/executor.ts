/**
 * Where store statements run, and how (see `index.ts` for the write rules).
 *
 * Every store function takes a {@link Queryable}: a `pg.Pool` runs each statement on any idle
 * connection (each call is then its own transaction); a client runs them inside whatever transaction
 * is open on it. To make several store calls and your own statements atomic (a poll page plus its
 * checkpoint, invariant 3), run them on one transaction: {@link withTransaction}.
 */
import { createHash } from 'node:crypto';
import type pg from 'pg';
import type { Queryable } from '../../ground/queryable.js';

interface Result<R> {
  rows: R[];
  rowCount: number;
}

/**
 * Runs `text` with `$n` parameters, planned afresh on each run (an unnamed statement). The mirror's
 * tables grow from empty within the very pass that writes them, and every index leads with
 * `account`: a plan cached while a table was nearly empty (a named statement's generic plan, from
 * its sixth run) kept taking an index on `account` alone and read the whole account for each row
 * of a page, and nothing replans it before autovacuum's next ANALYZE (seen: 10,000 members from
 * empty went from 4 s to over 60 s). Planning the largest statement, the subscriber upsert, takes
 * about 3 ms, under a tenth of what a page of 1000 rows costs to write.
 */
export async function run<R>(exec: Queryable, text: string, values: unknown[]): Promise<Result<R>> {
  const res = await exec.query({ text, values });
  return { rows: res.rows as R[], rowCount: res.rowCount ?? 0 };
}

const statementNames = new Map<string, string>();

function statementName(text: string): string {
  let name = statementNames.get(text);
  if (name === undefined) {
    name = `sm_mirror_${createHash('sha1').update(text).digest('hex').slice(0, 16)}`;
    statementNames.set(text, name);
  }
  return name;
}

/**
 * `exec`, with each statement kept as a named prepared statement of its connection: parsed once,
 * and planned once under `plan_cache_mode = force_generic_plan`. For the webhook apply only, whose
 * batches of a few rows would otherwise spend a quarter of their Postgres CPU planning (measured on
 * the freshness bench: 520–580 against 710–730 µs per delivery). Its tables grow at the pace of
 * deliveries, so autovacuum's ANALYZE, which replans a cached plan, keeps up with them; a pass
 * fills a table from empty in seconds and must not keep plans ({@link run}).
 */
export function keepingPlans(exec: Queryable): Queryable {
  return {
    query: (query, values) => {
      const config = typeof query === 'string' ? { text: query, ...(values === undefined ? {} : { values }) } : query;
      return exec.query({ ...config, name: config.name ?? statementName(config.text) });
    },
  };
}

/**
 * Runs `fn` in one transaction on a dedicated pool client: `BEGIN`, then `COMMIT` when `fn`
 * resolves, `ROLLBACK` when it throws (the error is rethrown). Pass the client to store calls and
 * to your own statements (e.g. the poll's checkpoint) so they commit together or not at all.
 */
export async function withTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken = false;
  try {
    await client.query('begin');
    const result = await fn(client);
    await client.query('commit');
    return result;
  } catch (err) {
    broken = await rollbackOrBroken(client);
    throw err;
  } finally {
    client.release(broken);
  }
}

/** SQLSTATEs after which the whole transaction may simply run again: it was rolled back, nothing of it stayed. */
const RETRYABLE_STATES = new Set(['40P01', '40001']); // deadlock_detected, serialization_failure

/**
 * {@link withTransaction}, run again (up to `attempts` times in all) when Postgres ends it as a
 * deadlock victim or a serialization failure. Only for units of work that are safe to repeat, such
 * as a pass's page (version-guarded upserts and its checkpoint): a page whose rows a webhook batch
 * locks in another order would otherwise fail the whole pass (seen in the compose demo:
 * `pass failed: deadlock detected`).
 */
export async function withRetriedTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>, attempts = 3): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await withTransaction(pool, fn);
    } catch (error) {
      const state = (error as { code?: unknown }).code;
      if (attempt >= attempts || typeof state !== 'string' || !RETRYABLE_STATES.has(state)) throw error;
    }
  }
}

/**
 * Rolls back the open transaction of a failed unit of work; true when even that failed: the
 * connection is unusable, so release it destroyed (`release(true)`) instead of back to the pool.
 */
export async function rollbackOrBroken(client: pg.ClientBase): Promise<boolean> {
  try {
    await client.query('rollback');
    return false;
  } catch {
    return true;
  }
}

/**
 * `removalRule` (docs/architecture.md, "Pass history and the removal rule") on `sync_passes` rows
 * written by hand: the last two complete, gap-free full passes of every type, and, for a source that
 * sweeps in a group of several types, a sweep of every type that started after the first round ended
 * and read every change since the cutoff. Real Postgres: the rule is SQL.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { pruneHistory, removalRule } from '../../src/sync/pass-history.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

const GROUP = '7';
const TYPES = ['active', 'unsubscribed'] as const;
type Type = (typeof TYPES)[number];

/** A minute of the test's day, as a timestamp. */
const at = (minute: number): string => new Date(Date.UTC(2026, 10, 27, 12, minute)).toISOString();

interface Row {
  type: Type;
  kind: 'full' | 'incremental';
  /** Start and end minutes. */
  run: [number, number];
  /** Incremental: the earliest change it read (minute). */
  since?: number;
  gapFree?: boolean;
  status?: 'succeeded' | 'failed';
}

describe('removalRule', () => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createTestDatabase();
  });
  afterAll(async () => {
    await database?.drop();
  });
  beforeEach(async () => {
    await database.pool.query('truncate sync_passes');
  });

  /** Writes the rows in order; returns their ids. */
  async function write(rows: readonly Row[]): Promise<number[]> {
    const ids: number[] = [];
    for (const r of rows) {
      const full = r.kind === 'full';
      const { rows: inserted } = await database.pool.query<{ id: string }>(
        `insert into sync_passes (group_id, type, kind, source, started_at, listed_from, ended_at, status, complete, gap_free, read_since)
         values ($1, $2, $3, 'legacy', $4, $5, $6, $7, $8, $9, $10) returning id`,
        [
          GROUP,
          r.type,
          r.kind,
          at(r.run[0]),
          full ? at(r.run[0]) : null,
          at(r.run[1]),
          r.status ?? 'succeeded',
          full,
          full ? (r.gapFree ?? true) : null,
          r.since === undefined ? null : at(r.since),
        ],
      );
      ids.push(Number(inserted[0]?.id));
    }
    return ids;
  }

  const rule = (sweeps = true, types: readonly string[] = TYPES) => removalRule(database.pool, GROUP, types, { sweeps });
  const cutoff = async (sweeps = true, types: readonly string[] = TYPES) => {
    const found = await rule(sweeps, types);
    return found === null ? null : Date.parse(found.cutoff);
  };
  const full = (type: Type, from: number, to: number, more: Partial<Row> = {}): Row => ({ type, kind: 'full', run: [from, to], ...more });
  const sweep = (type: Type, from: number, since: number): Row => ({ type, kind: 'incremental', run: [from, from], since });

  it('two overlapping rounds and no sweep: no cutoff where the source sweeps; passes alone elsewhere', async () => {
    // "unsubscribed" starts its second pass (minute 12) before "active"'s first ends (minute 14).
    await write([full('active', 10, 14), full('unsubscribed', 11, 11), full('unsubscribed', 12, 13), full('active', 15, 16)]);
    expect(await cutoff()).toBeNull();
    expect(await cutoff(false)).toBe(Date.parse(at(10)));
    // One type: a member cannot hide by changing type between the passes of the types mirrored.
    expect(await cutoff(true, ['active'])).toBe(Date.parse(at(10)));
  });

  it('a sweep of every type after the first round ended, reading since the cutoff: the cutoff, proven by the four passes and both sweeps', async () => {
    const ids = await write([
      full('active', 10, 14),
      full('unsubscribed', 11, 11),
      full('unsubscribed', 12, 13),
      sweep('active', 15, 0),
      sweep('unsubscribed', 16, 0),
      full('active', 17, 18),
    ]);
    const found = await rule();
    expect(found === null ? null : Date.parse(found.cutoff)).toBe(Date.parse(at(10)));
    expect([...(found?.proof ?? [])].sort((a, b) => a - b)).toEqual([...ids].sort((a, b) => a - b));
  });

  it('a sweep of one type that started before another type’s first pass ended proves nothing', async () => {
    await write([
      full('active', 10, 14),
      full('unsubscribed', 11, 11),
      full('unsubscribed', 12, 13),
      sweep('unsubscribed', 13, 0),
      sweep('active', 15, 0),
      full('active', 17, 18),
    ]);
    expect(await cutoff()).toBeNull();
  });

  it('a sweep that read only changes after the cutoff proves nothing', async () => {
    await write([
      full('active', 10, 14),
      full('unsubscribed', 11, 11),
      full('unsubscribed', 12, 13),
      sweep('active', 15, 0),
      sweep('unsubscribed', 16, 11),
      full('active', 17, 18),
    ]);
    expect(await cutoff()).toBeNull();
  });

  it('any sweep after the first round counts, not only the last one', async () => {
    await write([
      full('active', 10, 14),
      full('unsubscribed', 11, 11),
      full('unsubscribed', 12, 13),
      sweep('active', 15, 0),
      sweep('unsubscribed', 16, 0),
      // A later sweep that reads less does not undo the proof the first ones gave.
      sweep('unsubscribed', 19, 18),
      full('active', 17, 18),
    ]);
    expect(await cutoff()).toBe(Date.parse(at(10)));
  });

  it('only the last two passes of a type count: a third moves the cutoff forward', async () => {
    await write([
      full('active', 10, 11),
      full('active', 12, 13),
      full('active', 14, 15),
      full('unsubscribed', 20, 21),
      full('unsubscribed', 22, 23),
    ]);
    expect(await cutoff(false)).toBe(Date.parse(at(12)));
  });

  it('a pass with a gap, or one that failed, proves nothing', async () => {
    await write([full('active', 10, 11), full('active', 12, 13, { gapFree: false }), full('active', 14, 15, { status: 'failed' })]);
    expect(await cutoff(false, ['active'])).toBeNull();
    await write([full('active', 16, 17)]);
    expect(await cutoff(false, ['active'])).toBe(Date.parse(at(10)));
  });

  it('a type with fewer than two complete passes: no cutoff', async () => {
    await write([
      full('active', 10, 14),
      full('unsubscribed', 11, 11),
      full('active', 15, 16),
      sweep('active', 17, 0),
      sweep('unsubscribed', 17, 0),
    ]);
    expect(await cutoff()).toBeNull();
    expect(await cutoff(false)).toBeNull();
  });

  it('pruning drops old rows but never the passes the rule reads, nor the newest row', async () => {
    // All of these ended on the test's day, long before now: every one is past any retention.
    const ids = await write([
      full('active', 1, 2),
      sweep('active', 3, 0),
      full('active', 4, 5, { gapFree: false }),
      full('active', 6, 7),
      sweep('active', 8, 0),
      full('active', 9, 10),
      full('active', 11, 12, { status: 'failed' }),
      full('unsubscribed', 1, 2),
    ]);
    const before = await cutoff(false, ['active']);
    expect(await pruneHistory(database.pool, GROUP, 'active', 3_600_000)).toBe(3);
    const { rows } = await database.pool.query<{ id: string }>('select id from sync_passes order by id');
    // Kept: the last two proving passes of "active" and everything after the earlier one; "unsubscribed" untouched.
    expect(rows.map((r) => Number(r.id))).toEqual(ids.slice(3));
    expect(await cutoff(false, ['active'])).toBe(before);
    // A pair with no proving pass keeps its newest row only.
    await write([sweep('unsubscribed', 20, 0), sweep('unsubscribed', 21, 0)]);
    await database.pool.query(`delete from sync_passes where type = 'unsubscribed' and kind = 'full'`);
    expect(await pruneHistory(database.pool, GROUP, 'unsubscribed', 3_600_000)).toBe(1);
  });
});

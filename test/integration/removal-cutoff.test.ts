/**
 * `removalCutoff` (docs/architecture.md, "Proof in rounds") on `sync_state` rows written by hand:
 * two complete passes of every type, and, for a source that sweeps in a group of several types, a
 * sweep of every type that started after the first round ended and read every change since the
 * cutoff. Real Postgres: the rule is SQL.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { removalCutoff } from '../../src/sync/state.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

const GROUP = '7';
const TYPES = ['active', 'unsubscribed'] as const;

/** A minute of the test's day, as a timestamp. */
const at = (minute: number): string => new Date(Date.UTC(2026, 10, 27, 12, minute)).toISOString();

interface TypeState {
  /** Start and end of the earlier of the two passes (the first round). */
  prev: [number, number | null];
  /** Start and end of the later one. */
  last: [number, number];
  /** When its last sweep started, and the earliest change it read. */
  sweep?: [number, number];
}

describe('removalCutoff', () => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createTestDatabase();
  });
  afterAll(async () => {
    await database?.drop();
  });
  beforeEach(async () => {
    await database.pool.query('truncate sync_state');
  });

  async function write(states: Record<(typeof TYPES)[number], TypeState>): Promise<void> {
    for (const [type, s] of Object.entries(states)) {
      await database.pool.query(
        `insert into sync_state (group_id, type, prev_proof_started_at, prev_proof_ended_at, proof_started_at, proof_ended_at, swept_at, swept_since)
         values ($1, $2, $3, $4, $5, $6, $7, $8)`,
        [
          GROUP,
          type,
          at(s.prev[0]),
          s.prev[1] === null ? null : at(s.prev[1]),
          at(s.last[0]),
          at(s.last[1]),
          s.sweep ? at(s.sweep[0]) : null,
          s.sweep ? at(s.sweep[1]) : null,
        ],
      );
    }
  }

  const cutoff = (sweeps = true, types: readonly string[] = TYPES) => removalCutoff(database.pool, GROUP, types, { sweeps });
  const ms = async (value: Promise<string | null>) => {
    const v = await value;
    return v === null ? null : Date.parse(v);
  };

  it('two overlapping rounds and no sweep: no cutoff where the source sweeps; passes alone elsewhere', async () => {
    // "unsubscribed" starts its second pass (minute 12) before "active"'s first ends (minute 14).
    await write({ active: { prev: [10, 14], last: [15, 16] }, unsubscribed: { prev: [11, 11], last: [12, 13] } });
    expect(await cutoff()).toBeNull();
    expect(await ms(cutoff(false))).toBe(Date.parse(at(10)));
    // One type: a member cannot hide by changing type between the passes of the types mirrored.
    expect(await ms(cutoff(true, ['active']))).toBe(Date.parse(at(10)));
  });

  it('a sweep of every type after the first round ended, reading since the cutoff: the cutoff', async () => {
    await write({
      active: { prev: [10, 14], last: [17, 18], sweep: [15, 0] },
      unsubscribed: { prev: [11, 11], last: [12, 13], sweep: [16, 0] },
    });
    expect(await ms(cutoff())).toBe(Date.parse(at(10)));
  });

  it('a sweep of one type that started before another type’s first pass ended proves nothing', async () => {
    await write({
      active: { prev: [10, 14], last: [17, 18], sweep: [15, 0] },
      unsubscribed: { prev: [11, 11], last: [12, 13], sweep: [13, 0] },
    });
    expect(await cutoff()).toBeNull();
  });

  it('a sweep that read only changes after the cutoff proves nothing', async () => {
    await write({
      active: { prev: [10, 14], last: [17, 18], sweep: [15, 0] },
      unsubscribed: { prev: [11, 11], last: [12, 13], sweep: [16, 11] },
    });
    expect(await cutoff()).toBeNull();
  });

  it('rows written before the pass ends were recorded: the later pass’s start bounds the earlier one’s end', async () => {
    const states = {
      active: { prev: [10, null], last: [15, 16], sweep: [14, 0] },
      unsubscribed: { prev: [11, null], last: [12, 13], sweep: [16, 0] },
    } satisfies Record<string, TypeState>;
    await write(states);
    // "active"'s first pass ended before its second started (minute 15), but not provably before its sweep (14).
    expect(await cutoff()).toBeNull();
    await database.pool.query(`update sync_state set swept_at = $1 where type = 'active'`, [at(15)]);
    expect(await ms(cutoff())).toBe(Date.parse(at(10)));
  });

  it('a type with fewer than two complete passes: no cutoff', async () => {
    await write({
      active: { prev: [10, 14], last: [15, 16], sweep: [17, 0] },
      unsubscribed: { prev: [11, 11], last: [12, 13], sweep: [17, 0] },
    });
    await database.pool.query(`update sync_state set prev_proof_started_at = null where type = 'unsubscribed'`);
    expect(await cutoff()).toBeNull();
    expect(await cutoff(false)).toBeNull();
  });
});

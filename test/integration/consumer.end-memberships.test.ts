/**
 * `endMemberships` (src/mirror/store/index.ts), added for the consumer's `subscriber.deleted`: ends every
 * current membership of a subscriber at the deletion's upstream time, with the ordering guard of
 * `removeMembership` (invariant 2).
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { endMemberships, removeMembership, upsertMemberships } from '../../src/mirror/store/index.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { readMember, ts } from '../fixtures/mirror/rows.js';

let tdb: TestDatabase;
let seq = 0;
const newSubscriber = () => `5${++seq}`;

beforeAll(async () => {
  tdb = await createTestDatabase();
});
afterAll(async () => {
  await tdb?.drop();
});

async function add(groupId: string, subscriberId: string, at: string): Promise<void> {
  await upsertMemberships(tdb.pool, groupId, [{ subscriberId, type: 'active', at }], { via: 'poll' });
}

describe('endMemberships', () => {
  test('ends every current membership with an older fact; other subscribers are untouched', async () => {
    const s = newSubscriber();
    const other = newSubscriber();
    await add('1', s, ts(10));
    await add('2', s, ts(20));
    await add('1', other, ts(10));
    expect(await endMemberships(tdb.pool, s, ts(30), 'webhook')).toBe(2);
    for (const g of ['1', '2']) {
      expect(await readMember(tdb.pool, g, s)).toMatchObject({ removed_at: ts(30), source_updated_at: ts(30), mirrored_via: 'webhook' });
    }
    expect(await readMember(tdb.pool, '1', other)).toMatchObject({ removed_at: null, source_updated_at: ts(10) });
  });

  test('keeps a membership whose newest fact is newer (re-added after the deletion)', async () => {
    const s = newSubscriber();
    await add('1', s, ts(40));
    await add('2', s, ts(10));
    expect(await endMemberships(tdb.pool, s, ts(30), 'webhook')).toBe(1);
    expect(await readMember(tdb.pool, '1', s)).toMatchObject({ removed_at: null, source_updated_at: ts(40) });
    expect(await readMember(tdb.pool, '2', s)).toMatchObject({ removed_at: ts(30) });
  });

  test('is idempotent, leaves removed memberships alone, and blocks an older add arriving later', async () => {
    const s = newSubscriber();
    await add('1', s, ts(10));
    await removeMembership(tdb.pool, '2', s, ts(15), 'webhook');
    expect(await endMemberships(tdb.pool, s, ts(30), 'webhook')).toBe(1);
    const before = await readMember(tdb.pool, '1', s);
    expect(await endMemberships(tdb.pool, s, ts(30), 'webhook')).toBe(0);
    expect((await readMember(tdb.pool, '1', s))?.xmin).toBe(before?.xmin);
    expect(await readMember(tdb.pool, '2', s)).toMatchObject({ removed_at: ts(15), source_updated_at: ts(15) });
    await add('1', s, ts(20));
    expect(await readMember(tdb.pool, '1', s)).toMatchObject({ removed_at: ts(30) });
  });

  test('ends a tie (same fact time) and a membership without a fact time (inferred by a full pass)', async () => {
    const s = newSubscriber();
    await add('1', s, ts(30));
    await tdb.pool.query(
      `insert into group_members (group_id, subscriber_id, type, added_at, mirrored_via) values ('2', $1, 'active', null, 'poll')`,
      [s],
    );
    expect(await endMemberships(tdb.pool, s, ts(30), 'webhook')).toBe(2);
  });

  test('rejects arguments outside the normalizers contract', async () => {
    await expect(endMemberships(tdb.pool, '', ts(1), 'webhook')).rejects.toThrow(TypeError);
    await expect(endMemberships(tdb.pool, '1', '2024-01-01', 'webhook')).rejects.toThrow(TypeError);
  });
});

/**
 * The legacy poll against a service whose lists move or whose dates mislead: lists growing during
 * their full pass, the page cap learned once per install, a row dated in the future, an unsubscribe
 * stamped only in `date_unsubscribe`, a page cap the client has not learned. Members leaving,
 * joining and changing type between the pages of a full pass are the contract every read source
 * passes (read-source.contract.test.ts). Simulator + real Postgres; webhooks off (poll alone).
 */
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../src/ground/log.js';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { runPass, type PassDeps } from '../../src/sync/legacy-pass.js';
import { readPaging, readSyncState, savePaging } from '../../src/sync/state.js';
import { collectStatus } from '../../src/sync/status.js';
import type { TestDatabase } from '../helpers/db.js';
import { readMembers, readMirroredSubscribers } from '../helpers/mirror.js';
import { ALL_TYPES, passAllTypes, passDeps, passFixture } from '../helpers/poll.js';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/** Page size 500, as the scenarios. */
const deps = (database: TestDatabase, sim: Simulator, overrides: Partial<PassDeps> = {}): PassDeps =>
  passDeps(database, sim, { pageSize: 500, ...overrides });

describe('full passes while the list changes under them', () => {
  const fixture = passFixture();

  it('the page cap is one per install: passes that ran at once merge what they learned', async () => {
    const database = fixture.database;
    await savePaging(database.pool, { cap: 100, longestPage: 100, candidate: null });
    // A pass that started before the cap was learned saves what it knew: the cap stays.
    await savePaging(database.pool, { cap: null, longestPage: 60, candidate: { length: 60, where: '1/active@0' } });
    expect(await readPaging(database.pool)).toEqual({ cap: 100, longestPage: 100, candidate: { length: 60, where: '1/active@0' } });
    // A pass that was served a longer page proves the cap gone.
    await savePaging(database.pool, { cap: null, longestPage: 500, candidate: null });
    expect(await readPaging(database.pool)).toEqual({ cap: null, longestPage: 500, candidate: null });
  });

  it('lists of 3 and of 300 members growing during their full pass keep the configured page size', async () => {
    const sim = (fixture.sim = await startSimulator({ subscribers: 0, groups: 2, rateLimit: false }));
    const database = fixture.database;
    const [small, large] = sim.world.groupIds() as [string, string];
    for (let i = 0; i < 3; i++) sim.world.createSubscriber({ groups: [small] });
    for (let i = 0; i < 300; i++) sim.world.createSubscriber({ groups: [large] });
    const d = deps(database, sim, { groupTypes: ['active'] });
    for (const [groupId, join, before] of [
      [small, 2, 3],
      [large, 40, 300],
    ] as const) {
      sim.pageChurn.set({ groupId, join, pages: 4 });
      const joinedBefore = sim.pageChurn.applied.join;
      await runPass(d, groupId, 'active', 'full');
      const joined = sim.pageChurn.applied.join - joinedBefore;
      // The pass's first (short) page already grew the list; the count taken before it agrees with that page, so it ends there.
      expect(joined).toBeGreaterThan(0);
      expect(sim.world.memberCount(groupId)).toBe(before + joined);
    }
    const paging = await readPaging(database.pool);
    expect(paging.cap).toBeNull();
    sim.clearRequests();
    for (const groupId of [small, large]) {
      await runPass(d, groupId, 'active', 'full');
      await runPass(d, groupId, 'active', 'incremental');
    }
    const lists = sim.requests.filter((r) => r.api === 'legacy' && !r.url.includes('/count'));
    expect(lists.every((r) => r.url.includes('limit=500'))).toBe(true);
    // Each full pass reads its whole list in one page: the short page and the count agree, no request finds the end.
    expect(lists.filter((r) => !r.url.includes('filters'))).toHaveLength(2);
    const members = (await readMembers(database.pool)).filter((m) => m.removedAt === null);
    expect(members).toHaveLength(sim.world.memberCount(small) + sim.world.memberCount(large));
  });
});

describe('incremental passes against dates the service gets wrong or does not stamp', () => {
  const fixture = passFixture();

  it('a row dated 2099 is stored but does not drag the cursor: the next ordinary change is mirrored by the next incremental pass', async () => {
    const sim = (fixture.sim = await startSimulator({ subscribers: 200, groups: 1, rateLimit: false }));
    const database = fixture.database;
    const groupId = sim.world.groupIds()[0]!;
    const lines: string[] = [];
    const capture = createLogger({
      level: 'warn',
      destination: new Writable({ write: (chunk: Buffer, _enc, done) => (lines.push(chunk.toString()), done()) }),
    }).logger;
    const d = deps(database, sim, { logger: capture });
    await passAllTypes(d, groupId, 'full');

    const [wrong, ordinary] = sim.world.members(groupId, 'active') as [string, string];
    sim.world.updateDatedAt(wrong, Date.parse('2099-01-01T00:00:00Z'), { city: 'from-the-future' });
    const first = await runPass(d, groupId, 'active', 'incremental');
    expect(first.futureRows).toBe(1);
    const mirrored = await readMirroredSubscribers(database.pool);
    expect(mirrored.get(wrong)?.updatedAt).toBe('2099-01-01T00:00:00.000000Z');
    const state = await readSyncState(database.pool, groupId, 'active');
    // The service's now comes from its Date header; the cursor stays within 14 h of it.
    expect(Date.parse(state!.cursor!)).toBeLessThanOrEqual(sim.world.now() + 14 * HOUR);
    expect(state?.futureRowsLastRun).toBe(1);
    const status = await collectStatus(database.pool, { groups: [groupId], types: ALL_TYPES });
    expect(status.find((r) => r.type === 'active')?.futureRows).toBe(1);
    expect(lines.some((l) => l.includes('"futureRows":1') && l.includes('cursor does not follow'))).toBe(true);

    sim.world.updateFields(ordinary, { city: 'an-ordinary-change' });
    await runPass(d, groupId, 'active', 'incremental');
    const after = await readMirroredSubscribers(database.pool);
    expect(after.get(ordinary)?.fields).toMatchObject({ city: 'an-ordinary-change' });
    expect(Date.parse((await readSyncState(database.pool, groupId, 'active'))!.cursor!)).toBeLessThanOrEqual(sim.world.now() + 14 * HOUR);
  });

  it('a cursor that ran away before (2099) is pulled back to the service now + 14 h and polling goes on', async () => {
    const sim = (fixture.sim = await startSimulator({ subscribers: 50, groups: 1, rateLimit: false }));
    const database = fixture.database;
    const groupId = sim.world.groupIds()[0]!;
    const d = deps(database, sim);
    await runPass(d, groupId, 'active', 'full');
    await database.pool.query(`update sync_state set cursor = '2099-01-01T00:00:00Z' where group_id = $1 and type = 'active'`, [groupId]);
    const id = sim.world.members(groupId, 'active')[0]!;
    sim.world.updateFields(id, { city: 'after-the-runaway' });
    await runPass(d, groupId, 'active', 'incremental');
    expect((await readMirroredSubscribers(database.pool)).get(id)?.fields).toMatchObject({ city: 'after-the-runaway' });
    expect(Date.parse((await readSyncState(database.pool, groupId, 'active'))!.cursor!)).toBeLessThanOrEqual(sim.world.now() + 14 * HOUR);
  });

  it('with webhooks off, an unsubscribe stamped only in date_unsubscribe is mirrored by an incremental pass', async () => {
    let now = Date.parse('2024-05-10T12:00:00Z');
    const sim = (fixture.sim = await startSimulator({ subscribers: 300, groups: 1, rateLimit: false, clock: () => now }));
    const database = fixture.database;
    const groupId = sim.world.groupIds()[0]!;
    const d = deps(database, sim);
    await passAllTypes(d, groupId, 'full');
    // Three days on, other changes move every cursor well past the target's date_updated.
    now += 3 * DAY;
    const [target, other] = sim.world.members(groupId, 'active') as [string, string];
    sim.world.updateFields(other, { city: 'moves-the-cursor' });
    for (const id of sim.world.members(groupId, 'unsubscribed').slice(0, 1)) sim.world.updateFields(id, { city: 'moves-the-cursor' });
    await passAllTypes(d, groupId, 'incremental');

    now += HOUR;
    const before = sim.world.subscriber(target)!.updatedAtUs;
    sim.world.unsubscribeUnstamped(target);
    expect(sim.world.subscriber(target)!.updatedAtUs).toBe(before);
    sim.clearRequests();
    const results = await passAllTypes(d, groupId, 'incremental');
    // A date_updated filter alone cannot see it: its date_updated is older than the filter day.
    const unsubscribed = results[1]!;
    expect(Date.parse(`${unsubscribed.filterDay}T00:00:00Z`)).toBeGreaterThan(before / 1000);
    expect(sim.requests.some((r) => r.url.includes('filters%5Bdate_unsubscribe%5D') || r.url.includes('filters[date_unsubscribe]'))).toBe(
      true,
    );
    const row = (await readMirroredSubscribers(database.pool)).get(target);
    expect(row?.status).toBe('unsubscribed');
    expect(row?.unsubscribedAt).not.toBeNull();
    const member = (await readMembers(database.pool, groupId)).find((m) => m.subscriberId === target);
    expect(member).toMatchObject({ type: 'unsubscribed', removedAt: null });
  });

  it('page cap 100 not learned before, 150 subscribers changed in one day: all 150 mirrored by incremental passes', async () => {
    let now = Date.parse('2024-05-10T12:00:00Z');
    const sim = (fixture.sim = await startSimulator({ subscribers: 0, groups: 1, rateLimit: false, pageCap: 100, clock: () => now }));
    const database = fixture.database;
    const groupId = sim.world.groupIds()[0]!;
    for (let i = 0; i < 60; i++) sim.world.createSubscriber({ groups: [groupId] });
    const d = deps(database, sim, { groupTypes: ['active'] });
    await runPass(d, groupId, 'active', 'full');
    // A list of 60 says nothing about a cap of 100.
    expect((await readPaging(database.pool)).cap).toBeNull();

    now += 2 * DAY;
    const changed = [...sim.world.members(groupId, 'active')];
    for (const id of changed) sim.world.updateFields(id, { city: 'changed' });
    for (let i = 0; i < 90; i++) changed.push(sim.world.createSubscriber({ groups: [groupId] }));
    expect(changed).toHaveLength(150);
    now += HOUR;
    const result = await runPass(d, groupId, 'active', 'incremental');
    expect(result.rowsSeen).toBe(150);
    const mirrored = await readMirroredSubscribers(database.pool);
    expect(changed.filter((id) => !mirrored.has(id))).toEqual([]);
    expect(changed.slice(0, 60).filter((id) => mirrored.get(id)?.fields.city !== 'changed')).toEqual([]);

    // Steady state: once the window holds fewer rows than pages the service served, a tick reads
    // one short page and stops, without an extra request to rule out a cap.
    now += 3 * DAY;
    sim.world.updateFields(changed[0]!, { city: 'later' });
    now += HOUR;
    await runPass(d, groupId, 'active', 'incremental'); // its window still holds the 150: it moves the cursor on
    for (let tick = 0; tick < 2; tick++) {
      sim.clearRequests();
      await runPass(d, groupId, 'active', 'incremental');
      expect(sim.requests.filter((r) => r.api === 'legacy')).toHaveLength(1);
    }
  });
});

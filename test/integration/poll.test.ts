/**
 * The poll path against the simulator, real Postgres and an in-process limiter (docs/architecture.md, "Poll path",
 * invariants 2, 3, 4, 6, 8, 9).
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { SUBSCRIBER_FIELDS } from '../../src/mirror/normalize.js';
import { startSimulator, type Simulator, type SimulatorOptions } from '../../src/simulator/index.js';
import { runPass, incrementalFilterDay } from '../../src/sync/legacy-pass.js';
import { readPaging, readSyncState } from '../../src/sync/state.js';
import { UpstreamAuthError } from '../../src/upstream/errors.js';
import { createLegacyClient, overlapFor } from '../../src/upstream/legacy/client.js';
import { createLimiter } from '../../src/ratelimit/limiter.js';
import { deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { createLogger } from '../../src/ground/log.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { diffSubscribers, expectedFromWorld, readMembers, readMirroredSubscribers } from '../helpers/mirror.js';
import { passAllTypes, passDeps } from '../helpers/poll.js';

const { logger } = createLogger({ level: 'silent' });
const deps = passDeps;

async function assertMirrorEqualsWorld(database: TestDatabase, sim: Simulator, groupId: string, timezone = 'UTC') {
  const memberIds = sim.world.members(groupId);
  const expected = expectedFromWorld(sim.world, memberIds, timezone);
  const actual = await readMirroredSubscribers(database.pool);
  expect(
    diffSubscribers(
      expected,
      actual,
      SUBSCRIBER_FIELDS.filter((f) => f !== 'source' && f !== 'deletedAt' && f !== 'forgetAt'),
    ),
  ).toEqual([]);
  const members = (await readMembers(database.pool, groupId)).filter((m) => m.removedAt === null);
  const want = [...sim.world.memberships()]
    .filter((m) => m.groupId === groupId)
    .map((m) => `${m.subscriberId}:${m.type}`)
    .sort();
  expect(members.map((m) => `${m.subscriberId}:${m.type}`).sort()).toEqual(want);
}

describe('incrementalFilterDay', () => {
  it('covers the cursor day under both boundary semantics and ±14 h', () => {
    expect(incrementalFilterDay('2024-05-10T12:00:00.000000Z', 86_400_000, 'UTC')).toBe('2024-05-08');
    expect(incrementalFilterDay('2024-05-10T20:00:00.000000Z', 0, 'UTC')).toBe('2024-05-09');
    expect(incrementalFilterDay('2024-05-10T01:00:00.000000Z', 0, 'Pacific/Kiritimati')).toBe('2024-05-09');
  });
});

describe('full pass', () => {
  let database: TestDatabase;
  let sim: Simulator | undefined;

  beforeAll(async () => {
    database = await createTestDatabase();
  });
  afterEach(async () => {
    await sim?.close();
    sim = undefined;
    await database.pool.query('truncate subscribers, group_members, sync_state, sync_passes, upstream_paging');
  });
  afterAll(async () => {
    await database.drop();
  });

  it.each([
    ['uncapped pages', {}],
    ['pages silently capped at 300', { pageCap: 300 }],
  ] as Array<[string, SimulatorOptions]>)('mirrors 10,000 subscribers with ids above 2^53 exactly (%s)', async (_label, options) => {
    sim = await startSimulator({ subscribers: 10_000, groups: 1, largeIds: true, rateLimit: false, ...options });
    const groupId = sim.world.groupIds()[0]!;
    const d = deps(database, sim);
    const results = await passAllTypes(d, groupId, 'full');
    expect(results.reduce((n, r) => n + r.rowsSeen, 0)).toBe(sim.world.memberCount(groupId));
    const { rows } = await database.pool.query<{ n: number; big: number }>(
      `select count(*)::int as n, count(*) filter (where id::numeric > 9007199254740992)::int as big from subscribers`,
    );
    expect(rows[0]).toEqual({ n: sim.world.memberCount(groupId), big: sim.world.memberCount(groupId) });
    await assertMirrorEqualsWorld(database, sim, groupId);
    // The cap is the service's: learned once per install, from pages inside a list known to be longer.
    expect((await readPaging(database.pool)).cap).toBe(options.pageCap ?? null);
    // Re-running a pass changes nothing (invariant 3).
    const again = await runPass(d, groupId, 'active', 'full');
    expect(again.rowsWritten).toBe(0);
  });

  it('marks a member removed upstream as removed only after two complete full passes that missed it', async () => {
    sim = await startSimulator({ subscribers: 300, groups: 1, rateLimit: false });
    const groupId = sim.world.groupIds()[0]!;
    const d = deps(database, sim, { pageSize: 50 });
    await passAllTypes(d, groupId, 'full');
    const leaver = sim.world.members(groupId, 'active')[0]!;
    sim.world.removeFromGroup(leaver, groupId);

    // A full pass of one type that fails halfway removes nobody.
    sim.faults.failNext(0);
    const before = sim.requests.length;
    const failing = runPass(
      deps(database, sim, {
        pageSize: 50,
        legacy: createLegacyClient({ baseUrl: sim.url, apiKey: sim.apiKey, http: { retry: { retries: 0 } } }),
      }),
      groupId,
      'active',
      'full',
    );
    await new Promise((r) => setTimeout(r, 0));
    sim.faults.set({ errorRate: 1, errorStatus: 500 });
    await expect(failing).rejects.toThrow();
    sim.faults.clear();
    expect(sim.requests.length).toBeGreaterThan(before);
    const leaverRow = async () => (await readMembers(database.pool, groupId)).find((m) => m.subscriberId === leaver);
    expect((await leaverRow())?.removedAt).toBeNull();
    expect((await readSyncState(database.pool, groupId, 'active'))?.lastStatus).toBe('failed');

    // One complete pass of every type that misses it is no proof (offset paging can skip a row).
    await passAllTypes(d, groupId, 'full');
    expect((await leaverRow())?.removedAt).toBeNull();
    // The second one in a row is, with a sweep of every type after the first round (below).
    await passAllTypes(d, groupId, 'incremental');
    const second = await passAllTypes(d, groupId, 'full');
    expect(second.reduce((n, r) => n + r.removed, 0)).toBe(1);
    expect((await leaverRow())?.removedAt).not.toBeNull();
    await assertMirrorEqualsWorld(database, sim, groupId);
  });

  it('keeps a member that changes type during each round: the removal waits for a sweep after the first round', async () => {
    sim = await startSimulator({ subscribers: 300, groups: 1, rateLimit: false });
    const groupId = sim.world.groupIds()[0]!;
    const types = ['active', 'unsubscribed'] as const;
    const d = deps(database, sim, { pageSize: 50, groupTypes: [...types] });
    await passAllTypes(d, groupId, 'full', [...types]);
    const [mover, leaver] = sim.world.members(groupId, 'active') as [string, string];
    sim.world.removeFromGroup(leaver, groupId);
    const row = async (id: string) => (await readMembers(database.pool, groupId)).find((m) => m.subscriberId === id);

    // The mover is unsubscribed while "active" is read and active again while "unsubscribed" is,
    // twice: every full pass of both rounds misses it, and no pass lists its changes.
    for (let round = 0; round < 2; round++) {
      sim.world.unsubscribe(mover);
      await runPass(d, groupId, 'active', 'full');
      sim.world.activate(mover);
      await runPass(d, groupId, 'unsubscribed', 'full');
    }
    expect((await row(mover))?.removedAt).toBeNull();
    // The leaver was missed by the same two rounds: it waits for the sweep too.
    expect((await row(leaver))?.removedAt).toBeNull();

    // The sweep (an incremental pass of every type after the first round) lists the mover's newer
    // version and proves the leaver gone.
    const sweep = await passAllTypes(d, groupId, 'incremental', [...types]);
    expect(sweep.reduce((n, r) => n + r.removed, 0)).toBe(1);
    expect((await row(leaver))?.removedAt).not.toBeNull();
    expect(await row(mover)).toMatchObject({ removedAt: null, type: 'active' });
    const current = (await readMembers(database.pool, groupId)).filter((m) => m.removedAt === null);
    const want = [...sim.world.memberships()].filter((m) => m.groupId === groupId && (types as readonly string[]).includes(m.type));
    expect(current.map((m) => `${m.subscriberId}:${m.type}`).sort()).toEqual(want.map((m) => `${m.subscriberId}:${m.type}`).sort());
  });

  it('completes a pass when the shared limiter loses its Redis state mid-pass', async () => {
    sim = await startSimulator({ subscribers: 2_000, groups: 1, rateLimit: false });
    const groupId = sim.world.groupIds()[0]!;
    const prefix = uniquePrefix('poll-limiter');
    const limiter = createLimiter({ mode: 'redis', redisUrl: redisUrl(), prefix, perMinute: 6_000, logger });
    try {
      let pages = 0;
      const d = deps(database, sim, {
        pageSize: 100,
        legacy: createLegacyClient({ baseUrl: sim.url, apiKey: sim.apiKey, limiter }),
        // Bottleneck 2.19.5 cannot heal on Redis 7 by itself (docs/architecture.md, "Traps we work around"): wipe its keys halfway.
        onProgress: async () => {
          if (++pages === 5) await deletePrefix(`b_${prefix}`);
        },
      });
      const result = await runPass(d, groupId, 'active', 'full');
      expect(pages).toBeGreaterThan(5);
      expect(result.rowsSeen).toBe(sim.world.memberCount(groupId, 'active'));
      expect(limiter.stats().rebuilds).toBeGreaterThanOrEqual(1);
    } finally {
      await limiter.close();
      await deletePrefix(`b_${prefix}`);
    }
  });

  it('resumes a crashed full pass from its checkpoint', async () => {
    sim = await startSimulator({ subscribers: 2_000, groups: 1, rateLimit: false });
    const groupId = sim.world.groupIds()[0]!;
    const active = sim.world.memberCount(groupId, 'active');
    let pages = 0;
    const stopping = deps(database, sim, { pageSize: 100, shouldStop: () => ++pages >= 3 });
    await expect(runPass(stopping, groupId, 'active', 'full')).rejects.toThrow(/interrupted/);
    const state = await readSyncState(database.pool, groupId, 'active');
    // Three pages of 100 read; each next request re-reads the last overlapFor(100) rows.
    const checkpoint = 3 * (100 - overlapFor(100));
    expect(state?.fullOffset).toBe(checkpoint);
    expect(state?.fullTailIds).toHaveLength(overlapFor(100));
    expect(state?.lastStatus).toBe('failed');
    sim.clearRequests();
    const resumed = await runPass(deps(database, sim, { pageSize: 100 }), groupId, 'active', 'full');
    expect(resumed.rowsSeen).toBe(active - checkpoint - overlapFor(100));
    expect(resumed.gaps).toBe(0);
    const firstList = sim.requests.find((r) => r.route?.includes(':type') && !r.url.includes('/count'));
    expect(firstList?.url).toContain(`offset=${checkpoint}`);
    const { rows } = await database.pool.query<{ n: number }>(`select count(*)::int as n from subscribers`);
    expect(rows[0]?.n).toBe(active);
  });
});

describe('incremental passes', () => {
  let database: TestDatabase;
  let sim: Simulator | undefined;

  beforeAll(async () => {
    database = await createTestDatabase();
  });
  afterEach(async () => {
    await sim?.close();
    sim = undefined;
    await database.pool.query('truncate subscribers, group_members, sync_state, sync_passes, upstream_paging');
  });
  afterAll(async () => {
    await database.drop();
  });

  const HOUR = 3_600_000;
  it.each([
    ['midnight', '+14:00'],
    ['midnight', '-12:00'],
    ['whole-day', '+14:00'],
    ['whole-day', '-12:00'],
    ['whole-day', 'UTC'],
  ] as const)('pick up every change between passes (%s boundary, service timezone %s)', async (boundary, timezone) => {
    let now = Date.parse('2024-05-10T23:30:00Z');
    sim = await startSimulator({ subscribers: 500, groups: 1, rateLimit: false, boundary, timezone, clock: () => now });
    const groupId = sim.world.groupIds()[0]!;
    // MAILER_SOURCE_TZ stays UTC: the service's zone is "14 h ahead / 12 h behind ours".
    const d = deps(database, sim, { pageSize: 100 });
    await passAllTypes(d, groupId, 'full');

    for (const step of [1, 5, 13, 26]) {
      now += step * HOUR;
      const ids = sim.world.members(groupId).slice(step, step + 7);
      sim.world.updateFields(ids[0]!, { city: `city-${step}` });
      sim.world.unsubscribe(ids[1]!);
      sim.world.bounce(ids[2]!);
      sim.world.markJunk(ids[3]!);
      sim.world.markUnconfirmed(ids[4]!);
      sim.world.activate(ids[4]!);
      sim.world.createSubscriber({ groups: [groupId] });
      now += 60_000;
      await passAllTypes(d, groupId, 'incremental');
      const actual = await readMirroredSubscribers(database.pool);
      const expected = expectedFromWorld(sim.world, sim.world.members(groupId), 'UTC');
      expect(diffSubscribers(expected, actual, ['updatedAt', 'status', 'fields', 'email'])).toEqual([]);
    }
    const members = (await readMembers(database.pool, groupId)).filter((m) => m.removedAt === null);
    const want = [...sim.world.memberships()].filter((m) => m.groupId === groupId).map((m) => `${m.subscriberId}:${m.type}`);
    expect(members.map((m) => `${m.subscriberId}:${m.type}`).sort()).toEqual(want.sort());

    // An unchanged group writes nothing.
    const quiet = await passAllTypes(d, groupId, 'incremental');
    expect(quiet.reduce((n, r) => n + r.rowsWritten, 0)).toBe(0);
  });

  it('fails at once on a wrong API key: 1 request, code 302 named, cursor unchanged', async () => {
    sim = await startSimulator({ subscribers: 50, groups: 1, rateLimit: false });
    const groupId = sim.world.groupIds()[0]!;
    await runPass(deps(database, sim), groupId, 'active', 'full');
    const cursor = (await readSyncState(database.pool, groupId, 'active'))?.cursor;
    expect(cursor).toBeTruthy();
    sim.clearRequests();
    const wrongKey = 'wrong-key-123456';
    const bad = deps(database, sim, {
      legacy: createLegacyClient({ baseUrl: sim.url, apiKey: wrongKey, http: { retry: { retries: 5, minDelayMs: 5 } } }),
    });
    const error = await runPass(bad, groupId, 'active', 'incremental').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UpstreamAuthError);
    expect((error as Error).message).toMatch(/code 302/);
    expect((error as Error).message).not.toContain(wrongKey);
    expect(sim.requests.filter((r) => r.api === 'legacy')).toHaveLength(1);
    const state = await readSyncState(database.pool, groupId, 'active');
    expect(state?.cursor).toBe(cursor);
    expect(state?.lastStatus).toBe('failed');
    expect(state?.lastError).toMatch(/code 302/);
  });

  it('retries 5xx bursts and connection resets and still completes', async () => {
    sim = await startSimulator({ subscribers: 1_000, groups: 1, rateLimit: false, seed: 7 });
    const groupId = sim.world.groupIds()[0]!;
    sim.faults.set({ errorRate: 0.2, errorStatus: 503, resetRate: 0.1 });
    const d = deps(database, sim, { pageSize: 50 });
    await passAllTypes(d, groupId, 'full');
    sim.faults.clear();
    expect(sim.requests.some((r) => r.status === 503)).toBe(true);
    expect(sim.requests.some((r) => r.status === 0)).toBe(true);
    await assertMirrorEqualsWorld(database, sim, groupId);
  });
});

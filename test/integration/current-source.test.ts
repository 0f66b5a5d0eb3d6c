/**
 * The current API as a read source (docs/upstream-current.md): what only its cursor paging does,
 * against the simulator's current API. A page cap below the asked limit; a pass stopped at a cursor
 * checkpoint and resumed; a backfill dropping an open checkpoint; a switch of source mid-pass; the
 * 120-a-minute budget (scaled: the same budget per shorter window). What every source must do
 * (churn, version order, lossless ids) is read-source.contract.test.ts. Webhooks off throughout.
 */
import { describe, expect, it } from 'vitest';
import { normalizeCurrentSubscriber, normalizeWebhookSubscriber, SUBSCRIBER_FIELDS } from '../../src/mirror/normalize.js';
import { upsertSubscribers } from '../../src/mirror/store/index.js';
import { CURRENT_REQUESTS, startSimulator, type Simulator } from '../../src/simulator/index.js';
import { runPass } from '../../src/sync/legacy-pass.js';
import { PassInterruptedError } from '../../src/sync/pass-recorder.js';
import { readSyncState } from '../../src/sync/state.js';
import { createLimiter } from '../../src/ratelimit/limiter.js';
import type { TestDatabase } from '../helpers/db.js';
import { currentTestSource, expectedFromWorldCurrent, passContext } from '../helpers/current.js';
import { diffSubscribers, readMembers, readMirroredSubscribers } from '../helpers/mirror.js';
import { ALL_TYPES, fullPassAllTypes, passDeps, passFixture } from '../helpers/poll.js';

async function mirrorEqualsWorld(database: TestDatabase, sim: Simulator, groupId: string): Promise<void> {
  const expected = expectedFromWorldCurrent(sim.world, sim.world.members(groupId));
  const actual = await readMirroredSubscribers(database.pool);
  const fields = SUBSCRIBER_FIELDS.filter((f) => f !== 'deletedAt' && f !== 'forgetAt');
  expect(diffSubscribers(expected, actual, fields)).toEqual([]);
  const current = (await readMembers(database.pool, groupId)).filter((m) => m.removedAt === null);
  const want = [...sim.world.memberships()].filter((m) => m.groupId === groupId).map((m) => `${m.subscriberId}:${m.type}`);
  expect(current.map((m) => `${m.subscriberId}:${m.type}`).sort()).toEqual(want.sort());
}

describe('current API source: full passes by cursor', () => {
  const fixture = passFixture();

  it('a page cap (100) below the asked limit (500): the pass follows the cursor, not the page length, and reads every member', async () => {
    const sim = (fixture.sim = await startSimulator({ subscribers: 3_000, groups: 1, rateLimit: false, seed: 5 }));
    const database = fixture.database;
    const groupId = sim.world.groupIds()[0]!;
    const results = await fullPassAllTypes(currentTestSource(sim, { pageSize: 500 }), passContext(database), groupId);
    await mirrorEqualsWorld(database, sim, groupId);
    const members = sim.world.memberCount(groupId);
    const minimum =
      ALL_TYPES.reduce((n, t) => n + Math.max(1, Math.ceil(sim.world.members(groupId, t).length / 100)), 0) + ALL_TYPES.length;
    expect(results.reduce((n, r) => n + r.rowsSeen, 0)).toBe(members);
    expect(results.reduce((n, r) => n + r.requests, 0)).toBeLessThanOrEqual(minimum + ALL_TYPES.length);
  });

  it('a pass stopped after a page resumes at its cursor checkpoint: no page read twice, the mirror exact', async () => {
    const sim = (fixture.sim = await startSimulator({
      subscribers: 2_000,
      groups: 1,
      rateLimit: false,
      seed: 7,
    }));
    const database = fixture.database;
    const groupId = sim.world.groupIds()[0]!;
    const source = currentTestSource(sim);
    let pages = 0;
    const stopping = passContext(database, { shouldStop: () => ++pages >= 3 });
    await expect(source.runPass(stopping, groupId, 'active', 'full')).rejects.toBeInstanceOf(PassInterruptedError);
    const open = await readSyncState(database.pool, groupId, 'active');
    expect(open?.fullPages).toBe(3);
    expect(
      (await database.pool.query('select full_cursor from sync_state where group_id = $1 and type = $2', [groupId, 'active'])).rows[0]
        .full_cursor,
    ).toEqual(expect.any(String));
    sim.clearRequests();
    const resumed = await source.runPass(passContext(database), groupId, 'active', 'full');
    const active = sim.world.members(groupId, 'active').length;
    // The rest of the list (the counts request, then the pages after the checkpoint).
    expect(resumed.rowsSeen).toBe(active - 300);
    expect(sim.requests.filter((r) => r.api === 'current' && !r.url.includes('cursor=') && r.url.includes('/subscribers'))).toHaveLength(0);
    const state = await readSyncState(database.pool, groupId, 'active');
    expect(state?.fullPages).toBeNull();
    expect(state?.lastFullCompletedAt).not.toBeNull();
    await fullPassAllTypes(
      source,
      passContext(database),
      groupId,
      ALL_TYPES.filter((t) => t !== 'active'),
    );
    await mirrorEqualsWorld(database, sim, groupId);
  });

  it('a backfill (restart) drops an open cursor checkpoint and reads from the first page; a pass that missed members reports them awaiting proof', async () => {
    const sim = (fixture.sim = await startSimulator({
      subscribers: 1_000,
      groups: 1,
      rateLimit: false,
      seed: 9,
    }));
    const database = fixture.database;
    const groupId = sim.world.groupIds()[0]!;
    const source = currentTestSource(sim);
    await fullPassAllTypes(source, passContext(database), groupId);
    let pages = 0;
    await expect(
      source.runPass(passContext(database, { shouldStop: () => ++pages >= 2 }), groupId, 'active', 'full'),
    ).rejects.toBeInstanceOf(PassInterruptedError);
    const leaver = sim.world.members(groupId, 'active')[0]!;
    sim.world.removeFromGroup(leaver, groupId);
    const fresh = await source.runPass(passContext(database, { restart: true }), groupId, 'active', 'full');
    expect(fresh.rowsSeen).toBe(sim.world.members(groupId, 'active').length);
    expect(fresh.startedAt).not.toBeNull();
    expect(fresh.awaitingProof?.count).toBe(1);
  });

  it("SYNC_SOURCE changed mid-pass: neither source reads the other's checkpoint as its own, both start from the top", async () => {
    const sim = (fixture.sim = await startSimulator({ subscribers: 1_500, groups: 1, rateLimit: false, seed: 11 }));
    const database = fixture.database;
    const groupId = sim.world.groupIds()[0]!;
    const active = sim.world.members(groupId, 'active').length;
    let pages = 0;
    // The legacy pass stops after two pages: its checkpoint is a row offset with the ids that end it.
    const legacy = passDeps(database, sim, { pageSize: 100, shouldStop: () => ++pages >= 2 });
    await expect(runPass(legacy, groupId, 'active', 'full')).rejects.toBeInstanceOf(PassInterruptedError);
    expect((await readSyncState(database.pool, groupId, 'active'))?.fullOffset).toBeGreaterThan(0);
    // Read as a cursor checkpoint (pages done, no cursor left), it would end the pass at once, complete, having listed nobody.
    const current = await currentTestSource(sim).runPass(passContext(database), groupId, 'active', 'full');
    expect(current.rowsSeen).toBe(active);

    // And back: a cursor checkpoint is a page count, not a row offset.
    pages = 0;
    await expect(
      currentTestSource(sim).runPass(passContext(database, { shouldStop: () => ++pages >= 2 }), groupId, 'active', 'full'),
    ).rejects.toBeInstanceOf(PassInterruptedError);
    sim.clearRequests();
    const back = await runPass(passDeps(database, sim, { pageSize: 100 }), groupId, 'active', 'full');
    expect(back.rowsSeen).toBe(active);
    expect(back.gaps).toBe(0);
    const firstList = sim.requests.find((r) => r.api === 'legacy' && !r.url.includes('/count'));
    expect(firstList?.url).toContain('offset=0');
  });

  it('the shared limiter keeps the 120-a-window budget: busiest window ≤ 120, no 429 (window scaled to 3 s)', async () => {
    const windowMs = 3_000;
    const sim = (fixture.sim = await startSimulator({
      subscribers: 3_000,
      groups: 1,
      rateLimitWindowMs: windowMs,
      currentRateLimit: 120,
      currentPageCap: 10,
      seed: 3,
    }));
    const database = fixture.database;
    const groupId = sim.world.groupIds()[0]!;
    const limiter = createLimiter({ mode: 'memory', perMinute: 120, windowMs });
    try {
      const results = await fullPassAllTypes(currentTestSource(sim, { limiter }), passContext(database), groupId);
      const requests = results.reduce((n, r) => n + r.requests, 0);
      expect(requests).toBeGreaterThan(300);
      expect(sim.requests.filter((r) => r.api === 'current' && r.status === 429)).toEqual([]);
      expect(sim.maxRequestsInAnyWindow(windowMs, CURRENT_REQUESTS)).toBeLessThanOrEqual(120);
      await mirrorEqualsWorld(database, sim, groupId);
    } finally {
      await limiter.close();
    }
  }, 120_000);
});

describe('history: list versions of the current API are second-granular, as poll ones', () => {
  const fixture = passFixture();

  it('a webhook version of the same second replaces a listed version without keeping it as a past version', async () => {
    const { pool } = fixture.database;
    const base = {
      email: 'coarse@example.com',
      status: 'active',
      created_at: '2026-01-01 09:00:00',
      fields: { city: 'listed' },
    };
    const listed = normalizeCurrentSubscriber(
      { id: '9007199254740993', ...base, updated_at: '2026-01-01 10:00:00' },
      { sourceTimezone: 'UTC' },
    );
    const webhook = normalizeWebhookSubscriber({
      id: '9007199254740993',
      ...base,
      created_at: '2026-01-01T09:00:00.000000Z',
      updated_at: '2026-01-01T10:00:00.500000Z',
      fields: { city: 'by-webhook' },
    });
    const later = normalizeWebhookSubscriber({
      id: '9007199254740993',
      ...base,
      created_at: '2026-01-01T09:00:00.000000Z',
      updated_at: '2026-01-01T10:00:02.000000Z',
      fields: { city: 'later' },
    });
    await upsertSubscribers(pool, [listed]);
    await upsertSubscribers(pool, [webhook]);
    // The listed version is the same change as the webhook's, dated to its second: not a version of its own.
    expect((await pool.query('select via from subscriber_versions_past')).rows).toEqual([]);
    await upsertSubscribers(pool, [later]);
    expect((await pool.query('select via from subscriber_versions_past')).rows).toEqual([{ via: 'webhook' }]);
    await pool.query('truncate subscriber_versions_past');
  });
});

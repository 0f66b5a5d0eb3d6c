/**
 * A backfill means "the mirror equals the service now" (issue 20): it is served only by a pass that
 * starts after it was asked for (a running pass does not count: it waits behind it, then runs), and
 * when that pass missed members it runs the confirming passes itself, so it returns with every
 * member that left before it was asked for ended, and no listed member. Worker in-process,
 * simulator, real Postgres and Redis; webhooks off.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SubscriberType } from '../../src/db/schema.js';
import { createLogger } from '../../src/ground/log.js';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { waitForPass } from '../../src/sync/backfill.js';
import { createSyncQueue, enqueueBackfill, type PassJobResult } from '../../src/sync/schedule.js';
import { createSyncWorker, type SyncWorker } from '../../src/sync/worker.js';
import { createLegacyClient } from '../../src/upstream/legacy/client.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { readMembers } from '../helpers/mirror.js';
import { deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';

const { logger } = createLogger({ level: 'silent' });

/** A database, a simulator and an in-process sync worker on their own queue prefix, for one describe block. */
function backfillFixture(label: string, world: { subscribers: number; seed: number }, types: readonly SubscriberType[]) {
  const prefix = uniquePrefix(label);
  const connection = { url: redisUrl(), maxRetriesPerRequest: null };
  const fx = {
    queue: createSyncQueue(connection, prefix),
    database: undefined as unknown as TestDatabase,
    sim: undefined as unknown as Simulator,
    groupId: '',
    /** Waits for a backfill job; throws unless it completed. */
    done: async (jobId: string): Promise<PassJobResult> => {
      const outcome = await waitForPass(fx.queue, jobId, { pollMs: 50 });
      if (outcome.state !== 'completed') throw new Error(`backfill failed: ${outcome.error}`);
      return outcome.result;
    },
  };
  let redis: Redis | undefined;
  let worker: SyncWorker | undefined;

  beforeAll(async () => {
    fx.database = await createTestDatabase();
    const sim = (fx.sim = await startSimulator({ ...world, groups: 1, rateLimit: false }));
    fx.groupId = sim.world.groupIds()[0] as string;
    redis = new Redis(redisUrl());
    worker = createSyncWorker({
      pool: fx.database.pool,
      redis,
      connection,
      prefix,
      legacyFactory: () =>
        createLegacyClient({ baseUrl: sim.url, apiKey: sim.apiKey, http: { retry: { retries: 2, minDelayMs: 5, maxDelayMs: 20 } } }),
      apiKey: sim.apiKey,
      logger,
      sourceTimezone: 'UTC',
      lookbackMs: 86_400_000,
      pageSize: 100,
      groups: [fx.groupId],
      types,
      busyRetryMs: 200,
    });
  });

  afterAll(async () => {
    await worker?.close(5_000);
    await fx.queue.close();
    redis?.disconnect();
    await fx.sim?.close();
    await fx.database?.drop();
    await deletePrefix(prefix);
  });

  return fx;
}

describe('backfill after a burst of departures', () => {
  const fx = backfillFixture('backfill-fresh', { subscribers: 3_000, seed: 21 }, ['active']);
  const { queue, done } = fx;

  it('a backfill asked while a pass runs waits for it, starts its own pass and returns with every earlier leaver ended', async () => {
    const { sim, groupId, database } = fx;
    expect(await done(await enqueueBackfill(queue, groupId, 'active'))).toMatchObject({
      status: 'succeeded',
      removed: 0,
      confirmingPasses: 0,
    });

    // A pass under a burst of departures (members it already read leave after every request), slowed
    // down so that the next backfill is asked while it runs.
    sim.faults.set({ delayMs: 30 });
    sim.pageChurn.set({ groupId, leave: 3 });
    const running = await enqueueBackfill(queue, groupId, 'active');
    const deadline = Date.now() + 20_000;
    while (sim.pageChurn.left.length < 6 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    expect(await queue.getJobState(running)).toBe('active');

    const askedAt = Date.now();
    const leftBeforeAsked = [...sim.pageChurn.left];
    const backfill = await enqueueBackfill(queue, groupId, 'active');
    // Not the running pass's job: that pass started before it was asked for.
    expect(backfill).not.toBe(running);
    await done(running);
    sim.pageChurn.clear();
    sim.faults.clear();

    const result = await done(backfill);
    expect(Date.parse(result.startedAt as string)).toBeGreaterThanOrEqual(askedAt - 5);
    // Its pass missed the members that left during the running pass; it confirmed at once.
    expect(result.confirmingPasses).toBeGreaterThanOrEqual(1);
    expect(result.awaitingProof).toBe(0);
    const rows = new Map((await readMembers(database.pool, groupId)).map((m) => [m.subscriberId, m]));
    expect(leftBeforeAsked.filter((id) => rows.get(id)?.removedAt == null)).toEqual([]);
    // Every leaver of the burst left before this backfill's pass started: all ended, and nobody listed.
    expect(sim.pageChurn.left.filter((id) => rows.get(id)?.removedAt == null)).toEqual([]);
    // (The running pass may have ended a leaver it stepped back from and never read; the rest are this backfill's.)
    expect(result.removed).toBeGreaterThan(0);
    const listed = new Set(sim.world.members(groupId, 'active'));
    expect([...rows.values()].filter((m) => m.removedAt !== null && listed.has(m.subscriberId))).toEqual([]);
  }, 120_000);
});

describe('backfill of a group of several types: the proof in rounds with the sweep between them', () => {
  const types = ['active', 'unsubscribed', 'bounced'] as const;
  const fx = backfillFixture('backfill-rounds', { subscribers: 2_000, seed: 23 }, types);
  const { queue, done } = fx;

  it('backfill --group: one job per type returns with every member of every type that left before it ended', async () => {
    const { sim, groupId, database } = fx;
    for (const type of types) await done(await enqueueBackfill(queue, groupId, type));
    const active = sim.world.members(groupId, 'active');
    const unsubscribed = sim.world.members(groupId, 'unsubscribed');
    expect(unsubscribed.length).toBeGreaterThan(20);
    // Webhooks off: only the poll can end these memberships.
    const leavers = [...active.slice(10, 25), ...unsubscribed.slice(3, 8)];
    for (const id of leavers.slice(0, 10)) sim.world.removeFromGroup(id, groupId);
    for (const id of leavers.slice(10)) sim.world.deleteSubscriber(id);

    const jobs = [];
    for (const type of types) jobs.push(await enqueueBackfill(queue, groupId, type));
    const results = await Promise.all(jobs.map(done));

    // One job proved it for the group (it held the proof lock); the others found nothing left to prove.
    expect(results.map((r) => [r.type, r.status, r.awaitingProof])).toEqual(types.map((t) => [t, 'succeeded', 0]));
    // Round one is the first backfill's passes of every type (they started after the leavers were last
    // seen) and this backfill's own; then the sweep; then round two: one more pass of each type at most.
    expect(results.reduce((n, r) => n + (r.confirmingPasses ?? 0), 0)).toBeLessThanOrEqual(types.length);
    expect(results.reduce((n, r) => n + (r.removed ?? 0), 0)).toBe(leavers.length);
    const rows = new Map((await readMembers(database.pool, groupId)).map((m) => [m.subscriberId, m]));
    expect(leavers.filter((id) => rows.get(id)?.removedAt == null)).toEqual([]);
    const listed = new Set(sim.world.members(groupId));
    expect([...rows.values()].filter((m) => m.removedAt !== null && listed.has(m.subscriberId))).toEqual([]);
  }, 120_000);

  it('keeps a member that flees every list just before it is read: the sweep between the rounds lists it', async () => {
    const { sim, groupId, database } = fx;
    const active = sim.world.members(groupId, 'active');
    const leavers = active.slice(30, 35);
    for (const id of leavers) sim.world.removeFromGroup(id, groupId);
    // The worst a member changing type can do to passes by type: it leaves each list just before
    // the pass reads it (active → unsubscribed stamped only in date_unsubscribe, and back).
    const fleeing = active[active.length - 1] as string;
    sim.pageChurn.set({ groupId, flee: [fleeing] });
    const result = await done(await enqueueBackfill(queue, groupId, 'active'));
    const fled = sim.pageChurn.applied.fled;
    sim.pageChurn.clear();
    // The backfill's own pass missed the leavers; the sweep; round two: active, unsubscribed (bounced's
    // last two passes, from the test before, both started after the leavers were last seen).
    expect(result).toMatchObject({ status: 'succeeded', confirmingPasses: 2, awaitingProof: 0, removed: leavers.length });
    // It fled the backfill's pass and round two's pass of unsubscribed: every pass of every type missed it.
    expect(fled).toBeGreaterThanOrEqual(2);
    expect(sim.world.membership(groupId, fleeing)).toBeDefined();
    const rows = new Map((await readMembers(database.pool, groupId)).map((m) => [m.subscriberId, m]));
    expect(rows.get(fleeing)?.removedAt ?? null).toBeNull();
    expect(leavers.filter((id) => rows.get(id)?.removedAt == null)).toEqual([]);
  }, 120_000);
});

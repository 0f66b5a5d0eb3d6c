/**
 * The sync worker in-process, for the job triggers: a `resume` job continues an open full pass from
 * its checkpoint, does nothing once no pass is open, and waits (instead of being dropped) while
 * another holder runs the same (group, type).
 */
import { Redis } from 'ioredis';
import { QueueEvents } from 'bullmq';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/ground/metrics.js';
import { createLogger } from '../../src/ground/log.js';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { tryAcquirePassLock } from '../../src/sync/lock.js';
import { PASS_JOB_OPTIONS, createSyncQueue, enqueueBackfill, enqueueResume, type PassJobResult } from '../../src/sync/schedule.js';
import { closeRow, openRow } from '../../src/sync/pass-history.js';
import { closeFullPass, openFullPass, readSyncState, saveFullCheckpoint } from '../../src/sync/state.js';
import {
  createOrphanResumer,
  createSyncWorker,
  passLockKey,
  passWantedKey,
  proofLockKey,
  resumeOpenFullPasses,
  type SyncWorker,
} from '../../src/sync/worker.js';
import { createLegacyClient } from '../../src/upstream/legacy/client.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';

const { logger } = createLogger({ level: 'silent' });

describe('sync worker triggers', () => {
  const prefix = uniquePrefix('sync-worker');
  const connection = { url: redisUrl(), maxRetriesPerRequest: null };
  let database: TestDatabase;
  let sim: Simulator;
  let redis: Redis;
  let groupId: string;
  let worker: SyncWorker;
  let events: QueueEvents;
  const queue = createSyncQueue(connection, prefix);
  const metrics = createMetrics({ defaultMetrics: false });

  beforeAll(async () => {
    database = await createTestDatabase();
    sim = await startSimulator({ subscribers: 2_000, groups: 1, rateLimit: false, seed: 5 });
    groupId = sim.world.groupIds()[0] as string;
    redis = new Redis(redisUrl());
    events = new QueueEvents('sync', { connection, prefix });
    await events.waitUntilReady();
    worker = createSyncWorker({
      pool: database.pool,
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
      groups: [groupId],
      types: ['active'],
      busyRetryMs: 200,
      metrics,
    });
  });

  afterAll(async () => {
    await worker?.close(5_000);
    await events?.close();
    await queue.close();
    redis?.disconnect();
    await sim?.close();
    await database?.drop();
    await deletePrefix(prefix);
  });

  beforeEach(() => sim.clearRequests());

  const finished = async (jobId: string): Promise<PassJobResult> => {
    const job = await queue.getJob(jobId);
    if (!job) throw new Error(`job ${jobId} vanished`);
    const result: PassJobResult = await job.waitUntilFinished(events, 30_000);
    return result;
  };
  const listRequests = () => sim.requests.filter((r) => r.api === 'legacy' && !r.url.includes('/count'));

  it('does nothing when no full pass is open', async () => {
    const result = await finished(await enqueueResume(queue, groupId, 'active'));
    expect(result).toMatchObject({ status: 'skipped', reason: 'no open full pass to resume', requests: 0 });
    expect(listRequests()).toHaveLength(0);
  });

  it('continues an open full pass from its checkpoint', async () => {
    // What a process killed mid-pass leaves behind: an open pass with a committed checkpoint.
    await openRow(database.pool, { groupId, type: 'active', kind: 'full', source: 'legacy', trigger: null });
    await openFullPass(database.pool, groupId, 'active');
    await saveFullCheckpoint(database.pool, groupId, 'active', { nextOffset: 700, tailIds: [], continuous: true });

    const ids = await resumeOpenFullPasses(queue, database.pool, [groupId], ['active']);
    expect(ids).toHaveLength(1);
    const result = await finished(ids[0] as string);
    expect(result.status).toBe('succeeded');
    expect(listRequests()[0]?.url).toContain('offset=700');
    const state = await readSyncState(database.pool, groupId, 'active');
    expect(state?.fullOffset).toBeNull();
    expect(state?.lastStatus).toBe('succeeded');
  });

  it('waits while the pass is held elsewhere, then skips if that holder finished it', async () => {
    await openRow(database.pool, { groupId, type: 'active', kind: 'full', source: 'legacy', trigger: null });
    await openFullPass(database.pool, groupId, 'active');
    await saveFullCheckpoint(database.pool, groupId, 'active', { nextOffset: 300, tailIds: [], continuous: true });
    const lock = await tryAcquirePassLock(redis, passLockKey(prefix, groupId, 'active'));
    expect(lock).not.toBeNull();

    const jobId = await enqueueResume(queue, groupId, 'active');
    try {
      await new Promise((r) => setTimeout(r, 600)); // a few busy retries
      // Between retries it is delayed; during one, briefly active. Never finished, nothing fetched.
      expect(['delayed', 'active', 'waiting']).toContain(await (await queue.getJob(jobId))?.getState());
      expect(listRequests()).toHaveLength(0);
      // The holder completes the pass (as a still-running process would after Redis lost its job).
      await closeFullPass(database.pool, groupId, 'active');
    } finally {
      await lock?.release();
    }
    const result = await finished(jobId);
    expect(result).toMatchObject({ status: 'skipped', reason: 'no open full pass to resume' });
    expect(listRequests()).toHaveLength(0);
  });

  it('keeps a manual backfill apart from a pending resume, so the backfill always runs', async () => {
    const lock = await tryAcquirePassLock(redis, passLockKey(prefix, groupId, 'active'));
    const resumeId = await enqueueResume(queue, groupId, 'active');
    const backfillId = await enqueueBackfill(queue, groupId, 'active');
    expect(backfillId).not.toBe(resumeId);
    await lock?.release();
    expect((await finished(backfillId)).status).toBe('succeeded');
    expect((await finished(resumeId)).status).toBe('skipped');
  });

  it('lets a waiting backfill go before scheduled ticks, so back-to-back passes cannot starve it', async () => {
    const lock = await tryAcquirePassLock(redis, passLockKey(prefix, groupId, 'active'));
    const backfillId = await enqueueBackfill(queue, groupId, 'active');
    try {
      // The backfill found the pass busy and waits, marked as wanted.
      const deadline = Date.now() + 10_000;
      while ((await redis.exists(passWantedKey(prefix, groupId, 'active'))) === 0 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 20));
      }
      const tick = await queue.add('incremental', { groupId, type: 'active', mode: 'incremental', trigger: 'schedule' }, PASS_JOB_OPTIONS);
      expect(await finished(tick.id as string)).toMatchObject({
        status: 'skipped',
        reason: 'a full pass of this group and type (a backfill, a resume or a scheduled one) is waiting for its turn',
      });
    } finally {
      await lock?.release();
    }
    expect((await finished(backfillId)).status).toBe('succeeded');
    // Its turn came: scheduled ticks run again.
    const next = await queue.add('incremental', { groupId, type: 'active', mode: 'incremental', trigger: 'schedule' }, PASS_JOB_OPTIONS);
    expect((await finished(next.id as string)).status).toBe('succeeded');
  });

  it('a scheduled full pass that meets a running pass runs after it instead of being dropped', async () => {
    const before = (await readSyncState(database.pool, groupId, 'active'))?.lastFullCompletedAt ?? null;
    const lock = await tryAcquirePassLock(redis, passLockKey(prefix, groupId, 'active'));
    expect(lock).not.toBeNull();
    let releasedAt: number;
    // What the full scheduler enqueues every RECONCILE_EVERY.
    const tick = await queue.add('full', { groupId, type: 'active', mode: 'full', trigger: 'schedule' }, PASS_JOB_OPTIONS);
    try {
      await new Promise((r) => setTimeout(r, 600)); // a few busy retries
      expect(['delayed', 'active', 'waiting']).toContain(await tick.getState());
      expect(listRequests()).toHaveLength(0);
      // Meanwhile a scheduled incremental tick is still just skipped (the next one comes soon).
      const incremental = await queue.add(
        'incremental',
        { groupId, type: 'active', mode: 'incremental', trigger: 'schedule' },
        PASS_JOB_OPTIONS,
      );
      expect((await finished(incremental.id as string)).status).toBe('skipped');
    } finally {
      releasedAt = Date.now();
      await lock?.release();
    }
    const result = await finished(tick.id as string);
    expect(result.status).toBe('succeeded');
    expect(result.rowsSeen).toBe(sim.world.memberCount(groupId, 'active'));
    const completed = (await readSyncState(database.pool, groupId, 'active'))?.lastFullCompletedAt;
    expect(completed).not.toBe(before);
    expect(Date.parse(completed as string)).toBeGreaterThanOrEqual(releasedAt - 1000);
  });

  it('a scheduled full pass that meets a running full pass is served by it (no back-to-back passes)', async () => {
    const lock = await tryAcquirePassLock(redis, passLockKey(prefix, groupId, 'active'));
    // The holder is running a full pass.
    const running = await openRow(database.pool, { groupId, type: 'active', kind: 'full', source: 'legacy', trigger: null });
    try {
      const tick = await queue.add('full', { groupId, type: 'active', mode: 'full', trigger: 'schedule' }, PASS_JOB_OPTIONS);
      expect(await finished(tick.id as string)).toMatchObject({
        status: 'skipped',
        reason: 'a full pass of this group and type is running',
      });
      expect(listRequests()).toHaveLength(0);
    } finally {
      await closeRow(database.pool, running, { status: 'succeeded', rowsSeen: 0, rowsWritten: 0, requests: 0 });
      await lock?.release();
    }
  });

  it('a scheduled full pass that waited behind a pass which turned out full is served by it', async () => {
    const lock = await tryAcquirePassLock(redis, passLockKey(prefix, groupId, 'active'));
    const tick = await queue.add('full', { groupId, type: 'active', mode: 'full', trigger: 'schedule' }, PASS_JOB_OPTIONS);
    try {
      await new Promise((r) => setTimeout(r, 400)); // it found the lock held and waits
      // The holder's pass completes as a full pass (e.g. the first pass of a type with no cursor).
      const holder = await openRow(database.pool, { groupId, type: 'active', kind: 'full', source: 'legacy', trigger: null });
      await closeRow(database.pool, holder, { status: 'succeeded', complete: true, rowsSeen: 0, rowsWritten: 0, requests: 0 });
    } finally {
      await lock?.release();
    }
    expect(await finished(tick.id as string)).toMatchObject({
      status: 'skipped',
      reason: 'a full pass of this group and type completed after this one was due',
    });
    expect(listRequests()).toHaveLength(0);
  });

  it('a scheduled full pass that waited, then met the pass recorded as full, takes its mark away as it skips', async () => {
    // At a start with no cursor the first scheduled tick runs a full pass, and the scheduled full job
    // can meet its lock before that pass has recorded itself as full: it waits, marked as wanted.
    const lock = await tryAcquirePassLock(redis, passLockKey(prefix, groupId, 'active'));
    const wanted = passWantedKey(prefix, groupId, 'active');
    const tick = await queue.add('full', { groupId, type: 'active', mode: 'full', trigger: 'schedule' }, PASS_JOB_OPTIONS);
    let running: Awaited<ReturnType<typeof openRow>> | null = null;
    try {
      const deadline = Date.now() + 10_000;
      while ((await redis.get(wanted)) !== tick.id && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect(await redis.get(wanted)).toBe(tick.id);
      // The holder's pass now shows as a full pass that runs.
      running = await openRow(database.pool, { groupId, type: 'active', kind: 'full', source: 'legacy', trigger: null });
      expect(await finished(tick.id as string)).toMatchObject({
        status: 'skipped',
        reason: 'a full pass of this group and type is running',
      });
      // Nothing waits any more: a scheduled tick is skipped for the pass that runs, not for a wait.
      expect(await redis.exists(wanted)).toBe(0);
      const incremental = await queue.add(
        'incremental',
        { groupId, type: 'active', mode: 'incremental', trigger: 'schedule' },
        PASS_JOB_OPTIONS,
      );
      expect(await finished(incremental.id as string)).toMatchObject({
        status: 'skipped',
        reason: 'another pass of this group and type is running',
      });
    } finally {
      if (running) await closeRow(database.pool, running, { status: 'succeeded', rowsSeen: 0, rowsWritten: 0, requests: 0 });
      await lock?.release();
    }
    expect(listRequests()).toHaveLength(0);
  });

  it('counts rows dated in the future in a metric (and keeps polling)', async () => {
    const full = await queue.add('full', { groupId, type: 'active', mode: 'full', trigger: 'backfill' }, PASS_JOB_OPTIONS);
    expect((await finished(full.id as string)).status).toBe('succeeded');
    const id = sim.world.members(groupId, 'active')[3] as string;
    sim.world.updateDatedAt(id, Date.parse('2099-01-01T00:00:00Z'));
    const tick = await queue.add('incremental', { groupId, type: 'active', mode: 'incremental', trigger: 'schedule' }, PASS_JOB_OPTIONS);
    expect((await finished(tick.id as string)).status).toBe('succeeded');
    const counted = (await metrics.futureRows.get()).values.find((v) => v.labels.group === groupId && v.labels.type === 'active');
    expect(counted?.value).toBe(1);
  });

  it('finds open full passes that nothing runs or waits to run, and resumes them once', async () => {
    const orphans = createOrphanResumer({ queue, pool: database.pool, redis, prefix, groups: [groupId], types: ['active'] });
    await openRow(database.pool, { groupId, type: 'active', kind: 'full', source: 'legacy', trigger: null });
    await openFullPass(database.pool, groupId, 'active');
    await saveFullCheckpoint(database.pool, groupId, 'active', { nextOffset: 500, tailIds: [], continuous: true });

    const lock = await tryAcquirePassLock(redis, passLockKey(prefix, groupId, 'active'));
    try {
      expect(await orphans()).toEqual([]); // someone holds the pass: not an orphan
    } finally {
      await lock?.release();
    }

    // What a job failed as "stalled more than allowable limit" leaves: an open pass and no job.
    const [id] = await orphans();
    expect(id).toBeDefined();
    expect(await orphans()).toEqual([]); // its resume is queued (or already running or done)
    expect(await finished(id as string)).toMatchObject({ status: 'succeeded' });
    expect(listRequests()[0]?.url).toContain('offset=500');
    expect(await orphans()).toEqual([]);
  });

  it('resumes a pass that keeps failing at the same checkpoint only after a growing delay', async () => {
    let clock = 1_000_000;
    const orphans = createOrphanResumer({
      queue,
      pool: database.pool,
      redis,
      prefix,
      groups: [groupId],
      types: ['active'],
      minRetryMs: 60_000,
      maxRetryMs: 200_000,
      now: () => clock,
    });
    await openRow(database.pool, { groupId, type: 'active', kind: 'full', source: 'legacy', trigger: null });
    await openFullPass(database.pool, groupId, 'active');
    await saveFullCheckpoint(database.pool, groupId, 'active', { nextOffset: 900, tailIds: [], continuous: true });
    sim.faults.set({ errorRate: 1 }); // every resume fails; the checkpoint stays at 900
    const failedRun = async () => {
      const [id] = await orphans();
      if (!id) return false;
      const job = await queue.getJob(id);
      await job?.waitUntilFinished(events, 30_000).catch(() => undefined);
      expect(await job?.getState()).toBe('failed');
      return true;
    };
    try {
      expect(await failedRun()).toBe(true); // first sight: at once
      clock += 59_000;
      expect(await orphans()).toEqual([]); // not again within a minute
      clock += 1_000;
      expect(await failedRun()).toBe(true); // a minute later
      clock += 119_000;
      expect(await orphans()).toEqual([]); // now two minutes
      clock += 1_000;
      expect(await failedRun()).toBe(true);
      clock += 199_000;
      expect(await orphans()).toEqual([]); // capped at maxRetryMs
      clock += 1_000;
      expect(await failedRun()).toBe(true);
    } finally {
      sim.faults.clear();
    }
    // Progress resets the wait: once the checkpoint moves, the next check resumes at once.
    await saveFullCheckpoint(database.pool, groupId, 'active', { nextOffset: 1_000, tailIds: [], continuous: true });
    const [id] = await orphans();
    expect(id).toBeDefined();
    expect(await finished(id as string)).toMatchObject({ status: 'succeeded' });
  });

  it("the group's proof lock taken: a resume leaves its missed members to that proof at once, a backfill waits for it and then proves", async () => {
    expect(await finished(await enqueueBackfill(queue, groupId, 'active'))).toMatchObject({ status: 'succeeded' });
    const leavers = sim.world.members(groupId, 'active').slice(5, 8);
    for (const id of leavers) sim.world.removeFromGroup(id, groupId);
    const other = await tryAcquirePassLock(redis, proofLockKey(prefix, groupId));
    expect(other).not.toBeNull();
    try {
      // A resume (like a scheduled pass) misses them, finds another job proving the group, and leaves it at that.
      await openRow(database.pool, { groupId, type: 'active', kind: 'full', source: 'legacy', trigger: null });
      await openFullPass(database.pool, groupId, 'active', { restart: true });
      const resumed = await finished(await enqueueResume(queue, groupId, 'active'));
      expect(resumed).toMatchObject({ status: 'succeeded', confirmingPasses: 0, awaitingProof: leavers.length, proofRequests: 0 });

      // Two more leave. A backfill's pass ends the first three (its pass and the resume's both missed
      // them) and misses these two: it waits for the proof lock, holding no pass lock meanwhile.
      const later = sim.world.members(groupId, 'active').slice(20, 22);
      for (const id of later) sim.world.removeFromGroup(id, groupId);
      // Read before the job exists: a worker may start its pass before a read after the enqueue.
      const started = (await readSyncState(database.pool, groupId, 'active'))?.lastRunStartedAt;
      const backfill = await enqueueBackfill(queue, groupId, 'active');
      const deadline = Date.now() + 20_000;
      for (;;) {
        const state = await readSyncState(database.pool, groupId, 'active');
        const passDone = state?.lastStatus === 'succeeded' && state.lastRunStartedAt !== started;
        if (passDone && (await redis.exists(passLockKey(prefix, groupId, 'active'))) === 0) break;
        if (Date.now() > deadline) throw new Error('the backfill did not reach the proof lock');
        await new Promise((r) => setTimeout(r, 50));
      }
      await new Promise((r) => setTimeout(r, 500));
      expect(await (await queue.getJob(backfill))?.getState()).toBe('active');
      await other?.release();
      const proven = await finished(backfill);
      expect(proven).toMatchObject({ status: 'succeeded', awaitingProof: 0, removed: leavers.length + later.length });
      expect(proven.confirmingPasses).toBeGreaterThanOrEqual(1);
    } finally {
      await other?.release();
    }
  });
});

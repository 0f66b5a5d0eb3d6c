/**
 * The removal proof on the current API (docs/architecture.md, "Pass history and the removal rule"):
 * after a complete pass that missed members, the worker asks about each candidate, one request each
 * (`GET /api/subscribers/{id}`), when that costs fewer requests than another round of passes, and
 * runs the rounds otherwise. Real worker, queue, Postgres and the simulator's current API.
 */
import { QueueEvents } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/ground/log.js';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { createSyncQueue, enqueueBackfill, type PassJobResult } from '../../src/sync/schedule.js';
import { createSyncWorker, type SyncWorker } from '../../src/sync/worker.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { currentTestSource } from '../helpers/current.js';
import { readMembers } from '../helpers/mirror.js';
import { deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';

const { logger } = createLogger({ level: 'silent' });
const TYPES = ['active', 'unsubscribed'] as const;

describe('current API: the proof checks candidates one request each when that is cheaper than a round', () => {
  const prefix = uniquePrefix('current-proof');
  const connection = { url: redisUrl(), maxRetriesPerRequest: null };
  let database: TestDatabase;
  let sim: Simulator;
  let redis: Redis;
  let groupId: string;
  let worker: SyncWorker;
  let events: QueueEvents;
  const queue = createSyncQueue(connection, prefix);

  beforeAll(async () => {
    database = await createTestDatabase();
    sim = await startSimulator({ subscribers: 1_500, groups: 1, rateLimit: false, seed: 11, largeIds: true });
    groupId = sim.world.groupIds()[0] as string;
    redis = new Redis(redisUrl());
    events = new QueueEvents('sync', { connection, prefix });
    await events.waitUntilReady();
    worker = createSyncWorker({
      pool: database.pool,
      redis,
      connection,
      prefix,
      source: currentTestSource(sim),
      apiKey: sim.webhooksToken,
      logger,
      sourceTimezone: 'UTC',
      lookbackMs: 86_400_000,
      pageSize: 100,
      groups: [groupId],
      types: [...TYPES],
      busyRetryMs: 200,
    });
    // The first pass of each type: nothing awaits proof yet.
    for (const type of TYPES) expect(await finished(await enqueueBackfill(queue, groupId, type))).toMatchObject({ status: 'succeeded' });
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

  async function finished(jobId: string): Promise<PassJobResult> {
    const job = await queue.getJob(jobId);
    if (!job) throw new Error(`job ${jobId} vanished`);
    const result: PassJobResult = await job.waitUntilFinished(events, 60_000);
    return result;
  }

  const checks = () => sim.requests.filter((r) => r.url.split('?')[0]?.startsWith('/api/subscribers/'));
  const current = async () => (await readMembers(database.pool, groupId)).filter((m) => m.removedAt === null).map((m) => m.subscriberId);

  it('a few leavers: one request each, ended with the check as their proof; a candidate still in the group is kept', async () => {
    const active = sim.world.members(groupId, 'active');
    const removed = active.slice(10, 13);
    const deleted = active[20] as string;
    for (const id of removed) sim.world.removeFromGroup(id, groupId);
    sim.world.deleteSubscriber(deleted);
    // A member the next pass will not list although it stays in the group: it moves to a type the
    // pass read before this one, as a status change during a pass would.
    const mover = active[30] as string;

    const job = await enqueueBackfill(queue, groupId, 'active');
    // Let the pass start, then move the member out of the list it reads.
    sim.world.unsubscribe(mover);
    const result = await finished(job);
    expect(result).toMatchObject({ status: 'succeeded', confirmingPasses: 0, awaitingProof: 0 });

    const leavers = [...removed, deleted];
    const asked = checks().map((r) => r.url.split('/').at(-1));
    // One request per candidate: the leavers (and the mover, when the pass missed it), nothing more.
    expect(asked.filter((id) => leavers.includes(id as string)).sort()).toEqual([...leavers].sort());
    expect(asked.length).toBeLessThanOrEqual(leavers.length + 1);
    expect(result.proofRequests).toBe(asked.length);
    const now = await current();
    for (const id of leavers) expect(now).not.toContain(id);
    expect(now).toContain(mover);

    // "Why was it ended": the check's row, and the pass that missed it as its proof.
    const { rows } = await database.pool.query<{ kind: string; proof: string[]; requests: number }>(
      `select settled.kind, settled.proof, settled.requests
         from group_members m join sync_passes settled on settled.id = m.ended_by
        where m.group_id = $1 and m.subscriber_id = $2`,
      [groupId, removed[0]],
    );
    expect(rows[0]?.kind).toBe('check');
    const missedBy = Number(rows[0]?.proof[0]);
    const { rows: proof } = await database.pool.query<{ kind: string; complete: boolean; type: string }>(
      'select kind, complete, type from sync_passes where id = $1',
      [missedBy],
    );
    expect(proof[0]).toMatchObject({ kind: 'full', complete: true, type: 'active' });
  });

  it('more leavers than a round costs: the rounds prove them, no candidate is asked about', async () => {
    const active = sim.world.members(groupId, 'active');
    // A round here is one pass per type: about (members / 100 + 2) requests; far fewer than these.
    const leavers = active.slice(100, 400);
    for (const id of leavers) sim.world.removeFromGroup(id, groupId);
    const result = await finished(await enqueueBackfill(queue, groupId, 'active'));
    expect(result).toMatchObject({ status: 'succeeded', awaitingProof: 0 });
    expect(result.confirmingPasses).toBeGreaterThan(0);
    expect(checks()).toHaveLength(0);
    const now = await current();
    for (const id of leavers) expect(now).not.toContain(id);
  });
});

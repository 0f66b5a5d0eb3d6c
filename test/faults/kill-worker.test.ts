/**
 * Fault 1 (invariant 3): `start --role worker` killed with SIGKILL at 10 random points of a full pass
 * over the 200k active subscribers of a group (ids above 2^53), restarted after each kill. The mirror then equals the
 * world: every listed subscriber with every column, no extra row, one membership each.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { readSyncState, type SyncStateRow } from '../../src/sync/state.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { firstListOffset } from '../helpers/simulator.js';
import { secretScanFigures } from './helpers/collector.js';
import { compareGroupWithWorld } from './helpers/compare.js';
import { expireDeadWorker } from './helpers/redis-keys.js';
import { useSecondAccount } from './helpers/second-account.js';
import { makeSecrets, withCredentials } from './helpers/secrets.js';
import {
  assertRunning,
  killAll,
  killHard,
  printSummary,
  servicePort,
  sleep,
  startService,
  stopGracefully,
  waitFor,
  type ServiceProcess,
} from './helpers/service.js';

const KILLS = 10;

describe('fault 1: kill -9 of the worker during a 200k full pass', () => {
  const secrets = makeSecrets('kill-worker');
  // Each kill takes its passes down too, wherever they are.
  // Large enough for passes of several pages, which the first scenario slows to run across kills.
  const second = useSecondAccount('kill-worker', { largeIds: false, subscribers: 12_000 });
  const prefix = uniquePrefix('fault-kill');
  let database: TestDatabase;
  let sim: Simulator;
  let groupId: string;
  let env: Record<string, string>;

  beforeAll(async () => {
    database = await createTestDatabase();
    // 286k subscribers, of whom about 70% are active members of the group: a pass of 200k rows.
    sim = await startSimulator({ subscribers: 286_000, groups: 1, rateLimit: false, largeIds: true, seed: 71, apiKey: secrets.apiKey });
    groupId = sim.world.groupIds()[0] as string;
    env = {
      DATABASE_URL: withCredentials(database.url, 'postgres', secrets.dbPassword),
      REDIS_URL: withCredentials(redisUrl(), 'default', secrets.redisPassword),
      REDIS_PREFIX: prefix,
      MAILER_LEGACY_URL: sim.url,
      MAILER_API_KEY: secrets.apiKey,
      SYNC_GROUPS: groupId,
      SYNC_TYPES: 'active',
      SYNC_PAGE_SIZE: '1000',
      // Nothing but the restart's resume may continue the pass within the test.
      SYNC_EVERY: '1h',
      RECONCILE_EVERY: '24h',
      API_RATE_LIMIT: '100000',
      ADMIN_TOKEN: secrets.adminToken,
      // Admin is served on the ops listener only.
      OPS_PORT: '0',
      PORT: '0',
      LOG_LEVEL: 'trace',
    };
  });

  afterAll(async () => {
    killAll();
    await sim?.close();
    await database?.drop();
    await deleteInstallKeys(prefix);
  });

  const state = (): Promise<SyncStateRow | null> => readSyncState(database.pool, groupId, 'active');

  it('ends identical to the world after 10 kills, nothing lost, nothing duplicated', async () => {
    const started = Date.now();
    const active = sim.world.memberCount(groupId, 'active');
    expect(active).toBeGreaterThanOrEqual(200_000);
    // Kill points spread over the pass, one per tenth, at a random place inside it.
    const points = Array.from({ length: KILLS }, (_, i) => Math.floor(((i + 0.1 + 0.8 * Math.random()) / (KILLS + 0.5)) * active));
    // Slow every legacy page a little so that a kill lands inside the pass, not after it.
    sim.faults.set({ delayMs: 20 });
    // Every answer to the second account takes 1.5 s: its first full passes run across the kills.
    second.sim.faults.set({ delayMs: 1_500 });
    const kills: Array<{
      target: number;
      checkpoint: number;
      resumedFrom: number | null;
      staleJobs: number;
      secondStaleJobs: number;
      secondOpenPasses: string[];
    }> = [];
    let worker: ServiceProcess | undefined;
    let checkpoint = 0;
    for (const [i, target] of points.entries()) {
      const requestsBefore = sim.requests.length;
      worker = startService('worker', env, 'kill-worker');
      await waitFor(
        `the pass past offset ${target} (checkpoint ${checkpoint} at restart)`,
        async () => {
          assertRunning(worker as ServiceProcess, 'before its kill');
          const s = await state();
          if (s?.lastFullCompletedAt) throw new Error(`the pass completed before kill point ${target}`);
          // Past the checkpoint it resumed from too: the first kill waits for the second account as
          // well and may land past the next kill point, and a kill before the restarted worker read
          // a page would test no resume.
          if ((s?.fullOffset ?? 0) < Math.max(target, checkpoint + 1)) return false;
          // The first kill also waits for the second account's active pass to commit a page, so that
          // one restart surely resumes it from a checkpoint (the later kills land where they land).
          return i > 0 || (await second.openFullPasses(database.url)).some((p) => p.startsWith('active@') && !p.endsWith('@0'));
        },
        120_000,
      );
      // Anywhere in the next page's fetch, parse or commit.
      await sleep(Math.floor(Math.random() * 150));
      await killHard(worker);
      const secondOpenPasses = await second.openFullPasses(database.url);
      const resumedFrom = firstListOffset(sim, requestsBefore);
      checkpoint = (await state())?.fullOffset ?? 0;
      // The dead worker's pass lock (TTL 20 s) and its BullMQ job lock (30 s, then a stalled check)
      // expire now rather than in up to a minute: exactly what their timeouts would do, sooner.
      const cleanup = await expireDeadWorker(prefix, groupId, 'active');
      const secondCleanups = await second.expireDeadWorker(prefix);
      kills.push({
        target,
        checkpoint,
        resumedFrom,
        staleJobs: cleanup.staleJobs.length,
        secondStaleJobs: new Set(secondCleanups.flatMap((c) => c.staleJobs)).size,
        secondOpenPasses,
      });
    }

    sim.faults.clear();
    second.sim.faults.clear();
    sim.clearRequests();
    const lastCheckpoint = kills.at(-1)?.checkpoint ?? 0;
    worker = startService('worker', env, 'kill-worker');
    const done = await waitFor(
      'the resumed pass to complete',
      async () => {
        const s = await state();
        return s?.lastStatus === 'succeeded' && s.fullOffset === null && s.lastFullCompletedAt ? s : null;
      },
      180_000,
    );
    expect(done.cursor).not.toBeNull();
    // The last start resumed at the last checkpoint instead of starting over.
    expect(firstListOffset(sim)).toBe(lastCheckpoint);
    // Every restart resumed from the checkpoint the previous kill left: only the page in flight at a
    // kill was read again.
    expect(kills.map((k) => k.resumedFrom)).toEqual([0, ...kills.slice(0, -1).map((k) => k.checkpoint)]);

    const comparison = await compareGroupWithWorld(database.pool, sim.world, groupId, ['active'], { exactRows: true });
    expect(comparison.problems).toEqual([]);
    expect(comparison.subscriberRows).toBe(active);
    const { rows } = await database.pool.query<{ members: number; distinct: number; current: number }>(
      `select count(*)::int as members, count(distinct subscriber_id)::int as distinct,
              count(*) filter (where removed_at is null and type = 'active')::int as current
         from group_members where group_id = $1`,
      [groupId],
    );
    expect(rows[0]).toEqual({ members: active, distinct: active, current: active });
    const secondFigures = await second.expectMirrored(database.url, [sim.world]);
    // The kills cut the second account's passes too (else its check above proves nothing about kills).
    expect(kills.filter((k) => k.secondOpenPasses.length > 0).length).toBeGreaterThanOrEqual(2);
    // The first after a page of it was committed: a restart resumed it from its checkpoint.
    expect(kills[0]?.secondOpenPasses.some((p) => p.startsWith('active@') && !p.endsWith('@0'))).toBe(true);

    expect(await stopGracefully(worker)).toBe(0);
    printSummary('kill -9 of the worker', {
      subscribers: active,
      kills: kills.length,
      checkpoints: kills.map((k) => k.checkpoint).join('/'),
      staleJobsRequeued: kills.reduce((n, k) => n + k.staleJobs, 0),
      secondStaleJobsRequeued: kills.reduce((n, k) => n + k.secondStaleJobs, 0),
      secondPassesCutByKills: kills.reduce((n, k) => n + k.secondOpenPasses.length, 0),
      secondKillsMidPass: kills.filter((k) => k.secondOpenPasses.length > 0).length,
      secondActiveOffsetsAtKills: kills.map((k) => k.secondOpenPasses.find((p) => p.startsWith('active@'))?.split('@')[1] ?? '-').join('/'),
      ...secondFigures,
      mirrored: comparison.subscriberRows,
      members: comparison.currentMembers,
      lost: comparison.expected - comparison.subscriberRows,
      duplicated: (rows[0]?.members ?? 0) - (rows[0]?.distinct ?? 0),
      seconds: Math.round((Date.now() - started) / 1000),
    });
  }, 900_000);

  it('frees the shared rate limit soon after workers die mid-request (a crash loop does not stall every replica)', async () => {
    // Every legacy answer takes 10 s, so each worker is surely inside a request when it is killed.
    const slow = await startSimulator({
      subscribers: 100,
      groups: 1,
      // The second account's world has small ids: no id of one may be the other's.
      largeIds: true,
      rateLimit: false,
      seed: 76,
      apiKey: secrets.apiKey,
      faults: { delayMs: 10_000 },
    });
    const slowDb = await createTestDatabase();
    const slowPrefix = uniquePrefix('fault-kill-slots');
    const slowGroup = slow.world.groupIds()[0] as string;
    const slowEnv = {
      ...env,
      DATABASE_URL: withCredentials(slowDb.url, 'postgres', secrets.dbPassword),
      REDIS_PREFIX: slowPrefix,
      MAILER_LEGACY_URL: slow.url,
      SYNC_GROUPS: slowGroup,
    };
    try {
      // The limiter lets 4 requests run at once across all replicas (limiter.ts default): kill 4 workers mid-request.
      let firstKillAt = 0;
      for (let i = 0; i < 4; i++) {
        const before = slow.requests.length;
        const w = startService('worker', slowEnv, 'kill-slots');
        await waitFor(
          `worker ${i + 1} to send a request`,
          () => {
            assertRunning(w, 'before its kill');
            return slow.requests.length > before;
          },
          60_000,
        );
        await killHard(w);
        firstKillAt ||= Date.now();
        await expireDeadWorker(slowPrefix, slowGroup, 'active');
        await second.expireDeadWorker(slowPrefix);
      }
      const before = slow.requests.length;
      const fifth = startService('worker', slowEnv, 'kill-slots');
      await servicePort(fifth);
      // A request can run at most 30 s (the client's per-attempt timeout): a slot held longer than that
      // (plus a margin) by a process that no longer exists is a slot stolen from every live replica.
      const waited = await waitFor('the fifth worker to get a request out', () => slow.requests.length > before && Date.now(), 60_000, 100)
        .then((at) => Math.round((at - firstKillAt) / 1000))
        .catch(() => Number.POSITIVE_INFINITY);
      // The second account's limiter is its own: the slots the first account's dead requests hold
      // cannot keep it from being mirrored.
      const secondFigures = await second.expectMirrored(slowDb.url, [slow.world], 90_000);
      printSummary('kill -9 mid-request, limiter slots', {
        workersKilledMidRequest: 4,
        secondsUntilNextRequestAfterFirstKill: Number.isFinite(waited) ? waited : '>60',
        ...secondFigures,
      });
      await killHard(fifth);
      // 35 s of expiration, plus up to one 5 s Bottleneck heartbeat (a dead client never announces a
      // freed slot, so the live one finds out when it next polls), plus slack for a loaded machine.
      expect(waited, 'seconds from the first kill until a live worker got a request out (Infinity: not within 60 s)').toBeLessThanOrEqual(
        50,
      );
    } finally {
      killAll();
      await slow.close();
      await slowDb.drop();
      await deleteInstallKeys(slowPrefix);
    }
  }, 330_000);

  it('printed no secret in any log line', () => {
    const { leaks, ...figures } = secretScanFigures(KILLS * 3);
    printSummary('kill -9 of the worker, secrets', { ...figures, leaks: leaks.length });
    expect(leaks).toEqual([]);
  });
});

/**
 * Fault 3: Redis "restarted without persistence" in the middle of a full pass. The worker reaches
 * Redis through a TCP proxy that the test cuts for 5 s; while it is cut, every key of the install
 * (BullMQ queues and job schedulers, pass locks, the limiter's `b_<prefix>` state) is deleted, as a
 * Redis that restarts with no persistence would come back empty.
 *
 * Separate claims, so that a failure of one still lets the others be checked:
 * - the running service finishes the pass by itself once Redis is back (no operator restart);
 * - it keeps polling on schedule afterwards (its job schedulers were in Redis too);
 * - nothing is lost either way: after a restart, the pass resumes from its checkpoint (Postgres kept
 *   it) and the mirror equals the world.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_ACCOUNT } from '../../src/config.js';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { readSyncState, type SyncStateRow } from '../../src/sync/state.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { hostPort, startTcpProxy, type TcpProxy } from '../helpers/proxy.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { firstListOffset } from '../helpers/simulator.js';
import { secretScanFigures } from './helpers/collector.js';
import { compareGroupWithWorld } from './helpers/compare.js';
import { wipeInstall } from './helpers/redis-keys.js';
import { useSecondAccount } from './helpers/second-account.js';
import { makeSecrets, withCredentials } from './helpers/secrets.js';
import {
  assertRunning,
  killAll,
  linesOf,
  printSummary,
  sleep,
  startService,
  stopGracefully,
  waitFor,
  type ServiceProcess,
} from './helpers/service.js';

const OUTAGE_MS = 5_000;
/** How long the running service gets to finish the pass on its own after Redis is back. */
const SELF_RECOVERY_MS = 60_000;

describe('fault 3: Redis restarted without persistence mid-pass', () => {
  const secrets = makeSecrets('redis-outage');
  // Its keys are under REDIS_PREFIX too: the wipe takes them, and the cut is its Redis's as well.
  const second = useSecondAccount('redis-outage', { largeIds: false });
  const prefix = uniquePrefix('fault-redis');
  let database: TestDatabase;
  let proxy: TcpProxy;
  let sim: Simulator;
  let groupId: string;
  let env: Record<string, string>;
  let worker: ServiceProcess | undefined;
  let restoredAt = 0;
  const figures: Record<string, number | string> = {};

  beforeAll(async () => {
    database = await createTestDatabase();
    proxy = await startTcpProxy(hostPort(redisUrl(), 6379));
    sim = await startSimulator({ subscribers: 100_000, groups: 1, rateLimit: false, largeIds: true, seed: 73, apiKey: secrets.apiKey });
    groupId = sim.world.groupIds()[0] as string;
    env = {
      DATABASE_URL: withCredentials(database.url, 'postgres', secrets.dbPassword),
      REDIS_URL: proxy.via(withCredentials(redisUrl(), 'default', secrets.redisPassword)),
      REDIS_PREFIX: prefix,
      MAILER_LEGACY_URL: sim.url,
      MAILER_API_KEY: secrets.apiKey,
      SYNC_GROUPS: groupId,
      SYNC_TYPES: 'active',
      SYNC_PAGE_SIZE: '500',
      // Short, so a service that re-creates its schedules after the wipe has a tick to resume with.
      SYNC_EVERY: '15s',
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
    await proxy?.close();
    await database?.drop();
    await deleteInstallKeys(prefix);
  });

  const state = (): Promise<SyncStateRow | null> => readSyncState(database.pool, groupId, 'active');
  // The full pass is judged by its own columns: last_status also follows the incremental passes that
  // run every 15 s here, so "running" may be one of those.
  const completed = async () => {
    const s = await state();
    return s?.fullOffset === null && s.lastFullCompletedAt ? s : null;
  };

  it('finishes the pass by itself once Redis is back, empty', async () => {
    const started = Date.now();
    const active = sim.world.memberCount(groupId, 'active');
    sim.faults.set({ delayMs: 20 });
    worker = startService('worker', env, 'redis-outage');
    await waitFor('the pass to be a fifth through', async () => ((await state())?.fullOffset ?? 0) >= active / 5, 120_000);

    await proxy.cut();
    const wiped = await wipeInstall(prefix);
    const atCut = (await state())?.fullOffset ?? 0;
    await sleep(OUTAGE_MS);
    await proxy.restore();
    restoredAt = Date.now();
    figures.keysWiped = wiped;
    figures.checkpointAtCut = atCut;
    expect(wiped).toBeGreaterThan(3); // queues, schedulers and the pass lock really were there
    assertRunning(worker, 'during the Redis outage');

    sim.faults.set({ delayMs: 0 });
    const done = await waitFor(
      `the pass to complete within ${SELF_RECOVERY_MS / 1000} s of Redis coming back`,
      async () => {
        assertRunning(worker as ServiceProcess, 'after the Redis outage');
        return completed();
      },
      SELF_RECOVERY_MS,
      250,
    ).catch(async (error: unknown) => {
      const s = await state();
      throw new Error(
        `${(error as Error).message}; sync_state: status ${s?.lastStatus}, checkpoint ${s?.fullOffset}, ` +
          `error ${JSON.stringify(s?.lastError)}; worker log since the outage: ` +
          JSON.stringify(
            linesOf(worker as ServiceProcess, DEFAULT_ACCOUNT)
              .filter((l) => Date.parse(l.time ?? '') >= started)
              .map((l) => l.msg)
              .slice(-12),
          ),
      );
    });
    figures.selfRecovered = 'yes';
    figures.secondsToComplete = Math.round((Date.now() - started) / 1000);
    expect(done.cursor).not.toBeNull();
  }, 300_000);

  it('keeps polling on schedule after Redis came back empty, without a restart', async () => {
    // The job schedulers (one incremental every SYNC_EVERY = 15 s, one full per RECONCILE_EVERY) lived
    // in Redis and went with it. A service that polls "every 15 s" must start passes again by itself.
    const w = worker as ServiceProcess;
    const newPass = () => {
      assertRunning(w, 'after the Redis outage');
      // The first account's passes: the second's schedules are another account's to restore.
      return linesOf(w, DEFAULT_ACCOUNT).filter((l) => l.msg === 'pass started' && Date.parse(l.time ?? '') > restoredAt).length;
    };
    const deadline = restoredAt + 75_000 - Date.now();
    const started = await waitFor('a pass started after Redis came back', newPass, Math.max(deadline, 1_000), 250).catch(() => 0);
    figures.passesStartedAfterRestore = started;
    expect(started, 'passes the running worker started within 75 s of Redis coming back').toBeGreaterThan(0);
  }, 120_000);

  it('loses nothing: after a restart if need be, the pass resumes from its checkpoint and the mirror equals the world', async () => {
    const active = sim.world.memberCount(groupId, 'active');
    sim.faults.clear();
    if (!(await completed())) {
      figures.selfRecovered ??= 'no';
      const checkpoint = (await state())?.fullOffset ?? 0;
      if (worker) await stopGracefully(worker);
      sim.clearRequests();
      worker = startService('worker', env, 'redis-outage-restarted');
      await waitFor('the resumed pass to complete', completed, 180_000, 250);
      expect(firstListOffset(sim)).toBe(checkpoint);
      figures.resumedAfterRestartFrom = checkpoint;
    }
    const comparison = await compareGroupWithWorld(database.pool, sim.world, groupId, ['active'], { exactRows: true });
    expect(comparison.problems).toEqual([]);
    expect(comparison.subscriberRows).toBe(active);
    expect(comparison.currentMembers).toBe(active);
    const secondFigures = await second.expectMirrored(database.url, [sim.world]);
    expect(await stopGracefully(worker as ServiceProcess)).toBe(0);
    printSummary('Redis restarted empty mid-pass', {
      ...figures,
      ...secondFigures,
      subscribers: active,
      mirrored: comparison.subscriberRows,
      lost: comparison.expected - comparison.subscriberRows,
    });
  }, 300_000);

  it('printed no secret in any log line', () => {
    const { leaks, ...figures } = secretScanFigures(5);
    printSummary('Redis restarted, secrets', { ...figures, leaks: leaks.length });
    expect(leaks).toEqual([]);
  });
});

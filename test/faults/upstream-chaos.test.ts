/**
 * Fault 4 (invariants 3 and 7): upstream chaos during incremental passes, with churn. For about a
 * minute the simulator answers 5% of legacy requests with 500, leaves 2% without any answer (the
 * service's MAILER_TIMEOUT, 2 s here, must end them), drops 1% of connections, bursts of 429 come
 * from `failNext` (short ones the client rides out, a long one it cannot) and from a real rate limit
 * below what the service asks for, and for a few seconds some 200s carry an HTML error page instead
 * of JSON.
 *
 * Claims: a pass that failed never moved its cursor, at any step (a trigger in the test database
 * records every change of a pass and of its cursor); the cursor never went back; once the chaos stops, one more
 * incremental pass per type makes every listed subscriber equal to the world, and two full passes make
 * the memberships equal too.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SUBSCRIBER_TYPES } from '../../src/db/schema.js';
import { SUBSCRIBER_FIELDS } from '../../src/mirror/normalize.js';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { listSyncStates } from '../../src/sync/state.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { diffSubscribers, expectedFromWorld, readMirroredSubscribers } from '../helpers/mirror.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { secretScanFigures } from './helpers/collector.js';
import { compareGroupWithWorld } from './helpers/compare.js';
import { cursorViolations, dumpCursorAudit, installCursorAudit, readPassRuns } from './helpers/cursor-audit.js';
import { useSecondAccount } from './helpers/second-account.js';
import { makeSecrets, withCredentials } from './helpers/secrets.js';
import {
  assertRunning,
  killAll,
  printSummary,
  runCollected,
  sleep,
  startService,
  stopGracefully,
  waitFor,
  type ServiceProcess,
} from './helpers/service.js';

const CHAOS_MS = 60_000;

describe('fault 4: upstream chaos during incremental passes', () => {
  const secrets = makeSecrets('upstream-chaos');
  // Its simulator stays calm: the chaos is the first account's service's, the process both accounts'.
  const second = useSecondAccount('upstream-chaos', { largeIds: false });
  const prefix = uniquePrefix('fault-chaos');
  let database: TestDatabase;
  let sim: Simulator;
  let groupId: string;
  let env: Record<string, string>;
  let worker: ServiceProcess | undefined;

  beforeAll(async () => {
    database = await createTestDatabase();
    await installCursorAudit(database.pool);
    sim = await startSimulator({
      subscribers: 6_000,
      groups: 1,
      largeIds: true,
      seed: 74,
      apiKey: secrets.apiKey,
      // A real limit below the service's own: genuine 429s with X-RateLimit-Retry-After now and then.
      rateLimit: 25,
      rateLimitWindowMs: 1_000,
      rateLimitScope: 'global',
    });
    groupId = sim.world.groupIds()[0] as string;
    env = {
      DATABASE_URL: withCredentials(database.url, 'postgres', secrets.dbPassword),
      REDIS_URL: withCredentials(redisUrl(), 'default', secrets.redisPassword),
      REDIS_PREFIX: prefix,
      MAILER_LEGACY_URL: sim.url,
      MAILER_API_KEY: secrets.apiKey,
      SYNC_GROUPS: groupId,
      SYNC_PAGE_SIZE: '100',
      SYNC_EVERY: '1s',
      RECONCILE_EVERY: '24h',
      API_RATE_LIMIT: '6000',
      // Short, so that the requests the simulator leaves hanging time out within the minute of chaos.
      MAILER_TIMEOUT: '2s',
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

  const allSucceededSince = async (since: number) => {
    const states = await listSyncStates(database.pool);
    const mine = states.filter((s) => s.groupId === groupId);
    return (
      mine.length === SUBSCRIBER_TYPES.length &&
      mine.every((s) => s.lastStatus === 'succeeded' && s.lastRunStartedAt !== null && Date.parse(s.lastRunStartedAt) > since)
    );
  };

  it('never moves a cursor past a failed pass, and converges once the chaos stops', async () => {
    const started = Date.now();
    const htmlServed = () => sim.requests.filter((r) => r.api === 'legacy' && r.fault === 'html').length;
    const failedOn429 = async () => (await readPassRuns(database.pool)).some((r) => r.outcome === 'failed' && /429/.test(r.error ?? ''));
    worker = startService('worker', env, 'upstream-chaos');
    // First full pass of every type (no cursor yet), in calm weather.
    await waitFor('the first pass of every type', () => allSucceededSince(0), 120_000, 250);

    sim.clearRequests();
    sim.churn.setRate(25);
    sim.faults.set({ errorRate: 0.05, errorStatus: 500, hangRate: 0.02, hangMs: 10_000, resetRate: 0.01 });
    const chaosEnd = Date.now() + CHAOS_MS;
    let burst = 0;
    const bursts: string[] = [];
    while (Date.now() < chaosEnd) {
      await sleep(6_000);
      assertRunning(worker, 'during the chaos');
      burst += 1;
      if (burst === 2 || burst === 6) {
        // Garbage with a 200: not JSON, never data; the pass fails at once (no retry of a 2xx). At
        // least 2 s, and until one such body went out (a 429 pause can leave 2 s without a request).
        const htmlBefore = htmlServed();
        sim.faults.set({ htmlRate: 0.3 });
        const htmlUntil = Date.now() + 10_000;
        await sleep(2_000);
        while (htmlServed() === htmlBefore && Date.now() < htmlUntil) await sleep(100);
        sim.faults.set({ htmlRate: 0 });
        bursts.push('html');
      } else if (burst === 4) {
        // More 429s in a row than the client retries: a pass must fail, its cursor must stay. The
        // 429s spread over every request in flight, so the burst is renewed (at most 4 times) until
        // one pass has failed on them.
        for (let round = 0; round < 4 && !(await failedOn429()); round++) {
          sim.faults.failNext(24, 429);
          const until = Date.now() + 12_000;
          while (!(await failedOn429()) && Date.now() < until) await sleep(250);
        }
        bursts.push('429x24');
      } else {
        sim.faults.failNext(3, 429);
        bursts.push('429x3');
      }
    }
    sim.faults.clear();
    sim.churn.stop();
    const calm = Date.now();

    // One more incremental pass of every type, started after the chaos: every listed subscriber equal.
    await waitFor('an incremental pass of every type after the chaos', () => allSucceededSince(calm), 120_000, 250);
    const listed = SUBSCRIBER_TYPES.flatMap((t) => sim.world.members(groupId, t));
    const valueDiffs = diffSubscribers(
      expectedFromWorld(sim.world, listed),
      await readMirroredSubscribers(database.pool),
      SUBSCRIBER_FIELDS,
      20,
    );
    expect(valueDiffs).toEqual([]);

    // Two full passes: memberships that ended are closed too (only two complete full passes in a row
    // that missed a member may conclude that: invariant 11). The worker is restarted in calm
    // settings first: below the simulator's real limit, no 429 can fail the converging passes.
    expect(await stopGracefully(worker)).toBe(0);
    worker = startService('worker', { ...env, SYNC_EVERY: '1h', API_RATE_LIMIT: '1200' }, 'upstream-chaos-calm');
    for (const round of [1, 2]) {
      const backfill = await runCollected(['backfill', '--all', '--wait'], env, `upstream-chaos-backfill-${round}`, { timeoutMs: 180_000 });
      expect(backfill.code, backfill.stderr).toBe(0);
    }
    const comparison = await compareGroupWithWorld(database.pool, sim.world, groupId, SUBSCRIBER_TYPES);
    expect(comparison.problems).toEqual([]);

    await sleep(1_500); // let passes the schedule started meanwhile finish before reading the audit
    await dumpCursorAudit(database.pool, 'upstream-chaos');
    const runs = await readPassRuns(database.pool);
    const failed = runs.filter((r) => r.outcome === 'failed');
    const incremental = runs.filter((r) => r.mode === 'incremental');
    const violations = cursorViolations(runs);
    expect(violations).toEqual([]);
    // The chaos was real: passes failed, some on a garbage body, some on 429s, and many succeeded.
    expect(failed.length).toBeGreaterThanOrEqual(2);
    expect(failed.some((r) => /not JSON/i.test(r.error ?? ''))).toBe(true);
    expect(failed.some((r) => /429/.test(r.error ?? ''))).toBe(true);
    expect(incremental.filter((r) => r.outcome === 'succeeded').length).toBeGreaterThan(20);

    const legacy = sim.requests.filter((r) => r.api === 'legacy');
    const injected = (f: (r: (typeof legacy)[number]) => boolean) => legacy.filter(f).length;
    const figures = {
      passes: runs.length,
      incrementalPasses: incremental.length,
      failedPasses: failed.length,
      cursorChecks: runs.filter((r) => r.outcome !== 'unfinished').length,
      cursorViolations: violations.length,
      requests: legacy.length,
      injected500: injected((r) => r.fault === 'status' && r.status === 500),
      injectedTimeouts: injected((r) => r.fault === 'hang'),
      injectedResets: injected((r) => r.fault === 'reset'),
      answered429: injected((r) => r.status === 429),
      htmlBodies: injected((r) => r.fault === 'html'),
      bursts: bursts.join('/'),
      churnMutations: sim.churn.applied,
      mirroredMembers: comparison.currentMembers,
      seconds: Math.round((Date.now() - started) / 1000),
    };
    expect(figures.injected500).toBeGreaterThan(5);
    expect(figures.injectedTimeouts).toBeGreaterThan(0);
    expect(figures.injectedResets).toBeGreaterThan(0);
    expect(figures.answered429).toBeGreaterThan(10);
    expect(figures.htmlBodies).toBeGreaterThan(0);
    const secondFigures = await second.expectMirrored(database.url, [sim.world]);

    expect(await stopGracefully(worker)).toBe(0);
    printSummary('upstream chaos', { ...figures, ...secondFigures });
  }, 420_000);

  it('printed no secret in any log line', () => {
    const { leaks, ...figures } = secretScanFigures(50);
    printSummary('upstream chaos, secrets', { ...figures, leaks: leaks.length });
    expect(leaks).toEqual([]);
  });
});

/**
 * Scale-out under churn (issue #6): three worker processes and a receiver against the simulator
 * with continuous random changes. Afterwards: the service never saw more than API_RATE_LIMIT
 * requests in any minute, no (group, type) pass ever ran twice at once, and the mirror equals the
 * world.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_ACCOUNT } from '../../src/config.js';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { BATCHED_KINDS, REALTIME_KINDS } from '../../src/webhooks/manage.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { readMembers } from '../helpers/mirror.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { runCli } from '../helpers/cli.js';
import { waitFor } from '../helpers/wait.js';
import { useSecondAccount } from './helpers/second-account.js';
import { killAll, linesOf, servicePort, startService, stopGracefully, type ServiceProcess } from './helpers/service.js';

/** Pass intervals per (group, type) of the first account from every process's log; overlapping ones ran concurrently. */
function overlappingPasses(procs: readonly ServiceProcess[]): string[] {
  const intervals = new Map<string, Array<[number, number, number]>>();
  procs.forEach((p, index) => {
    const open = new Map<string, number>();
    for (const l of linesOf(p, DEFAULT_ACCOUNT)) {
      if (!l.groupId || !l.type || !l.time) continue;
      const key = `${l.groupId}/${l.type}`;
      const t = Date.parse(l.time);
      if (l.msg === 'pass started') open.set(key, t);
      else if (l.msg === 'pass succeeded' || l.msg === 'pass failed' || l.msg?.includes('pass interrupted')) {
        const start = open.get(key);
        if (start !== undefined) {
          intervals.set(key, [...(intervals.get(key) ?? []), [start, t, index]]);
          open.delete(key);
        }
      }
    }
  });
  const overlaps: string[] = [];
  for (const [key, list] of intervals) {
    const sorted = [...list].sort((a, b) => a[0] - b[0]);
    for (let i = 1; i < sorted.length; i++) {
      if (sorted[i]![0] < sorted[i - 1]![1]) overlaps.push(`${key}: ${JSON.stringify(sorted[i - 1])} and ${JSON.stringify(sorted[i])}`);
    }
  }
  return overlaps;
}

describe('three workers and a receiver under churn', () => {
  const prefix = uniquePrefix('soak');
  // Its own budget and simulator, in the same four processes; the scenario's world has small ids.
  const second = useSecondAccount('soak', { largeIds: true });
  const procs: ServiceProcess[] = [];
  let database: TestDatabase | undefined;
  let sim: Simulator | undefined;

  afterAll(async () => {
    killAll();
    await sim?.close();
    await database?.drop();
    await deleteInstallKeys(prefix);
  });

  it('stays within the rate limit, never runs a pass twice at once, and converges to the world', async () => {
    const limit = 60;
    database = await createTestDatabase();
    // timeScale 0.01: a simulated minute of batching and retries passes in 0.6 s.
    sim = await startSimulator({
      subscribers: 1_500,
      groups: 2,
      seed: 5,
      timeScale: 0.01,
      rateLimit: limit,
      rateLimitMode: 'sliding',
      rateLimitScope: 'global',
      rateLimitWindowMs: 60_000,
    });
    const base = {
      DATABASE_URL: database.url,
      REDIS_URL: redisUrl(),
      REDIS_PREFIX: prefix,
      PORT: '0',
      LOG_LEVEL: 'info',
    };
    const receiver = startService('receiver', { ...base }, 'soak');
    procs.push(receiver);
    const port = await servicePort(receiver, 30_000);
    const url = `http://127.0.0.1:${port}/webhooks`;
    const realtime = sim.webhooks.register({ url, events: [...REALTIME_KINDS], batchable: false });
    const batched = sim.webhooks.register({ url, events: [...BATCHED_KINDS], batchable: true });
    // The receiver learns secrets from webhook_endpoints, as after `webhooks register`.
    for (const w of [realtime, batched]) {
      await database.pool.query(`insert into webhook_endpoints (id, url, events, batchable, secret) values ($1, $2, $3, $4, $5)`, [
        w.id,
        w.url,
        w.events,
        w.batchable,
        w.secret,
      ]);
    }

    const workerEnv = {
      ...base,
      MAILER_LEGACY_URL: sim.url,
      MAILER_API_KEY: sim.apiKey,
      SYNC_GROUPS: sim.world.groupIds().join(','),
      // 10 (group, type) pairs share 60 requests/min: every 30 s, the incremental ticks take about
      // 24 of them (the unsubscribed type also reads date_unsubscribe), leaving room for the full passes.
      SYNC_EVERY: '30s',
      RECONCILE_EVERY: '45s',
      SYNC_PAGE_SIZE: '500',
      API_RATE_LIMIT: String(limit),
    };
    for (let i = 0; i < 3; i++) procs.push(startService('worker', workerEnv, 'soak'));

    sim.churn.setRate(15);
    await new Promise((r) => setTimeout(r, 75_000));
    sim.churn.stop();
    await sim.deliveries.settle(30_000);

    // Converge: two more complete full passes of every (group, type) after the churn stopped. A
    // membership whose removal event was not applied is ended by the poll only after two complete
    // passes in a row missed it (invariant 11).
    for (let round = 0; round < 2; round++) {
      const backfill = await runCli(['backfill', '--all', '--wait'], workerEnv, { timeoutMs: 150_000 });
      expect(backfill.code, backfill.stderr).toBe(0);
    }
    await waitFor(
      'deliveries applied',
      async () => (await database!.pool.query(`select 1 from webhook_deliveries where status = 'pending' limit 1`)).rows.length === 0,
      60_000,
      200,
    );

    // 1. The limit held across four processes, and the service never had to say 429.
    expect(sim.maxRequestsInAnyWindow(60_000)).toBeLessThanOrEqual(limit);
    expect(sim.requests.filter((r) => r.api === 'legacy' && r.status === 429)).toHaveLength(0);
    // 2. No pass of a (group, type) overlapped another, in any process.
    const started = procs.flatMap((p) => linesOf(p, DEFAULT_ACCOUNT)).filter((l) => l.msg === 'pass started').length;
    expect(started).toBeGreaterThan(20);
    expect(overlappingPasses(procs)).toEqual([]);
    // 3. The mirror equals the world: every live subscriber's status, email and version, and memberships.
    expect(sim.churn.applied).toBeGreaterThan(500);
    const { rows } = await database.pool.query<{ id: string; email: string | null; status: string; updated: string; deleted: boolean }>(
      `select id, email, status, to_char(updated_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS') as updated, deleted_at is not null as deleted
         from subscribers where account = mirror_account()`,
    );
    const mirror = new Map(rows.map((r) => [r.id, r]));
    const problems: string[] = [];
    for (const s of sim.world.subscribers({ includeDeleted: true })) {
      const m = mirror.get(s.id);
      const updated = new Date(Math.floor(s.updatedAtUs / 1000)).toISOString().slice(0, 19);
      if (s.deleted) {
        if (m && !m.deleted && s.groups.length === 0) continue; // never mirrored as a member: nothing to tombstone
        if (m && !m.deleted) problems.push(`${s.id}: deleted upstream, not tombstoned in the mirror`);
        continue;
      }
      if (!m) {
        if (s.groups.length > 0) problems.push(`${s.id}: missing`);
        continue;
      }
      if (m.status !== s.status || m.email !== s.email || m.updated !== updated) {
        problems.push(`${s.id}: mirror ${m.status}/${m.email}/${m.updated} world ${s.status}/${s.email}/${updated}`);
      }
    }
    expect(problems.slice(0, 10)).toEqual([]);
    const members = (await readMembers(database.pool)).filter((m) => m.removedAt === null).map((m) => `${m.groupId}/${m.subscriberId}`);
    const want = [...sim.world.memberships()].map((m) => `${m.groupId}/${m.subscriberId}`);
    expect(members.sort()).toEqual(want.sort());
    await second.expectMirrored(database.url, [sim.world]);

    expect(await Promise.all(procs.map((p) => stopGracefully(p)))).toEqual([0, 0, 0, 0]);
  }, 420_000);
});

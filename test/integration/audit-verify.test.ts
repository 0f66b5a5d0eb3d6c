/**
 * `subscriber-mirror audit --verify` (docs/operations.md, "The audit", "As a check for cron and CI"),
 * run as cron and CI run it (a child process) against the simulator (legacy source): exit 0 and
 * "equals" on a mirror its full passes made; a member the service removed without a stamp is one no
 * run can settle, so the run that finds it exits 3, names the pair and the count it cannot explain,
 * and asks the full pass with its removal proof (a job on the sync queue); once that proof has run,
 * exit 0 again. A leaver whose last stamped change is seconds old shows at once too (the counts are
 * compared as of the run's start, no settle margin). Bad usage exits 2 before any request, write or job.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { createSyncQueue } from '../../src/sync/schedule.js';
import { runCli } from '../helpers/cli.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { passAllTypes, passDeps } from '../helpers/poll.js';
import { deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';

const EQUALS = 'verify: the mirror equals the service for every pair checked';
const DIFFERS = 'verify: the mirror differs from the service after repair:';

describe('subscriber-mirror audit --verify', () => {
  let database: TestDatabase;
  let sim: Simulator;
  let groupId: string;
  let env: Record<string, string>;
  const prefix = uniquePrefix('audit-verify');
  const queue = createSyncQueue({ url: redisUrl(), maxRetriesPerRequest: 1 }, prefix);

  beforeAll(async () => {
    database = await createTestDatabase();
    sim = await startSimulator({ subscribers: 150, groups: 2, seed: 11, rateLimit: false });
    groupId = sim.world.groupIds()[0] as string;
    await passAllTypes(passDeps(database, sim), groupId, 'full');
    env = {
      DATABASE_URL: database.url,
      REDIS_URL: redisUrl(),
      REDIS_PREFIX: prefix,
      MAILER_LEGACY_URL: sim.url,
      MAILER_API_KEY: sim.apiKey,
      SYNC_GROUPS: groupId,
      // The simulator does not limit; at the legacy default of 60 a minute each run would take seconds.
      API_RATE_LIMIT: '6000',
      LOG_LEVEL: 'silent',
    };
  });

  afterAll(async () => {
    await queue.close();
    await sim?.close();
    await deletePrefix(prefix);
    await database?.drop();
  });

  async function auditRows(): Promise<{ state: number; results: number }> {
    const { rows } = await database.pool.query<{ state: number; results: number }>(
      'select (select count(*) from audit_state)::int as state, (select count(*) from audit_results)::int as results',
    );
    return rows[0] as { state: number; results: number };
  }

  async function liveMembers(): Promise<number> {
    const { rows } = await database.pool.query<{ n: number }>(
      'select count(*)::int as n from group_members where group_id = $1 and removed_at is null',
      [groupId],
    );
    return rows[0]?.n ?? 0;
  }

  it('refuses bad usage with exit 2 before any request, write or job', async () => {
    const requests = sim.requests.length;
    const members = await liveMembers();
    const [unknown, valued, group] = await Promise.all([
      runCli(['audit', '--verify', '--fix'], env),
      runCli(['audit', '--verify=yes'], env),
      runCli(['audit', '--verify', '--group', '999'], env),
    ]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("Unknown option '--fix'");
    expect(valued.code).toBe(2);
    expect(valued.stderr).toContain('--verify');
    expect(group.code).toBe(2);
    expect(group.stderr).toContain(`--group 999 is not configured; configured groups (SYNC_GROUPS): ${groupId}`);
    for (const r of [unknown, valued, group]) expect(r.stdout).toBe('');
    expect(sim.requests.length).toBe(requests);
    expect(await auditRows()).toEqual({ state: 0, results: 0 });
    expect(await liveMembers()).toBe(members);
    expect(await queue.getJobCounts()).toEqual(expect.objectContaining({ waiting: 0, active: 0, delayed: 0 }));
  });

  it('exits 0 and says the mirror equals the service after full passes', async () => {
    const result = await runCli(['audit', '--verify'], env, { timeoutMs: 60_000 });
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout).toContain(EQUALS);
    expect(result.stdout).not.toContain(DIFFERS);
    for (const t of ['active', 'unsubscribed', 'bounced', 'junk', 'unconfirmed'])
      expect(result.stdout).toMatch(new RegExp(`group ${groupId} ${t}: \\d+ rows checked`));
    expect((await queue.getJobCounts()).waiting).toBe(0);
  });

  it('exits 3 on a member removed without a stamp, naming the pair and the count, and asks the full pass with its removal proof', async () => {
    const leaver = sim.world.members(groupId, 'active')[4] as string;
    sim.world.removeFromGroupSilently(leaver, groupId);
    const listed = sim.world.members(groupId, 'active').length;

    const result = await runCli(['audit', '--group', groupId, '--verify'], env, { timeoutMs: 60_000 });
    expect(result.stderr).toBe('');
    expect(result.code).toBe(3);
    const out = result.stdout;
    expect(out).toContain(DIFFERS);
    expect(out).not.toContain(EQUALS);
    const verdict = out.slice(out.indexOf(DIFFERS)).split('\n').slice(1).filter(Boolean);
    expect(verdict).toHaveLength(1);
    const match = new RegExp(
      `^  group ${groupId} active: count: the service lists ${listed}, the mirror holds ${listed + 1}: extra 1; ` +
        'a full pass with its removal proof was asked \\(job (\\S+)\\); run again once it ended$',
    ).exec(verdict[0] as string);
    expect(match, verdict[0]).not.toBeNull();
    const jobId = match?.[1] as string;
    const job = await queue.getJob(jobId);
    expect(job?.data).toEqual(expect.objectContaining({ groupId, type: 'active', mode: 'full', trigger: 'backfill' }));
    // One run cannot settle it: the mirror still holds the leaver.
    const held = await database.pool.query(
      'select 1 from group_members where group_id = $1 and subscriber_id = $2 and removed_at is null',
      [groupId, leaver],
    );
    expect(held.rowCount).toBe(1);

    // What the worker does with that job (as in audit.test.ts): two rounds of full passes with the
    // legacy source's sweep between them. Then the next run finds the mirror equal again.
    await job?.remove();
    await passAllTypes(passDeps(database, sim), groupId, 'full');
    await passAllTypes(passDeps(database, sim), groupId, 'incremental');
    await passAllTypes(passDeps(database, sim), groupId, 'full');
    const after = await runCli(['audit', '--group', groupId, '--verify'], env, { timeoutMs: 60_000 });
    expect(after.stderr).toBe('');
    expect(after.stdout).toContain(EQUALS);
    expect(after.code).toBe(0);
  });

  it('exits 3 at once on a leaver whose last stamped change is seconds old (no settle margin, as of the run)', async () => {
    const leaver = sim.world.members(groupId, 'active')[7] as string;
    sim.world.updateFields(leaver, { city: 'Bergen' });
    await passAllTypes(passDeps(database, sim), groupId, 'incremental', ['active']);
    const { rows } = await database.pool.query<{ fresh: boolean }>(
      `select source_updated_at > now() - interval '30 seconds' as fresh from group_members
        where group_id = $1 and subscriber_id = $2 and removed_at is null`,
      [groupId, leaver],
    );
    expect(rows).toEqual([{ fresh: true }]);
    sim.world.removeFromGroupSilently(leaver, groupId);

    const result = await runCli(['audit', '--group', groupId, '--type', 'active', '--verify'], env, { timeoutMs: 60_000 });
    expect(result.stderr).toBe('');
    expect(result.stdout).toContain(`group ${groupId} active: count: the service lists`);
    expect(result.stdout).toContain(': extra 1; a full pass with its removal proof was asked');
    expect(result.code).toBe(3);
  });
});

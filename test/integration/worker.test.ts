/**
 * The poll path as users run it: `start --role worker` child processes, `backfill`, `status`.
 * Covers invariant 3 end to end: kill -9 mid-pass, restart, the mirror ends identical to the world.
 */
import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { readSyncState } from '../../src/sync/state.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { readMembers, readMirroredSubscribers, expectedFromWorld, diffSubscribers } from '../helpers/mirror.js';
import { deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { runCli, spawnCli } from '../helpers/cli.js';
import { waitFor } from '../helpers/wait.js';

function exited(child: ChildProcess): Promise<number | null> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve(child.exitCode);
    else child.on('close', (code) => resolve(code));
  });
}

describe('worker processes', () => {
  let database: TestDatabase;
  let sim: Simulator;
  const prefix = uniquePrefix('worker');
  let groupId: string;
  let env: Record<string, string>;
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    database = await createTestDatabase();
    sim = await startSimulator({ subscribers: 30_000, groups: 1, largeIds: true, rateLimit: false, seed: 11 });
    groupId = sim.world.groupIds()[0]!;
    env = {
      DATABASE_URL: database.url,
      REDIS_URL: redisUrl(),
      REDIS_PREFIX: prefix,
      MAILER_LEGACY_URL: sim.url,
      MAILER_API_KEY: sim.apiKey,
      SYNC_GROUPS: groupId,
      SYNC_TYPES: 'active',
      SYNC_PAGE_SIZE: '250',
      SYNC_EVERY: '1h',
      RECONCILE_EVERY: '24h',
      API_RATE_LIMIT: '100000',
      PORT: '0',
      LOG_LEVEL: process.env.WORKER_TEST_LOG ? 'info' : 'warn',
    };
  });

  afterAll(async () => {
    for (const c of children) c.kill('SIGKILL');
    await sim.close();
    await database.drop();
    await deletePrefix(prefix);
  });

  function startWorker(): ChildProcess {
    const child = spawnCli(['start', '--role', 'worker'], env);
    if (process.env.WORKER_TEST_LOG) {
      child.stdout?.on('data', (d: Buffer) => process.stderr.write(`[worker ${child.pid}] ${d.toString()}`));
      child.stderr?.on('data', (d: Buffer) => process.stderr.write(`[worker ${child.pid}] ${d.toString()}`));
    } else {
      child.stdout?.resume();
      child.stderr?.resume();
    }
    children.push(child);
    return child;
  }

  it('survives kill -9 at random points of a full pass and ends identical to the world', async () => {
    const active = sim.world.memberCount(groupId, 'active');
    // Slow every legacy response a little so the kill lands mid-pass rather than after it.
    sim.faults.set({ delayMs: 15 });
    const killPoints = [0.2 + Math.random() * 0.2, 0.5 + Math.random() * 0.3].map((f) => Math.floor(f * active));
    for (const point of killPoints) {
      const child = startWorker();
      await waitFor(
        `full pass past offset ${point}`,
        async () => {
          const s = await readSyncState(database.pool, groupId, 'active');
          if (s?.lastFullCompletedAt) throw new Error('the pass completed before the kill point');
          return (s?.fullOffset ?? 0) >= point;
        },
        90_000,
        20,
      );
      child.kill('SIGKILL');
      await exited(child);
    }
    const offsetAtLastKill = (await readSyncState(database.pool, groupId, 'active'))?.fullOffset ?? 0;
    expect(offsetAtLastKill).toBeGreaterThan(0);

    sim.faults.clear();
    sim.clearRequests();
    const child = startWorker();
    const state = await waitFor(
      'the resumed pass to complete',
      async () => {
        const s = await readSyncState(database.pool, groupId, 'active');
        return s?.lastStatus === 'succeeded' && s.fullOffset === null && s.lastFullCompletedAt ? s : null;
      },
      120_000,
      20,
    );
    // It resumed from the checkpoint instead of starting over.
    const firstPage = sim.requests.find((r) => r.api === 'legacy' && !r.url.includes('/count'));
    expect(firstPage?.url).toContain(`offset=${offsetAtLastKill}`);
    expect(state.cursor).not.toBeNull();

    const expected = expectedFromWorld(sim.world, sim.world.members(groupId, 'active'));
    const actual = await readMirroredSubscribers(database.pool);
    expect(actual.size).toBe(active);
    expect(diffSubscribers(expected, actual, ['email', 'status', 'updatedAt', 'fields', 'sent'])).toEqual([]);
    const members = await readMembers(database.pool, groupId);
    expect(members).toHaveLength(active);
    expect(new Set(members.map((m) => m.subscriberId)).size).toBe(active);

    child.kill('SIGTERM');
    expect(await exited(child)).toBe(0);
  }, 300_000);

  it('backfill --wait runs a full pass to completion and status reports it', async () => {
    const child = startWorker();
    const changed = sim.world.members(groupId, 'active').slice(0, 5);
    for (const id of changed) sim.world.updateFields(id, { company: 'Backfilled Inc' });

    const result = await runCli(['backfill', '--group', groupId, '--type', 'active', '--wait'], env, { timeoutMs: 120_000 });
    expect(result.stderr).not.toContain('failed');
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(new RegExp(`queued full pass of group ${groupId} active`));
    expect(result.stdout).toMatch(/done, \d+ rows read, 5 written/);
    const { rows } = await database.pool.query<{ n: number }>(
      `select count(*)::int as n from subscribers where fields->>'company' = 'Backfilled Inc'`,
    );
    expect(rows[0]?.n).toBe(5);

    const status = await runCli(['status', '--json'], env);
    expect(status.code).toBe(0);
    const parsed = JSON.parse(status.stdout) as {
      passes: Array<{ groupId: string; type: string; mirrored: number; drift: number; lastStatus: string }>;
    };
    const row = parsed.passes.find((p) => p.groupId === groupId && p.type === 'active');
    expect(row).toMatchObject({ lastStatus: 'succeeded', mirrored: sim.world.memberCount(groupId, 'active'), drift: 0 });
    const table = await runCli(['status'], env);
    expect(table.stdout).toMatch(/group\s+type\s+cursor/);
    expect(table.stdout).toContain(groupId);

    child.kill('SIGTERM');
    expect(await exited(child)).toBe(0);
  }, 180_000);

  it('backfill rejects bad arguments with exit code 2', async () => {
    const noGroup = await runCli(['backfill'], env);
    expect(noGroup.code).toBe(2);
    expect(noGroup.stderr).toContain('backfill needs --group ID');
    const badType = await runCli(['backfill', '--group', groupId, '--type', 'vip'], env);
    expect(badType.code).toBe(2);
    expect(badType.stderr).toContain('--type must be one of');
    const badGroup = await runCli(['backfill', '--group', 'abc'], env);
    expect(badGroup.code).toBe(2);
    expect(badGroup.stderr).toContain('--group must be a numeric group id, got "abc"');
  });
});

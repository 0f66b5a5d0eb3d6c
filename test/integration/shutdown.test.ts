/**
 * Graceful shutdown (SIGTERM) of `start --role all` during a running pass and under webhook load:
 * exit code 0, no delivery answered 2xx is lost, and the next start resumes the pass.
 */
import { createHash } from 'node:crypto';
import type { ChildProcess } from 'node:child_process';
import { afterAll, describe, expect, it } from 'vitest';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { readSyncState } from '../../src/sync/state.js';
import { signBody } from '../../src/webhooks/signature.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { spawnCli } from '../helpers/cli.js';
import { firstListOffset } from '../helpers/simulator.js';
import { waitFor } from '../helpers/wait.js';

const SECRET = 'whsec-shutdown-test-0001';

function startService(env: Record<string, string>): { child: ChildProcess; port: Promise<number>; exit: Promise<number | null> } {
  const child = spawnCli(['start', '--role', 'all'], env);
  let out = '';
  const port = new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`service did not start:\n${out}`)), 30_000);
    child.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
      const match = /"port":(\d+)[^\n]*"msg":"service started"/.exec(out);
      if (match) {
        clearTimeout(timer);
        resolve(Number(match[1]));
      }
    });
  });
  child.stderr?.resume();
  const exit = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  return { child, port, exit };
}

describe('graceful shutdown', () => {
  let database: TestDatabase | undefined;
  let sim: Simulator | undefined;
  const prefix = uniquePrefix('shutdown');
  const children: ChildProcess[] = [];

  afterAll(async () => {
    for (const c of children) c.kill('SIGKILL');
    await sim?.close();
    await database?.drop();
    await deleteInstallKeys(prefix);
  });

  it('exits 0 mid-pass under webhook load, loses no acknowledged delivery, and resumes the pass', async () => {
    database = await createTestDatabase();
    // 200 pages at 40 ms each: the pass takes ≥ 8 s however fast the mirror writes, so the SIGTERM
    // below (about 2 s in) always lands mid-pass.
    sim = await startSimulator({ subscribers: 20_000, groups: 1, rateLimit: false, faults: { delayMs: 40 } });
    const groupId = sim.world.groupIds()[0]!;
    const env = {
      DATABASE_URL: database.url,
      REDIS_URL: redisUrl(),
      REDIS_PREFIX: prefix,
      MAILER_LEGACY_URL: sim.url,
      MAILER_API_KEY: sim.apiKey,
      SYNC_GROUPS: groupId,
      SYNC_TYPES: 'active',
      SYNC_PAGE_SIZE: '100',
      SYNC_EVERY: '1h',
      RECONCILE_EVERY: '24h',
      API_RATE_LIMIT: '100000',
      WEBHOOK_SECRETS: SECRET,
      SHUTDOWN_TIMEOUT: '20s',
      PORT: '0',
      LOG_LEVEL: 'info', // the test reads the port from the "service started" line
    };
    const first = startService(env);
    children.push(first.child);
    const port = await first.port;
    const pool = database.pool;
    await waitFor('the pass to be under way', async () => ((await readSyncState(pool, groupId, 'active'))?.fullOffset ?? 0) >= 1_000);

    // Webhook load: 8 concurrent senders of unique signed deliveries until the server stops answering.
    const acknowledged: string[] = [];
    let sent = 0;
    let stop = false;
    const ids = sim.world.members(groupId).slice(0, 500);
    const sender = async () => {
      while (!stop) {
        const n = sent++;
        const subscriber = sim!.world.renderWebhook(ids[n % ids.length]!);
        const body = JSON.stringify({ event: 'subscriber.updated', account_id: n, ...subscriber });
        try {
          const res = await fetch(`http://127.0.0.1:${port}/webhooks`, {
            method: 'POST',
            body,
            headers: { signature: signBody(body, SECRET), 'content-type': 'application/json' },
          });
          if (res.status >= 200 && res.status < 300) acknowledged.push(createHash('sha256').update(body).digest('hex'));
          else await res.arrayBuffer();
        } catch {
          return; // connection refused: the server is gone
        }
      }
    };
    const senders = Array.from({ length: 8 }, sender);
    await new Promise((r) => setTimeout(r, 1_500));
    first.child.kill('SIGTERM');
    const code = await first.exit;
    stop = true;
    await Promise.all(senders);
    expect(code).toBe(0);

    expect(acknowledged.length).toBeGreaterThan(5); // load was really under way (the count depends on the machine)
    const { rows } = await pool.query<{ body_sha256: string }>(`select body_sha256 from webhook_deliveries`);
    const stored = new Set(rows.map((r) => r.body_sha256));
    expect(acknowledged.filter((h) => !stored.has(h))).toEqual([]);

    // The pass stopped at a checkpoint; the next start resumes from it and completes.
    const interrupted = await readSyncState(pool, groupId, 'active');
    expect(interrupted?.fullOffset).toBeGreaterThan(0);
    expect(interrupted?.lastFullCompletedAt).toBeNull();
    sim.faults.clear();
    sim.clearRequests();
    const second = startService(env);
    children.push(second.child);
    await second.port;
    await waitFor(
      'the resumed pass to complete',
      async () => Boolean((await readSyncState(pool, groupId, 'active'))?.lastFullCompletedAt),
      90_000,
    );
    expect(firstListOffset(sim)).toBe(interrupted!.fullOffset);
    const { rows: count } = await pool.query<{ n: number }>(
      `select count(*)::int as n from group_members where removed_at is null and type = 'active'`,
    );
    expect(count[0]?.n).toBe(sim.world.memberCount(groupId, 'active'));
    // Every acknowledged delivery is applied too.
    await waitFor('deliveries applied', async () => {
      const { rows: pending } = await pool.query(`select 1 from webhook_deliveries where status <> 'applied' limit 1`);
      return pending.length === 0;
    });
    second.child.kill('SIGTERM');
    expect(await second.exit).toBe(0);
  }, 240_000);
});

/**
 * The service as operators run it (in-process `startService`): readiness, metrics, admin API.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { startService, type RunningService } from '../../src/commands/start.js';
import { WORKER_POOL_MAX } from '../../src/commands/worker.js';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { createSyncQueue } from '../../src/sync/schedule.js';
import { signBody } from '../../src/webhooks/signature.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { deleteInstallKeys, deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { hostPort, startTcpProxy, type TcpProxy } from '../helpers/proxy.js';
import { waitFor } from '../helpers/wait.js';

const ADMIN_TOKEN = 'admin-token-0123456789abcdef';
const SECRET = 'whsec-readiness-test-0001';

describe('readiness', () => {
  let database: TestDatabase;
  let pgProxy: TcpProxy;
  let redisProxy: TcpProxy;
  let service: RunningService;
  const prefix = uniquePrefix('ready');

  beforeAll(async () => {
    database = await createTestDatabase();
    pgProxy = await startTcpProxy(hostPort(database.url, 5432));
    redisProxy = await startTcpProxy(hostPort(redisUrl(), 6379));
    const config = loadConfig(
      // The detailed /readyz is on the ops listener.
      {
        DATABASE_URL: pgProxy.via(database.url),
        REDIS_URL: redisProxy.via(redisUrl()),
        REDIS_PREFIX: prefix,
        PORT: '0',
        OPS_PORT: '0',
        LOG_LEVEL: 'silent',
        WEBHOOK_SECRETS: SECRET,
      },
      ['receive'],
    );
    service = await startService(config, 'receiver');
  });

  afterAll(async () => {
    await service.stop('test over');
    await pgProxy.close();
    await redisProxy.close();
    await database.drop();
    await deletePrefix(prefix);
  });

  const readyz = async () => {
    const res = await fetch(`http://127.0.0.1:${service.opsPort}/readyz`);
    return { status: res.status, body: (await res.json()) as { checks: Array<{ name: string; ok: boolean; reason?: string }> } };
  };

  it('stays ready when Redis goes away: the receiver needs only Postgres for its inbox', async () => {
    await waitFor('ready', async () => (await readyz()).status === 200, 20_000, 100);
    await redisProxy.cut();
    try {
      const r = await readyz();
      expect(r.status).toBe(200);
      expect(r.body.checks.map((c) => c.name)).toEqual(['postgres']);
      const body = JSON.stringify({ event: 'subscriber.updated', account_id: 1, subscriber: { id: '5', email: 'r@example.com' } });
      const res = await fetch(`http://127.0.0.1:${service.port}/webhooks`, {
        method: 'POST',
        body,
        headers: { signature: signBody(body, SECRET) },
      });
      expect(res.status).toBe(200);
    } finally {
      await redisProxy.restore();
    }
  });

  it('flips to 503 when Postgres goes away and back to 200 after', async () => {
    await waitFor('ready', async () => (await readyz()).status === 200, 20_000, 100);
    await pgProxy.cut();
    const down = await waitFor(
      'not ready',
      async () => {
        const r = await readyz();
        return r.status === 503 ? r : null;
      },
      20_000,
      100,
    );
    expect(down.body.checks.find((c) => c.name === 'postgres')).toMatchObject({ ok: false });
    await pgProxy.restore();
    await waitFor('ready again', async () => (await readyz()).status === 200, 20_000, 100);
  });

  it('has no admin routes without ADMIN_TOKEN', async () => {
    for (const port of [service.port, service.opsPort]) {
      for (const path of ['/admin/status', '/admin/queues', '/admin/jobs/1']) {
        const res = await fetch(`http://127.0.0.1:${port}${path}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
        expect(res.status, `${port} ${path}`).toBe(404);
      }
    }
  });
});

describe('admin API and metrics', () => {
  let database: TestDatabase;
  let sim: Simulator;
  let service: RunningService;
  const prefix = uniquePrefix('admin');
  let groupId: string;
  const secret = 'whsec-service-test-0001';
  let base: string;
  let opsBase: string;
  let queue: ReturnType<typeof createSyncQueue>;

  beforeAll(async () => {
    database = await createTestDatabase();
    sim = await startSimulator({ subscribers: 3_000, groups: 1, rateLimit: false });
    groupId = sim.world.groupIds()[0]!;
    const config = loadConfig(
      {
        DATABASE_URL: database.url,
        REDIS_URL: redisUrl(),
        REDIS_PREFIX: prefix,
        MAILER_LEGACY_URL: sim.url,
        MAILER_API_KEY: sim.apiKey,
        SYNC_GROUPS: groupId,
        SYNC_TYPES: 'active',
        SYNC_EVERY: '1h',
        RECONCILE_EVERY: '24h',
        SYNC_PAGE_SIZE: '100',
        API_RATE_LIMIT: '100000',
        WEBHOOK_SECRETS: secret,
        ADMIN_TOKEN,
        PORT: '0',
        OPS_PORT: '0',
        LOG_LEVEL: 'silent',
        METRICS_REFRESH_EVERY: '1s',
      },
      ['poll', 'receive'],
    );
    service = await startService(config, 'all');
    base = `http://127.0.0.1:${service.port}`;
    opsBase = `http://127.0.0.1:${service.opsPort}`;
    queue = createSyncQueue({ url: redisUrl(), maxRetriesPerRequest: 1 }, prefix);
  });

  afterAll(async () => {
    await queue?.close();
    await service.stop('test over');
    await sim.close();
    await database.drop();
    await deleteInstallKeys(prefix);
  });

  const admin = (path: string, init: RequestInit = {}, token: string | null = ADMIN_TOKEN) =>
    fetch(`${opsBase}${path}`, {
      ...init,
      headers: {
        ...(token ? { authorization: `Bearer ${token}` } : {}),
        ...(init.body ? { 'content-type': 'application/json' } : {}),
      },
    });
  let prober = 1;
  /**
   * Failed tokens are throttled per client address (5 a minute), and the ops port takes the socket's
   * address whatever X-Forwarded-For says: each wrong-token probe comes from a loopback address of its
   * own, so the probes here stay below the limit.
   */
  const wrongTokenStatus = (path: string, token: string) =>
    new Promise<number>((resolve, reject) => {
      http
        .get(`${opsBase}${path}`, { localAddress: `127.0.0.${++prober}`, headers: { authorization: `Bearer ${token}` } }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        })
        .on('error', reject);
    });

  it('rejects missing and wrong tokens on every admin route', async () => {
    for (const path of ['/admin/status', '/admin/queues', '/admin/jobs/1']) {
      expect((await admin(path, {}, null)).status, path).toBe(401);
      expect(await wrongTokenStatus(path, 'wrong-token-0123456789abcdef'), path).toBe(401);
      expect(await wrongTokenStatus(path, ADMIN_TOKEN.slice(0, -1)), path).toBe(401);
    }
    expect((await admin('/admin/backfill', { method: 'POST', body: JSON.stringify({ group: groupId }) }, null)).status).toBe(401);
    expect((await admin('/admin/queues')).status).toBe(200);
  });

  it('validates backfill requests', async () => {
    const bad = await admin('/admin/backfill', { method: 'POST', body: JSON.stringify({ group: 'abc' }) });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toEqual({ error: 'group must be a numeric group id' });
    const badType = await admin('/admin/backfill', { method: 'POST', body: JSON.stringify({ group: groupId, type: 'vip' }) });
    expect(badType.status).toBe(400);
  });

  it('backfills only configured groups and types, naming them otherwise, and queues nothing', async () => {
    const otherGroup = await admin('/admin/backfill', { method: 'POST', body: JSON.stringify({ group: '999999' }) });
    expect(otherGroup.status).toBe(400);
    expect(await otherGroup.json()).toEqual({ error: `group 999999 is not configured; configured groups (SYNC_GROUPS): ${groupId}` });
    // A real type, but not one of SYNC_TYPES (active).
    const otherType = await admin('/admin/backfill', { method: 'POST', body: JSON.stringify({ group: groupId, type: 'unsubscribed' }) });
    expect(otherType.status).toBe(400);
    expect(await otherType.json()).toEqual({ error: 'type unsubscribed is not configured; configured types (SYNC_TYPES): active' });
    const jobs = await queue.getJobs(['waiting', 'prioritized', 'delayed', 'active', 'completed', 'failed']);
    expect(jobs.filter((j) => j.data.groupId === '999999' || j.data.type === 'unsubscribed')).toEqual([]);
  });

  it('serves admin and /metrics on the ops port only', async () => {
    for (const path of ['/metrics', '/admin/status', '/admin/queues']) {
      expect((await fetch(`${base}${path}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).status, path).toBe(404);
    }
  });

  it('runs a backfill started over HTTP to completion, reporting progress', async () => {
    // Let the scheduled first pass finish so the backfill is a pass of its own.
    await waitFor(
      'first pass',
      async () => {
        const s = (await (await admin('/admin/status')).json()) as { passes: Array<{ lastStatus: string }> };
        return s.passes[0]?.lastStatus === 'succeeded';
      },
      60_000,
      100,
    );
    sim.faults.set({ delayMs: 20 });
    const res = await admin('/admin/backfill', { method: 'POST', body: JSON.stringify({ group: groupId, type: 'active' }) });
    expect(res.status).toBe(202);
    const { jobId } = (await res.json()) as { jobId: string };
    const seen: number[] = [];
    const done = await waitFor(
      'backfill completed',
      async () => {
        const job = (await (await admin(`/admin/jobs/${jobId}`)).json()) as {
          state: string;
          progress: { rowsSeen?: number; total?: number };
          result: { rowsSeen: number } | null;
        };
        if (typeof job.progress === 'object' && job.progress?.rowsSeen) seen.push(job.progress.rowsSeen);
        return job.state === 'completed' ? job : null;
      },
      60_000,
      100,
    );
    sim.faults.clear();
    const active = sim.world.memberCount(groupId, 'active');
    expect(done.result?.rowsSeen).toBe(active);
    expect(done.progress).toMatchObject({ rowsSeen: active, total: active });
    expect(seen.some((n) => n > 0 && n < active)).toBe(true); // progress was visible mid-pass
    const status = (await (await admin('/admin/status')).json()) as { passes: Array<{ groupId: string; mirrored: number; drift: number }> };
    expect(status.passes.find((p) => p.groupId === groupId)).toMatchObject({ mirrored: active, drift: 0 });
    expect((await admin('/admin/jobs/nope')).status).toBe(404);
  });

  it('exposes every metric family, and they move when work happens (labelled with the account where one account did the work)', async () => {
    const body = JSON.stringify({ event: 'subscriber.updated', account_id: 1, ...sim.world.renderWebhook(sim.world.members(groupId)[0]!) });
    const delivered = await fetch(`${base}/webhooks`, {
      method: 'POST',
      body,
      headers: { signature: signBody(body, secret), 'content-type': 'application/json' },
    });
    expect(delivered.status).toBe(200);
    await waitFor(
      'delivery applied',
      async () => {
        const { rows } = await database.pool.query(`select status from webhook_deliveries`);
        return rows[0]?.status === 'applied';
      },
      20_000,
      100,
    );
    // Gauges read from Postgres are refreshed on a timer (METRICS_REFRESH_EVERY), not by the scrape.
    const text = await waitFor(
      'drift gauge refreshed',
      async () => {
        const scraped = await (await fetch(`${opsBase}/metrics`)).text();
        return /subscriber_mirror_sync_drift\{group="\d+",type="active",account="default"\} 0\b/.test(scraped) ? scraped : null;
      },
      20_000,
      200,
    );
    const value = (pattern: RegExp) => Number(pattern.exec(text)?.[1] ?? Number.NaN);
    for (const family of [
      'subscriber_mirror_http_requests_total',
      'subscriber_mirror_webhook_deliveries_total',
      'subscriber_mirror_queue_depth',
      'subscriber_mirror_sync_pass_duration_seconds',
      'subscriber_mirror_rows_total',
      'subscriber_mirror_upstream_requests_total',
      'subscriber_mirror_sync_errors_total',
      'subscriber_mirror_limiter_wait_seconds',
      'subscriber_mirror_db_checkout_wait_seconds',
      'subscriber_mirror_db_pool',
      'subscriber_mirror_sync_cursor_age_seconds',
      'subscriber_mirror_sync_drift',
      'subscriber_mirror_upstream_auth_paused',
      'subscriber_mirror_process_cpu_user_seconds_total',
    ]) {
      expect(text, family).toContain(`# TYPE ${family}`);
    }
    expect(value(/subscriber_mirror_webhook_deliveries_total\{outcome="received",account="default"\} (\d+)/)).toBeGreaterThanOrEqual(1);
    expect(value(/subscriber_mirror_webhook_deliveries_total\{outcome="applied",account="default"\} (\d+)/)).toBeGreaterThanOrEqual(1);
    expect(value(/subscriber_mirror_rows_total\{via="poll",result="inserted",account="default"\} (\d+)/)).toBe(
      sim.world.memberCount(groupId, 'active'),
    );
    expect(value(/subscriber_mirror_upstream_requests_total\{api="legacy",outcome="200",account="default"\} (\d+)/)).toBeGreaterThan(10);
    expect(
      value(/subscriber_mirror_sync_pass_duration_seconds_count\{mode="full",outcome="succeeded",account="default"\} (\d+)/),
    ).toBeGreaterThanOrEqual(2);
    expect(value(/subscriber_mirror_sync_drift\{group="\d+",type="active",account="default"\} (-?\d+)/)).toBe(0);
    // The worker's statements went through its shared connections, each checkout's wait recorded.
    expect(value(/subscriber_mirror_db_checkout_wait_seconds_count\{account="default"\} (\d+)/)).toBeGreaterThan(10);
    const open = value(/subscriber_mirror_db_pool\{state="busy"\} (\d+)/) + value(/subscriber_mirror_db_pool\{state="idle"\} (\d+)/);
    expect(open).toBeGreaterThanOrEqual(1);
    expect(open).toBeLessThanOrEqual(WORKER_POOL_MAX);
    expect(value(/subscriber_mirror_http_requests_total\{method="POST",route="\/webhooks",status="200"\} (\d+)/)).toBe(1);
  });

  it('an HTTP backfill asked while a backfill runs gets its own pass, and returns with the members who left before it ended (issue 20)', async () => {
    await waitFor(
      'first pass',
      async () => {
        const s = (await (await admin('/admin/status')).json()) as { passes: Array<{ lastStatus: string }> };
        return s.passes[0]?.lastStatus === 'succeeded';
      },
      60_000,
      100,
    );
    const ask = async () => {
      const res = await admin('/admin/backfill', { method: 'POST', body: JSON.stringify({ group: groupId, type: 'active' }) });
      expect(res.status).toBe(202);
      return ((await res.json()) as { jobId: string }).jobId;
    };
    const job = async (id: string) =>
      (await (await admin(`/admin/jobs/${id}`)).json()) as {
        state: string;
        result: { startedAt: string; removed: number; confirmingPasses: number; awaitingProof: number } | null;
      };
    // A burst of departures while a backfill runs (slowed down so the next one is asked meanwhile).
    sim.faults.set({ delayMs: 25 });
    const leftBefore = sim.pageChurn.left.length;
    sim.pageChurn.set({ groupId, leave: 3 });
    const running = await ask();
    await waitFor(
      'departures during the running pass',
      async () => (await job(running)).state === 'active' && sim.pageChurn.left.length - leftBefore >= 6,
      30_000,
      20,
    );
    const askedAt = Date.now();
    const leavers = sim.pageChurn.left.slice(leftBefore);
    const second = await ask();
    expect(second).not.toBe(running);
    await waitFor('running backfill done', async () => (await job(running)).state === 'completed', 60_000, 100);
    sim.pageChurn.clear();
    sim.faults.clear();
    const done = await waitFor(
      'second backfill done',
      async () => {
        const j = await job(second);
        return j.state === 'completed' ? j : null;
      },
      60_000,
      100,
    );
    expect(Date.parse(done.result?.startedAt ?? '')).toBeGreaterThanOrEqual(askedAt - 5);
    expect(done.result).toMatchObject({ awaitingProof: 0 });
    expect(done.result?.confirmingPasses).toBeGreaterThanOrEqual(1);
    const { rows } = await database.pool.query<{ id: string }>(
      `select subscriber_id::text as id from group_members where group_id = $1 and removed_at is null and subscriber_id::text = any($2::text[])`,
      [groupId, leavers],
    );
    expect(rows).toEqual([]);
  });
});

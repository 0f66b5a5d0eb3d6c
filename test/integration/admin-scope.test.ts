/**
 * One scope wherever jobs come from (docs/security.md, "Only what is configured"): the BullMQ
 * dashboard is read-only unless DASHBOARD_WRITE, its writes follow the same-origin rule even with
 * Bearer, and the sync worker itself refuses a pass of a group or type that is not configured,
 * whoever queued it (unrecoverable, logged, counted).
 */
import { Writable } from 'node:stream';
import { QueueEvents } from 'bullmq';
import type { FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/ground/log.js';
import { createMetrics } from '../../src/ground/metrics.js';
import { registerAdminRoutes } from '../../src/http/admin.js';
import { buildServer } from '../../src/http/server.js';
import { createSessionStore } from '../../src/http/sessions.js';
import { createSyncQueue, PASS_JOB_OPTIONS } from '../../src/sync/schedule.js';
import { createSyncWorker, type SyncWorker } from '../../src/sync/worker.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';

const TOKEN = 'scope-admin-token-0123456789';
const GROUP = '3003';
const OTHER_GROUP = '4004';

describe('one scope for jobs, wherever they come from', () => {
  let database: TestDatabase;
  let redis: Redis;
  const prefix = uniquePrefix('scope');
  const queue = createSyncQueue({ url: redisUrl(), maxRetriesPerRequest: 1 }, prefix);
  const apps: FastifyInstance[] = [];
  const lines: Array<Record<string, unknown>> = [];
  const stream = new Writable({
    write(chunk, _enc, cb) {
      for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line) as Record<string, unknown>);
      cb();
    },
  });
  const { logger } = createLogger({ level: 'info', destination: stream });

  const adminApp = async (dashboardWrite: boolean): Promise<FastifyInstance> => {
    const app = buildServer({ logger, readiness: [] });
    await registerAdminRoutes(app, {
      token: TOKEN,
      pool: database.pool,
      accounts: [{ name: 'default', syncQueue: queue, configured: { groups: [GROUP], types: ['active'] } }],
      chooseAccount: (name) => name ?? 'default',
      configured: { groups: [GROUP], types: ['active'] },
      syncEveryMs: 60_000,
      sessions: createSessionStore(redis, { prefix, token: TOKEN }),
      logger,
      dashboardWrite,
    });
    await app.ready();
    apps.push(app);
    return app;
  };

  beforeAll(async () => {
    database = await createTestDatabase();
    redis = new Redis(redisUrl());
  });

  afterAll(async () => {
    for (const app of apps) await app.close();
    await queue.close();
    redis?.disconnect();
    await database?.drop();
    await deleteInstallKeys(prefix);
  });

  const bearer = { authorization: `Bearer ${TOKEN}` };
  const own = { origin: 'http://admin.test:9090', host: 'admin.test:9090', 'sec-fetch-site': 'same-origin' };
  const foreignJob = { name: 'backfill', data: { groupId: OTHER_GROUP, type: 'active', mode: 'full', trigger: 'backfill' } };

  it('the dashboard is read-only by default: adding, emptying, obliterating and pausing are refused, reading is not', async () => {
    const app = await adminApp(false);
    const before = await queue.getJobCounts();
    const add = await app.inject({
      method: 'POST',
      url: '/admin/queues/api/queues/sync/add',
      headers: { ...bearer, ...own },
      payload: foreignJob,
    });
    expect(add.statusCode).toBe(403);
    expect(add.json()).toMatchObject({ error: expect.stringContaining('DASHBOARD_WRITE') });
    for (const [method, action] of [
      ['PUT', 'empty'],
      ['PUT', 'obliterate'],
      ['PUT', 'pause'],
    ] as const) {
      const res = await app.inject({ method, url: `/admin/queues/api/queues/sync/${action}`, headers: { ...bearer, ...own } });
      expect(res.statusCode, action).toBe(403);
    }
    expect(await queue.getJobCounts()).toEqual(before);
    expect(await queue.isPaused()).toBe(false);
    expect((await app.inject({ method: 'GET', url: '/admin/queues/api/queues', headers: bearer })).statusCode).toBe(200);
  });

  it('with DASHBOARD_WRITE its writes need our own page, Bearer included', async () => {
    const app = await adminApp(true);
    const noOrigin = await app.inject({ method: 'PUT', url: '/admin/queues/api/queues/sync/pause', headers: bearer });
    expect(noOrigin.statusCode).toBe(403);
    const foreign = await app.inject({
      method: 'PUT',
      url: '/admin/queues/api/queues/sync/pause',
      headers: { ...bearer, origin: 'https://evil.example', host: 'admin.test:9090' },
    });
    expect(foreign.statusCode).toBe(403);
    expect(await queue.isPaused()).toBe(false);
    const ownPage = await app.inject({ method: 'PUT', url: '/admin/queues/api/queues/sync/pause', headers: { ...bearer, ...own } });
    expect(ownPage.statusCode).toBeLessThan(300);
    expect(await queue.isPaused()).toBe(true);
    await queue.resume();
  });

  it('the worker refuses a pass of a group or a type that is not configured, whoever queued it', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    const connection = { url: redisUrl(), maxRetriesPerRequest: null };
    const events = new QueueEvents('sync', { connection, prefix });
    await events.waitUntilReady();
    let requests = 0;
    const worker: SyncWorker = createSyncWorker({
      pool: database.pool,
      redis,
      connection,
      prefix,
      legacyFactory: () => {
        requests += 1;
        throw new Error('no pass may run for a job outside the scope');
      },
      apiKey: 'scope-api-key',
      logger,
      sourceTimezone: 'UTC',
      lookbackMs: 86_400_000,
      pageSize: 100,
      groups: [GROUP],
      types: ['active'],
      metrics,
    });
    try {
      // What the dashboard's add, a script with Redis access or an old scheduler would queue.
      const outside = [
        { groupId: OTHER_GROUP, type: 'active' as const },
        { groupId: GROUP, type: 'unsubscribed' as const },
      ];
      for (const data of outside) {
        const job = await queue.add('backfill', { ...data, mode: 'full', trigger: 'backfill' }, PASS_JOB_OPTIONS);
        await expect(job.waitUntilFinished(events, 20_000)).rejects.toThrow(/not configured/);
        const failed = await queue.getJob(job.id as string);
        expect(failed?.attemptsMade).toBeLessThanOrEqual(1);
      }
      expect(requests).toBe(0);
      const counted = await metrics.syncJobsRefused.get();
      expect(counted.values.map((v) => [v.labels.reason, v.value]).sort()).toEqual([
        ['group', 1],
        ['type', 1],
      ]);
      const logged = lines.filter((l) => l.msg === 'sync job refused: outside the configured scope');
      expect(logged.map((l) => [l.groupId, l.type])).toEqual([
        [OTHER_GROUP, 'active'],
        [GROUP, 'unsubscribed'],
      ]);
    } finally {
      await worker.close(5_000);
      await events.close();
    }
  });
});

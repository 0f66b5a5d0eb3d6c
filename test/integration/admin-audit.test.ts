/**
 * The admin audit trail: every action (login, logout, backfill, a dashboard action) and every failed
 * login is one log line naming the action, outcome and client, never a token, and one count in
 * subscriber_mirror_admin_actions_total.
 */
import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/ground/log.js';
import { createMetrics, type Metrics } from '../../src/ground/metrics.js';
import { registerAdminRoutes } from '../../src/http/admin.js';
import { buildServer } from '../../src/http/server.js';
import { createSessionStore } from '../../src/http/sessions.js';
import { createSyncQueue } from '../../src/sync/schedule.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';

const TOKEN = 'audit-admin-token-0123456789';
const WRONG = 'audit-wrong-guess-0123456789';
const GROUP = '2002';

describe('admin audit trail', () => {
  let database: TestDatabase;
  let redis: Redis;
  let queue: ReturnType<typeof createSyncQueue>;
  let app: FastifyInstance;
  let metrics: Metrics;
  const lines: Array<Record<string, unknown>> = [];
  const prefix = uniquePrefix('audit');

  beforeAll(async () => {
    database = await createTestDatabase();
    redis = new Redis(redisUrl());
    queue = createSyncQueue({ url: redisUrl(), maxRetriesPerRequest: 1 }, prefix);
    const stream = new Writable({
      write(chunk, _enc, cb) {
        for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line) as Record<string, unknown>);
        cb();
      },
    });
    const { logger } = createLogger({ level: 'info', destination: stream, secrets: [TOKEN] });
    metrics = createMetrics({ defaultMetrics: false });
    app = buildServer({ logger, readiness: [], metrics });
    await registerAdminRoutes(app, {
      token: TOKEN,
      pool: database.pool,
      accounts: [{ name: 'default', syncQueue: queue, configured: { groups: [GROUP], types: ['active'] } }],
      chooseAccount: (name) => name ?? 'default',
      configured: { groups: [GROUP], types: ['active'] },
      syncEveryMs: 60_000,
      sessions: createSessionStore(redis, { prefix, token: TOKEN }),
      logger,
      metrics,
      // The dashboard's actions are audited when it may change anything at all.
      dashboardWrite: true,
    });
    await app.ready();
  });

  afterAll(async () => {
    await app?.close();
    await queue?.close();
    redis?.disconnect();
    await database?.drop();
    await deleteInstallKeys(prefix);
  });

  const own = { origin: 'http://admin.test:8443', host: 'admin.test:8443', 'sec-fetch-site': 'same-origin' };

  it('logs and counts logins, failed logins, logout, backfill and dashboard actions, without any token', async () => {
    const form = (token: string) =>
      app.inject({
        method: 'POST',
        url: '/admin/login',
        headers: { ...own, 'content-type': 'application/x-www-form-urlencoded' },
        payload: `token=${token}`,
      });
    expect((await form(WRONG)).statusCode).toBe(401);
    const ok = await form(TOKEN);
    expect(ok.statusCode).toBe(303);
    const cookie = String(ok.headers['set-cookie']).split(';')[0] as string;
    expect((await app.inject({ method: 'GET', url: '/admin/status', headers: { authorization: `Bearer ${WRONG}` } })).statusCode).toBe(401);
    const backfill = await app.inject({
      method: 'POST',
      url: '/admin/backfill',
      headers: { ...own, cookie, 'content-type': 'application/json' },
      payload: { group: GROUP },
    });
    expect(backfill.statusCode).toBe(202);
    const pause = await app.inject({ method: 'PUT', url: '/admin/queues/api/queues/sync/pause', headers: { ...own, cookie } });
    expect(pause.statusCode).toBeLessThan(300);
    const refused = await app.inject({
      method: 'PUT',
      url: '/admin/queues/api/queues/sync/resume',
      headers: { cookie, origin: 'https://evil.example', host: 'admin.test:8443' },
    });
    expect(refused.statusCode).toBe(403);
    expect((await app.inject({ method: 'POST', url: '/admin/logout', headers: { ...own, cookie } })).statusCode).toBe(303);
    // Reading is no event.
    expect((await app.inject({ method: 'GET', url: '/admin/status', headers: { authorization: `Bearer ${TOKEN}` } })).statusCode).toBe(200);

    const audit = lines
      .filter((l) => l.component === 'admin')
      .map((l) => ({ msg: l.msg, action: l.action, outcome: l.outcome, via: l.via }));
    expect(audit).toEqual([
      { msg: 'admin login failed', action: 'login', outcome: 'failed', via: 'form' },
      { msg: 'admin action', action: 'login', outcome: 'succeeded', via: 'form' },
      { msg: 'admin login failed', action: 'auth', outcome: 'failed', via: 'bearer' },
      { msg: 'admin action', action: 'backfill', outcome: 'succeeded', via: 'cookie' },
      { msg: 'admin action', action: 'queues', outcome: 'succeeded', via: 'cookie' },
      { msg: 'admin action refused', action: 'queues', outcome: 'refused', via: 'cookie' },
      { msg: 'admin action', action: 'logout', outcome: 'succeeded', via: 'cookie' },
    ]);
    const backfillLine = lines.find((l) => l.action === 'backfill');
    expect(backfillLine).toMatchObject({ group: GROUP, types: ['active'], ip: '127.0.0.1', route: '/admin/backfill' });
    const all = JSON.stringify(lines);
    for (const secret of [TOKEN, WRONG, cookie.slice('sm_admin='.length)]) expect(all).not.toContain(secret);

    const counted = await metrics.adminActions.get();
    const value = (action: string, outcome: string) =>
      counted.values.find((v) => v.labels.action === action && v.labels.outcome === outcome)?.value;
    expect([value('login', 'failed'), value('login', 'succeeded'), value('auth', 'failed'), value('backfill', 'succeeded')]).toEqual([
      1, 1, 1, 1,
    ]);
    expect([value('queues', 'succeeded'), value('queues', 'refused'), value('logout', 'succeeded'), value('backfill', 'refused')]).toEqual([
      1, 1, 1, 0,
    ]);
  });
});

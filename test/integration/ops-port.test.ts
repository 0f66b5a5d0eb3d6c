/**
 * Public and internal apart (docs/operations.md, "Public surface"): with OPS_PORT set, /metrics, /admin and the
 * detailed /readyz answer only on the ops port; the public port serves the webhook route and a bare
 * health answer that names no dependency and leaks no error text.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { startService, type RunningService } from '../../src/commands/start.js';
import { signBody } from '../../src/webhooks/signature.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { hostPort, startTcpProxy, type TcpProxy } from '../helpers/proxy.js';
import { deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { runCli } from '../helpers/cli.js';
import { waitFor } from '../helpers/wait.js';

const ADMIN_TOKEN = 'admin-token-ops-0123456789abcdef';
const SECRET = 'whsec-ops-port-test-0001';

describe('OPS_PORT', () => {
  let database: TestDatabase;
  let pgProxy: TcpProxy;
  let service: RunningService;
  const prefix = uniquePrefix('ops');
  let publicBase: string;
  let opsBase: string;

  beforeAll(async () => {
    database = await createTestDatabase();
    pgProxy = await startTcpProxy(hostPort(database.url, 5432));
    const config = loadConfig(
      {
        DATABASE_URL: pgProxy.via(database.url),
        REDIS_URL: redisUrl(),
        REDIS_PREFIX: prefix,
        PORT: '0',
        OPS_PORT: '0',
        ADMIN_TOKEN,
        WEBHOOK_SECRETS: SECRET,
        LOG_LEVEL: 'silent',
      },
      ['receive'],
    );
    service = await startService(config, 'receiver');
    publicBase = `http://127.0.0.1:${service.port}`;
    opsBase = `http://127.0.0.1:${service.opsPort}`;
  });

  afterAll(async () => {
    await service?.stop('test over');
    await pgProxy?.close();
    await database?.drop();
    await deletePrefix(prefix);
  });

  const auth = { authorization: `Bearer ${ADMIN_TOKEN}` };

  it('listens on two ports', () => {
    expect(service.opsPort).not.toBe(service.port);
  });

  it('serves /metrics and /admin on the ops port only', async () => {
    for (const path of ['/metrics', '/admin/status', '/admin/queues', '/admin/jobs/1']) {
      expect((await fetch(`${publicBase}${path}`, { headers: auth })).status, `public ${path}`).toBe(404);
    }
    const metrics = await fetch(`${opsBase}/metrics`);
    expect(metrics.status).toBe(200);
    expect(await metrics.text()).toContain('# TYPE subscriber_mirror_webhook_deliveries_total');
    expect((await fetch(`${opsBase}/admin/status`, { headers: auth })).status).toBe(200);
    expect((await fetch(`${opsBase}/admin/status`)).status).toBe(401);
  });

  it('serves the webhook route on the public port only', async () => {
    const body = JSON.stringify({ event: 'subscriber.updated', account_id: 1, subscriber: { id: '77', email: 'o@example.com' } });
    const headers = { signature: signBody(body, SECRET), 'content-type': 'application/json' };
    expect((await fetch(`${opsBase}/webhooks`, { method: 'POST', body, headers })).status).toBe(404);
    expect((await fetch(`${publicBase}/webhooks`, { method: 'POST', body, headers })).status).toBe(200);
  });

  it('answers health on the public port without naming a dependency or an error, and in detail on the ops port', async () => {
    await waitFor('ready', async () => (await fetch(`${publicBase}/readyz`)).status === 200, 20_000, 100);
    expect(await (await fetch(`${publicBase}/readyz`)).json()).toEqual({ status: 'ready' });
    expect((await fetch(`${publicBase}/healthz`)).status).toBe(200);

    await pgProxy.cut();
    try {
      const down = await waitFor(
        'public not ready',
        async () => {
          const res = await fetch(`${publicBase}/readyz`);
          return res.status === 503 ? res.text() : null;
        },
        20_000,
        100,
      );
      expect(JSON.parse(down)).toEqual({ status: 'unavailable' });
      expect(down).not.toMatch(/postgres|ECONN|127\.0\.0\.1|connect|terminat|timeout/i);

      const detailed = await fetch(`${opsBase}/readyz`);
      expect(detailed.status).toBe(503);
      const body = (await detailed.json()) as { checks: Array<{ name: string; ok: boolean; reason?: string }> };
      expect(body.checks.find((c) => c.name === 'postgres')).toMatchObject({ ok: false, reason: expect.any(String) as unknown });
    } finally {
      await pgProxy.restore();
    }
    await waitFor('ready again', async () => (await fetch(`${publicBase}/readyz`)).status === 200, 20_000, 100);
  });

  it('`healthcheck` (the image HEALTHCHECK) asks the ops port and exits 0 when ready, 1 when nothing answers', async () => {
    const ok = await runCli(['healthcheck'], { PORT: '1', OPS_PORT: String(service.opsPort) });
    expect(ok.code, ok.stdout + ok.stderr).toBe(0);
    expect(ok.stdout).toContain('"checks"');
    const down = await runCli(['healthcheck'], { PORT: '1' });
    expect(down.code).toBe(1);
    expect(down.stdout).toContain('not answering on port 1');
  });
});

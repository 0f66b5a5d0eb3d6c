/**
 * The status page and the BullMQ dashboard in a real browser (Debian's chromium through
 * playwright-core): after a pass every configured group × type shows its figures; the API-key pause
 * banner shows when the simulator rejects the key; a missing or wrong token gets no page; the same
 * login opens the BullMQ dashboard; nothing the page renders runs as script; no console errors.
 *
 * With STATUS_PAGE_SCREENSHOT=path the page after a pass is saved there (the screenshot in docs/operations.md, "Status page").
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { loadConfig } from '../../src/config.js';
import { startService, type RunningService } from '../../src/commands/start.js';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { SUBSCRIBER_TYPES } from '../../src/db/schema.js';
import { collectStatus } from '../../src/sync/status.js';
import { chromiumTool, launchChromium, type Browser } from '../helpers/browser.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { waitForFullPasses } from '../helpers/passes.js';
import { waitFor } from '../helpers/wait.js';

const TOKEN = 'browser-admin-token-0123456789';
const PAUSED_TOKEN = 'paused-admin-token-0123456789';
const XSS_ERROR = `<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>`;

function serviceEnv(database: TestDatabase, sim: Simulator, prefix: string, apiKey: string, token: string): Record<string, string> {
  return {
    DATABASE_URL: database.url,
    REDIS_URL: redisUrl(),
    REDIS_PREFIX: prefix,
    MAILER_LEGACY_URL: sim.url,
    MAILER_API_KEY: apiKey,
    SYNC_GROUPS: sim.world.groupIds().join(','),
    SYNC_EVERY: '30s',
    API_RATE_LIMIT: '100000',
    // The audit ticks every 2 s here (at most 30 s after start), so the accuracy column has figures.
    AUDIT_EVERY: '2s',
    ADMIN_TOKEN: token,
    // One plain-http port on this machine, as in the demo.
    ADMIN_ON_PUBLIC_PORT: 'true',
    HOST: '127.0.0.1',
    ADMIN_COOKIE_INSECURE: 'true',
    PORT: '0',
    LOG_LEVEL: 'silent',
  };
}

/** Console errors and uncaught exceptions of a page, from now on. */
function watchErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(`console: ${m.text()}`);
  });
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  return errors;
}

async function logIn(page: Page, base: string, token: string): Promise<number | undefined> {
  await page.goto(`${base}/admin/login`);
  await page.fill('input[name=token]', token);
  const [response] = await Promise.all([page.waitForNavigation(), page.click('button[type=submit]')]);
  return response?.status();
}

describe.skipIf(chromiumTool.skip)('status page in a real browser', () => {
  let sim: Simulator;
  let database: TestDatabase;
  let service: RunningService;
  let paused: RunningService;
  let browser: Browser;
  let base = '';
  const prefix = uniquePrefix('page');
  const pausedPrefix = uniquePrefix('paused');

  beforeAll(async () => {
    sim = await startSimulator({ subscribers: 400, groups: 2, seed: 7, rateLimit: false, timeScale: 0.001 });
    database = await createTestDatabase();
    service = await startService(loadConfig(serviceEnv(database, sim, prefix, sim.apiKey, TOKEN), ['poll', 'receive']), 'all');
    base = `http://127.0.0.1:${service.port}`;
    await waitForFullPasses(database.pool, sim.world.groupIds());
    // Two members renamed without a new stamp: the audit finds and repairs them (the accuracy column shows it).
    const group = sim.world.groupIds()[0] as string;
    for (const id of sim.world.members(group, 'active').slice(0, 2)) sim.world.updateFieldsSilently(id, { name: 'Renamed quietly' });
    await waitFor(
      'an audit of every group × type',
      async () =>
        (await database.pool.query<{ n: number }>('select count(distinct (group_id, type))::int as n from audit_results')).rows[0]?.n ===
        10,
      60_000,
      250,
    );
    browser = await launchChromium();
  }, 180_000);

  afterAll(async () => {
    await browser?.close();
    await paused?.stop('test over');
    await service?.stop('test over');
    await sim?.close();
    await database?.drop();
    await deleteInstallKeys(prefix);
    await deleteInstallKeys(pausedPrefix);
  });

  it('a missing or wrong token gets the login form, never the page or the queues', async () => {
    const page = await browser.context.newPage();
    const missing = await page.goto(`${base}/admin/`);
    expect(missing?.status()).toBe(401);
    expect(await page.locator('#passes').count()).toBe(0);
    expect(await page.locator('input[name=token]').count()).toBe(1);

    const queues = await page.goto(`${base}/admin/queues`);
    expect(queues?.status()).toBe(401);
    expect(await page.content()).not.toContain('sync');

    expect(await logIn(page, base, 'wrong-token-0123456789abcdef')).toBe(401);
    expect(await page.locator('#passes').count()).toBe(0);
    expect(await page.textContent('[role=alert]')).toContain('Wrong token');
    expect(await browser.context.cookies()).toEqual([]);
    await page.close();
  });

  it('after login shows every group × type with its figures, the inbox and the failed delivery as text', async () => {
    const page = await browser.context.newPage();
    const errors = watchErrors(page);
    expect(await logIn(page, base, TOKEN)).toBe(200);
    expect(page.url()).toBe(`${base}/admin/`);
    expect(page.url()).not.toContain(TOKEN);

    const cookie = (await browser.context.cookies()).find((c) => c.name === 'sm_admin');
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: 'Strict', path: '/admin' });
    expect(cookie?.value).not.toContain(TOKEN);

    const status = await collectStatus(database.pool, { groups: sim.world.groupIds(), types: SUBSCRIBER_TYPES });
    const rows = page.locator('#passes tbody tr');
    expect(await rows.count()).toBe(status.length);
    for (const expected of status) {
      const row = page.locator(`#passes tr[data-group="${expected.groupId}"][data-type="${expected.type}"]`);
      expect(await row.count(), `${expected.groupId} ${expected.type}`).toBe(1);
      expect(await row.locator('[data-field=mirrored]').textContent()).toBe(String(expected.mirrored));
      expect(await row.locator('[data-field=upstream]').textContent()).toBe(String(expected.upstreamCount));
      expect(await row.locator('[data-freshness]').getAttribute('data-freshness')).toBe('fresh');
      expect(await row.locator('code').textContent()).toBe(expected.cursor ?? '–');
      expect(await row.locator('[data-field=accuracy]').textContent()).toMatch(/^\d+\.\d% \(\d+\/\d+\)$/);
    }
    expect(await page.locator('#auth-pause').count()).toBe(0);
    if (process.env.STATUS_PAGE_SCREENSHOT) await page.screenshot({ path: process.env.STATUS_PAGE_SCREENSHOT, fullPage: true });

    // A delivery that failed to apply, whose error carries markup: it must show as text.
    expect(await page.locator('[data-inbox=failed]').textContent()).toBe('0');
    await database.pool.query(
      `insert into webhook_deliveries (body_sha256, body, kinds, status, attempts, error) values ('browser-test', '{}', '{subscriber.created}', 'failed', 3, $1)`,
      [XSS_ERROR],
    );
    await page.reload();
    expect(await page.locator('[data-inbox=failed]').textContent()).toBe('1');
    expect(await page.locator('#failed td.err').textContent()).toBe(XSS_ERROR);
    expect(await page.evaluate('typeof window.__xss')).toBe('undefined');
    expect(await page.getAttribute('meta[http-equiv=refresh]', 'content')).toBe('15');
    for (const href of ['/admin/queues', '/metrics']) expect(await page.locator(`nav a[href="${href}"]`).count()).toBe(1);

    expect(errors).toEqual([]);
    await page.close();
  });

  // The one BullMQ queue is the passes' (deliveries go from the inbox to the workers without one).
  it('the same login opens the BullMQ dashboard with its queue', async () => {
    const page = await browser.context.newPage();
    const errors = watchErrors(page);
    const response = await page.goto(`${base}/admin/queues`);
    expect(response?.status()).toBe(200);
    await page.getByText('sync', { exact: true }).first().waitFor({ timeout: 20_000 });
    expect(errors).toEqual([]);
    await page.close();
  });

  it('HTTP Basic with the token as password opens the page too', async () => {
    const basic = await launchChromium({ httpCredentials: { username: 'operator', password: TOKEN } });
    try {
      const page = await basic.context.newPage();
      const errors = watchErrors(page);
      await page.goto(`${base}/admin/basic`);
      expect(page.url()).toBe(`${base}/admin/`);
      expect(await page.locator('#passes tbody tr').count()).toBe(10);
      expect(errors).toEqual([]);
    } finally {
      await basic.close();
    }
  });

  it('shows the pause banner when the simulator rejects the API key', async () => {
    paused = await startService(
      loadConfig(serviceEnv(database, sim, pausedPrefix, 'revoked-key-0123456789', PAUSED_TOKEN), ['poll', 'receive']),
      'worker',
    );
    // Another host name than the first service's, so its session cookie is its own.
    const pausedBase = `http://localhost:${paused.port}`;
    await waitFor(
      'the API-key pause',
      async () => {
        const res = await fetch(`${pausedBase}/admin/status`, { headers: { authorization: `Bearer ${PAUSED_TOKEN}` } });
        return ((await res.json()) as { authPause: unknown }).authPause;
      },
      60_000,
      250,
    );
    const page = await browser.context.newPage();
    const errors = watchErrors(page);
    expect(await logIn(page, pausedBase, PAUSED_TOKEN)).toBe(200);
    const banner = page.locator('#auth-pause');
    expect(await banner.count()).toBe(1);
    expect(await banner.textContent()).toContain('rejected the API key');
    expect(await banner.textContent()).not.toContain('revoked-key-0123456789');
    expect(errors).toEqual([]);
    await page.close();
  });
});

/**
 * The admin login as an attacker would try it (no browser needed): Basic, the login form's cookie,
 * cross-site requests (cookie and Basic alike, the dashboard's actions included), the token in a URL,
 * forged, expired, logged-out and other-token sessions, framing, guessing the token.
 *
 * The service shares its one port with admin here (ADMIN_ON_PUBLIC_PORT=true, the demo's setup) and
 * trusts X-Forwarded-For (TRUST_PROXY=true), so each test can be its own client for the login throttle.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { createSessionStore } from '../../src/http/sessions.js';
import { startService, type RunningService } from '../../src/commands/start.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

const TOKEN = 'login-admin-token-0123456789';
const OTHER_TOKEN = 'rotated-admin-token-0123456789';
const GROUP = '1001';

describe('admin login', () => {
  let database: TestDatabase;
  let service: RunningService;
  let rotated: RunningService;
  let redis: Redis;
  let base = '';
  let host = '';
  const prefix = uniquePrefix('login');
  let client = 0;
  /** A client address of its own (X-Forwarded-For), so one test's failures never throttle another's. */
  const newClient = () => `198.51.100.${++client}`;

  const env = (token: string) => ({
    DATABASE_URL: database.url,
    REDIS_URL: redisUrl(),
    REDIS_PREFIX: prefix,
    ADMIN_TOKEN: token,
    ADMIN_ON_PUBLIC_PORT: 'true',
    HOST: '127.0.0.1',
    TRUST_PROXY: 'true',
    SYNC_GROUPS: GROUP,
    SYNC_TYPES: 'active',
    PORT: '0',
    LOG_LEVEL: 'silent',
  });

  beforeAll(async () => {
    database = await createTestDatabase();
    service = await startService(loadConfig(env(TOKEN), ['receive']), 'receiver');
    // The same install after ADMIN_TOKEN changed (same Redis, same prefix).
    rotated = await startService(loadConfig(env(OTHER_TOKEN), ['receive']), 'receiver');
    redis = new Redis(redisUrl());
    host = `127.0.0.1:${service.port}`;
    base = `http://${host}`;
  });

  afterAll(async () => {
    redis?.disconnect();
    await rotated?.stop('test over');
    await service?.stop('test over');
    await database?.drop();
    await deleteInstallKeys(prefix);
  });

  const basic = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;
  const sameSite = () => ({ origin: base, 'sec-fetch-site': 'same-origin' });
  const login = (token: string, headers: Record<string, string> = sameSite(), at = base) =>
    fetch(`${at}/admin/login`, {
      method: 'POST',
      redirect: 'manual',
      headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
      body: new URLSearchParams({ token }).toString(),
    });
  const cookieOf = (res: Response) => (res.headers.get('set-cookie') ?? '').split(';')[0] ?? '';

  it('takes the token as the Basic password (any user name), and nothing else', async () => {
    expect((await fetch(`${base}/admin/`, { headers: { authorization: basic('me', TOKEN) } })).status).toBe(200);
    expect((await fetch(`${base}/admin/status`, { headers: { authorization: basic('', TOKEN) } })).status).toBe(200);
    expect((await fetch(`${base}/admin/`, { headers: { authorization: basic(TOKEN, 'x') } })).status).toBe(401);
    expect((await fetch(`${base}/admin/`, { headers: { authorization: basic('me', `${TOKEN}x`) } })).status).toBe(401);
  });

  it('answers a browser without credentials with the login form, an API client with 401 JSON', async () => {
    const page = await fetch(`${base}/admin/`, { headers: { accept: 'text/html' } });
    expect(page.status).toBe(401);
    const html = await page.text();
    expect(html).toContain('name="token"');
    expect(html).not.toContain('id="passes"');
    const api = await fetch(`${base}/admin/status`);
    expect(api.status).toBe(401);
    expect(await api.json()).toEqual({ error: 'unauthorized' });
    const challenge = await fetch(`${base}/admin/basic`);
    expect(challenge.status).toBe(401);
    expect(challenge.headers.get('www-authenticate')).toMatch(/^Basic realm=/);
  });

  it('sets an HttpOnly SameSite=Strict session cookie that is not the token, and it opens the page', async () => {
    const res = await login(TOKEN);
    expect(res.status).toBe(303);
    expect(res.headers.get('location')).toBe('/admin/');
    const setCookie = res.headers.get('set-cookie') ?? '';
    expect(setCookie).toMatch(/^sm_admin=[^;]+; Path=\/admin; HttpOnly; SameSite=Strict; Max-Age=43200; Secure$/);
    expect(setCookie).not.toContain(TOKEN);
    const page = await fetch(`${base}/admin/`, { headers: { cookie: cookieOf(res) } });
    expect(page.status).toBe(200);
    expect(page.headers.get('content-security-policy')).toContain("default-src 'none'");
    expect(await page.text()).toContain('id="passes"');
    expect((await fetch(`${base}/admin/queues`, { headers: { cookie: cookieOf(res) } })).status).toBe(200);
  });

  it('refuses a wrong token, a cross-site login and a token in the URL', async () => {
    expect((await login('wrong-token-0123456789abcdef')).status).toBe(401);
    expect((await login(TOKEN, { origin: 'https://evil.example' })).status).toBe(403);
    expect((await login(TOKEN, { 'sec-fetch-site': 'cross-site' })).status).toBe(403);
    expect((await login(TOKEN, {})).status).toBe(403); // neither header: not a browser's form
    const viaUrl = await fetch(`${base}/admin/login?token=${TOKEN}`, { redirect: 'manual' });
    expect(viaUrl.status).toBe(200);
    expect(viaUrl.headers.get('set-cookie')).toBeNull();
    expect((await fetch(`${base}/admin/?token=${TOKEN}`)).status).toBe(401);
  });

  it('refuses cookie-authenticated changes from another site (CSRF)', async () => {
    const cookie = cookieOf(await login(TOKEN));
    const backfill = (headers: Record<string, string>) =>
      fetch(`${base}/admin/backfill`, {
        method: 'POST',
        headers: { cookie, 'content-type': 'application/json', ...headers },
        body: '{"group":"1"}',
      });
    expect((await backfill({ origin: 'https://evil.example' })).status).toBe(403);
    expect((await backfill({ 'sec-fetch-site': 'same-site' })).status).toBe(403);
    expect((await backfill({})).status).toBe(403);
    // Bearer is not a browser's: no CSRF check.
    expect(
      (
        await fetch(`${base}/admin/backfill`, {
          method: 'POST',
          headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
          body: '{"group":"x"}',
        })
      ).status,
    ).toBe(400);
  });

  it('refuses Basic-authenticated changes from another site (CSRF through cached Basic credentials)', async () => {
    const auth = basic('me', TOKEN);
    // What a page on another site gets by auto-submitting a form: the browser adds the cached Basic.
    const form = (path: string, headers: Record<string, string>) =>
      fetch(`${base}${path}`, {
        method: 'POST',
        headers: { authorization: auth, 'content-type': 'application/x-www-form-urlencoded', ...headers },
        body: new URLSearchParams({ group: GROUP, type: 'active' }).toString(),
      });
    expect((await form('/admin/backfill', { origin: 'https://evil.example', 'sec-fetch-site': 'cross-site' })).status).toBe(403);
    expect((await form('/admin/backfill', { origin: 'https://evil.example' })).status).toBe(403);
    expect((await form('/admin/backfill', { 'sec-fetch-site': 'cross-site' })).status).toBe(403);
    // The dashboard's add-job endpoint, the same way.
    expect(
      (await form('/admin/queues/api/queues/sync/add', { origin: 'https://evil.example', 'sec-fetch-site': 'cross-site' })).status,
    ).toBe(403);
    const json = (path: string, headers: Record<string, string>, body: object) =>
      fetch(`${base}${path}`, {
        method: 'POST',
        headers: { authorization: auth, 'content-type': 'application/json', ...headers },
        body: JSON.stringify(body),
      });
    expect((await json('/admin/queues/api/queues/sync/add', { origin: 'https://evil.example' }, { name: 'x', data: {} })).status).toBe(403);
    expect((await json('/admin/backfill', {}, { group: GROUP })).status).toBe(403); // neither header: not a browser's own page
    // From our own page it works.
    expect((await json('/admin/backfill', sameSite(), { group: GROUP })).status).toBe(202);
  });

  it('takes form bodies on the login and logout forms only', async () => {
    const bearer = { authorization: `Bearer ${TOKEN}` };
    const form = await fetch(`${base}/admin/backfill`, {
      method: 'POST',
      headers: { ...bearer, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ group: GROUP }).toString(),
    });
    expect(form.status).toBe(415);
    const text = await fetch(`${base}/admin/backfill`, {
      method: 'POST',
      headers: { ...bearer, 'content-type': 'text/plain' },
      body: `{"group":"${GROUP}"}`,
    });
    expect(text.status).toBe(415);
    const multipart = new FormData();
    multipart.set('group', GROUP);
    const dashboardAdd = await fetch(`${base}/admin/queues/api/queues/sync/add`, {
      method: 'POST',
      headers: { ...bearer, ...sameSite() },
      body: multipart,
    });
    expect(dashboardAdd.status).toBe(415);
  });

  it("forbids framing every /admin page, the dashboard's included", async () => {
    const cookie = cookieOf(await login(TOKEN));
    const pages = [
      ['/admin/', { cookie }],
      ['/admin/login', {}],
      ['/admin/queues', { cookie }],
      ['/admin/queues/api/queues', { cookie }],
      ['/admin/status', {}],
    ] as const;
    for (const [path, headers] of pages) {
      const res = await fetch(`${base}${path}`, { headers: { accept: 'text/html', ...headers } });
      expect(res.headers.get('x-frame-options'), path).toBe('DENY');
      expect(res.headers.get('content-security-policy'), path).toContain("frame-ancestors 'none'");
    }
  });

  it('rejects forged, expired, other-token and token-valued sessions', async () => {
    const status = (cookie: string, at = base) => fetch(`${at}/admin/status`, { headers: { cookie } }).then((r) => r.status);
    const good = cookieOf(await login(TOKEN));
    expect(await status(good)).toBe(200);
    const value = good.slice('sm_admin='.length);
    const forged = `${value.slice(0, -1)}${value.endsWith('A') ? 'B' : 'A'}`;
    expect(await status(`sm_admin=${forged}`)).toBe(401);
    expect(await status(`sm_admin=${TOKEN}`)).toBe(401);
    expect(await status('sm_admin=')).toBe(401);
    // After ADMIN_TOKEN changed, sessions made under the old token are worthless, and the reverse.
    const rotatedBase = `http://127.0.0.1:${rotated.port}`;
    expect(await status(good, rotatedBase)).toBe(401);
    const fresh = cookieOf(await login(OTHER_TOKEN, { origin: rotatedBase }, rotatedBase));
    expect(await status(fresh, rotatedBase)).toBe(200);
    expect(await status(fresh)).toBe(401);
    // Expired: a session kept for 1 ms.
    const store = createSessionStore(redis, { prefix, token: TOKEN, ttlMs: 1 });
    const expiring = await store.create();
    await waitFor('the session to expire', async () => !(await store.valid(expiring)), 5_000);
    expect(await status(`sm_admin=${expiring}`)).toBe(401);
  });

  it('logs out by ending the session server-side: a copy of the cookie is refused afterwards', async () => {
    const cookie = cookieOf(await login(TOKEN));
    expect((await fetch(`${base}/admin/status`, { headers: { cookie } })).status).toBe(200);
    // Logout is a change too: not from another site.
    const crossSite = await fetch(`${base}/admin/logout`, {
      method: 'POST',
      redirect: 'manual',
      headers: { cookie, origin: 'https://evil.example' },
    });
    expect(crossSite.status).toBe(403);
    expect((await fetch(`${base}/admin/status`, { headers: { cookie } })).status).toBe(200);
    const out = await fetch(`${base}/admin/logout`, {
      method: 'POST',
      redirect: 'manual',
      headers: { cookie, origin: base, 'content-type': 'application/x-www-form-urlencoded' },
      body: '',
    });
    expect(out.status).toBe(303);
    expect(out.headers.get('set-cookie')).toMatch(/^sm_admin=; .*Max-Age=0/);
    // The stolen copy: still sent, no longer valid.
    expect((await fetch(`${base}/admin/status`, { headers: { cookie } })).status).toBe(401);
    expect((await fetch(`${base}/admin/`, { headers: { cookie, accept: 'text/html' } })).status).toBe(401);
  });

  it('throttles failed logins per client: after 5 failures in a minute, 429 even for the right token', async () => {
    const attacker = newClient();
    const bystander = newClient();
    const as = (ip: string) => ({ ...sameSite(), 'x-forwarded-for': ip });
    for (let i = 0; i < 5; i += 1) expect((await login(`wrong-token-${i}-0123456789`, as(attacker))).status).toBe(401);
    const blocked = await login(TOKEN, as(attacker));
    expect(blocked.status).toBe(429);
    expect(Number(blocked.headers.get('retry-after'))).toBeGreaterThan(0);
    // Guessing through Authorization is the same login.
    expect(
      (await fetch(`${base}/admin/status`, { headers: { authorization: `Bearer ${TOKEN}`, 'x-forwarded-for': attacker } })).status,
    ).toBe(429);
    expect(
      (await fetch(`${base}/admin/status`, { headers: { authorization: basic('me', TOKEN), 'x-forwarded-for': attacker } })).status,
    ).toBe(429);
    // Another client is not affected.
    expect((await login(TOKEN, as(bystander))).status).toBe(303);
    const guesser = newClient();
    for (let i = 0; i < 5; i += 1) {
      expect(
        (
          await fetch(`${base}/admin/status`, {
            headers: { authorization: `Bearer guess-${i}-0123456789abcdef`, 'x-forwarded-for': guesser },
          })
        ).status,
      ).toBe(401);
    }
    expect((await login(TOKEN, as(guesser))).status).toBe(429);
    // The login page itself answers credentials sent to it: the same throttle.
    const pageGuesser = newClient();
    const loginPage = (token: string) =>
      fetch(`${base}/admin/login`, { redirect: 'manual', headers: { authorization: basic('me', token), 'x-forwarded-for': pageGuesser } });
    for (let i = 0; i < 5; i += 1) expect((await loginPage(`guess-${i}-0123456789abcdef`)).status).toBe(401);
    expect((await loginPage(TOKEN)).status).toBe(429);
  });

  it('counts every admin action and failed login in a metric', async () => {
    const metrics = await (await fetch(`${base}/metrics`)).text();
    const count = (action: string, outcome: string) =>
      Number(
        new RegExp(`subscriber_mirror_admin_actions_total\\{action="${action}",outcome="${outcome}"\\} (\\d+)`).exec(metrics)?.[1] ??
          Number.NaN,
      );
    expect(count('login', 'failed')).toBeGreaterThanOrEqual(6);
    expect(count('login', 'succeeded')).toBeGreaterThanOrEqual(3);
    expect(count('login', 'throttled')).toBeGreaterThanOrEqual(2);
    expect(count('backfill', 'refused')).toBeGreaterThanOrEqual(4);
    expect(count('backfill', 'succeeded')).toBeGreaterThanOrEqual(1);
    expect(count('queues', 'refused')).toBeGreaterThanOrEqual(2);
    expect(count('logout', 'succeeded')).toBeGreaterThanOrEqual(1);
    expect(count('auth', 'failed')).toBeGreaterThanOrEqual(5);
  });
});

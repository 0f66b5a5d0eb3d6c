/**
 * The admin login as an attacker would try it (no browser needed): Basic, the login form's cookie,
 * cross-site requests, the token in a URL, forged and expired sessions.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { sessionValid, sessionValue } from '../../src/http/admin.js';
import { startService, type RunningService } from '../../src/start.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';

const TOKEN = 'login-admin-token-0123456789';

describe('admin login', () => {
  let database: TestDatabase;
  let service: RunningService;
  let base = '';
  let host = '';
  const prefix = uniquePrefix('login');

  beforeAll(async () => {
    database = await createTestDatabase();
    const config = loadConfig(
      { DATABASE_URL: database.url, REDIS_URL: redisUrl(), REDIS_PREFIX: prefix, ADMIN_TOKEN: TOKEN, PORT: '0', LOG_LEVEL: 'silent' },
      ['receive'],
    );
    service = await startService(config, 'receiver');
    host = `127.0.0.1:${service.port}`;
    base = `http://${host}`;
  });

  afterAll(async () => {
    await service.stop('test over');
    await database.drop();
    await deleteInstallKeys(prefix);
  });

  const basic = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;
  const login = (token: string, headers: Record<string, string> = { origin: base, 'sec-fetch-site': 'same-origin' }) =>
    fetch(`${base}/admin/login`, {
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
    expect(setCookie).toMatch(/^sm_admin=[^;]+; Path=\/admin; HttpOnly; SameSite=Strict; Max-Age=43200$/);
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
      fetch(`${base}/admin/backfill`, { method: 'POST', headers: { cookie, 'content-type': 'application/json', ...headers }, body: '{"group":"1"}' });
    expect((await backfill({ origin: 'https://evil.example' })).status).toBe(403);
    expect((await backfill({ 'sec-fetch-site': 'same-site' })).status).toBe(403);
    expect((await backfill({})).status).toBe(403);
    // Bearer is not a browser's: no CSRF check.
    expect((await fetch(`${base}/admin/backfill`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: '{"group":"x"}' })).status).toBe(400);
  });

  it('rejects forged, expired and other-token sessions', () => {
    const now = Date.now();
    expect(sessionValid(sessionValue(TOKEN, now), TOKEN, now)).toBe(true);
    expect(sessionValid(sessionValue(TOKEN, now - 13 * 3_600_000), TOKEN, now)).toBe(false);
    expect(sessionValid(sessionValue('another-token-0123456789', now), TOKEN, now)).toBe(false);
    const [expires, mac] = sessionValue(TOKEN, now).split('.');
    expect(sessionValid(`${Number(expires) + 1}.${mac}`, TOKEN, now)).toBe(false);
    expect(sessionValid(TOKEN, TOKEN, now)).toBe(false);
    expect(sessionValid(undefined, TOKEN, now)).toBe(false);
  });

  it('logs out by clearing the cookie', async () => {
    const cookie = cookieOf(await login(TOKEN));
    const out = await fetch(`${base}/admin/logout`, { method: 'POST', redirect: 'manual', headers: { cookie, origin: base } });
    expect(out.status).toBe(303);
    expect(out.headers.get('set-cookie')).toMatch(/^sm_admin=; .*Max-Age=0/);
  });
});

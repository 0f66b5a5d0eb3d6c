/**
 * Contract suite for the simulator: walks docs/upstream.md, "Endpoints" to "Limits", and the facts beyond the docs there row by row over HTTP.
 * Needs no database: only the simulator and small node:http receivers for deliveries.
 */
import { createHmac } from 'node:crypto';
import { createServer } from 'node:http';
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { isSafeNumber, parse as losslessParse } from 'lossless-json';
import { afterEach, describe, expect, it } from 'vitest';
import { ALL_EVENT_KINDS, BATCH_ONLY_KINDS, startSimulator } from '../../src/simulator/index.js';
import type { EventKind, Simulator, SimulatorOptions } from '../../src/simulator/index.js';
import { waitFor } from '../helpers/wait.js';

// ---------------------------------------------------------------- helpers

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()));
});

async function sim(options: SimulatorOptions = {}): Promise<Simulator> {
  const started = await startSimulator({ rateLimit: false, ...options });
  closers.push(() => started.close());
  return started;
}

interface Answer {
  status: number;
  headers: Headers;
  text: string;
}

async function request(url: string, init: RequestInit = {}): Promise<Answer> {
  const response = await fetch(url, init);
  return { status: response.status, headers: response.headers, text: await response.text() };
}

function legacy(s: Simulator, path: string, headers: Record<string, string> = { [s.apiKeyHeader]: s.apiKey }): Promise<Answer> {
  return request(`${s.url}/api/v2${path}`, { headers: { 'Content-Type': 'application/json', ...headers } });
}

function hooksApi(s: Simulator, method: string, path = '', body?: unknown, token: string | null = s.webhooksToken): Promise<Answer> {
  const headers: Record<string, string> = { Accept: 'application/json', 'Content-Type': 'application/json' };
  if (token !== null) headers['Authorization'] = `Bearer ${token}`;
  return request(`${s.url}/api/webhooks${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
}

/** Lossless parse: integers beyond 2^53 stay strings, as a correct client must read them. */
function parseLossless(text: string): unknown {
  return losslessParse(text, null, (digits) => (isSafeNumber(digits) ? Number(digits) : digits));
}

type LegacyItem = Record<string, unknown> & { id: string | number; type: string };

function legacyItems(text: string): LegacyItem[] {
  const parsed = parseLossless(text);
  if (!Array.isArray(parsed)) throw new Error(`not an array: ${text.slice(0, 100)}`);
  return parsed as LegacyItem[];
}

async function listAll(s: Simulator, path: string, limit: number): Promise<string[]> {
  const ids: string[] = [];
  for (let offset = 0; ; offset += limit) {
    const page = legacyItems((await legacy(s, `${path}${path.includes('?') ? '&' : '?'}limit=${limit}&offset=${offset}`)).text);
    if (page.length === 0) return ids;
    ids.push(...page.map((item) => String(item.id)));
  }
}

interface Received {
  headers: IncomingHttpHeaders;
  body: string;
  at: number;
}

interface Receiver {
  url: string;
  received: Received[];
  waitFor(count: number, timeoutMs?: number): Promise<void>;
}

/** A webhook receiver; `respond` picks the status for the n-th request (0-based), or 'hang'. */
async function receiver(respond: (n: number) => number | 'hang' = () => 200): Promise<Receiver> {
  const received: Received[] = [];
  const hanging: ServerResponse[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const n = received.length;
      received.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8'), at: performance.timeOrigin + performance.now() });
      const status = respond(n);
      if (status === 'hang') hanging.push(res);
      else res.writeHead(status).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    received,
    async waitFor(count, timeoutMs = 10_000) {
      const deadline = Date.now() + timeoutMs;
      while (received.length < count) {
        if (Date.now() > deadline) throw new Error(`receiver got ${received.length}/${count} requests in ${timeoutMs} ms`);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    },
  };
}

async function createHook(s: Simulator, body: Record<string, unknown>): Promise<{ id: string; secret: string }> {
  const answer = await hooksApi(s, 'POST', '', body);
  expect(answer.status, answer.text).toBe(200);
  const { data } = JSON.parse(answer.text) as { data: { id: string; secret: string } };
  return data;
}

function hmac(body: string, secret: string): string {
  return createHmac('sha256', secret).update(body).digest('hex');
}

const LEGACY_KEYS = [
  'id',
  'name',
  'email',
  'sent',
  'opened',
  'opened_rate',
  'clicked',
  'clicked_rate',
  'type',
  'country_id',
  'signup_ip',
  'signup_timestamp',
  'confirmation_ip',
  'confirmation_timestamp',
  'fields',
  'webform_subscribe_date',
  'date_subscribe',
  'date_unsubscribe',
  'date_created',
  'date_updated',
  'user_agent',
];
const SUBSCRIBER_KEYS = [
  'id',
  'email',
  'status',
  'source',
  'sent',
  'opens_count',
  'clicks_count',
  'open_rate',
  'click_rate',
  'ip_address',
  'subscribed_at',
  'unsubscribed_at',
  'created_at',
  'updated_at',
  'deleted_at',
  'forget_at',
  'fields',
  'opted_in_at',
  'optin_ip',
];
const WEBHOOK_KEYS = ['id', 'name', 'url', 'events', 'enabled', 'secret', 'created_at', 'updated_at', 'batchable'];
const TYPES = ['active', 'unsubscribed', 'bounced', 'junk', 'unconfirmed'];
const ISO_MICROS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;
const YMD_HIS = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/;

// ---------------------------------------------------------------- "Legacy lists" (docs/upstream.md) legacy reads

describe('"Legacy lists" (docs/upstream.md) legacy group subscribers', () => {
  it('GET /groups/:id/subscribers answers a bare array of Single Subscriber objects', async () => {
    const s = await sim({ subscribers: 200, groups: 3, seed: 11 });
    const groupId = s.world.groupIds()[0] ?? '';
    const answer = await legacy(s, `/groups/${groupId}/subscribers`);
    expect(answer.status).toBe(200);
    expect(answer.headers.get('content-type')).toMatch(/^application\/json/);
    const items = legacyItems(answer.text);
    expect(items.length).toBeGreaterThan(0);
    for (const item of items) {
      expect(Object.keys(item)).toEqual(LEGACY_KEYS);
      expect(typeof item.id).toBe('number');
      expect(TYPES).toContain(item.type);
      expect(item['date_created']).toMatch(YMD_HIS);
      expect(item['date_updated']).toMatch(YMD_HIS);
      if (item['date_subscribe'] !== null) expect(item['date_subscribe']).toMatch(/^\d{4}-\d{2}-\d{2}$/);
      expect(item['fields']).toEqual(expect.arrayContaining([{ key: 'email', value: item['email'], type: 'TEXT' }]));
      expect((item['fields'] as { key: string }[]).map((f) => f.key)).toEqual([
        'email',
        'name',
        'last_name',
        'company',
        'country',
        'city',
        'phone',
        'state',
        'zip',
      ]);
    }
    // Each element is byte-for-byte the world's own rendering, so tests can compare field by field.
    const expected = `[${s.world
      .members(groupId)
      .slice(0, 100)
      .map((id) => s.world.renderLegacyJson(id))
      .join(',')}]`;
    expect(answer.text).toBe(expected);
  });

  it('writes ids above 2^53 as exact digits that survive a lossless parse', async () => {
    const s = await sim({ subscribers: 50, groups: 1, largeIds: true });
    const groupId = s.world.groupIds()[0] ?? '';
    const answer = await legacy(s, `/groups/${groupId}/subscribers?limit=10`);
    const ids = s.world.members(groupId).slice(0, 10);
    for (const id of ids) {
      expect(BigInt(id) > 2n ** 53n).toBe(true);
      expect(answer.text).toContain(`{"id":${id},`);
    }
    expect(legacyItems(answer.text).map((item) => item.id)).toEqual(ids);
    // The trap this guards against: a plain JSON.parse rounds them.
    const lossy = (JSON.parse(answer.text) as { id: number }[]).map((item) => String(item.id));
    expect(lossy).not.toEqual(ids);
  });

  it('counts, lists by type and counts by type consistently', async () => {
    const s = await sim({ subscribers: 400, groups: 2, seed: 3 });
    const groupId = s.world.groupIds()[1] ?? '';
    const total = JSON.parse((await legacy(s, `/groups/${groupId}/subscribers/count`)).text) as unknown;
    expect(total).toEqual({ count: s.world.memberCount(groupId) });
    let sum = 0;
    for (const type of TYPES) {
      const count = JSON.parse((await legacy(s, `/groups/${groupId}/subscribers/${type}/count`)).text) as { count: number };
      const listed = legacyItems((await legacy(s, `/groups/${groupId}/subscribers/${type}?limit=1000`)).text);
      expect(listed.length).toBe(count.count);
      expect(count.count).toBeGreaterThan(0);
      for (const item of listed) expect(item.type).toBe(type);
      expect(listed.map((item) => String(item.id))).toEqual(s.world.members(groupId, type as 'active'));
      sum += count.count;
    }
    expect(sum).toBe(s.world.memberCount(groupId));
  });

  it('pages with limit (default 100) and offset in a stable order that is not by id', async () => {
    const s = await sim({ subscribers: 600, groups: 1 });
    const groupId = s.world.groupIds()[0] ?? '';
    expect(legacyItems((await legacy(s, `/groups/${groupId}/subscribers`)).text)).toHaveLength(100);
    const paged = await listAll(s, `/groups/${groupId}/subscribers`, 37);
    expect(paged).toEqual(s.world.members(groupId));
    expect(new Set(paged).size).toBe(600);
    expect(await listAll(s, `/groups/${groupId}/subscribers`, 37)).toEqual(paged);
    const byId = [...paged].sort((a, b) => Number(BigInt(a) - BigInt(b)));
    expect(paged).not.toEqual(byId);
  });

  it('answers an unknown group with an empty array and count 0', async () => {
    const s = await sim({ subscribers: 10 });
    for (const groupId of ['424242424242', 'abc']) {
      expect((await legacy(s, `/groups/${groupId}/subscribers`)).text).toBe('[]');
      expect((await legacy(s, `/groups/${groupId}/subscribers/active`)).text).toBe('[]');
      expect(JSON.parse((await legacy(s, `/groups/${groupId}/subscribers/count`)).text)).toEqual({ count: 0 });
    }
  });

  it('rejects an unknown :type with 400 and an error body', async () => {
    const s = await sim({ subscribers: 10 });
    const groupId = s.world.groupIds()[0] ?? '';
    for (const path of [`/groups/${groupId}/subscribers/deleted`, `/groups/${groupId}/subscribers/Active/count`]) {
      const answer = await legacy(s, path);
      expect(answer.status).toBe(400);
      expect(JSON.parse(answer.text)).toEqual({ error: { code: 400, message: expect.stringContaining('type') } });
    }
  });

  it('drops deleted subscribers from lists and counts', async () => {
    const s = await sim({ subscribers: 30, groups: 1 });
    const groupId = s.world.groupIds()[0] ?? '';
    const [gone] = s.world.members(groupId);
    s.world.deleteSubscriber(gone ?? '');
    const ids = legacyItems((await legacy(s, `/groups/${groupId}/subscribers`)).text).map((item) => String(item.id));
    expect(ids).not.toContain(gone);
    expect(JSON.parse((await legacy(s, `/groups/${groupId}/subscribers/count`)).text)).toEqual({ count: 29 });
  });

  it('caps pages silently below the requested limit with pageCap', async () => {
    const s = await sim({ subscribers: 100, groups: 1, pageCap: 30 });
    const groupId = s.world.groupIds()[0] ?? '';
    expect(legacyItems((await legacy(s, `/groups/${groupId}/subscribers?limit=100`)).text)).toHaveLength(30);
    expect(legacyItems((await legacy(s, `/groups/${groupId}/subscribers?limit=10`)).text)).toHaveLength(10);
    expect(await listAll(s, `/groups/${groupId}/subscribers`, 30)).toEqual(s.world.members(groupId));
  });

  it.each([
    [false, 'keeps rows in place when one is updated between pages'],
    [true, 'with shiftingOrder, moves an updated row to the end so offset paging skips one'],
  ])('shiftingOrder %s: %s', async (shiftingOrder) => {
    const s = await sim({ subscribers: 60, groups: 1, shiftingOrder });
    const groupId = s.world.groupIds()[0] ?? '';
    const page = async (offset: number, limit = 10) =>
      legacyItems((await legacy(s, `/groups/${groupId}/subscribers?limit=${limit}&offset=${offset}`)).text).map((i) => String(i.id));
    const before = await page(0, 1000);
    expect(before).toHaveLength(60);
    const first = await page(0);
    expect(first).toEqual(before.slice(0, 10));
    s.world.updateFields(first[0] ?? '', { city: 'Elsewhere' });
    const second = await page(10);
    if (!shiftingOrder) {
      expect(second).toEqual(before.slice(10, 20));
      return;
    }
    expect(second).toEqual(before.slice(11, 21));
    expect([...first, ...second]).not.toContain(before[10]);
    expect((await page(0, 1000)).at(-1)).toBe(first[0]);
  });
});

// ---------------------------------------------------------------- "Legacy lists" (docs/upstream.md) filters

describe('"Legacy lists" (docs/upstream.md) legacy date filters', () => {
  it.each([
    ['filters[date_sent][$gt]=2024-01-01'],
    ['filters[date_updated][$ne]=2024-01-01'],
    ['filters[date_updated][$gt]=2024-02-30'],
    ['filters[date_updated][$gt]=01/02/2024'],
    ['filters[date_updated]=2024-01-01'],
  ])('rejects %s with HTTP 400 and an error body', async (query) => {
    const s = await sim({ subscribers: 5 });
    const answer = await legacy(s, `/groups/${s.world.groupIds()[0]}/subscribers?${query}`);
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.text)).toEqual({ error: { code: 400, message: expect.any(String) } });
  });

  // Local times relative to 00:00 of D = 2024-03-10 in the configured zone.
  const LOCAL = {
    a: -500, // D-1 23:59:59.5
    b: 0, // D 00:00:00 exactly
    c: 1_000, // D 00:00:01
    d: 12 * 3_600_000, // D 12:00
    e: 86_399_000, // D 23:59:59
    f: 86_400_000, // D+1 00:00
    g: 122_400_000, // D+1 10:00
  } as const;
  type Name = keyof typeof LOCAL;
  const EXPECTED: Record<'midnight' | 'whole-day', Record<string, Name[]>> = {
    midnight: { $gt: ['c', 'd', 'e', 'f', 'g'], $gte: ['b', 'c', 'd', 'e', 'f', 'g'], $lt: ['a'], $lte: ['a', 'b'] },
    'whole-day': { $gt: ['f', 'g'], $gte: ['b', 'c', 'd', 'e', 'f', 'g'], $lt: ['a'], $lte: ['a', 'b', 'c', 'd', 'e'] },
  };
  const ZONES = [
    ['UTC', 0],
    ['+14:00', 14 * 60],
    ['-12:00', -12 * 60],
  ] as const;

  describe.each(ZONES)('timezone %s', (timezone, offsetMinutes) => {
    it.each(['midnight', 'whole-day'] as const)('%s boundary: every operator and a range', async (boundary) => {
      let now = 0;
      const s = await sim({ subscribers: 0, groups: 1, timezone, boundary, clock: () => now });
      const groupId = s.world.groupIds()[0] ?? '';
      const localMidnightUtc = Date.UTC(2024, 2, 10) - offsetMinutes * 60_000;
      const names = new Map<string, Name>();
      for (const [name, delta] of Object.entries(LOCAL) as [Name, number][]) {
        now = localMidnightUtc + delta;
        names.set(s.world.createSubscriber({ groups: [groupId] }), name);
      }
      const query = async (filters: string): Promise<Name[]> => {
        const items = legacyItems((await legacy(s, `/groups/${groupId}/subscribers?limit=1000&${filters}`)).text);
        return items.map((item) => names.get(String(item.id)) ?? 'a').sort();
      };
      for (const [op, expected] of Object.entries(EXPECTED[boundary])) {
        expect(await query(`filters[date_updated][${op}]=2024-03-10`), `${op}`).toEqual(expected);
      }
      expect(await query('filters[date_created][$gte]=2024-03-10&filters[date_created][$lt]=2024-03-11')).toEqual(['b', 'c', 'd', 'e']);
      const b = [...names].find(([, name]) => name === 'b')?.[0] ?? '';
      expect(s.world.renderLegacy(b).date_updated).toBe('2024-03-10 00:00:00');
    });
  });

  it('filters date_subscribe and date_unsubscribe, never matching a null date', async () => {
    let now = Date.UTC(2024, 0, 5, 12);
    const s = await sim({ subscribers: 0, groups: 1, clock: () => now });
    const groupId = s.world.groupIds()[0] ?? '';
    const stays = s.world.createSubscriber({ groups: [groupId] });
    const leaves = s.world.createSubscriber({ groups: [groupId] });
    const pending = s.world.createSubscriber({ groups: [groupId], status: 'unconfirmed' });
    now = Date.UTC(2024, 1, 5, 12);
    s.world.unsubscribe(leaves);
    const ids = async (filters: string) =>
      legacyItems((await legacy(s, `/groups/${groupId}/subscribers?${filters}`)).text)
        .map((item) => String(item.id))
        .sort();
    expect(await ids('filters[date_unsubscribe][$gte]=2024-01-01')).toEqual([leaves]);
    expect(await ids('filters[date_subscribe][$lt]=2024-02-01')).toEqual([stays, leaves].sort());
    expect(await ids('filters[date_subscribe][$gt]=2024-02-01')).toEqual([]);
    expect(await ids('filters[date_created][$gte]=2024-01-01')).toEqual([stays, leaves, pending].sort());
  });
});

// ---------------------------------------------------------------- "Authentication" (docs/upstream.md) authentication and CORS

describe('"Authentication" (docs/upstream.md) legacy authentication', () => {
  it('answers a missing key with code 1 and a wrong key with code 302, both HTTP 401', async () => {
    const s = await sim({ subscribers: 5, apiKey: 'right' });
    const path = `/groups/${s.world.groupIds()[0]}/subscribers`;
    const missing = await legacy(s, path, {});
    expect(missing.status).toBe(401);
    expect(JSON.parse(missing.text)).toEqual({ error: { code: 1, message: 'Unauthorized' } });
    const wrong = await legacy(s, path, { 'X-Service-ApiKey': 'wrong' });
    expect(wrong.status).toBe(401);
    expect(JSON.parse(wrong.text)).toEqual({ error: { code: 302, message: 'API-Key Unauthorized' } });
    expect((await legacy(s, path, { 'x-service-apikey': 'right' })).status).toBe(200);
  });

  it('reads the key from a configurable header', async () => {
    const s = await sim({ subscribers: 5, apiKeyHeader: 'X-Brand-ApiKey', apiKey: 'k' });
    const path = `/groups/${s.world.groupIds()[0]}/subscribers/count`;
    expect((await legacy(s, path, { 'X-Brand-ApiKey': 'k' })).status).toBe(200);
    expect(JSON.parse((await legacy(s, path, { 'X-Service-ApiKey': 'k' })).text)).toEqual({ error: { code: 1, message: 'Unauthorized' } });
  });

  it('answers the CORS preflight without the key header in Access-Control-Allow-Headers', async () => {
    const s = await sim({ subscribers: 5 });
    const answer = await request(`${s.url}/api/v2/groups/${s.world.groupIds()[0]}/subscribers`, {
      method: 'OPTIONS',
      headers: {
        Origin: 'https://app.example.com',
        'Access-Control-Request-Method': 'GET',
        'Access-Control-Request-Headers': 'x-service-apikey',
      },
    });
    expect(answer.status).toBeGreaterThanOrEqual(200);
    expect(answer.status).toBeLessThan(300);
    const allowed = (answer.headers.get('access-control-allow-headers') ?? '').toLowerCase().split(/\s*,\s*/);
    expect(allowed.length).toBeGreaterThan(0);
    expect(allowed).not.toContain('x-service-apikey');
    expect(answer.headers.get('access-control-allow-origin')).toBeTruthy();
  });
});

// ---------------------------------------------------------------- "Limits" (docs/upstream.md) / Facts: rate limit

describe('"Limits" (docs/upstream.md) legacy rate limit', () => {
  it('carries X-RateLimit-* on every response and answers 429 past the limit', async () => {
    const s = await sim({ subscribers: 5, rateLimit: 5, rateLimitMode: 'sliding', rateLimitWindowMs: 60_000 });
    const groupId = s.world.groupIds()[0] ?? '';
    const remaining: string[] = [];
    for (let i = 0; i < 5; i++) {
      const answer = await legacy(s, `/groups/${groupId}/subscribers`);
      expect(answer.status).toBe(200);
      expect(answer.headers.get('x-ratelimit-limit')).toBe('5');
      expect(Number(answer.headers.get('x-ratelimit-reset'))).toBeGreaterThan(Date.now() / 1000);
      remaining.push(answer.headers.get('x-ratelimit-remaining') ?? '');
    }
    expect(remaining).toEqual(['4', '3', '2', '1', '0']);
    const refused = await legacy(s, `/groups/${groupId}/subscribers`);
    expect(refused.status).toBe(429);
    expect(JSON.parse(refused.text)).toEqual({ error: { code: 429, message: 'Too many requests' } });
    const retryAfter = Number(refused.headers.get('x-ratelimit-retry-after'));
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(refused.headers.get('retry-after')).toBe(String(retryAfter));
    // Per endpoint: the count endpoint has its own budget; and errors carry the headers too.
    const other = await legacy(s, `/groups/${groupId}/subscribers/count`, {});
    expect(other.status).toBe(401);
    expect(other.headers.get('x-ratelimit-remaining')).toBe('4');
    expect(s.maxRequestsInAnyWindow(60_000)).toBe(7);
    expect(s.maxRequestsInAnyWindow(60_000, (r) => r.status === 200)).toBe(5);
    expect(s.requests.filter((r) => r.status === 429)).toHaveLength(1);
  });

  it('frees the budget when a fixed window (scaled by timeScale) ends', async () => {
    const s = await sim({ subscribers: 5, rateLimit: 3, timeScale: 0.005 });
    expect(s.rateLimit).toMatchObject({ limit: 3, windowMs: 300, mode: 'fixed' });
    const path = `/groups/${s.world.groupIds()[0]}/subscribers/count`;
    let statuses: number[] = [];
    for (let i = 0; i < 8 && !statuses.includes(429); i++) statuses.push((await legacy(s, path)).status);
    expect(statuses).toContain(429);
    await new Promise((resolve) => setTimeout(resolve, 320));
    statuses = [(await legacy(s, path)).status];
    expect(statuses).toEqual([200]);
  });

  it('can be turned off', async () => {
    const s = await sim({ subscribers: 5, rateLimit: false });
    const answer = await legacy(s, `/groups/${s.world.groupIds()[0]}/subscribers/count`);
    expect(answer.headers.get('x-ratelimit-limit')).toBeNull();
    expect(s.rateLimit).toBeNull();
  });
});

// ---------------------------------------------------------------- fault injection

describe('fault injection', () => {
  it('fails the next N requests with a given status, then recovers', async () => {
    const s = await sim({ subscribers: 5 });
    const path = `/groups/${s.world.groupIds()[0]}/subscribers/count`;
    s.faults.failNext(2, 503);
    expect([(await legacy(s, path)).status, (await legacy(s, path)).status, (await legacy(s, path)).status]).toEqual([503, 503, 200]);
    expect(s.requests.map((r) => r.fault)).toEqual(['status', 'status', null]);
  });

  it('answers 500s, HTML pages, resets and delays on demand', async () => {
    const s = await sim({ subscribers: 5 });
    const path = `/groups/${s.world.groupIds()[0]}/subscribers`;
    s.faults.set({ errorRate: 1 });
    const failed = await legacy(s, path);
    expect(failed.status).toBe(500);
    expect(JSON.parse(failed.text)).toMatchObject({ error: { code: 500 } });
    s.faults.set({ errorRate: 0, htmlRate: 1 });
    const html = await legacy(s, path);
    expect(html.status).toBe(200);
    expect(html.headers.get('content-type')).toMatch(/text\/html/);
    expect(() => JSON.parse(html.text) as unknown).toThrow();
    s.faults.set({ htmlRate: 0, resetRate: 1 });
    await expect(legacy(s, path)).rejects.toThrow();
    s.faults.set({ resetRate: 0, hangRate: 1, hangMs: 400 });
    const hangStarted = performance.now();
    await expect(legacy(s, path)).rejects.toThrow(); // no answer, then the connection goes
    expect(performance.now() - hangStarted).toBeGreaterThanOrEqual(390);
    s.faults.clear();
    s.faults.set({ delayMs: 150 });
    const started = performance.now();
    expect((await legacy(s, path)).status).toBe(200);
    expect(performance.now() - started).toBeGreaterThanOrEqual(140);
    s.faults.clear();
    expect(s.requests.map((r) => r.fault)).toEqual(['status', 'html', 'reset', 'hang', 'delay']);
  });

  it('closes at once even while a request hangs', async () => {
    // An hour-long hang: a close that waited for it would outlast the test's timeout.
    const s = await startSimulator({ subscribers: 5, faults: { hangRate: 1, hangMs: 3_600_000 } });
    const pending = legacy(s, `/groups/${s.world.groupIds()[0]}/subscribers`).catch((error: unknown) => error);
    await waitFor('the request to hang in the simulator', () => s.requests.some((r) => r.fault === 'hang'), 10_000);
    await s.close();
    expect(await pending).toBeInstanceOf(Error);
  });
});

// ---------------------------------------------------------------- "Webhook management" (docs/upstream.md) webhook management

describe('"Webhook management" (docs/upstream.md) webhook management', () => {
  it('requires the bearer token: 401 {"message":"Unauthenticated."}', async () => {
    const s = await sim({ subscribers: 0 });
    for (const token of [null, 'wrong']) {
      const answer = await hooksApi(s, 'GET', '', undefined, token);
      expect(answer.status).toBe(401);
      expect(JSON.parse(answer.text)).toEqual({ message: 'Unauthenticated.' });
    }
  });

  it('creates (200 {data} with a secret), gets, updates and deletes (204, no body)', async () => {
    const s = await sim({ subscribers: 0 });
    const created = await hooksApi(s, 'POST', '', { name: 'mirror', url: 'https://example.com/in', events: ['subscriber.bounced'] });
    expect(created.status).toBe(200);
    const { data } = JSON.parse(created.text) as { data: Record<string, unknown> };
    expect(Object.keys(data)).toEqual(WEBHOOK_KEYS);
    expect(data).toMatchObject({
      name: 'mirror',
      url: 'https://example.com/in',
      events: ['subscriber.bounced'],
      enabled: true,
      batchable: false,
    });
    expect(data['id']).toMatch(/^\d+$/);
    expect(data['secret']).toMatch(/^\S{6,}$/);
    expect(data['created_at']).toMatch(YMD_HIS);
    const id = String(data['id']);

    const got = await hooksApi(s, 'GET', `/${id}`);
    expect(got.status).toBe(200);
    expect(JSON.parse(got.text)).toEqual({ data });

    const updated = await hooksApi(s, 'PUT', `/${id}`, { enabled: false, events: ['subscriber.bounced', 'subscriber.created'] });
    expect(updated.status).toBe(200);
    expect(JSON.parse(updated.text)).toMatchObject({
      data: { id, enabled: false, secret: data['secret'], events: ['subscriber.bounced', 'subscriber.created'] },
    });

    const deleted = await hooksApi(s, 'DELETE', `/${id}`);
    expect(deleted.status).toBe(204);
    expect(deleted.text).toBe('');
    expect((await hooksApi(s, 'DELETE', `/${id}`)).status).toBe(404);
  });

  it('answers an unknown id with 404 and no body', async () => {
    const s = await sim({ subscribers: 0 });
    for (const method of ['GET', 'PUT']) {
      const answer = await hooksApi(s, method, '/123456789', method === 'PUT' ? { name: 'x' } : undefined);
      expect(answer.status).toBe(404);
      expect(answer.text).toBe('');
    }
  });

  it.each([
    [{}, ['events', 'url']],
    [{ url: 'https://example.com/in' }, ['events']],
    [{ events: ['subscriber.created'] }, ['url']],
    [{ url: 'https://example.com/in', events: ['subscriber.renamed'] }, ['events.0']],
    [{ url: 'https://example.com/in', events: ['campaign.open'] }, ['batchable']],
    [{ url: 'https://example.com/in', events: ['campaign.click'], batchable: false }, ['batchable']],
    [{ url: 'https://example.com/in', events: ['subscriber.deleted'] }, ['batchable']],
  ])('validates %j → 422 with errors on %j', async (body, fields) => {
    const s = await sim({ subscribers: 0 });
    const answer = await hooksApi(s, 'POST', '', body);
    expect(answer.status).toBe(422);
    const parsed = JSON.parse(answer.text) as { message: string; errors: Record<string, string[]> };
    expect(parsed.message).toBe('The given data was invalid.');
    expect(Object.keys(parsed.errors).sort()).toEqual(fields);
    for (const messages of Object.values(parsed.errors)) expect(messages.every((m) => typeof m === 'string')).toBe(true);
  });

  it('accepts the batch-only kinds with batchable true, and checks the rule on update', async () => {
    const s = await sim({ subscribers: 0 });
    const ok = await hooksApi(s, 'POST', '', { url: 'https://example.com/in', events: BATCH_ONLY_KINDS, batchable: true });
    expect(ok.status).toBe(200);
    const plain = await createHook(s, { url: 'https://example.com/in', events: ['subscriber.created'] });
    const bad = await hooksApi(s, 'PUT', `/${plain.id}`, { events: ['campaign.open'] });
    expect(bad.status).toBe(422);
    expect(Object.keys((JSON.parse(bad.text) as { errors: object }).errors)).toEqual(['batchable']);
  });

  it('lists 50 per page with a consistent Laravel envelope across pages', async () => {
    const s = await sim({ subscribers: 0 });
    for (let i = 0; i < 120; i++)
      s.webhooks.register({ name: `hook ${i}`, url: `https://example.com/${i}`, events: ['subscriber.created'] });
    type Page = {
      data: { id: string }[];
      links: Record<string, string | null>;
      meta: Record<string, unknown> & { links: { url: string | null; label: string; active: boolean }[] };
    };
    const base = `${s.url}/api/webhooks`;
    const first = JSON.parse((await hooksApi(s, 'GET')).text) as Page;
    expect(Object.keys(first)).toEqual(['data', 'links', 'meta']);
    expect(first.links).toEqual({ first: `${base}?page=1`, last: `${base}?page=3`, prev: null, next: `${base}?page=2` });
    expect(first.meta).toEqual({
      current_page: 1,
      from: 1,
      last_page: 3,
      links: [
        { url: null, label: '&laquo; Previous', active: false },
        { url: `${base}?page=1`, label: '1', active: true },
        { url: `${base}?page=2`, label: '2', active: false },
        { url: `${base}?page=3`, label: '3', active: false },
        { url: `${base}?page=2`, label: 'Next &raquo;', active: false },
      ],
      path: base,
      per_page: 50,
      to: 50,
      total: 120,
    });
    const seen: string[] = [];
    let url: string | null = first.links['first'] ?? null;
    let pages = 0;
    while (url) {
      const page = JSON.parse((await request(url, { headers: { Authorization: `Bearer ${s.webhooksToken}` } })).text) as Page;
      pages++;
      expect(page.meta['current_page']).toBe(pages);
      expect(page.meta['from']).toBe((pages - 1) * 50 + 1);
      expect(page.meta['to']).toBe((pages - 1) * 50 + page.data.length);
      expect(page.links['prev']).toBe(pages === 1 ? null : `${base}?page=${pages - 1}`);
      expect(page.meta.links.filter((l) => l.active).map((l) => l.label)).toEqual([String(pages)]);
      for (const hook of page.data) expect(Object.keys(hook)).toEqual(WEBHOOK_KEYS);
      seen.push(...page.data.map((hook) => hook.id));
      url = page.links['next'] ?? null;
    }
    expect(pages).toBe(3);
    expect(seen).toEqual(s.webhooks.list().map((hook) => hook.id));
    const past = JSON.parse((await hooksApi(s, 'GET', '?page=7')).text) as Page;
    expect(past.data).toEqual([]);
    expect(past.meta).toMatchObject({ current_page: 7, from: null, to: null, total: 120 });
  });
});

// ---------------------------------------------------------------- "Webhook deliveries" (docs/upstream.md) deliveries

function kindOf(payload: Record<string, unknown>): string {
  return String(payload['event'] ?? payload['type']);
}

describe('"Webhook deliveries" (docs/upstream.md) webhook deliveries', () => {
  it('delivers every kind in its shape, signed with the webhook secret', async () => {
    const target = await receiver();
    const s = await sim({ subscribers: 20, groups: 2, largeIds: true, batchIntervalMs: 60_000 });
    const direct = await createHook(s, { url: target.url, events: ALL_EVENT_KINDS.filter((k) => !BATCH_ONLY_KINDS.includes(k)) });
    const batched = await createHook(s, { url: target.url, events: BATCH_ONLY_KINDS, batchable: true });
    const w = s.world;
    const [g1, g2] = w.groupIds();
    const id = w.createSubscriber({ groups: [g1 ?? ''], email: 'shape@example.com' });
    w.updateFields(id, { company: 'Initech' });
    w.unsubscribe(id);
    w.activate(id);
    w.bounce(id);
    w.markJunk(id);
    w.activate(id);
    w.addToGroup(id, g2 ?? '');
    w.removeFromGroup(id, g2 ?? '');
    w.triggerAutomation(id);
    w.completeAutomation(id);
    const campaign = w.sendCampaign({ groupIds: [g1 ?? ''] });
    w.open(id, campaign.id);
    w.click(id, { campaignId: campaign.id, url: 'https://example.com/buy' });
    w.deleteSubscriber(id);
    await s.deliveries.settle(10_000);

    const seen = new Set<string>();
    for (const { headers, body } of target.received) {
      expect(headers['content-type']).toMatch(/^application\/json/);
      const payload = JSON.parse(body) as Record<string, unknown>;
      const secret = 'events' in payload ? batched.secret : direct.secret;
      expect(headers['signature']).toBe(hmac(body, secret));
      if ('events' in payload) {
        const items = payload['events'] as Record<string, unknown>[];
        expect(payload['total']).toBe(items.length);
        for (const item of items) {
          expect(item).not.toHaveProperty('account_id');
          seen.add(kindOf(item));
          const keys = {
            'campaign.open': ['type', 'subscriber', 'campaign'],
            'campaign.click': ['type', 'subscriber', 'campaign', 'link_url'],
            'subscriber.deleted': ['type', 'subscriber'],
          }[kindOf(item)];
          expect(Object.keys(item)).toEqual(keys);
        }
        continue;
      }
      const kind = kindOf(payload) as EventKind;
      seen.add(kind);
      expect(payload['account_id']).toBe(s.accountId);
      if (kind === 'campaign.sent') {
        expect(Object.keys(payload)).toEqual(['id', 'name', 'total_recipients', 'preview_url', 'date', 'event', 'account_id']);
        expect(payload['date']).toMatch(ISO_MICROS);
      } else if (kind === 'subscriber.added_to_group' || kind === 'subscriber.removed_from_group') {
        expect(Object.keys(payload)).toEqual(['type', 'subscriber', 'group', 'account_id']);
        const group = payload['group'] as { id: string; name: string };
        expect(group).toEqual(w.group(group.id));
      } else if (kind.startsWith('subscriber.automation')) {
        expect(Object.keys(payload)).toEqual(['type', 'subscriber', 'automation', 'account_id']);
      } else {
        expect(Object.keys(payload)).toEqual([...SUBSCRIBER_KEYS, 'event', 'account_id']);
        expect(payload['id']).toBe(id);
        for (const key of ['created_at', 'updated_at']) expect(payload[key]).toMatch(ISO_MICROS);
      }
    }
    expect([...seen].sort()).toEqual([...ALL_EVENT_KINDS].sort());
  });

  it('sends the subscriber as it is after the change, with ids as strings', async () => {
    const target = await receiver();
    const s = await sim({ subscribers: 5, groups: 1, largeIds: true });
    const hook = await createHook(s, { url: target.url, events: ['subscriber.updated'] });
    const id = s.world.members(s.world.groupIds()[0] ?? '')[0] ?? '';
    s.world.updateFields(id, { city: 'Vilnius' });
    const expected = s.world.renderWebhook(id);
    await s.deliveries.idle(5_000);
    expect(target.received).toHaveLength(1);
    const body = target.received[0]?.body ?? '';
    expect(target.received[0]?.headers['signature']).toBe(hmac(body, hook.secret));
    const payload = JSON.parse(body) as Record<string, unknown>;
    expect(payload).toEqual({ ...expected, event: 'subscriber.updated', account_id: s.accountId });
    expect(payload['id']).toBe(id);
    expect(expected.fields.city).toBe('Vilnius');
    expect(Object.keys(expected.fields)).toEqual(['name', 'last_name', 'company', 'country', 'city', 'phone', 'state', 'zip']);
  });

  it('batches batchable webhooks into {events, total} once per interval', async () => {
    const target = await receiver();
    const s = await sim({ subscribers: 5, groups: 1, batchIntervalMs: 300 });
    const hook = await createHook(s, { url: target.url, events: ['campaign.open', 'campaign.click'], batchable: true });
    const id = s.world.members(s.world.groupIds()[0] ?? '')[0] ?? '';
    const opensBefore = s.world.subscriber(id)?.opensCount ?? 0;
    s.world.open(id);
    s.world.open(id);
    s.world.click(id, { url: 'https://example.com/a' });
    // Within 5 s, far under the default interval of a minute: the 300 ms interval sent it.
    await target.waitFor(1, 5_000);
    const body = target.received[0]?.body ?? '';
    expect(target.received[0]?.headers['signature']).toBe(hmac(body, hook.secret));
    const payload = JSON.parse(body) as { events: Record<string, unknown>[]; total: number };
    expect(payload.total).toBe(3);
    expect(payload.events.map((e) => e['type'])).toEqual(['campaign.open', 'campaign.open', 'campaign.click']);
    expect(payload.events.map((e) => (e['subscriber'] as { opens_count: number }).opens_count)).toEqual([
      opensBefore + 1,
      opensBefore + 2,
      opensBefore + 2,
    ]);
    expect(payload.events[2]?.['link_url']).toBe('https://example.com/a');
    await s.deliveries.idle(2_000);
    expect(target.received).toHaveLength(1);
  });

  it('splits a large batch into several bodies and flushes on demand', async () => {
    const target = await receiver();
    const s = await sim({ subscribers: 5, groups: 1, batchMaxEvents: 2 });
    await createHook(s, { url: target.url, events: ['campaign.open'], batchable: true });
    const id = s.world.members(s.world.groupIds()[0] ?? '')[0] ?? '';
    for (let i = 0; i < 5; i++) s.world.open(id);
    expect(s.deliveries.pending().batchedEvents).toBe(5);
    await s.deliveries.settle(5_000);
    const totals = target.received.map((r) => (JSON.parse(r.body) as { total: number }).total).sort();
    expect(totals).toEqual([1, 2, 2]);
  });

  it('retries a failing receiver with the identical body after 10, 100 and 1000 s (scaled)', async () => {
    const target = await receiver((n) => (n < 3 ? 500 : 200));
    const s = await sim({ subscribers: 5, groups: 1, timeScale: 0.002 });
    const hook = await createHook(s, { url: target.url, events: ['subscriber.bounced'] });
    s.world.bounce(s.world.members(s.world.groupIds()[0] ?? '', 'active')[0] ?? '');
    await s.deliveries.idle(10_000);
    const attempts = s.deliveries.attempts;
    expect(attempts.map((a) => [a.attempt, a.status, a.ok])).toEqual([
      [1, 500, false],
      [2, 500, false],
      [3, 500, false],
      [4, 200, true],
    ]);
    expect(new Set(attempts.map((a) => a.deliveryId)).size).toBe(1);
    expect(new Set(target.received.map((r) => r.body)).size).toBe(1);
    expect(new Set(target.received.map((r) => r.headers['signature'])).size).toBe(1);
    expect(target.received[0]?.headers['signature']).toBe(hmac(target.received[0]?.body ?? '', hook.secret));
    const expected = [20, 200, 2000];
    expect(attempts.slice(0, 3).map((a) => a.nextRetryInMs)).toEqual(expected);
    for (let i = 0; i < 3; i++) {
      const gap = (attempts[i + 1]?.startedAt ?? 0) - (attempts[i]?.finishedAt ?? 0);
      // Only a lower bound: a loaded machine fires timers late, never early.
      expect(gap, `gap before attempt ${i + 2}`).toBeGreaterThanOrEqual((expected[i] ?? 0) - 2);
    }
  });

  it('gives up after the third retry', async () => {
    const target = await receiver(() => 503);
    const s = await sim({ subscribers: 5, groups: 1, timeScale: 0.0005 });
    await createHook(s, { url: target.url, events: ['subscriber.unsubscribed'] });
    s.world.unsubscribe(s.world.members(s.world.groupIds()[0] ?? '', 'active')[0] ?? '');
    await s.deliveries.idle(10_000);
    expect(s.deliveries.attempts.map((a) => [a.attempt, a.nextRetryInMs, a.gaveUp])).toEqual([
      [1, 5, false],
      [2, 50, false],
      [3, 500, false],
      [4, null, true],
    ]);
    expect(target.received).toHaveLength(4);
  });

  it('fails an attempt that gets no answer within the timeout and retries it', async () => {
    const target = await receiver((n) => (n === 0 ? 'hang' : 200));
    const s = await sim({ subscribers: 5, groups: 1, timeScale: 0.001, deliveryTimeoutMs: 200 });
    await createHook(s, { url: target.url, events: ['subscriber.updated'] });
    s.world.updateFields(s.world.members(s.world.groupIds()[0] ?? '')[0] ?? '', { zip: '1' });
    await s.deliveries.idle(10_000);
    const [first, second] = s.deliveries.attempts;
    expect(first).toMatchObject({ attempt: 1, status: null, ok: false, error: 'timeout' });
    // The receiver never answers the first attempt: only the 200 ms delivery timeout can end it.
    expect(first?.latencyMs).toBeGreaterThanOrEqual(190);
    expect(second).toMatchObject({ attempt: 2, status: 200, ok: true });
  });

  it('sends nothing to disabled webhooks and stops retrying for deleted ones', async () => {
    const target = await receiver(() => 500);
    // First retry 1 s out: ample time to delete the webhook before it fires.
    const s = await sim({ subscribers: 5, groups: 1, timeScale: 0.1 });
    const hook = await createHook(s, { url: target.url, events: ['subscriber.updated'], enabled: false });
    const id = s.world.members(s.world.groupIds()[0] ?? '')[0] ?? '';
    s.world.updateFields(id, { zip: '1' });
    await s.deliveries.idle(2_000);
    expect(target.received).toHaveLength(0);
    await hooksApi(s, 'PUT', `/${hook.id}`, { enabled: true });
    s.world.updateFields(id, { zip: '2' });
    await s.deliveries.waitFor((a) => a.attempt === 1, 5_000);
    expect(s.deliveries.pending().retrying).toBe(1);
    expect((await hooksApi(s, 'DELETE', `/${hook.id}`)).status).toBe(204);
    await s.deliveries.idle(1_000);
    expect(s.deliveries.attempts).toHaveLength(1);
  });
});

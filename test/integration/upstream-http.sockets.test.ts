/**
 * The upstream client against real sockets: small node:http stub servers that misbehave on purpose.
 * Its logic with a fake fetch is the unit test upstream-http.test.ts.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import {
  UpstreamAuthError,
  UpstreamBodyError,
  UpstreamHttpError,
  UpstreamNetworkError,
  UpstreamRateLimitError,
  UpstreamTimeoutError,
} from '../../src/upstream/errors.js';
import { createHttpClient } from '../../src/upstream/http.js';
import type { Release } from '../../src/upstream/page-gate.js';
import { createLegacyClient, overlapFor, type LegacyPage } from '../../src/upstream/legacy/client.js';
import { createLimiter, type Limiter } from '../../src/ratelimit/limiter.js';
import { deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';

const API_KEY = 'int-test-key-5e4d3c2b1a';
const HEADER = 'X-Service-ApiKey';

interface Hit {
  at: number;
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
}

type Handler = (req: IncomingMessage, res: ServerResponse, hit: number) => void;

interface Stub {
  url: string;
  hits: Hit[];
  close(): Promise<void>;
}

const stubs: Stub[] = [];
const limiters: Limiter[] = [];
const prefixes: string[] = [];

async function stub(handler: Handler): Promise<Stub> {
  const hits: Hit[] = [];
  const server = createServer((req, res) => {
    hits.push({ at: performance.now(), method: req.method ?? '', url: req.url ?? '', headers: req.headers });
    handler(req, res, hits.length);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const created: Stub = {
    url: `http://127.0.0.1:${port}`,
    hits,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  stubs.push(created);
  return created;
}

function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(typeof body === 'string' ? body : JSON.stringify(body));
}

const fastRetry = { retries: 4, minDelayMs: 5, maxDelayMs: 20, jitter: true };

function legacy(url: string, extra: Partial<Parameters<typeof createLegacyClient>[0]> = {}) {
  return createLegacyClient({ baseUrl: url, apiKey: API_KEY, apiKeyHeader: HEADER, http: { retry: fastRetry, timeoutMs: 2000 }, ...extra });
}

afterEach(async () => {
  await Promise.all(stubs.splice(0).map((s) => s.close()));
  await Promise.all(limiters.splice(0).map((l) => l.close()));
});

afterAll(async () => {
  for (const prefix of prefixes) {
    await deletePrefix(`b_${prefix}`);
    await deletePrefix(prefix);
  }
});

describe('retries over real sockets', () => {
  it('a burst of 500s is retried and succeeds', async () => {
    const server = await stub((_req, res, hit) => (hit <= 3 ? json(res, 500, { message: 'Server Error' }) : json(res, 200, { count: 42 })));
    await expect(legacy(server.url).count('1')).resolves.toBe(42);
    expect(server.hits).toHaveLength(4);
  });

  it('connection resets are retried and succeed', async () => {
    const server = await stub((req, res, hit) => {
      if (hit <= 2) req.socket.destroy();
      else json(res, 200, { count: 7 });
    });
    const client = legacy(server.url);
    await expect(client.count('1')).resolves.toBe(7);
    expect(server.hits).toHaveLength(3);
    expect(client.stats()).toMatchObject({ requests: 3, retries: 2, failures: 0 });
  });

  it('a connection that keeps failing ends in UpstreamNetworkError', async () => {
    const server = await stub((req) => req.socket.destroy());
    const error = await legacy(server.url, { http: { retry: { ...fastRetry, retries: 1 } } })
      .count('1')
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UpstreamNetworkError);
    expect(server.hits).toHaveLength(2);
  });

  it('a slow answer times out and is retried', async () => {
    const server = await stub((_req, res, hit) => {
      if (hit === 1) setTimeout(() => json(res, 200, { count: 1 }), 1000);
      else json(res, 200, { count: 2 });
    });
    await expect(legacy(server.url, { http: { retry: fastRetry, timeoutMs: 150 } }).count('1')).resolves.toBe(2);
    expect(server.hits).toHaveLength(2);
  });

  it('a 429 is waited out for at least X-RateLimit-Retry-After before the retry arrives', async () => {
    const server = await stub((_req, res, hit) =>
      hit === 1
        ? json(
            res,
            429,
            { message: 'Too Many Attempts.' },
            { 'X-RateLimit-Limit': '60', 'X-RateLimit-Remaining': '0', 'X-RateLimit-Retry-After': '1' },
          )
        : json(res, 200, { count: 5 }),
    );
    await expect(legacy(server.url).count('1')).resolves.toBe(5);
    expect(server.hits).toHaveLength(2);
    const [first, second] = server.hits as [Hit, Hit];
    expect(second.at).toBeGreaterThanOrEqual(first.at + 1000 - 15);
  });

  it('a 429 honours Retry-After too, and gives up with UpstreamRateLimitError when retries run out', async () => {
    const server = await stub((_req, res) => json(res, 429, {}, { 'Retry-After': '0' }));
    const error = await legacy(server.url, { http: { retry: { ...fastRetry, retries: 2 } } })
      .count('1')
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UpstreamRateLimitError);
    expect(server.hits).toHaveLength(3);
  });

  it('a 429 pauses every replica sharing the Redis limiter', async () => {
    const prefix = uniquePrefix('http-429');
    prefixes.push(prefix);
    const shared = () => {
      const l = createLimiter({ redisUrl: redisUrl(), prefix, perMinute: 600, windowMs: 60_000 });
      limiters.push(l);
      return l;
    };
    let limited = false;
    const server = await stub((req, res) => {
      if (req.url?.includes('/groups/1/') && !limited) {
        limited = true;
        json(res, 429, {}, { 'X-RateLimit-Retry-After': '1' });
      } else json(res, 200, { count: 1 });
    });
    const limiterA = shared();
    const limiterB = shared();
    const replicaA = legacy(server.url, { limiter: limiterA });
    const replicaB = legacy(server.url, { limiter: limiterB });
    await replicaB.count('2'); // B is warm
    const a = replicaA.count('1');
    // Wait until A has recorded the pause in Redis (it is seen through B's limiter).
    const deadline = performance.now() + 3000;
    while ((await limiterB.pausedForMs()) === 0 && performance.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    expect(await limiterB.pausedForMs()).toBeGreaterThan(0);
    const limitedAt = (server.hits.find((h) => h.url.includes('/groups/1/')) as Hit).at;
    await replicaB.count('3');
    await a;
    const bHit = server.hits.find((h) => h.url.includes('/groups/3/')) as Hit;
    expect(bHit.at).toBeGreaterThanOrEqual(limitedAt + 1000 - 15);
  });
});

describe('a body waiting for room at the page gate', () => {
  // Production's limiter, with a job expiration far shorter than the wait below: the slot must end
  // with the headers, before the body waits.
  function limiterExpiringAfter(ms: number): Limiter {
    const prefix = uniquePrefix('http-gate-wait');
    prefixes.push(prefix);
    const l = createLimiter({ redisUrl: redisUrl(), prefix, perMinute: 6000, windowMs: 60_000, jobExpirationMs: ms });
    limiters.push(l);
    return l;
  }

  const waitFor = (ms: number) => async (): Promise<Release> => {
    await new Promise((resolve) => setTimeout(resolve, ms));
    return () => {};
  };

  it.each([
    ['without a limiter: the wait is not timed', false],
    ["with production's limiter: the wait is not inside the budget slot", true],
  ])('is read once, however long it waits (%s)', async (_name, limited) => {
    const server = await stub((_req, res) => json(res, 200, [{ id: 1 }]));
    const http = createHttpClient({
      baseUrl: server.url,
      label: 'legacy API',
      retry: fastRetry,
      timeoutMs: 150,
      ...(limited ? { gate: limiterExpiringAfter(100) } : {}),
    });
    const response = await http.request({ path: '/x', beforeBody: waitFor(600) });
    expect(response.body).toEqual([{ id: 1 }]);
    expect(server.hits).toHaveLength(1);
    expect(http.stats()).toMatchObject({ requests: 1, retries: 0, failures: 0 });
  });

  it('still times out when the service stalls its body once the body has room', async () => {
    const server = await stub((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('[{"id":');
    });
    const http = createHttpClient({ baseUrl: server.url, label: 'legacy API', retry: { ...fastRetry, retries: 1 }, timeoutMs: 150 });
    const error = await http.request({ path: '/x', beforeBody: waitFor(20) }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UpstreamTimeoutError);
    expect(server.hits).toHaveLength(2);
  });
});

describe('failures that must not be retried', () => {
  it('401 with code 302 fails after exactly one request, naming code 302 and not the key', async () => {
    const server = await stub((_req, res) => json(res, 401, { error: { code: 302, message: 'API-Key Unauthorized' } }));
    const error = (await legacy(server.url)
      .listGroupSubscribers('9', { type: 'active', limit: 10, offset: 0 })
      .catch((e: unknown) => e)) as Error;
    expect(error).toBeInstanceOf(UpstreamAuthError);
    expect(error.message).toContain('legacy API rejected the API key (code 302: API-Key Unauthorized');
    expect(error.message).not.toContain(API_KEY);
    expect(JSON.stringify({ ...error, message: error.message, stack: error.stack })).not.toContain(API_KEY);
    expect(server.hits).toHaveLength(1);
  });

  it('200 with code 1 is an auth error too (the body is authoritative)', async () => {
    const server = await stub((_req, res) => json(res, 200, { error: { code: 1, message: 'Unauthorized' } }));
    await expect(legacy(server.url).count('1')).rejects.toBeInstanceOf(UpstreamAuthError);
    expect(server.hits).toHaveLength(1);
  });

  it('a non-JSON body is an UpstreamBodyError', async () => {
    const server = await stub((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end('<html><body>We are down for maintenance</body></html>');
    });
    const error = await legacy(server.url)
      .listGroupSubscribers('1', { limit: 10, offset: 0 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UpstreamBodyError);
    expect(server.hits).toHaveLength(1);
  });

  it('404 fails at once', async () => {
    const server = await stub((_req, res) => json(res, 404, { message: 'Not Found' }));
    const error = await legacy(server.url)
      .count('1')
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UpstreamHttpError);
    expect((error as UpstreamHttpError).status).toBe(404);
    expect(server.hits).toHaveLength(1);
  });

  it('a redirect is not followed, so the key never reaches another host', async () => {
    const elsewhere = await stub((_req, res) => json(res, 200, { count: 1 }));
    const server = await stub((_req, res) => {
      res.writeHead(302, { location: `${elsewhere.url}/api/v2/groups/1/subscribers/count` });
      res.end();
    });
    await expect(legacy(server.url).count('1')).rejects.toBeInstanceOf(UpstreamHttpError);
    expect(elsewhere.hits).toHaveLength(0);
  });
});

describe('what goes over the wire', () => {
  it('sends the key in the configured header and JSON content type; ids arrive exactly', async () => {
    const server = await stub((req, res) => {
      if (req.headers['x-service-apikey'] !== API_KEY) return json(res, 401, { error: { code: 1, message: 'Unauthorized' } });
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        '[{"id":1261159647788771324,"email":"mail@whatever.com","country_id":49,"fields":[{"key":"name","value":"","type":"TEXT"}]}]',
      );
    });
    const rows = await legacy(server.url).listGroupSubscribers('1261159647788771000', {
      type: 'active',
      limit: 1000,
      offset: 0,
      filters: [{ key: 'date_updated', op: '$gt', date: '2024-05-01' }],
    });
    expect(rows).toEqual([
      { id: '1261159647788771324', email: 'mail@whatever.com', country_id: 49, fields: [{ key: 'name', value: '', type: 'TEXT' }] },
    ]);
    const hit = server.hits[0] as Hit;
    expect(hit.headers['content-type']).toBe('application/json');
    const url = new URL(hit.url, 'http://x');
    expect(url.pathname).toBe('/api/v2/groups/1261159647788771000/subscribers/active');
    expect(url.searchParams.get('filters[date_updated][$gt]')).toBe('2024-05-01');
  });

  it('uses a custom key header when configured', async () => {
    const server = await stub((req, res) => json(res, req.headers['x-other-key'] === API_KEY ? 200 : 401, { count: 1 }));
    await expect(legacy(server.url, { apiKeyHeader: 'X-Other-Key' }).count('1')).resolves.toBe(1);
  });
});

describe('page iterator against a service that caps pages', () => {
  const TOTAL = 173;
  const CAP = 40;

  async function cappedService(): Promise<Stub> {
    return stub((req, res) => {
      const url = new URL(req.url ?? '/', 'http://x');
      const limit = Math.min(Number(url.searchParams.get('limit') ?? 100), CAP);
      const offset = Number(url.searchParams.get('offset') ?? 0);
      const rows = [];
      for (let i = offset; i < Math.min(TOTAL, offset + limit); i++) rows.push(`{"id":${9007199254740993n + BigInt(i)}}`);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(`[${rows.join(',')}]`);
    });
  }

  async function collect(pages: AsyncGenerator<LegacyPage>): Promise<LegacyPage[]> {
    const out: LegacyPage[] = [];
    for await (const page of pages) out.push(page);
    return out;
  }

  it('a full pass reads every row and learns the cap', async () => {
    const server = await cappedService();
    const learned: number[] = [];
    const pages = await collect(
      legacy(server.url).pages('5', {
        type: 'active',
        limit: 500,
        mode: 'full',
        knownLength: TOTAL,
        onEffectiveLimit: (n) => learned.push(n),
      }),
    );
    const ids = pages.flatMap((p) => p.rows.map((r) => r.id));
    expect(ids).toHaveLength(TOTAL);
    expect(new Set(ids).size).toBe(TOTAL);
    expect(ids[0]).toBe('9007199254740993');
    expect(learned).toEqual([CAP]);
    // Overlapping pages (each re-reads overlapFor(CAP) rows) cost a few more requests than the bare minimum;
    // the last page, shorter than the cap, ends the list without another request.
    expect(server.hits.length).toBeGreaterThanOrEqual(Math.ceil(TOTAL / CAP));
    expect(server.hits.length).toBeLessThanOrEqual(Math.ceil((TOTAL - CAP) / (CAP - overlapFor(CAP))) + 2);
  });

  it('an incremental pass with the learned cap stops at the first short page', async () => {
    const server = await cappedService();
    const pages = await collect(legacy(server.url).pages('5', { limit: 500, mode: 'incremental', effectiveLimit: CAP }));
    expect(pages.flatMap((p) => p.rows)).toHaveLength(TOTAL);
    expect(server.hits).toHaveLength(Math.ceil(TOTAL / CAP));
  });
});

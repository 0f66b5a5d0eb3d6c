import { describe, expect, it } from 'vitest';
import {
  assertSubscriberType,
  buildFilters,
  createLegacyClient,
  FILTER_KEYS,
  FILTER_OPS,
  normalizeGroupId,
  type DateFilter,
  type LegacyPage,
} from '../../src/upstream/legacy.js';
import { isRealDate } from '../../src/time.js';
import { UpstreamAuthError, UpstreamBodyError } from '../../src/upstream/http.js';

const API_KEY = 'legacy-key-0a9b8c7d6e';

describe('buildFilters', () => {
  it.each(FILTER_KEYS.flatMap((key) => FILTER_OPS.map((op) => [key, op] as const)))('accepts %s %s', (key, op) => {
    expect(buildFilters([{ key, op, date: '2024-05-01' }])).toEqual({ [`filters[${key}][${op}]`]: '2024-05-01' });
  });

  it('combines several filters into a range', () => {
    expect(
      buildFilters([
        { key: 'date_created', op: '$gte', date: '2024-01-01' },
        { key: 'date_created', op: '$lt', date: '2024-02-29' },
        { key: 'date_updated', op: '$gt', date: '2024-05-01' },
      ]),
    ).toEqual({
      'filters[date_created][$gte]': '2024-01-01',
      'filters[date_created][$lt]': '2024-02-29',
      'filters[date_updated][$gt]': '2024-05-01',
    });
    expect(buildFilters([])).toEqual({});
  });

  const bad = (filter: Record<string, unknown>) => () => buildFilters([filter as unknown as DateFilter]);

  it.each(['date_deleted', 'DATE_UPDATED', 'updated_at', '', 42])('rejects key %j, naming it', (key) => {
    expect(bad({ key, op: '$gt', date: '2024-05-01' })).toThrow(TypeError);
    expect(bad({ key, op: '$gt', date: '2024-05-01' })).toThrow(/filter key/);
    expect(bad({ key, op: '$gt', date: '2024-05-01' })).toThrow(JSON.stringify(key));
  });

  it.each(['$eq', 'gt', '$GT', '$ne', '>', ''])('rejects operator %j, naming it', (op) => {
    expect(bad({ key: 'date_updated', op, date: '2024-05-01' })).toThrow(/filter operator/);
    expect(bad({ key: 'date_updated', op, date: '2024-05-01' })).toThrow(JSON.stringify(op));
  });

  it.each(['2024-02-30', '2023-02-29', '2024-13-01', '2024-00-10', '2024-04-31', '2024-5-1', '2024-05-01T00:00:00', '01-05-2024', '', 'today'])(
    'rejects date %j, naming it',
    (date) => {
      expect(bad({ key: 'date_updated', op: '$gt', date })).toThrow(/filter date/);
      expect(bad({ key: 'date_updated', op: '$gt', date })).toThrow(JSON.stringify(date));
    },
  );

  it('rejects a non-string date, a non-object filter and a repeated key/operator', () => {
    expect(bad({ key: 'date_updated', op: '$gt', date: new Date() })).toThrow(/filter date/);
    expect(() => buildFilters([null as unknown as DateFilter])).toThrow(TypeError);
    expect(() =>
      buildFilters([
        { key: 'date_updated', op: '$gt', date: '2024-05-01' },
        { key: 'date_updated', op: '$gt', date: '2024-05-02' },
      ]),
    ).toThrow(/given twice/);
  });

  it('knows real days, leap years included', () => {
    expect(isRealDate('2024-02-29')).toBe(true);
    expect(isRealDate('2000-02-29')).toBe(true);
    expect(isRealDate('1900-02-29')).toBe(false);
    expect(isRealDate('2024-12-31')).toBe(true);
    expect(isRealDate('2024-06-31')).toBe(false);
  });
});

describe('argument checks', () => {
  it('accepts numeric group ids as text and rejects others', () => {
    expect(normalizeGroupId(42)).toBe('42');
    expect(normalizeGroupId('1261159647788771324')).toBe('1261159647788771324');
    for (const bad of ['abc', '', '-1', '1.5', ' 1', -3, 1.5, Number.MAX_SAFE_INTEGER + 2]) {
      expect(() => normalizeGroupId(bad)).toThrow(TypeError);
    }
  });

  it('accepts the five types and nothing else', () => {
    for (const type of ['active', 'unsubscribed', 'bounced', 'junk', 'unconfirmed']) expect(() => assertSubscriberType(type)).not.toThrow();
    for (const type of ['Active', 'all', '', 'deleted']) expect(() => assertSubscriberType(type)).toThrow(/subscriber type/);
  });
});

// ---------------------------------------------------------------------------------------------
// The client against an in-memory fake service (injected fetch, no network)
// ---------------------------------------------------------------------------------------------

interface FakeService {
  fetch: typeof fetch;
  urls: URL[];
}

/** A legacy list with `total` rows whose page size is silently capped at `cap`. */
function fakeService(total: number, options: { cap?: number; body?: (url: URL) => { status: number; body: string } | undefined } = {}): FakeService {
  const urls: URL[] = [];
  const fetchImpl = (async (input: string | URL | Request) => {
    const url = new URL(String(input));
    urls.push(url);
    const custom = options.body?.(url);
    if (custom) return new Response(custom.body, { status: custom.status });
    if (url.pathname.endsWith('/count')) return new Response(JSON.stringify({ count: total }), { status: 200 });
    const limit = Math.min(Number(url.searchParams.get('limit') ?? 100), options.cap ?? Infinity);
    const offset = Number(url.searchParams.get('offset') ?? 0);
    const ids = [];
    for (let i = offset; i < Math.min(total, offset + limit); i++) ids.push(`{"id":${1261159647788771324n + BigInt(i)},"email":"s${i}@x.test"}`);
    return new Response(`[${ids.join(',')}]`, { status: 200 });
  }) as typeof fetch;
  return { fetch: fetchImpl, urls };
}

function legacy(service: FakeService) {
  return createLegacyClient({
    baseUrl: 'http://legacy.test',
    apiKey: API_KEY,
    http: { fetch: service.fetch, retry: { retries: 2, minDelayMs: 1, maxDelayMs: 2, jitter: false } },
  });
}

async function collect(pages: AsyncGenerator<LegacyPage>): Promise<LegacyPage[]> {
  const out: LegacyPage[] = [];
  for await (const page of pages) out.push(page);
  return out;
}

describe('legacy client requests', () => {
  it('lists a type with limit, offset and filters, keeping big ids exact', async () => {
    const service = fakeService(3);
    const rows = await legacy(service).listGroupSubscribers('77', {
      type: 'unsubscribed',
      limit: 2,
      offset: 1,
      filters: [{ key: 'date_updated', op: '$gt', date: '2024-05-01' }],
    });
    expect(rows.map((r) => r.id)).toEqual(['1261159647788771325', '1261159647788771326']);
    const url = service.urls[0] as URL;
    expect(url.pathname).toBe('/api/v2/groups/77/subscribers/unsubscribed');
    expect([...url.searchParams]).toEqual([
      ['limit', '2'],
      ['offset', '1'],
      ['filters[date_updated][$gt]', '2024-05-01'],
    ]);
  });

  it('lists all types without a type segment', async () => {
    const service = fakeService(1);
    await legacy(service).listGroupSubscribers(5, { limit: 10, offset: 0 });
    expect(service.urls[0]?.pathname).toBe('/api/v2/groups/5/subscribers');
  });

  it('counts, with and without a type', async () => {
    const service = fakeService(1234);
    const client = legacy(service);
    await expect(client.count('9')).resolves.toBe(1234);
    await expect(client.count('9', 'bounced')).resolves.toBe(1234);
    expect(service.urls.map((u) => u.pathname)).toEqual(['/api/v2/groups/9/subscribers/count', '/api/v2/groups/9/subscribers/bounced/count']);
  });

  it.each([
    ['an object', '{"data":[]}'],
    ['a string', '"hello"'],
    ['items that are not objects', '[1,2]'],
    ['an item without id', '[{"email":"a@b.c"}]'],
    ['an item with a bad id', '[{"id":"abc"}]'],
    ['an item with a fractional id', '[{"id":1.5}]'],
  ])('treats %s as an UpstreamBodyError, never data', async (_name, body) => {
    const service = fakeService(0, { body: () => ({ status: 200, body }) });
    await expect(legacy(service).listGroupSubscribers('1', { limit: 10, offset: 0 })).rejects.toBeInstanceOf(UpstreamBodyError);
    expect(service.urls).toHaveLength(1);
  });

  it.each(['{"total":3}', '{"count":"many"}', '{"count":-1}', '[]'])('rejects count body %s', async (body) => {
    const service = fakeService(0, { body: () => ({ status: 200, body }) });
    await expect(legacy(service).count('1')).rejects.toBeInstanceOf(UpstreamBodyError);
  });

  it('fails at once on an auth error body, naming the code and not the key', async () => {
    const service = fakeService(0, { body: () => ({ status: 200, body: '{"error":{"code":302,"message":"API-Key Unauthorized"}}' }) });
    const error = (await legacy(service).count('1').catch((e: unknown) => e)) as Error;
    expect(error).toBeInstanceOf(UpstreamAuthError);
    expect(error.message).toContain('legacy API rejected the API key (code 302: API-Key Unauthorized');
    expect(error.message).not.toContain(API_KEY);
    expect(service.urls).toHaveLength(1);
  });

  it('rejects bad arguments before any request', async () => {
    const service = fakeService(0);
    const client = legacy(service);
    await expect(client.listGroupSubscribers('x1', { limit: 1, offset: 0 })).rejects.toThrow(/group id/);
    await expect(client.listGroupSubscribers('1', { type: 'deleted' as never, limit: 1, offset: 0 })).rejects.toThrow(/subscriber type/);
    await expect(client.listGroupSubscribers('1', { limit: 0, offset: 0 })).rejects.toThrow(/limit/);
    await expect(client.listGroupSubscribers('1', { limit: 1, offset: -1 })).rejects.toThrow(/offset/);
    await expect(
      client.listGroupSubscribers('1', { limit: 1, offset: 0, filters: [{ key: 'date_updated', op: '$gt', date: '2024-02-30' }] }),
    ).rejects.toThrow(/filter date/);
    await expect(collect(client.pages('1', { limit: 10, mode: 'sometimes' as never }))).rejects.toThrow(/mode/);
    expect(service.urls).toHaveLength(0);
  });
});

describe('legacy page iterator', () => {
  it('full pass over an uncapped service reads until an empty page', async () => {
    const service = fakeService(25);
    const pages = await collect(legacy(service).pages('1', { limit: 10, mode: 'full' }));
    expect(pages.map((p) => [p.offset, p.rows.length, p.limit])).toEqual([
      [0, 10, 10],
      [10, 10, 10],
      [20, 5, 10],
    ]);
    expect(service.urls.map((u) => u.searchParams.get('offset'))).toEqual(['0', '10', '20', '25']);
  });

  it('full pass over a capped service learns the cap once and reads everything', async () => {
    const service = fakeService(237, { cap: 50 });
    const learned: number[] = [];
    const client = legacy(service);
    const pages = await collect(client.pages('1', { limit: 1000, mode: 'full', onEffectiveLimit: (n) => learned.push(n) }));
    const ids = pages.flatMap((p) => p.rows.map((r) => String(r.id)));
    expect(ids).toHaveLength(237);
    expect(new Set(ids).size).toBe(237);
    expect(pages.map((p) => p.offset)).toEqual([0, 50, 100, 150, 200]);
    expect(pages.map((p) => p.limit)).toEqual([1000, 50, 50, 50, 50]);
    expect(learned).toEqual([50]);
    expect(client.effectiveLimit()).toBe(50);
    // Every request still asks for the configured limit.
    expect(service.urls.every((u) => u.searchParams.get('limit') === '1000')).toBe(true);
  });

  it('incremental pass stops at the first page shorter than the effective limit', async () => {
    const service = fakeService(237, { cap: 50 });
    const pages = await collect(legacy(service).pages('1', { limit: 1000, mode: 'incremental', effectiveLimit: 50 }));
    expect(pages.flatMap((p) => p.rows)).toHaveLength(237);
    // 4 full pages + the short last one; no extra request for an empty page.
    expect(service.urls).toHaveLength(5);
  });

  it('incremental pass uses the cap this client learned in a full pass', async () => {
    const service = fakeService(120, { cap: 50 });
    const client = legacy(service);
    await collect(client.pages('1', { limit: 1000, mode: 'full' }));
    service.urls.length = 0;
    const pages = await collect(client.pages('1', { limit: 1000, mode: 'incremental' }));
    expect(pages.flatMap((p) => p.rows)).toHaveLength(120);
    expect(service.urls).toHaveLength(3);
  });

  it('incremental pass with an unknown cap stops after the first short page (as DESIGN.md says)', async () => {
    const service = fakeService(30);
    const pages = await collect(legacy(service).pages('1', { limit: 100, mode: 'incremental' }));
    expect(pages).toHaveLength(1);
    expect(service.urls).toHaveLength(1);
  });

  it('resumes at startOffset and advances by rows received', async () => {
    const service = fakeService(95, { cap: 20 });
    const pages = await collect(legacy(service).pages('1', { limit: 30, startOffset: 40, mode: 'full', effectiveLimit: 20 }));
    expect(pages.map((p) => p.offset)).toEqual([40, 60, 80]);
    expect(pages.at(-1)?.rows).toHaveLength(15);
  });

  it('does not mistake a set that grew between requests for a cap', async () => {
    let grown = false;
    const service = fakeService(0, {
      body: (url) => {
        const offset = Number(url.searchParams.get('offset'));
        if (offset === 0) return { status: 200, body: JSON.stringify(Array.from({ length: 8 }, (_, i) => ({ id: i + 1 }))) };
        if (offset === 8 && !grown) {
          grown = true;
          return { status: 200, body: JSON.stringify(Array.from({ length: 9 }, (_, i) => ({ id: 100 + i }))) };
        }
        return { status: 200, body: '[]' };
      },
    });
    const learned: number[] = [];
    const client = legacy(service);
    const pages = await collect(client.pages('1', { limit: 10, mode: 'full', onEffectiveLimit: (n) => learned.push(n) }));
    expect(pages.flatMap((p) => p.rows)).toHaveLength(17);
    expect(learned).toEqual([]);
    expect(client.effectiveLimit()).toBeUndefined();
  });

  it('fails instead of looping when the service ignores offset', async () => {
    const service = fakeService(0, { body: () => ({ status: 200, body: '[{"id":1},{"id":2}]' }) });
    await expect(collect(legacy(service).pages('1', { limit: 2, mode: 'full' }))).rejects.toThrow(/ignore offset/);
    expect(service.urls).toHaveLength(2);
  });

  it('accepts the same single row at two consecutive offsets (a set changing under the pass)', async () => {
    let calls = 0;
    const service = fakeService(0, {
      body: () => {
        calls += 1;
        // 2 rows, then the last row again one offset later (a row moved), then the end.
        const bodies = ['[{"id":1},{"id":2}]', '[{"id":3}]', '[{"id":3}]', '[]'];
        return { status: 200, body: bodies[Math.min(calls, bodies.length) - 1]! };
      },
    });
    const pages = await collect(legacy(service).pages('1', { limit: 2, mode: 'full' }));
    expect(pages.map((p) => p.rows.length)).toEqual([2, 1, 1]);
  });

  it('fetches one page at a time: nothing is requested until the consumer asks', async () => {
    const service = fakeService(100, { cap: 10 });
    const iterator = legacy(service).pages('1', { limit: 10, mode: 'full' });
    await iterator.next();
    await new Promise((r) => setTimeout(r, 20));
    expect(service.urls).toHaveLength(1);
    await iterator.return(undefined);
    expect(service.urls).toHaveLength(1);
  });
});

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
  type PageCapKnowledge,
} from '../../src/upstream/legacy/client.js';
import { isRealDate } from '../../src/ground/time.js';
import { UpstreamAuthError, UpstreamBodyError } from '../../src/upstream/errors.js';

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

  it.each([
    '2024-02-30',
    '2023-02-29',
    '2024-13-01',
    '2024-00-10',
    '2024-04-31',
    '2024-5-1',
    '2024-05-01T00:00:00',
    '01-05-2024',
    '',
    'today',
  ])('rejects date %j, naming it', (date) => {
    expect(bad({ key: 'date_updated', op: '$gt', date })).toThrow(/filter date/);
    expect(bad({ key: 'date_updated', op: '$gt', date })).toThrow(JSON.stringify(date));
  });

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
function fakeService(
  total: number,
  options: { cap?: number; body?: (url: URL) => { status: number; body: string } | undefined } = {},
): FakeService {
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
    for (let i = offset; i < Math.min(total, offset + limit); i++)
      ids.push(`{"id":${1261159647788771324n + BigInt(i)},"email":"s${i}@x.test"}`);
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
    expect(service.urls.map((u) => u.pathname)).toEqual([
      '/api/v2/groups/9/subscribers/count',
      '/api/v2/groups/9/subscribers/bounced/count',
    ]);
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
    const error = (await legacy(service)
      .count('1')
      .catch((e: unknown) => e)) as Error;
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

/** A list served from a mutable array of ids, capped at `cap`; `between` runs after each page is served. */
function listService(ids: number[], options: { cap?: number; between?: (offset: number, served: number) => void } = {}): FakeService {
  const urls: URL[] = [];
  const fetchImpl = (async (input: string | URL | Request) => {
    const url = new URL(String(input));
    urls.push(url);
    if (url.pathname.endsWith('/count')) return new Response(JSON.stringify({ count: ids.length }), { status: 200 });
    const limit = Math.min(Number(url.searchParams.get('limit') ?? 100), options.cap ?? Infinity);
    const offset = Number(url.searchParams.get('offset') ?? 0);
    const page = ids.slice(offset, offset + limit);
    options.between?.(offset, page.length);
    return new Response(JSON.stringify(page.map((id) => ({ id }))), { status: 200 });
  }) as typeof fetch;
  return { fetch: fetchImpl, urls };
}

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
const idsOf = (pages: LegacyPage[]) => pages.flatMap((p) => p.rows.map((r) => Number(r.id)));

describe('legacy page iterator', () => {
  it('full pass reads with overlapping pages until a short page ends the list', async () => {
    const service = fakeService(25);
    const pages = await collect(legacy(service).pages('1', { limit: 10, mode: 'full' }));
    // Each request re-reads the last row of the previous page; yielded rows leave it out.
    expect(pages.map((p) => [p.offset, p.rows.length, p.nextOffset, p.continuous])).toEqual([
      [0, 10, 9, true],
      [9, 9, 18, true],
      [18, 6, 24, true],
    ]);
    expect(new Set(pages.flatMap((p) => p.rows.map((r) => String(r.id)))).size).toBe(25);
    // The short last page (shorter than pages served before) ends the list: no request after it.
    expect(service.urls.map((u) => u.searchParams.get('offset'))).toEqual(['0', '9', '18']);
  });

  it('full pass over a capped service learns the cap from two equal short pages inside a long list', async () => {
    const service = fakeService(237, { cap: 50 });
    const learned: number[] = [];
    const client = legacy(service);
    const pages = await collect(
      client.pages('1', { limit: 1000, mode: 'full', knownLength: 237, onEffectiveLimit: (n) => learned.push(n) }),
    );
    const ids = pages.flatMap((p) => p.rows.map((r) => String(r.id)));
    expect(ids).toHaveLength(237);
    expect(new Set(ids).size).toBe(237);
    expect(learned).toEqual([50]);
    expect(client.effectiveLimit()).toBe(50);
    expect(pages.at(-1)?.limit).toBe(50);
    // Every request still asks for the configured limit.
    expect(service.urls.every((u) => u.searchParams.get('limit') === '1000')).toBe(true);
  });

  it('never learns a cap from a list that grows during its pass (3 and 300 rows, growing between pages)', async () => {
    for (const start of [3, 300]) {
      const ids = range(1, start);
      let next = 10_000;
      // Growth by exactly what a cap would produce (the last page's length minus the overlap) is the
      // adversary: every page then looks the same.
      const service = listService(ids, { between: (_offset, served) => ids.push(...range((next += served), Math.max(1, served - 1))) });
      const client = legacy(service);
      let knowledge: PageCapKnowledge = { cap: null, longestPage: 0, candidate: null };
      const pages = [];
      const onCapKnowledge = (k: PageCapKnowledge) => (knowledge = k);
      for await (const page of client.pages('1', {
        limit: 500,
        mode: 'full',
        knownLength: start,
        capKnowledge: knowledge,
        onCapKnowledge,
      })) {
        pages.push(page);
        if (pages.length > 6) break;
      }
      expect(knowledge.cap).toBeNull();
      expect(client.effectiveLimit()).toBeUndefined();
      expect(pages.every((p) => p.limit === 500)).toBe(true);
      expect(service.urls.every((u) => u.searchParams.get('limit') === '500')).toBe(true);
    }
  });

  it('reads every member that stays when members leave ahead of the read position between pages', async () => {
    const ids = range(1, 1000);
    const stay = new Set(ids);
    // After each page, 3 members already read leave: the rest of the list shifts up by 3.
    const service = listService(ids, {
      between: (offset, served) => {
        for (let i = 0; i < 3 && offset + served > 3; i++) stay.delete(ids.splice(Math.max(0, offset + served - 10 - i), 1)[0]!);
      },
    });
    const pages = await collect(legacy(service).pages('1', { limit: 100, mode: 'full' }));
    const seen = new Set(idsOf(pages));
    expect([...stay].filter((id) => !seen.has(id))).toEqual([]);
    expect(pages.every((p) => p.continuous)).toBe(true);
  });

  it('steps back when more members left than the overlap covers, and still skips no one', async () => {
    const ids = range(1, 600);
    const stay = new Set(ids);
    let pagesServed = 0;
    const service = listService(ids, {
      between: (offset, served) => {
        // 30 members already read leave after the second page: more than the 4-row overlap.
        if (++pagesServed === 2) for (let i = 0; i < 30; i++) stay.delete(ids.splice(offset + served - 40, 1)[0]!);
      },
    });
    const pages = await collect(legacy(service).pages('1', { limit: 100, mode: 'full' }));
    const seen = new Set(idsOf(pages));
    expect([...stay].filter((id) => !seen.has(id))).toEqual([]);
    expect(pages.every((p) => p.continuous)).toBe(true);
    const offsets = service.urls.map((u) => Number(u.searchParams.get('offset')));
    expect(offsets.some((o, i) => i > 0 && o < offsets[i - 1]!)).toBe(true);
  });

  it('reports a page it cannot join to the previous one instead of pretending it skipped nothing', async () => {
    const ids = range(1, 2000);
    let pagesServed = 0;
    const service = listService(ids, {
      between: () => {
        // After the fifth page 450 members already read leave at once: more than three pages back.
        if (++pagesServed === 5) ids.splice(0, 450);
      },
    });
    const pages = await collect(legacy(service).pages('1', { limit: 100, mode: 'full' }));
    expect(pages.some((p) => !p.continuous)).toBe(true);
  });

  it('a list whose last page holds one row ends without a gap or a step back', async () => {
    for (const total of [1, 11, 20]) {
      const service = fakeService(total);
      const pages = await collect(legacy(service).pages('1', { limit: 10, mode: 'full' }));
      expect(new Set(pages.flatMap((p) => p.rows.map((r) => String(r.id)))).size).toBe(total);
      expect(pages.every((p) => p.continuous)).toBe(true);
      const offsets = service.urls.map((u) => Number(u.searchParams.get('offset')));
      expect(offsets.every((o, i) => i === 0 || o >= offsets[i - 1]!)).toBe(true);
    }
  });

  it('a resumed pass joins its first page on the saved tail', async () => {
    const service = fakeService(95, { cap: 20 });
    const tail = ['1261159647788771362', '1261159647788771363'];
    const pages = await collect(
      legacy(service).pages('1', { limit: 30, startOffset: 38, startTail: tail, mode: 'full', effectiveLimit: 20 }),
    );
    expect(pages[0]?.offset).toBe(38);
    expect(pages[0]?.continuous).toBe(true);
    expect(pages[0]?.rows.map((r) => String(r.id))).not.toContain(tail[0]);
    expect(new Set(pages.flatMap((p) => p.rows.map((r) => String(r.id)))).size).toBe(95 - 40);
    // Without a tail, the first page after a resume cannot prove continuity.
    const blind = await collect(legacy(fakeService(95, { cap: 20 })).pages('1', { limit: 30, startOffset: 40, mode: 'full' }));
    expect(blind[0]?.continuous).toBe(false);
  });

  it('incremental pass stops at the first page shorter than the learned cap', async () => {
    const service = fakeService(237, { cap: 50 });
    const pages = await collect(legacy(service).pages('1', { limit: 1000, mode: 'incremental', effectiveLimit: 50 }));
    expect(pages.flatMap((p) => p.rows)).toHaveLength(237);
    // 4 full pages + the short last one; no extra request for an empty page.
    expect(service.urls).toHaveLength(5);
  });

  it('incremental pass never ends at a cap it has not learned: a page as long as any served is checked', async () => {
    const service = fakeService(150, { cap: 100 });
    let knowledge: PageCapKnowledge = { cap: null, longestPage: 60, candidate: null };
    const pages = await collect(
      legacy(service).pages('1', { limit: 500, mode: 'incremental', capKnowledge: knowledge, onCapKnowledge: (k) => (knowledge = k) }),
    );
    expect(pages.flatMap((p) => p.rows)).toHaveLength(150);
    expect(service.urls).toHaveLength(2);
    expect(knowledge.longestPage).toBe(100);
  });

  it('incremental pass in steady state spends no extra request: a page shorter than one served before ends it', async () => {
    const service = fakeService(30);
    const pages = await collect(
      legacy(service).pages('1', { limit: 500, mode: 'incremental', capKnowledge: { cap: null, longestPage: 500, candidate: null } }),
    );
    expect(pages).toHaveLength(1);
    expect(service.urls).toHaveLength(1);
  });

  it('fails instead of looping when the service ignores offset', async () => {
    const service = fakeService(0, { body: () => ({ status: 200, body: '[{"id":1},{"id":2},{"id":3}]' }) });
    await expect(collect(legacy(service).pages('1', { limit: 3, mode: 'full' }))).rejects.toThrow(/ignore offset/);
    // A repeat alone could be members joining ahead of the read position: one request far past
    // any list settles it.
    expect(service.urls.map((u) => u.searchParams.get('offset'))).toEqual(['0', '2', '999999999']);
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

/**
 * The current API's client (src/upstream/current/client.ts) in-process, with a fake fetch: cursor
 * pages, group counts, errors. The same client against the simulator is
 * upstream-current.simulator.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { createCurrentClient, type CurrentPage } from '../../src/upstream/current/client.js';
import { UpstreamAuthError, UpstreamBodyError, UpstreamHttpError, UpstreamMovedAccountError } from '../../src/upstream/errors.js';

const TOKEN = 'ml-token-8c1f4e2a9b7d';
const BASE = 'https://connect.example.com';

interface Sent {
  url: URL;
  headers: Record<string, string>;
}

type Reply = { status?: number; body: unknown; headers?: Record<string, string> } | string;

/** A fetch answering from a list of replies in order (the last one repeats), recording what was sent. */
function fakeFetch(replies: Reply[]): { fetch: typeof fetch; sent: Sent[] } {
  const sent: Sent[] = [];
  const fetchImpl = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    sent.push({ url: new URL(String(input)), headers: { ...(init?.headers as Record<string, string>) } });
    const reply = replies[Math.min(sent.length - 1, replies.length - 1)] as Reply;
    if (typeof reply === 'string') return new Response(reply, { status: 200, headers: { 'content-type': 'application/json' } });
    return new Response(JSON.stringify(reply.body), {
      status: reply.status ?? 200,
      headers: { 'content-type': 'application/json', ...reply.headers },
    });
  };
  return { fetch: fetchImpl, sent };
}

function client(replies: Reply[]) {
  const fake = fakeFetch(replies);
  const current = createCurrentClient({
    baseUrl: BASE,
    token: TOKEN,
    http: { fetch: fake.fetch, retry: { retries: 3, minDelayMs: 1, maxDelayMs: 2, jitter: false }, timeoutMs: 2000 },
  });
  return { current, sent: fake.sent };
}

function members(ids: string[], next: string | null, meta = true): Record<string, unknown> {
  const data = ids.map((id) => ({ id, email: `${id}@example.com`, status: 'active', fields: {}, updated_at: '2024-06-01 08:00:00' }));
  const link = next === null ? null : `${BASE}/api/groups/7/subscribers?cursor=${next}`;
  return {
    data,
    links: { first: null, last: null, prev: null, next: link },
    ...(meta ? { meta: { path: `${BASE}/api/groups/7/subscribers`, per_page: 100, next_cursor: next, prev_cursor: null } } : {}),
  };
}

async function collect(pages: AsyncGenerator<CurrentPage>): Promise<CurrentPage[]> {
  const out: CurrentPage[] = [];
  for await (const page of pages) out.push(page);
  return out;
}

describe('current API client: cursor pages', () => {
  it('follows meta.next_cursor to null, whatever the page lengths, sending Bearer, filter[status], limit and cursor', async () => {
    const { current, sent } = client([
      { body: members(['1', '2'], 'c1') },
      { body: members(['3'], 'c2') },
      { body: members([], 'c3') },
      { body: members(['4', '5', '6'], null) },
    ]);
    const pages = await collect(current.pages('7', { status: 'unsubscribed', limit: 500 }));
    expect(pages.map((p) => p.rows.map((r) => r.id))).toEqual([['1', '2'], ['3'], [], ['4', '5', '6']]);
    expect(pages.map((p) => [p.cursor, p.nextCursor])).toEqual([
      [null, 'c1'],
      ['c1', 'c2'],
      ['c2', 'c3'],
      ['c3', null],
    ]);
    expect(pages.every((p) => p.requestedLimit === 500)).toBe(true);
    expect(sent.map((s) => s.url.pathname)).toEqual(Array(4).fill('/api/groups/7/subscribers'));
    expect(sent.map((s) => s.url.searchParams.get('cursor'))).toEqual([null, 'c1', 'c2', 'c3']);
    expect(
      sent.every((s) => s.url.searchParams.get('filter[status]') === 'unsubscribed' && s.url.searchParams.get('limit') === '500'),
    ).toBe(true);
    expect(sent[0]?.headers.authorization).toBe(`Bearer ${TOKEN}`);
  });

  it('reads the cursor of links.next when meta carries none', async () => {
    const { current } = client([{ body: members(['1'], 'abc_-9', false) }, { body: members(['2'], null, false) }]);
    const pages = await collect(current.pages(7, { status: 'active', limit: 10 }));
    expect(pages.map((p) => p.nextCursor)).toEqual(['abc_-9', null]);
  });

  it('resumes from a given cursor', async () => {
    const { current, sent } = client([{ body: members(['9'], null) }]);
    await collect(current.pages('7', { status: 'active', limit: 10, cursor: 'resume-here' }));
    expect(sent[0]?.url.searchParams.get('cursor')).toBe('resume-here');
  });

  it('keeps ids above 2^53 exact', async () => {
    const text = `{"data":[{"id":1261159647788771324,"status":"active"},{"id":"1261159647788771999","status":"active"}],"links":{"next":null},"meta":{"next_cursor":null}}`;
    const { current } = client([text]);
    const page = await current.listPage('7', { status: 'active', limit: 10 });
    expect(page.rows.map((r) => String(r.id))).toEqual(['1261159647788771324', '1261159647788771999']);
  });

  it('stops with an error when the cursor does not move on, or empty pages keep coming with a cursor', async () => {
    const same = client([{ body: members(['1'], 'c1') }, { body: members(['2'], 'c1') }]);
    await expect(collect(same.current.pages('7', { status: 'active', limit: 10 }))).rejects.toThrow(/does not advance/);
    const empty = client([
      { body: members([], 'e1') },
      { body: members([], 'e2') },
      { body: members([], 'e3') },
      { body: members([], 'e4') },
    ]);
    await expect(collect(empty.current.pages('7', { status: 'active', limit: 10 }))).rejects.toBeInstanceOf(UpstreamBodyError);
    expect(empty.sent).toHaveLength(3);
  });

  it('rejects bodies that are not a page of subscribers as UpstreamBodyError, never data', async () => {
    const bodies: unknown[] = [
      [],
      { data: {} },
      { data: [{ email: 'x' }] },
      { data: [{ id: 'abc' }] },
      { data: [{ id: 1.5 }] },
      { data: [], meta: { next_cursor: 42 } },
      { data: [], links: { next: 'not a url' } },
      { data: [], links: { next: `${BASE}/api/groups/7/subscribers` } },
    ];
    for (const body of bodies) {
      const { current } = client([{ body }]);
      await expect(current.listPage('7', { status: 'active', limit: 10 }), JSON.stringify(body)).rejects.toBeInstanceOf(UpstreamBodyError);
    }
  });

  it('checks its arguments before sending anything', async () => {
    const { current, sent } = client([{ body: members([], null) }]);
    await expect(current.listPage('7', { status: 'gone' as 'active', limit: 10 })).rejects.toThrow(/status "gone"/);
    await expect(current.listPage('7', { status: 'active', limit: 0 })).rejects.toThrow(/limit/);
    await expect(current.listPage('seven', { status: 'active', limit: 10 })).rejects.toThrow(/group id/);
    await expect(current.listPage('7', { status: 'active', limit: 10, cursor: 'a b' })).rejects.toThrow(/cursor/);
    expect(sent).toHaveLength(0);
    expect(() => createCurrentClient({ baseUrl: BASE, token: '' })).toThrow(/token/);
  });
});

describe('current API client: group counts', () => {
  const group = {
    data: {
      id: '91872364529000018',
      name: 'Newsletter',
      active_count: 10,
      unsubscribed_count: 2,
      unconfirmed_count: 1,
      bounced_count: 0,
      junk_count: 3,
    },
  };

  it('reads the count of every status', async () => {
    const { current, sent } = client([{ body: group }]);
    await expect(current.group('91872364529000018')).resolves.toEqual({
      id: '91872364529000018',
      name: 'Newsletter',
      counts: { active: 10, unsubscribed: 2, unconfirmed: 1, bounced: 0, junk: 3 },
    });
    expect(sent[0]?.url.pathname).toBe('/api/groups/91872364529000018');
  });

  it('rejects a group without a valid count', async () => {
    const { junk_count: _junk, ...partial } = group.data;
    for (const data of [partial, { ...group.data, bounced_count: -1 }, { ...group.data, active_count: '10' }]) {
      const { current } = client([{ body: { data } }]);
      await expect(current.group('7')).rejects.toThrow(/count/);
    }
  });
});

describe('current API client: one subscriber', () => {
  const subscriber = {
    id: '31986843064993537',
    email: 'a@example.com',
    status: 'unsubscribed',
    fields: {},
    updated_at: '2024-06-01 08:00:00',
  };

  it('reads the record and the ids of the groups it is in', async () => {
    const { current, sent } = client([
      { body: { data: { ...subscriber, groups: [{ id: '7', name: 'A' }, { id: 91872364529000018n.toString() }] } } },
    ]);
    const answer = await current.subscriber('31986843064993537');
    expect(answer).toMatchObject({
      found: true,
      groupIds: ['7', '91872364529000018'],
      record: { id: '31986843064993537', status: 'unsubscribed' },
    });
    expect(sent[0]?.url.pathname).toBe('/api/subscribers/31986843064993537');
    expect(sent[0]?.headers.authorization).toBe(`Bearer ${TOKEN}`);
  });

  it('an answer without a groups list says nothing about membership', async () => {
    const { current } = client([{ body: { data: subscriber } }]);
    await expect(current.subscriber('31986843064993537')).resolves.toMatchObject({ found: true, groupIds: null });
  });

  it('a 404 is a subscriber that is gone; other errors are errors', async () => {
    await expect(client([{ status: 404, body: { message: 'Resource not found.' } }]).current.subscriber('5')).resolves.toEqual({
      found: false,
    });
    await expect(client([{ status: 422, body: { message: 'bad' } }]).current.subscriber('5')).rejects.toBeInstanceOf(UpstreamHttpError);
  });

  it('refuses a malformed answer, and an id that is not digits before asking', async () => {
    await expect(
      client([{ body: { data: { ...subscriber, groups: [{ name: 'no id' }] } } }]).current.subscriber('5'),
    ).rejects.toBeInstanceOf(UpstreamBodyError);
    await expect(client([{ body: { nothing: true } }]).current.subscriber('5')).rejects.toBeInstanceOf(UpstreamBodyError);
    const { current, sent } = client([{ body: {} }]);
    await expect(current.subscriber('5/../groups')).rejects.toThrow(TypeError);
    expect(sent).toHaveLength(0);
  });
});

describe('current API client: errors', () => {
  it('a 401 is an auth error (the auth pause applies) that never names the token, and is not retried', async () => {
    const { current, sent } = client([{ status: 401, body: { message: 'Unauthenticated.' } }]);
    const error = await current.listPage('7', { status: 'active', limit: 10 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UpstreamAuthError);
    expect(error).not.toBeInstanceOf(UpstreamMovedAccountError);
    expect((error as Error).message).toMatch(/current API rejected the API token \(HTTP 401: Unauthenticated\./);
    expect((error as Error).message).not.toContain(TOKEN);
    expect(sent).toHaveLength(1);
  });

  it('waits out a 429 for as long as Retry-After says, then goes on', async () => {
    const { current, sent } = client([
      { status: 429, body: { message: 'Too Many Attempts.' }, headers: { 'retry-after': '0', 'x-ratelimit-remaining': '0' } },
      { body: members(['1'], null) },
    ]);
    const page = await current.listPage('7', { status: 'active', limit: 10 });
    expect(page.rows).toHaveLength(1);
    expect(sent).toHaveLength(2);
    expect(current.stats().rateLimited).toBe(1);
  });

  it('a 404 or a 422 is an HTTP error carrying the body, not a moved account', async () => {
    const { current } = client([
      { status: 422, body: { message: 'The limit must be an integer.', errors: { limit: ['The limit must be an integer.'] } } },
    ]);
    const error = await current.listPage('7', { status: 'active', limit: 10 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UpstreamHttpError);
    expect((error as UpstreamHttpError).status).toBe(422);
    expect((error as UpstreamHttpError).body).toEqual({
      message: 'The limit must be an integer.',
      errors: { limit: ['The limit must be an integer.'] },
    });
    const missing = client([{ status: 404, body: { error: { message: 'Endpoint not found' } } }]);
    const notFound = await missing.current.group('7').catch((e: unknown) => e);
    expect(notFound).toBeInstanceOf(UpstreamHttpError);
    expect(notFound).not.toBeInstanceOf(UpstreamAuthError);
  });
});

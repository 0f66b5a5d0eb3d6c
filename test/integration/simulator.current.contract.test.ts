/**
 * Contract suite for the simulator's current API (docs/upstream-current.md) and the legacy API's
 * moved-account mode, over HTTP. Needs no database.
 */
import { isSafeNumber, parse as losslessParse } from 'lossless-json';
import { afterEach, describe, expect, it } from 'vitest';
import { CURRENT_REQUESTS, decodeCursor, startSimulator } from '../../src/simulator/index.js';
import type { Simulator, SimulatorOptions, SubscriberType } from '../../src/simulator/index.js';

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

async function get(s: Simulator, path: string, token: string | null = s.webhooksToken): Promise<Answer> {
  const headers: Record<string, string> = { Accept: 'application/json', 'Content-Type': 'application/json' };
  if (token !== null) headers['Authorization'] = `Bearer ${token}`;
  const response = await fetch(`${s.url}${path}`, { headers });
  return { status: response.status, headers: response.headers, text: await response.text() };
}

/** Lossless parse: integers beyond 2^53 stay strings, as a correct client must read them. */
function parse(text: string): Record<string, unknown> {
  return losslessParse(text, null, (digits) => (isSafeNumber(digits) ? Number(digits) : digits)) as Record<string, unknown>;
}

interface MemberPage {
  data: Array<Record<string, unknown> & { id: string; status: string }>;
  links: { first: null; last: null; prev: string | null; next: string | null };
  meta: { path: string; per_page: number; next_cursor: string | null; prev_cursor: string | null };
}

async function page(s: Simulator, groupId: string, query: string): Promise<MemberPage> {
  const answer = await get(s, `/api/groups/${groupId}/subscribers?${query}`);
  expect(answer.status, answer.text).toBe(200);
  return parse(answer.text) as unknown as MemberPage;
}

/** Reads one status list to its end by cursor; returns the ids in order and the page lengths. */
async function walk(s: Simulator, groupId: string, status: SubscriberType, limit: number): Promise<{ ids: string[]; lengths: number[] }> {
  const ids: string[] = [];
  const lengths: number[] = [];
  let cursor: string | null = null;
  do {
    const query: string = `filter[status]=${status}&limit=${limit}${cursor === null ? '' : `&cursor=${cursor}`}`;
    const body = await page(s, groupId, query);
    ids.push(...body.data.map((row) => row.id));
    lengths.push(body.data.length);
    cursor = body.meta.next_cursor;
  } while (cursor !== null);
  return { ids, lengths };
}

const GROUP_KEY = (s: Simulator) => s.world.groupIds()[0] as string;

describe('current API: authentication', () => {
  it('requires the Bearer token: 401 {"message":"Unauthenticated."}', async () => {
    const s = await sim({ subscribers: 10 });
    for (const token of [null, 'wrong-token']) {
      const answer = await get(s, `/api/groups/${GROUP_KEY(s)}/subscribers`, token);
      expect(answer.status).toBe(401);
      expect(JSON.parse(answer.text)).toEqual({ message: 'Unauthenticated.' });
    }
    expect((await get(s, `/api/groups/${GROUP_KEY(s)}`, null)).status).toBe(401);
  });
});

describe('current API: group members by cursor', () => {
  it('lists a status in ascending id order, page by page, until next_cursor is null', async () => {
    const s = await sim({ subscribers: 300, groups: 1, largeIds: true });
    const groupId = GROUP_KEY(s);
    const { ids, lengths } = await walk(s, groupId, 'active', 40);
    expect(ids).toEqual(s.world.membersById(groupId, 'active'));
    expect(ids.length).toBeGreaterThan(80);
    expect(lengths.slice(0, -1).every((n) => n === 40)).toBe(true);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('answers {data, links, meta} with opaque cursors in both meta and links', async () => {
    const s = await sim({ subscribers: 60, groups: 1, largeIds: true });
    const groupId = GROUP_KEY(s);
    const first = await page(s, groupId, 'filter[status]=active&limit=5');
    expect(first.links.first).toBeNull();
    expect(first.links.prev).toBeNull();
    expect(first.meta.prev_cursor).toBeNull();
    expect(first.meta.per_page).toBe(5);
    expect(first.meta.path).toBe(`${s.url}/api/groups/${groupId}/subscribers`);
    const cursor = first.meta.next_cursor as string;
    expect(new URL(first.links.next as string).searchParams.get('cursor')).toBe(cursor);
    // Laravel's shape: base64url JSON of the last id, exact above 2^53.
    expect(decodeCursor(cursor)).toEqual({ id: first.data[4]?.id, next: true });
    const second = await page(s, groupId, `filter[status]=active&limit=5&cursor=${cursor}`);
    expect(second.meta.prev_cursor).not.toBeNull();
    expect(BigInt(second.data[0]?.id as string)).toBeGreaterThan(BigInt(first.data[4]?.id as string));
  });

  it('serves the webhook subscriber shape with string ids above 2^53 and Y-m-d H:i:s dates', async () => {
    const s = await sim({ subscribers: 30, groups: 1, largeIds: true });
    const groupId = GROUP_KEY(s);
    const body = await page(s, groupId, 'filter[status]=active&limit=100');
    const row = body.data[0] as Record<string, unknown>;
    expect(typeof row.id).toBe('string');
    expect(BigInt(row.id as string)).toBeGreaterThan(BigInt(Number.MAX_SAFE_INTEGER));
    expect(row.status).toBe('active');
    expect(typeof row.fields).toBe('object');
    for (const key of ['created_at', 'updated_at', 'subscribed_at']) expect(row[key]).toMatch(/^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/);
    expect(row).not.toHaveProperty('deleted_at');
    const webhook = s.world.renderWebhook(row.id as string);
    expect(row.email).toBe(webhook.email);
    expect(row.updated_at).toBe(webhook.updated_at.slice(0, 19).replace('T', ' '));
  });

  it('caps pages silently below the asked limit (100 by default, configurable) and still hands out a cursor', async () => {
    const s = await sim({ subscribers: 400, groups: 1 });
    const groupId = GROUP_KEY(s);
    const capped = await page(s, groupId, 'filter[status]=active&limit=1000');
    expect(capped.data).toHaveLength(100);
    expect(capped.meta.per_page).toBe(1000);
    expect(capped.meta.next_cursor).not.toBeNull();
    s.setCurrentPageCap(7);
    const { ids, lengths } = await walk(s, groupId, 'active', 50);
    expect(ids).toEqual(s.world.membersById(groupId, 'active'));
    expect(lengths.slice(0, -1).every((n) => n === 7)).toBe(true);
  });

  it('filters by each status and lists active members without a filter', async () => {
    const s = await sim({ subscribers: 200, groups: 1 });
    const groupId = GROUP_KEY(s);
    for (const status of ['active', 'unsubscribed', 'bounced', 'junk', 'unconfirmed'] as const) {
      const body = await page(s, groupId, `filter[status]=${status}&limit=100`);
      expect(body.data.every((row) => row.status === status)).toBe(true);
      expect(body.data.map((row) => row.id)).toEqual(s.world.membersById(groupId, status).slice(0, 100));
    }
    const unfiltered = await page(s, groupId, 'limit=10');
    expect(unfiltered.data.map((row) => row.id)).toEqual(s.world.membersById(groupId, 'active').slice(0, 10));
  });

  it('answers a bad status, limit or cursor with 422 {message, errors} and an unknown group with 404', async () => {
    const s = await sim({ subscribers: 10, groups: 1 });
    const groupId = GROUP_KEY(s);
    for (const [query, field] of [
      ['filter[status]=gone', 'filter.status'],
      ['limit=0', 'limit'],
      ['limit=ten', 'limit'],
      ['cursor=not-a-cursor', 'cursor'],
    ] as const) {
      const answer = await get(s, `/api/groups/${groupId}/subscribers?${query}`);
      expect(answer.status, query).toBe(422);
      const body = JSON.parse(answer.text) as { message: string; errors: Record<string, string[]> };
      expect(typeof body.message).toBe('string');
      expect(Object.keys(body.errors)).toEqual([field]);
    }
    expect((await get(s, '/api/groups/999999999/subscribers')).status).toBe(404);
    expect((await get(s, '/api/groups/999999999')).status).toBe(404);
  });
});

describe('current API: group counts', () => {
  it('GET /api/groups/{id} carries the member count of every status', async () => {
    const s = await sim({ subscribers: 300, groups: 2, largeIds: true });
    const groupId = s.world.groupIds()[1] as string;
    s.world.markJunk(s.world.membersById(groupId, 'active')[0] as string);
    const answer = await get(s, `/api/groups/${groupId}`);
    expect(answer.status).toBe(200);
    const { data } = parse(answer.text) as { data: Record<string, unknown> };
    expect(data.id).toBe(groupId);
    for (const status of ['active', 'unsubscribed', 'unconfirmed', 'bounced', 'junk'] as const) {
      expect(data[`${status}_count`], status).toBe(s.world.memberCount(groupId, status));
    }
    expect(data.junk_count).toBeGreaterThan(0);
  });
});

describe('current API: rate limit', () => {
  it('allows 120 requests a minute per account by default, then 429 with Retry-After and X-RateLimit-*', async () => {
    const s = await sim({ subscribers: 10, groups: 1, rateLimit: undefined, timeScale: 0.05 });
    expect(s.currentRateLimit).toEqual({ limit: 120, windowMs: 3000 });
    const small = await sim({ subscribers: 10, groups: 1, rateLimit: undefined, currentRateLimit: 3, rateLimitWindowMs: 60_000 });
    const groupId = GROUP_KEY(small);
    const answers: Answer[] = [];
    for (let i = 0; i < 4; i++) answers.push(await get(small, i % 2 ? `/api/groups/${groupId}` : `/api/groups/${groupId}/subscribers`));
    expect(answers.slice(0, 3).map((a) => a.status)).toEqual([200, 200, 200]);
    expect(answers.map((a) => a.headers.get('x-ratelimit-remaining'))).toEqual(['2', '1', '0', '0']);
    expect(answers[0]?.headers.get('x-ratelimit-limit')).toBe('3');
    const limited = answers[3] as Answer;
    expect(limited.status).toBe(429);
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(limited.headers.get('x-ratelimit-reset')).toMatch(/^\d+$/);
    expect(JSON.parse(limited.text)).toEqual({ message: 'Too Many Attempts.' });
    expect(small.maxRequestsInAnyWindow(60_000, CURRENT_REQUESTS)).toBe(4);
  });
});

describe('current API: the list changing under the cursor', () => {
  it('skips no survivor and sees every member that joins while members leave between pages', async () => {
    const s = await sim({ subscribers: 2000, groups: 1, largeIds: true });
    const groupId = GROUP_KEY(s);
    const before = new Set(s.world.membersById(groupId, 'active'));
    s.pageChurn.set({ groupId, leave: 4, join: 2 });
    const { ids } = await walk(s, groupId, 'active', 25);
    s.pageChurn.clear();
    const after = s.world.membersById(groupId, 'active');
    expect(s.pageChurn.applied.leave).toBeGreaterThan(100);
    expect(s.pageChurn.applied.join).toBeGreaterThan(50);
    const seen = new Set(ids);
    // Only the two members who joined after the last page was served are unseen.
    const created = [...s.world.ids()];
    expect(after.filter((id) => !seen.has(id)).sort()).toEqual(created.slice(-2).sort());
    expect([...before].filter((id) => after.includes(id)).length).toBeGreaterThan(0);
  });

  it('hides a member whose status moves to a list the pass has already read (one pass only)', async () => {
    const s = await sim({ subscribers: 2000, groups: 1 });
    const groupId = GROUP_KEY(s);
    const seen = new Set((await walk(s, groupId, 'active', 50)).ids);
    // While the unsubscribed list is read, members ahead in it are re-activated: they move to the
    // active list, which this pass has read already.
    s.pageChurn.set({ groupId, retype: 1 });
    for (const id of (await walk(s, groupId, 'unsubscribed', 20)).ids) seen.add(id);
    s.pageChurn.clear();
    const hidden = [...s.world.membersById(groupId, 'active'), ...s.world.membersById(groupId, 'unsubscribed')].filter(
      (id) => !seen.has(id),
    );
    expect(s.pageChurn.applied.retype).toBeGreaterThan(0);
    expect(hidden).toHaveLength(s.pageChurn.applied.retype);
    // The next pass, with the list at rest, sees them.
    const next = new Set([...(await walk(s, groupId, 'active', 50)).ids, ...(await walk(s, groupId, 'unsubscribed', 50)).ids]);
    expect(hidden.every((id) => next.has(id))).toBe(true);
  });
});

describe('legacy API: moved-account mode', () => {
  it('answers every legacy group endpoint 404 {"error":{"message":"Endpoint not found"}} without a code; the current API still answers', async () => {
    const s = await sim({ subscribers: 10, groups: 1, movedAccount: true });
    const groupId = GROUP_KEY(s);
    for (const path of ['subscribers', 'subscribers/count', 'subscribers/active', 'subscribers/active/count']) {
      const response = await fetch(`${s.url}/api/v2/groups/${groupId}/${path}`, { headers: { [s.apiKeyHeader]: s.apiKey } });
      expect(response.status, path).toBe(404);
      expect(await response.json()).toEqual({ error: { message: 'Endpoint not found' } });
    }
    expect((await get(s, `/api/groups/${groupId}/subscribers`)).status).toBe(200);
    s.setMovedAccount(false);
    const back = await fetch(`${s.url}/api/v2/groups/${groupId}/subscribers`, { headers: { [s.apiKeyHeader]: s.apiKey } });
    expect(back.status).toBe(200);
  });
});

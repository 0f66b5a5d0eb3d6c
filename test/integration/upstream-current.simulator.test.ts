/**
 * The current-API client against the simulator: whole lists by cursor under a silent page cap, ids
 * above 2^53, group counts, churn between pages, the 120-a-minute limit, auth errors; and the legacy
 * client against an account that moved to the current platform.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { normalizeCurrentSubscriber } from '../../src/mirror/normalize.js';
import { CURRENT_REQUESTS, startSimulator, type Simulator, type SimulatorOptions } from '../../src/simulator/index.js';
import { createCurrentClient, type CurrentClientOptions, type CurrentPage } from '../../src/upstream/current/client.js';
import { UpstreamAuthError, UpstreamMovedAccountError } from '../../src/upstream/errors.js';
import { createLegacyClient } from '../../src/upstream/legacy/client.js';
import { createLimiter, type Limiter } from '../../src/ratelimit/limiter.js';

const STATUSES = ['active', 'unsubscribed', 'bounced', 'junk', 'unconfirmed'] as const;

const sims: Simulator[] = [];
const limiters: Limiter[] = [];

afterEach(async () => {
  await Promise.all(limiters.splice(0).map((l) => l.close()));
  await Promise.all(sims.splice(0).map((s) => s.close()));
});

async function simulator(options: SimulatorOptions): Promise<Simulator> {
  const sim = await startSimulator({ seed: 11, largeIds: true, rateLimit: false, ...options });
  sims.push(sim);
  return sim;
}

function current(sim: Simulator, extra: Partial<CurrentClientOptions> = {}) {
  return createCurrentClient({
    baseUrl: sim.url,
    token: sim.webhooksToken,
    http: { retry: { retries: 8, minDelayMs: 5, maxDelayMs: 50, jitter: true }, timeoutMs: 5000 },
    ...extra,
  });
}

async function allIds(pages: AsyncGenerator<CurrentPage>): Promise<string[]> {
  const ids: string[] = [];
  for await (const page of pages) ids.push(...page.rows.map((r) => String(r.id)));
  return ids;
}

describe('current API client against the simulator', () => {
  it('reads every member of every group and status by cursor, never trusting the asked page size', async () => {
    const sim = await simulator({ subscribers: 1500, groups: 2 });
    const client = current(sim);
    const minimum = { requests: 0 };
    for (const groupId of sim.world.groupIds()) {
      for (const status of STATUSES) {
        const expected = sim.world.membersById(groupId, status);
        const pages: CurrentPage[] = [];
        for await (const page of client.pages(groupId, { status, limit: 1000 })) pages.push(page);
        expect(pages.flatMap((p) => p.rows.map((r) => String(r.id)))).toEqual(expected);
        // The service caps pages at 100 whatever is asked: a page of 100 rows is not the end.
        expect(pages.every((p) => p.rows.length <= 100)).toBe(true);
        minimum.requests += Math.max(1, Math.ceil(expected.length / 100));
        for (const row of pages.flatMap((p) => p.rows)) {
          const normalized = normalizeCurrentSubscriber(row, { sourceTimezone: 'UTC' });
          expect(normalized.values.status).toBe(status);
          expect(BigInt(normalized.values.id)).toBeGreaterThan(BigInt(Number.MAX_SAFE_INTEGER));
        }
      }
    }
    // One request per page of the cap, plus at most one per list when its length is a multiple of the cap.
    const sent = sim.requests.filter(CURRENT_REQUESTS).length;
    expect(sent).toBeGreaterThanOrEqual(minimum.requests);
    expect(sent).toBeLessThanOrEqual(minimum.requests + 2 * STATUSES.length);
  });

  it('reads the group counts that drift and progress compare with', async () => {
    const sim = await simulator({ subscribers: 500, groups: 2 });
    const client = current(sim);
    for (const groupId of sim.world.groupIds()) {
      const group = await client.group(groupId);
      expect(group.id).toBe(groupId);
      for (const status of STATUSES) expect(group.counts[status]).toBe(sim.world.memberCount(groupId, status));
    }
  });

  it('skips no survivor while members leave and join between pages', async () => {
    const sim = await simulator({ subscribers: 3000, groups: 1, currentPageCap: 50 });
    const [groupId] = sim.world.groupIds() as [string];
    sim.pageChurn.set({ groupId, leave: 5, join: 1 });
    const ids = new Set(await allIds(current(sim).pages(groupId, { status: 'active', limit: 200 })));
    sim.pageChurn.clear();
    expect(sim.pageChurn.applied.leave).toBeGreaterThan(100);
    const created = [...sim.world.ids()];
    // Everyone listed now was read, except the one member who joined after the last page.
    expect(sim.world.membersById(groupId, 'active').filter((id) => !ids.has(id))).toEqual(created.slice(-1));
  });

  it('keeps within the limit with the shared limiter: no 429, busiest window within the budget', async () => {
    const sim = await simulator({
      subscribers: 600,
      groups: 1,
      rateLimit: undefined,
      currentRateLimit: 20,
      rateLimitWindowMs: 2000,
      rateLimitMode: 'sliding',
      currentPageCap: 10,
    });
    const [groupId] = sim.world.groupIds() as [string];
    const limiter = createLimiter({ mode: 'memory', perMinute: 20, windowMs: 2000 });
    limiters.push(limiter);
    const ids = await allIds(current(sim, { limiter }).pages(groupId, { status: 'active', limit: 100 }));
    expect(ids).toEqual(sim.world.membersById(groupId, 'active'));
    const requests = sim.requests.filter(CURRENT_REQUESTS);
    expect(requests.length).toBeGreaterThan(25);
    expect(requests.filter((r) => r.status === 429)).toEqual([]);
    expect(sim.maxRequestsInAnyWindow(2000, CURRENT_REQUESTS)).toBeLessThanOrEqual(20);
  });

  it('honours a 429 (Retry-After) rather than hammering', async () => {
    const sim = await simulator({ subscribers: 10, groups: 1, rateLimit: undefined, currentRateLimit: 3, rateLimitWindowMs: 1000 });
    const [groupId] = sim.world.groupIds() as [string];
    const client = current(sim);
    for (let i = 0; i < 7; i++) await expect(client.group(groupId)).resolves.toMatchObject({ id: groupId });
    const limited = sim.requests.filter((r) => r.status === 429);
    expect(limited.length).toBeGreaterThanOrEqual(1);
    expect(limited.length).toBeLessThanOrEqual(3);
    expect(sim.requests).toHaveLength(7 + limited.length);
  });

  it('a wrong token is an auth error at once, not retried', async () => {
    const sim = await simulator({ subscribers: 10, groups: 1 });
    const [groupId] = sim.world.groupIds() as [string];
    const error = await current(sim, { token: 'not-the-token' })
      .listPage(groupId, { status: 'active', limit: 10 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UpstreamAuthError);
    expect((error as Error).message).toContain('Unauthenticated.');
    expect((error as Error).message).not.toContain('not-the-token');
    expect(sim.requests).toHaveLength(1);
  });
});

describe('legacy client on an account moved to the current platform', () => {
  it('fails at once with a moved-account error (an auth error) that names the current platform and the settings to use', async () => {
    const sim = await simulator({ subscribers: 10, groups: 1, movedAccount: true });
    const [groupId] = sim.world.groupIds() as [string];
    const legacy = createLegacyClient({
      baseUrl: sim.url,
      apiKey: sim.apiKey,
      apiKeyHeader: sim.apiKeyHeader,
      http: { retry: { retries: 5, minDelayMs: 5, maxDelayMs: 20, jitter: false } },
    });
    const fromPages = await allLegacy(legacy.pages(groupId, { type: 'active', limit: 100, mode: 'full' })).catch((e: unknown) => e);
    const fromCount = await legacy.count(groupId, 'active').catch((e: unknown) => e);
    for (const error of [fromPages, fromCount]) {
      expect(error).toBeInstanceOf(UpstreamMovedAccountError);
      expect(error).toBeInstanceOf(UpstreamAuthError);
      const message = (error as Error).message;
      expect(message).toMatch(/HTTP 404: Endpoint not found/);
      expect(message).toMatch(/moved to the service's current platform/);
      for (const setting of ['MAILER_API_URL', 'MAILER_API_TOKEN', 'SYNC_SOURCE=current']) expect(message).toContain(setting);
      expect(message).not.toContain(sim.apiKey);
    }
    expect(sim.requests).toHaveLength(2);
  });
});

async function allLegacy(pages: AsyncGenerator<{ rows: unknown[] }>): Promise<number> {
  let n = 0;
  for await (const page of pages) n += page.rows.length;
  return n;
}

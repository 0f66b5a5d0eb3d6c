/**
 * The upstream client layer against the service simulator (src/simulator): paging with a silent
 * cap, ids above 2^53, filters, auth errors, injected faults and the service's own rate limit.
 */
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { startSimulator, type Simulator, type SimulatorOptions } from '../../src/simulator/index.js';
import { createLegacyClient, type LegacyClientOptions, type LegacyPage } from '../../src/upstream/legacy/client.js';
import { UpstreamAuthError, UpstreamBodyError } from '../../src/upstream/errors.js';
import { createLimiter, maxInAnyWindow, type Limiter } from '../../src/ratelimit/limiter.js';
import { deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';

const SUBSCRIBER_TYPES = ['active', 'unsubscribed', 'bounced', 'junk', 'unconfirmed'] as const;

const sims: Simulator[] = [];
const limiters: Limiter[] = [];
const prefixes: string[] = [];

async function simulator(options: SimulatorOptions): Promise<Simulator> {
  const sim = await startSimulator({ seed: 7, largeIds: true, ...options });
  sims.push(sim);
  return sim;
}

function legacy(sim: Simulator, extra: Partial<LegacyClientOptions> = {}) {
  return createLegacyClient({
    baseUrl: sim.url,
    apiKey: sim.apiKey,
    apiKeyHeader: sim.apiKeyHeader,
    http: { retry: { retries: 8, minDelayMs: 5, maxDelayMs: 50, jitter: true }, timeoutMs: 5000 },
    ...extra,
  });
}

async function allIds(pages: AsyncGenerator<LegacyPage>): Promise<string[]> {
  const ids: string[] = [];
  for await (const page of pages) ids.push(...page.rows.map((r) => String(r.id)));
  return ids;
}

afterEach(async () => {
  await Promise.all(limiters.splice(0).map((l) => l.close()));
  await Promise.all(sims.splice(0).map((s) => s.close()));
});

afterAll(async () => {
  for (const prefix of prefixes) {
    await deletePrefix(`b_${prefix}`);
    await deletePrefix(prefix);
  }
});

describe('reading groups from the simulator', () => {
  it('a full pass over a capped service reads every member exactly, ids above 2^53 included', async () => {
    const sim = await simulator({ subscribers: 600, groups: 2, pageCap: 50, rateLimit: false });
    const [group] = sim.world.groupIds() as [string];
    const learned: number[] = [];
    const client = legacy(sim);
    const expected = sim.world.members(group);
    const ids = await allIds(
      client.pages(group, { limit: 1000, mode: 'full', knownLength: expected.length, onEffectiveLimit: (n) => learned.push(n) }),
    );
    expect(expected.length).toBeGreaterThan(100);
    expect(ids).toHaveLength(expected.length);
    expect(new Set(ids)).toEqual(new Set(expected));
    expect(ids.some((id) => BigInt(id) > BigInt(Number.MAX_SAFE_INTEGER))).toBe(true);
    expect(learned).toEqual([50]);
    await expect(client.count(group)).resolves.toBe(expected.length);
  });

  it('reads each type and counts it', async () => {
    const sim = await simulator({ subscribers: 400, groups: 1, pageCap: 30, rateLimit: false });
    const [group] = sim.world.groupIds() as [string];
    const client = legacy(sim);
    for (const type of SUBSCRIBER_TYPES) {
      const ids = await allIds(client.pages(group, { type, limit: 100, mode: 'full' }));
      expect(new Set(ids), type).toEqual(new Set(sim.world.members(group, type)));
      await expect(client.count(group, type)).resolves.toBe(sim.world.memberCount(group, type));
    }
  });

  it('an incremental pass with the learned cap reads everything and asks for no empty page', async () => {
    const sim = await simulator({ subscribers: 300, groups: 1, pageCap: 25, rateLimit: false });
    const [group] = sim.world.groupIds() as [string];
    const client = legacy(sim);
    await allIds(client.pages(group, { limit: 100, mode: 'full' }));
    sim.clearRequests();
    const ids = await allIds(client.pages(group, { limit: 100, mode: 'incremental' }));
    const members = sim.world.memberCount(group);
    expect(ids).toHaveLength(members);
    expect(sim.requests.filter((r) => r.api === 'legacy')).toHaveLength(Math.floor(members / 25) + 1);
  });

  it('sends date filters the service accepts', async () => {
    const sim = await simulator({ subscribers: 200, groups: 1, rateLimit: false });
    const [group] = sim.world.groupIds() as [string];
    const client = legacy(sim);
    const future = await client.listGroupSubscribers(group, {
      limit: 500,
      offset: 0,
      filters: [{ key: 'date_updated', op: '$gt', date: '2999-01-01' }],
    });
    expect(future).toEqual([]);
    const past = await client.listGroupSubscribers(group, {
      limit: 500,
      offset: 0,
      filters: [
        { key: 'date_updated', op: '$lt', date: '2999-01-01' },
        { key: 'date_created', op: '$gte', date: '1970-01-02' },
      ],
    });
    expect(new Set(past.map((r) => String(r.id)))).toEqual(new Set(sim.world.members(group)));
    expect(sim.requests.every((r) => r.status === 200)).toBe(true);
  });
});

describe('errors from the simulator', () => {
  it('a wrong key fails after exactly one request with code 302, without the key in the message', async () => {
    const sim = await simulator({ subscribers: 10, groups: 1, rateLimit: false });
    const [group] = sim.world.groupIds() as [string];
    const wrongKey = 'definitely-wrong-key-123';
    const error = (await legacy(sim, { apiKey: wrongKey })
      .listGroupSubscribers(group, { type: 'active', limit: 10, offset: 0 })
      .catch((e: unknown) => e)) as UpstreamAuthError;
    expect(error).toBeInstanceOf(UpstreamAuthError);
    expect(error.code).toBe(302);
    expect(error.message).toContain('code 302: API-Key Unauthorized');
    expect(error.message).not.toContain(wrongKey);
    expect(sim.requests).toHaveLength(1);
  });

  it('survives injected 500s and connection resets', async () => {
    const sim = await simulator({ subscribers: 300, groups: 1, pageCap: 20, rateLimit: false });
    const [group] = sim.world.groupIds() as [string];
    sim.faults.set({ errorRate: 0.2, resetRate: 0.1 });
    const client = legacy(sim);
    const ids = await allIds(client.pages(group, { limit: 20, mode: 'full' }));
    expect(new Set(ids)).toEqual(new Set(sim.world.members(group)));
    expect(sim.requests.filter((r) => r.fault !== null).length).toBeGreaterThan(0);
    expect(client.stats().retries).toBe(sim.requests.filter((r) => r.fault !== null).length);
  });

  it('an HTML page with status 200 is an UpstreamBodyError, never data', async () => {
    const sim = await simulator({ subscribers: 10, groups: 1, rateLimit: false, faults: { htmlRate: 1 } });
    const [group] = sim.world.groupIds() as [string];
    await expect(legacy(sim).listGroupSubscribers(group, { limit: 10, offset: 0 })).rejects.toBeInstanceOf(UpstreamBodyError);
    expect(sim.requests).toHaveLength(1);
  });
});

describe('the service rate limit (invariant 7)', () => {
  it('a 429 is honoured, not hammered', async () => {
    const sim = await simulator({ subscribers: 10, groups: 1, rateLimit: 3, rateLimitWindowMs: 1000, rateLimitScope: 'global' });
    const [group] = sim.world.groupIds() as [string];
    const client = legacy(sim, { limiter: createLimiter({ mode: 'off', perMinute: 1 }) });
    for (let i = 0; i < 7; i++) await expect(client.count(group)).resolves.toBe(sim.world.memberCount(group));
    const limited = sim.requests.filter((r) => r.status === 429);
    // 7 calls at 3 per window need 2 more windows: one 429 each, then the wait the service named.
    expect(limited.length).toBeGreaterThanOrEqual(1);
    expect(limited.length).toBeLessThanOrEqual(2);
    expect(sim.requests).toHaveLength(7 + limited.length);
  });

  it('two replicas sharing the Redis limiter never reach the service limit (sliding window)', async () => {
    const sim = await simulator({
      subscribers: 300,
      groups: 1,
      pageCap: 10,
      rateLimit: 20,
      rateLimitWindowMs: 2000,
      rateLimitMode: 'sliding',
      rateLimitScope: 'global',
    });
    const [group] = sim.world.groupIds() as [string];
    const prefix = uniquePrefix('sim-limit');
    prefixes.push(prefix);
    const replica = () => {
      const limiter = createLimiter({ redisUrl: redisUrl(), prefix, perMinute: 20, windowMs: 2000 });
      limiters.push(limiter);
      return legacy(sim, { limiter });
    };
    const [a, b] = [replica(), replica()];
    const [idsA, idsB] = await Promise.all([
      allIds(a.pages(group, { type: 'active', limit: 10, mode: 'full' })),
      allIds(b.pages(group, { limit: 10, mode: 'full' })),
    ]);
    expect(new Set(idsA)).toEqual(new Set(sim.world.members(group, 'active')));
    expect(new Set(idsB)).toEqual(new Set(sim.world.members(group)));
    const legacyRequests = sim.requests.filter((r) => r.api === 'legacy');
    expect(legacyRequests.length).toBeGreaterThan(25);
    expect(legacyRequests.filter((r) => r.status === 429)).toEqual([]);
    expect(sim.maxRequestsInAnyWindow(2000)).toBeLessThanOrEqual(20);
    expect(
      maxInAnyWindow(
        legacyRequests.map((r) => r.at),
        2000,
      ),
    ).toBeLessThanOrEqual(20);
  });
});

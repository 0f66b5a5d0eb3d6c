import { afterEach, describe, expect, it } from 'vitest';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import type { RateLimitScope } from '../../src/simulator/server.js';
import { createBudgetLimiter, type BudgetLimiter } from '../../src/ratelimit/budget-limiter.js';
import { createLegacyClient } from '../../src/upstream/legacy/client.js';

const TYPES = ['active', 'unsubscribed', 'bounced'] as const;
const WINDOW_MS = 1_000;
const LIMIT = 5;

const open: Array<Simulator | BudgetLimiter> = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((o) => o.close()));
});

/** Reads `pages` pages of each type side by side, as the worker's passes do; returns the elapsed ms. */
async function readSideBySide(
  model: RateLimitScope,
  pages: number,
): Promise<{ sim: Simulator; limiter: BudgetLimiter; elapsedMs: number }> {
  const sim = await startSimulator({
    subscribers: 3_000,
    groups: 1,
    rateLimit: LIMIT,
    rateLimitWindowMs: WINDOW_MS,
    rateLimitScope: model,
  });
  const limiter = createBudgetLimiter({ mode: 'memory', perMinute: LIMIT, windowMs: WINDOW_MS });
  open.push(sim, limiter);
  const client = createLegacyClient({ baseUrl: sim.url, apiKey: sim.apiKey, apiKeyHeader: sim.apiKeyHeader, limiter });
  const groupId = sim.world.groupIds()[0] ?? '';
  const started = performance.now();
  await Promise.all(
    TYPES.map(async (type) => {
      await client.count(groupId, type);
      let read = 0;
      for await (const page of client.pages(groupId, { type, limit: 20, mode: 'full' })) {
        void page;
        if (++read >= pages) break;
      }
    }),
  );
  return { sim, limiter, elapsedMs: performance.now() - started };
}

describe('the limiter learns the budget model from the rate-limit headers (simulator)', () => {
  it('per endpoint: proves own budgets, reads the types side by side, never a 429', async () => {
    const { sim, limiter, elapsedMs } = await readSideBySide('endpoint', 6);
    expect(sim.requests.filter((r) => r.status === 429)).toHaveLength(0);
    expect(limiter.report().model).toBe('endpoint');
    expect(limiter.report().budgets.filter((b) => b.budget !== 'shared').length).toBeGreaterThanOrEqual(TYPES.length);
    // 21 requests on one shared budget of 5 a second need more than 4 s; side by side about 1.5 s.
    expect(elapsedMs).toBeLessThan(3_500);
    // Never more than the headers allow on any one endpoint's budget.
    const endpoints = new Set(sim.requests.map((r) => r.url.split('?')[0] ?? ''));
    for (const endpoint of endpoints) {
      expect(
        sim.maxRequestsInAnyWindow(WINDOW_MS, (r) => r.url.split('?')[0] === endpoint),
        endpoint,
      ).toBeLessThanOrEqual(LIMIT);
    }
  }, 20_000);

  it('one account budget: proves it shared, keeps to it, never a 429', async () => {
    const { sim, limiter } = await readSideBySide('account', 3);
    expect(sim.requests.filter((r) => r.status === 429)).toHaveLength(0);
    expect(limiter.report().model).toBe('account');
    expect(limiter.report().budgets.map((b) => b.budget)).toEqual(['shared']);
    expect(sim.maxRequestsInAnyWindow(WINDOW_MS)).toBeLessThanOrEqual(LIMIT);
  }, 20_000);

  it('mixed: lists on their own budgets, counts on the shared one, never a 429', async () => {
    const { sim, limiter } = await readSideBySide('mixed', 6);
    expect(sim.requests.filter((r) => r.status === 429)).toHaveLength(0);
    expect(limiter.report().model).toBe('mixed');
    expect(sim.maxRequestsInAnyWindow(WINDOW_MS, (r) => (r.url.split('?')[0] ?? '').endsWith('/count'))).toBeLessThanOrEqual(LIMIT);
  }, 20_000);
});

describe('API_RATE_LIMIT=auto', () => {
  it('one account budget: the shared budget follows what the headers announce, less the reserve, never a 429', async () => {
    const sim = await startSimulator({
      subscribers: 3_000,
      groups: 1,
      rateLimit: 10,
      rateLimitWindowMs: WINDOW_MS,
      rateLimitScope: 'account',
    });
    // Before the first answer only the start value is known: 3 less the reserve = 2 a window.
    const limiter = createBudgetLimiter({ mode: 'memory', perMinute: 'auto', autoStart: 3, windowMs: WINDOW_MS });
    open.push(sim, limiter);
    expect(limiter.report().budgets).toEqual([{ budget: 'shared', perWindow: 2, announcedLimit: null }]);
    const client = createLegacyClient({ baseUrl: sim.url, apiKey: sim.apiKey, apiKeyHeader: sim.apiKeyHeader, limiter });
    const groupId = sim.world.groupIds()[0] ?? '';
    const started = performance.now();
    await Promise.all(TYPES.map((type) => client.count(groupId, type)));
    for (let i = 0; i < 12; i++) await client.count(groupId, TYPES[i % TYPES.length] ?? 'active');
    const elapsedMs = performance.now() - started;
    // 10 announced, less the reserve of 10 % (at least one): 9 a window.
    expect(limiter.report().budgets).toEqual([{ budget: 'shared', perWindow: 9, announcedLimit: null }]);
    expect(limiter.report().model).toBe('account');
    expect(sim.requests.filter((r) => r.status === 429)).toHaveLength(0);
    expect(sim.maxRequestsInAnyWindow(WINDOW_MS)).toBeLessThanOrEqual(9);
    // 15 requests at the start value of 2 a window would take 7 s.
    expect(elapsedMs).toBeLessThan(4_500);
  }, 20_000);
});

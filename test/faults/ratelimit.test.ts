/**
 * Invariant 7 as users run it: two worker processes share one API_RATE_LIMIT through Redis, and the
 * service never sees more than that many requests in any 60 s window.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { useSecondAccount } from './helpers/second-account.js';
import { killAll, startService } from './helpers/service.js';

describe('shared rate limit across worker processes', () => {
  const prefix = uniquePrefix('ratelimit');
  // Its budget is its own: its requests go to its own simulator, never counted against this limit.
  const second = useSecondAccount('ratelimit', { largeIds: true });
  let database: TestDatabase | undefined;
  let sim: Simulator | undefined;

  afterAll(async () => {
    killAll();
    await sim?.close();
    await database?.drop();
    await deleteInstallKeys(prefix);
  });

  it('two workers never exceed API_RATE_LIMIT requests in any minute', async () => {
    const limit = 30;
    database = await createTestDatabase();
    // The service counts with a sliding window over all legacy routes: the strictest reading.
    sim = await startSimulator({
      subscribers: 4_000,
      groups: 2,
      rateLimit: limit,
      rateLimitMode: 'sliding',
      rateLimitScope: 'global',
      rateLimitWindowMs: 60_000,
    });
    const env = {
      DATABASE_URL: database.url,
      REDIS_URL: redisUrl(),
      REDIS_PREFIX: prefix,
      MAILER_LEGACY_URL: sim.url,
      MAILER_API_KEY: sim.apiKey,
      SYNC_GROUPS: sim.world.groupIds().join(','),
      SYNC_PAGE_SIZE: '20',
      SYNC_EVERY: '10s',
      RECONCILE_EVERY: '1h',
      API_RATE_LIMIT: String(limit),
      PORT: '0',
      LOG_LEVEL: 'warn',
    };
    for (let i = 0; i < 2; i++) startService('worker', env, 'ratelimit');
    // A little over one window, so that the sliding count is checked across a full minute of load.
    await new Promise((r) => setTimeout(r, 90_000));
    const legacy = sim.requests.filter((r) => r.api === 'legacy');
    // Enough demand to have gone over the limit without a shared limiter (each worker alone would).
    expect(legacy.length).toBeGreaterThanOrEqual(limit);
    expect(sim.maxRequestsInAnyWindow(60_000)).toBeLessThanOrEqual(limit);
    expect(legacy.filter((r) => r.status === 429)).toHaveLength(0);
    await second.expectMirrored(database.url, [sim.world]);
  }, 240_000);
});

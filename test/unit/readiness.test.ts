/**
 * /readyz costs a bounded number of checks whatever the request rate (docs/operations.md, "Public
 * surface"): concurrent callers share one check in flight, and its result is kept briefly.
 */
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../src/ground/log.js';
import { buildServer, type ReadinessCheck } from '../../src/http/server.js';

const { logger } = createLogger({ level: 'silent' });

function countingCheck(fail = false): ReadinessCheck & { calls: number } {
  const check = {
    name: 'postgres',
    calls: 0,
    async check() {
      check.calls += 1;
      await new Promise((resolve) => setTimeout(resolve, 20));
      if (fail) throw new Error('connect ECONNREFUSED 10.1.2.3:5432');
    },
  };
  return check;
}

describe('/readyz', () => {
  it('300 calls, 30 at a time, on a frozen clock: one check in all', async () => {
    const check = countingCheck();
    const app = buildServer({ logger, readiness: [check], public: true, readinessCacheMs: 1_000, now: () => 1_000_000 });
    for (let round = 0; round < 10; round += 1) {
      const answers = await Promise.all(Array.from({ length: 30 }, () => app.inject({ method: 'GET', url: '/readyz' })));
      for (const a of answers) expect(a.json()).toEqual({ status: 'ready' });
    }
    expect(check.calls).toBe(1);
    await app.close();
  });

  it('checks again once the cached result is older than the cache time', async () => {
    let now = 0;
    const check = countingCheck(true);
    const app = buildServer({ logger, readiness: [check], public: true, readinessCacheMs: 1_000, now: () => now });
    expect((await app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(503);
    now = 999;
    expect((await app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(503);
    expect(check.calls).toBe(1);
    now = 1_000;
    const answer = await app.inject({ method: 'GET', url: '/readyz' });
    expect(answer.json()).toEqual({ status: 'unavailable' });
    expect(check.calls).toBe(2);
    await app.close();
  });
});

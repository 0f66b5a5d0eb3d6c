import { describe, expect, it } from 'vitest';
import { createLimiter, isLostStateError, LimiterClosedError, maxInAnyWindow, spacingMs } from '../../src/ratelimit/limiter.js';

describe('limiter arithmetic', () => {
  it('spaces starts so that limit + 1 of them never fit in one window', () => {
    for (const [perWindow, windowMs, safety] of [
      [60, 60_000, 1200],
      [20, 2000, 250],
      [7, 1000, 0],
      [1, 60_000, 10],
    ] as const) {
      const spacing = spacingMs(perWindow, windowMs, safety);
      // perWindow gaps between perWindow + 1 starts already exceed the window.
      expect(perWindow * spacing).toBeGreaterThanOrEqual(windowMs + safety);
      const starts = Array.from({ length: 3 * perWindow + 1 }, (_, i) => i * spacing);
      expect(maxInAnyWindow(starts, windowMs)).toBeLessThanOrEqual(perWindow);
    }
  });

  it('maxInAnyWindow counts windows closed at both ends, anywhere', () => {
    expect(maxInAnyWindow([], 1000)).toBe(0);
    expect(maxInAnyWindow([0, 1000], 1000)).toBe(2);
    expect(maxInAnyWindow([0, 1001], 1000)).toBe(1);
    expect(maxInAnyWindow([5, 0, 3000, 3500, 3999, 4000, 9000], 1000)).toBe(4);
  });

  it('recognises the lost-state errors Bottleneck misses on Redis 7', () => {
    expect(isLostStateError(new Error('ERR SETTINGS_KEY_NOT_FOUND'))).toBe(true);
    expect(isLostStateError(new Error('ERR UNKNOWN_CLIENT'))).toBe(true);
    expect(isLostStateError(new Error('SETTINGS_KEY_NOT_FOUND'))).toBe(true);
    expect(isLostStateError(new Error('ECONNREFUSED'))).toBe(false);
    expect(isLostStateError('ERR UNKNOWN_CLIENT')).toBe(false);
  });

  it('rejects nonsense options', () => {
    expect(() => createLimiter({ mode: 'memory', perMinute: 0 })).toThrow(/perMinute/);
    expect(() => createLimiter({ mode: 'memory', perMinute: 1.5 })).toThrow(/perMinute/);
    expect(() => createLimiter({ mode: 'memory', perMinute: 5, windowMs: -1 })).toThrow(/windowMs/);
    expect(() => createLimiter({ perMinute: 5 })).toThrow(/redisUrl/);
    expect(() => createLimiter({ perMinute: 5, redisUrl: 'redis://127.0.0.1:6379' })).toThrow(/prefix/);
  });
});

describe('in-memory limiter', () => {
  it('spaces starts within one process', async () => {
    // A safety margin of a fifth of the window: a start delayed by a busy event loop by less than that
    // cannot crowd a window (a 20 ms margin failed on a machine loaded 20 on 2 cores).
    const limiter = createLimiter({ mode: 'memory', perMinute: 5, windowMs: 1000, safetyMs: 200 });
    const starts: number[] = [];
    await Promise.all(Array.from({ length: 12 }, () => limiter.schedule(async () => void starts.push(performance.now()))));
    expect(starts).toHaveLength(12);
    expect(maxInAnyWindow(starts, 1000)).toBeLessThanOrEqual(5);
    expect(limiter.stats()).toMatchObject({ mode: 'memory', scheduled: 12, started: 12, waiting: 0, minTimeMs: 240 });
    await limiter.close();
  });

  it('honours a pause', async () => {
    const limiter = createLimiter({ mode: 'memory', perMinute: 100, windowMs: 1000 });
    const before = performance.now();
    await limiter.pauseFor(150);
    let startedAt = 0;
    await limiter.schedule(async () => void (startedAt = performance.now()));
    expect(startedAt - before).toBeGreaterThanOrEqual(150 - 5);
    await limiter.close();
    await expect(limiter.schedule(async () => 1)).rejects.toBeInstanceOf(LimiterClosedError);
  });

  it('passes errors of the job through, untouched, and runs it once', async () => {
    const limiter = createLimiter({ mode: 'memory', perMinute: 100, windowMs: 1000 });
    let runs = 0;
    const boom = new Error('boom');
    await expect(
      limiter.schedule(async () => {
        runs += 1;
        throw boom;
      }),
    ).rejects.toBe(boom);
    expect(runs).toBe(1);
    await limiter.close();
  });
});

describe('limiter cancellation', () => {
  it('an aborted caller is released at once and its job never runs', async () => {
    // The next slot is an hour away: a caller not released at once would outlast the test timeout.
    const limiter = createLimiter({ mode: 'memory', perMinute: 1, windowMs: 3_600_000 });
    await limiter.schedule(async () => undefined);
    const controller = new AbortController();
    let ran = false;
    const pending = limiter.schedule(async () => void (ran = true), { signal: controller.signal });
    setTimeout(() => controller.abort(new Error('shutdown')), 20);
    await expect(pending).rejects.toThrow('shutdown');
    await limiter.close();
    expect(ran).toBe(false);
  });

  it('close() rejects waiting jobs with LimiterClosedError', async () => {
    const limiter = createLimiter({ mode: 'memory', perMinute: 1, windowMs: 10_000 });
    await limiter.schedule(async () => undefined);
    let ran = false;
    // Caught at once: close() may reject it before close() itself resolves.
    const pending = limiter.schedule(async () => void (ran = true)).catch((error: unknown) => error);
    await new Promise((r) => setTimeout(r, 10));
    await limiter.close();
    expect(await pending).toBeInstanceOf(LimiterClosedError);
    expect(ran).toBe(false);
  });
});

describe('rate limit off', () => {
  it('runs at once, counts, and still honours a pause', async () => {
    const limiter = createLimiter({ mode: 'off', perMinute: 1 });
    const results = await Promise.all(Array.from({ length: 50 }, (_, i) => limiter.schedule(async () => i)));
    expect(results).toHaveLength(50);
    expect(limiter.stats()).toMatchObject({ mode: 'off', scheduled: 50, started: 50, perWindow: null, minTimeMs: 0 });
    const before = performance.now();
    await limiter.pauseFor(80);
    await limiter.schedule(async () => undefined);
    expect(performance.now() - before).toBeGreaterThanOrEqual(80 - 5);
    await limiter.close();
  });
});

describe('send ledger: the bound holds however late a start slot fires', () => {
  /** Blocks the event loop, as a busy process does: every timer due meanwhile fires late, at once. */
  const stall = (ms: number) => {
    const until = performance.now() + ms;
    while (performance.now() < until);
  };

  it('an event loop stalled past the safety margin does not crowd a window (memory mode)', async () => {
    // Spacing 220 ms for 5 per second with a 100 ms margin; a 700 ms stall makes three slots fire together.
    const limiter = createLimiter({ mode: 'memory', perMinute: 5, windowMs: 1000, safetyMs: 100 });
    const starts: number[] = [];
    let stalled = false;
    await Promise.all(
      Array.from({ length: 14 }, () =>
        limiter.schedule(async () => {
          starts.push(performance.now());
          if (starts.length === 4 && !stalled) {
            stalled = true;
            setTimeout(() => stall(700), 30);
          }
        }),
      ),
    );
    expect(starts).toHaveLength(14);
    expect(maxInAnyWindow(starts, 1000)).toBeLessThanOrEqual(5);
    expect(limiter.stats().windowWaits).toBeGreaterThan(0);
    await limiter.close();
  });

  it('a request in flight counts until its answer: a slow answer holds the next back', async () => {
    // 1 per 500 ms (spacing 550 ms): the first answer takes 600 ms. The service may have counted the
    // first request as late as its answer, so the second may not go before 600 + 500 ms.
    const limiter = createLimiter({ mode: 'memory', perMinute: 1, windowMs: 500, safetyMs: 50 });
    const t0 = performance.now();
    let answeredAt = 0;
    let secondAt = 0;
    await Promise.all([
      limiter.schedule(async () => {
        await new Promise((r) => setTimeout(r, 600));
        answeredAt = performance.now() - t0;
      }),
      limiter.schedule(async () => void (secondAt = performance.now() - t0)),
    ]);
    expect(secondAt).toBeGreaterThanOrEqual(answeredAt + 500 - 2);
    await limiter.close();
  });
});

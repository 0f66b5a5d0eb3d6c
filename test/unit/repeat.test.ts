import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { repeat } from '../../src/ground/repeat.js';

describe('repeat', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('runs after the first delay, then after the delay its outcome picks, never overlapping, until stopped', async () => {
    const runs: number[] = [];
    const errors: unknown[] = [];
    let n = 0;
    const loop = repeat(
      async () => {
        runs.push(Date.now());
        n += 1;
        if (n === 2) throw new Error('boom');
        await new Promise((r) => setTimeout(r, 50)); // a slow run delays the next one
      },
      { firstDelayMs: 10, nextDelayMs: (failed) => (failed ? 1_000 : 100), onError: (e) => errors.push(e) },
    );
    const t0 = Date.now();
    await vi.advanceTimersByTimeAsync(10); // first run at 10, ends at 60
    await vi.advanceTimersByTimeAsync(150); // second at 160: throws
    await vi.advanceTimersByTimeAsync(1_000); // third at 1160
    expect(runs.map((t) => t - t0)).toEqual([10, 160, 1_160]);
    expect(errors).toHaveLength(1);
    loop.stop();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(runs).toHaveLength(3);
  });
});

import { describe, expect, it } from 'vitest';
import { createLoginThrottle } from '../../src/http/throttle.js';

describe('login throttle', () => {
  it('blocks a client after max failures until its window ends, others untouched, refusal logged once', () => {
    let now = 1_000_000;
    const throttle = createLoginThrottle({ max: 5, windowMs: 60_000, now: () => now });
    for (let i = 0; i < 4; i += 1) throttle.failed('a');
    expect(throttle.retryAfterSeconds('a')).toBe(0);
    throttle.failed('a');
    expect(throttle.retryAfterSeconds('a')).toBe(60);
    expect(throttle.retryAfterSeconds('b')).toBe(0);
    expect([throttle.firstRefusal('a'), throttle.firstRefusal('a')]).toEqual([true, false]);
    now += 59_500;
    expect(throttle.retryAfterSeconds('a')).toBe(1);
    now += 500;
    expect(throttle.retryAfterSeconds('a')).toBe(0);
    throttle.failed('a');
    expect(throttle.retryAfterSeconds('a')).toBe(0);
  });

  it('tracks at most maxClients, forgetting the oldest', () => {
    const throttle = createLoginThrottle({ max: 1, windowMs: 60_000, maxClients: 2 });
    for (const client of ['a', 'b', 'c']) throttle.failed(client);
    expect(['a', 'b', 'c'].map((c) => throttle.retryAfterSeconds(c) > 0)).toEqual([false, true, true]);
  });
});

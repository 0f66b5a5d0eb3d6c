import { describe, expect, it } from 'vitest';
import { createLoginThrottle, type LoginThrottle } from '../../src/http/throttle.js';

/** A failed attempt, settled at once. */
function fail(throttle: LoginThrottle, client: string): void {
  const attempt = throttle.reserve(client);
  if (attempt.allowed) attempt.settle('failed');
}

function retryAfter(throttle: LoginThrottle, client: string): number {
  const attempt = throttle.reserve(client);
  if (!attempt.allowed) return attempt.retryAfterSeconds;
  attempt.settle('succeeded');
  return 0;
}

describe('login throttle', () => {
  it('blocks a client after max failures until its window ends, others untouched, refusal logged once', () => {
    let now = 1_000_000;
    const throttle = createLoginThrottle({ max: 5, windowMs: 60_000, now: () => now });
    for (let i = 0; i < 4; i += 1) fail(throttle, 'a');
    expect(retryAfter(throttle, 'a')).toBe(0);
    fail(throttle, 'a');
    const refused = [throttle.reserve('a'), throttle.reserve('a')];
    expect(refused.map((r) => (r.allowed ? 'allowed' : [r.retryAfterSeconds, r.firstRefusal]))).toEqual([
      [60, true],
      [60, false],
    ]);
    expect(retryAfter(throttle, 'b')).toBe(0);
    now += 59_500;
    expect(retryAfter(throttle, 'a')).toBe(1);
    now += 500;
    expect(retryAfter(throttle, 'a')).toBe(0);
    fail(throttle, 'a');
    expect(retryAfter(throttle, 'a')).toBe(0);
  });

  it('counts an attempt from the moment it is reserved: attempts in flight together cannot pass the limit', () => {
    const throttle = createLoginThrottle({ max: 5, windowMs: 60_000 });
    // 100 attempts that all start before the first one is settled (pipelined, or in parallel).
    const attempts = Array.from({ length: 100 }, () => throttle.reserve('a'));
    expect(attempts.filter((a) => a.allowed)).toHaveLength(5);
    for (const a of attempts) if (a.allowed) a.settle('failed');
    expect(throttle.reserve('a').allowed).toBe(false);
  });

  it('gives a reservation back when the attempt succeeds', () => {
    const throttle = createLoginThrottle({ max: 2, windowMs: 60_000 });
    for (let i = 0; i < 10; i += 1) {
      const attempt = throttle.reserve('a');
      expect(attempt.allowed).toBe(true);
      if (attempt.allowed) attempt.settle('succeeded');
    }
    fail(throttle, 'a');
    const inFlight = throttle.reserve('a');
    expect(throttle.reserve('a').allowed).toBe(false);
    if (inFlight.allowed) inFlight.settle('succeeded');
    expect(throttle.reserve('a').allowed).toBe(true);
  });

  it('settles each reservation once', () => {
    const throttle = createLoginThrottle({ max: 2, windowMs: 60_000 });
    const attempt = throttle.reserve('a');
    if (!attempt.allowed) throw new Error('expected an attempt');
    attempt.settle('failed');
    attempt.settle('failed');
    attempt.settle('succeeded');
    expect(retryAfter(throttle, 'a')).toBe(0);
  });

  it('backstop: after maxPerProcess failures in a window from any addresses, every client waits', () => {
    let now = 0;
    const throttle = createLoginThrottle({ max: 5, windowMs: 60_000, maxPerProcess: 10, now: () => now });
    for (let i = 0; i < 10; i += 1) fail(throttle, `client-${i}`);
    const fresh = throttle.reserve('somebody-new');
    expect(fresh.allowed).toBe(false);
    if (!fresh.allowed) expect(fresh.retryAfterSeconds).toBe(60);
    now += 60_000;
    expect(throttle.reserve('somebody-new').allowed).toBe(true);
  });

  it('tracks at most maxClients, forgetting the oldest', () => {
    const throttle = createLoginThrottle({ max: 1, windowMs: 60_000, maxClients: 2 });
    for (const client of ['a', 'b', 'c']) fail(throttle, client);
    expect(['c', 'b', 'a'].map((c) => retryAfter(throttle, c) > 0)).toEqual([true, true, false]);
  });
});

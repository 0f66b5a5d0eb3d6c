import { describe, expect, it } from 'vitest';
import { RateLimiter, rateLimitHeaders } from '../../src/simulator/rate-limit.js';
import { RequestLog, maxInAnyWindow } from '../../src/simulator/requests.js';
import { rateLimitKey } from '../../src/simulator/server.js';
import { parseSimulatorArgs } from '../../src/simulator/cli.js';

describe('simulator rate limit', () => {
  it('fixed window: allows the limit, then refuses until the window ends', () => {
    let now = 60_000 * 1000 + 10_000;
    const limiter = new RateLimiter(3, 60_000, 'fixed', () => now);
    const decisions = [1, 2, 3, 4].map(() => limiter.consume('k'));
    expect(decisions.map((d) => [d.allowed, d.remaining])).toEqual([
      [true, 2],
      [true, 1],
      [true, 0],
      [false, 0],
    ]);
    expect(decisions[3]?.retryAfterMs).toBe(50_000);
    expect(decisions[3]?.resetAtMs).toBe(60_000 * 1001);
    now += 50_000;
    expect(limiter.consume('k').allowed).toBe(true);
    expect(limiter.consume('other').remaining).toBe(2);
  });

  it('sliding window: a slot frees when the oldest request leaves the window', () => {
    let now = 1_000_000;
    const limiter = new RateLimiter(2, 1_000, 'sliding', () => now);
    limiter.consume('k');
    now += 400;
    limiter.consume('k');
    now += 100;
    const refused = limiter.consume('k');
    expect(refused.allowed).toBe(false);
    expect(refused.retryAfterMs).toBe(500);
    now += 500;
    expect(limiter.consume('k').allowed).toBe(true);
    now += 1;
    expect(limiter.consume('k').allowed).toBe(false);
  });

  it('renders the X-RateLimit headers, and Retry-After only when refused', () => {
    const ok = rateLimitHeaders({ allowed: true, limit: 60, remaining: 59, resetAtMs: 1_700_000_000_500, retryAfterMs: 0 });
    expect(ok).toEqual({
      'X-RateLimit-Limit': '60',
      'X-RateLimit-Remaining': '59',
      'X-RateLimit-Reset': '1700000001',
      'X-RateLimit-Retry-After': '0',
    });
    const refused = rateLimitHeaders({ allowed: false, limit: 60, remaining: 0, resetAtMs: 0, retryAfterMs: 1_200 });
    expect(refused['Retry-After']).toBe('2');
    expect(refused['X-RateLimit-Retry-After']).toBe('2');
  });

  it('rejects nonsense limits', () => {
    expect(() => new RateLimiter(0, 1000, 'fixed')).toThrow(RangeError);
    expect(() => new RateLimiter(5, 0, 'fixed')).toThrow(RangeError);
  });
});

describe('simulator request log', () => {
  it('finds the busiest window', () => {
    expect(maxInAnyWindow([], 1000)).toBe(0);
    expect(maxInAnyWindow([0, 100, 999, 1000, 1001, 5000], 1000)).toBe(4);
    expect(maxInAnyWindow([5, 1, 3, 2, 4], 10)).toBe(5);
    expect(maxInAnyWindow([0, 1000, 2000], 1000)).toBe(1);
  });

  it('counts legacy requests by default', () => {
    const log = new RequestLog();
    const base = { method: 'GET', url: '/', route: null, status: 200, durationMs: 0, fault: null };
    log.add({ ...base, at: 0, api: 'legacy' });
    log.add({ ...base, at: 1, api: 'webhooks' });
    log.add({ ...base, at: 2, api: 'legacy' });
    expect(log.maxInAnyWindow(10)).toBe(2);
    expect(log.maxInAnyWindow(10, () => true)).toBe(3);
  });
});

describe('simulator rate-limit models (--rate-limit-model)', () => {
  const list = '/api/v2/groups/7/subscribers/active?limit=1000&offset=0';
  const otherList = '/api/v2/groups/7/subscribers/junk';
  const count = '/api/v2/groups/7/subscribers/active/count';
  const otherCount = '/api/v2/groups/8/subscribers/count';

  it('endpoint: every method and path is its own budget, whatever the query', () => {
    expect(rateLimitKey('endpoint', 'GET', list)).toBe('GET /api/v2/groups/7/subscribers/active');
    expect(rateLimitKey('endpoint', 'GET', otherList)).not.toBe(rateLimitKey('endpoint', 'GET', list));
    expect(rateLimitKey('endpoint', 'GET', count)).not.toBe(rateLimitKey('endpoint', 'GET', otherCount));
  });

  it('account (and its old name global): one budget for everything', () => {
    for (const scope of ['account', 'global'] as const) {
      const keys = new Set([list, otherList, count, otherCount].map((u) => rateLimitKey(scope, 'GET', u)));
      expect([...keys]).toEqual(['account']);
    }
  });

  it('mixed: lists per endpoint, every count in one shared budget', () => {
    expect(rateLimitKey('mixed', 'GET', count)).toBe(rateLimitKey('mixed', 'GET', otherCount));
    expect(rateLimitKey('mixed', 'GET', list)).toBe('GET /api/v2/groups/7/subscribers/active');
    expect(rateLimitKey('mixed', 'GET', otherList)).not.toBe(rateLimitKey('mixed', 'GET', count));
  });

  it('the command line takes the model and names a bad one', () => {
    expect(parseSimulatorArgs(['--rate-limit-model', 'mixed']).options.rateLimitScope).toBe('mixed');
    expect(parseSimulatorArgs([]).options.rateLimitScope).toBeUndefined();
    expect(() => parseSimulatorArgs(['--rate-limit-model', 'route'])).toThrow(/--rate-limit-model must be one of endpoint, account, mixed/);
  });
});

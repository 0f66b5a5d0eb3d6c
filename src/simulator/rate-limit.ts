/**
 * Legacy rate limit (docs/upstream.md, "Limits": 60 requests per minute, X-RateLimit-* headers, 429). Only
 * accepted requests use up the budget, as in Laravel's throttle: a 429 does not extend the wait.
 */

export type RateLimitMode = 'fixed' | 'sliding';

export interface RateDecision {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** When the window resets (fixed) or the oldest counted request leaves it (sliding), epoch ms. */
  resetAtMs: number;
  /** How long until a request would be accepted; 0 when one would be now. */
  retryAfterMs: number;
}

export class RateLimiter {
  private readonly fixed = new Map<string, { windowStart: number; count: number }>();
  private readonly sliding = new Map<string, number[]>();

  constructor(
    readonly limit: number,
    readonly windowMs: number,
    readonly mode: RateLimitMode,
    private readonly now: () => number = Date.now,
  ) {
    if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`rate limit must be a positive integer, got ${limit}`);
    if (!(windowMs > 0)) throw new RangeError(`rate-limit window must be positive, got ${windowMs}`);
  }

  consume(key: string): RateDecision {
    return this.mode === 'fixed' ? this.consumeFixed(key) : this.consumeSliding(key);
  }

  private consumeFixed(key: string): RateDecision {
    const now = this.now();
    const windowStart = Math.floor(now / this.windowMs) * this.windowMs;
    let state = this.fixed.get(key);
    if (!state || state.windowStart !== windowStart) {
      state = { windowStart, count: 0 };
      this.fixed.set(key, state);
    }
    const allowed = state.count < this.limit;
    if (allowed) state.count++;
    const remaining = this.limit - state.count;
    const resetAtMs = windowStart + this.windowMs;
    return { allowed, limit: this.limit, remaining, resetAtMs, retryAfterMs: remaining > 0 ? 0 : resetAtMs - now };
  }

  private consumeSliding(key: string): RateDecision {
    const now = this.now();
    const stamps = this.sliding.get(key) ?? [];
    while (stamps.length > 0 && (stamps[0] ?? 0) <= now - this.windowMs) stamps.shift();
    const allowed = stamps.length < this.limit;
    if (allowed) stamps.push(now);
    this.sliding.set(key, stamps);
    const remaining = this.limit - stamps.length;
    const resetAtMs = (stamps[0] ?? now) + this.windowMs;
    return { allowed, limit: this.limit, remaining, resetAtMs, retryAfterMs: remaining > 0 ? 0 : resetAtMs - now };
  }
}

/** The X-RateLimit-* headers (and Retry-After on a 429) for a decision. */
export function rateLimitHeaders(decision: RateDecision): Record<string, string> {
  const retryAfter = String(Math.ceil(decision.retryAfterMs / 1000));
  const headers: Record<string, string> = {
    'X-RateLimit-Limit': String(decision.limit),
    'X-RateLimit-Remaining': String(decision.remaining),
    'X-RateLimit-Reset': String(Math.ceil(decision.resetAtMs / 1000)),
    'X-RateLimit-Retry-After': retryAfter,
  };
  if (!decision.allowed) headers['Retry-After'] = retryAfter;
  return headers;
}

/**
 * Invariant 9: when the service rejects the API key (legacy code 1 or 302), polling with that key
 * pauses with a growing back-off (1 min, doubling, capped at 1 h) instead of failing again on every
 * schedule. The pause lives in Redis so every replica honours it; its key is derived from a hash of
 * the API key, so deploying a new key starts fresh, and the key itself is never stored.
 */
import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';

export const AUTH_PAUSE_MIN_MS = 60_000;
export const AUTH_PAUSE_MAX_MS = 3_600_000;

export interface AuthPause {
  until: number;
  failures: number;
  message: string;
  since: number;
}

export function authPauseKey(prefix: string, apiKey: string): string {
  const digest = createHash('sha256').update(apiKey).digest('hex').slice(0, 16);
  return `${prefix}:auth-pause:${digest}`;
}

/** 1 min after the first failure, doubling per consecutive failure, at most 1 h. */
export function authPauseDelay(failures: number, minMs = AUTH_PAUSE_MIN_MS, maxMs = AUTH_PAUSE_MAX_MS): number {
  const exponent = Math.max(0, failures - 1);
  return Math.min(maxMs, minMs * 2 ** Math.min(exponent, 30));
}

export async function readAuthPause(redis: Redis, key: string): Promise<AuthPause | null> {
  const raw = await redis.get(key);
  if (!raw) return null;
  try {
    const parsed = JSON.parse(raw) as Partial<AuthPause>;
    if (typeof parsed.until !== 'number' || typeof parsed.failures !== 'number') return null;
    return {
      until: parsed.until,
      failures: parsed.failures,
      message: String(parsed.message ?? ''),
      since: Number(parsed.since ?? parsed.until),
    };
  } catch {
    return null;
  }
}

/** True while `now` is inside the pause window. */
export function isPaused(pause: AuthPause | null, now = Date.now()): pause is AuthPause {
  return pause !== null && pause.until > now;
}

export async function recordAuthFailure(
  redis: Redis,
  key: string,
  message: string,
  now = Date.now(),
  limits: { minMs?: number; maxMs?: number } = {},
): Promise<AuthPause> {
  const previous = await readAuthPause(redis, key);
  const failures = (previous?.failures ?? 0) + 1;
  const pause: AuthPause = {
    failures,
    message,
    since: previous?.since ?? now,
    until: now + authPauseDelay(failures, limits.minMs, limits.maxMs),
  };
  // Kept well beyond the window so the failure count (and the doubling) survives until a success.
  await redis.set(key, JSON.stringify(pause), 'PX', (limits.maxMs ?? AUTH_PAUSE_MAX_MS) * 4);
  return pause;
}

export async function clearAuthPause(redis: Redis, key: string): Promise<void> {
  await redis.del(key);
}

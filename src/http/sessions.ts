/**
 * Admin sessions, kept server-side in Redis so that logging out ends a session for good (a copied
 * cookie is worthless afterwards) and changing ADMIN_TOKEN ends every session at once.
 *
 * The cookie holds 32 random bytes; Redis holds, under a hash of them (a dump of Redis yields no
 * usable cookie), an HMAC of a fixed text keyed by ADMIN_TOKEN: a session made under another token
 * does not match. Keys expire with the session. When Redis cannot answer, no session is valid (cookie
 * users see the login form; Bearer and Basic keep working).
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/** The part of ioredis the store uses. */
export interface SessionRedis {
  set(key: string, value: string, px: 'PX', ms: number): Promise<unknown>;
  get(key: string): Promise<string | null>;
  del(key: string): Promise<number>;
}

export interface SessionStore {
  /** A new session; resolves to the cookie value. */
  create(): Promise<string>;
  valid(value: string | undefined): Promise<boolean>;
  /** Ends the session (no-op for a value that is not one). */
  revoke(value: string | undefined): Promise<void>;
}

export const SESSION_MS = 12 * 3_600_000;

const VALUE = /^[A-Za-z0-9_-]{43}$/;

export function createSessionStore(redis: SessionRedis, options: { prefix: string; token: string; ttlMs?: number }): SessionStore {
  const ttlMs = options.ttlMs ?? SESSION_MS;
  const binding = createHmac('sha256', options.token).update('subscriber-mirror admin session').digest();
  const keyOf = (value: string) => `${options.prefix}:admin-session:${createHash('sha256').update(value).digest('hex')}`;
  return {
    async create() {
      const value = randomBytes(32).toString('base64url');
      await redis.set(keyOf(value), binding.toString('base64url'), 'PX', ttlMs);
      return value;
    },
    async valid(value) {
      if (!value || !VALUE.test(value)) return false;
      const stored = await redis.get(keyOf(value)).catch(() => null);
      if (stored === null) return false;
      const presented = Buffer.from(stored, 'base64url');
      return presented.length === binding.length && timingSafeEqual(presented, binding);
    },
    async revoke(value) {
      if (value && VALUE.test(value)) await redis.del(keyOf(value));
    },
  };
}

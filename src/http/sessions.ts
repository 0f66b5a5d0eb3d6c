/**
 * Admin sessions, kept server-side in Redis so that logging out ends a session for good (a copied
 * cookie is worthless afterwards) and changing ADMIN_TOKEN ends every session at once.
 *
 * The cookie holds 32 random bytes; Redis holds, under their hash (the session's id: a dump of Redis
 * yields no usable cookie), an HMAC of that id keyed by ADMIN_TOKEN. The value is bound to its own
 * key: whoever can write to Redis but does not hold the token cannot make one, and a value copied
 * under another key (the hash of a cookie of one's choosing) is worthless there; a session made under
 * another token does not match either. Keys expire with the session. When Redis cannot answer, no
 * session is valid (cookie users see the login form; Bearer and Basic keep working).
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
  const idOf = (value: string) => createHash('sha256').update(value).digest('hex');
  const keyOf = (value: string) => `${options.prefix}:admin-session:${idOf(value)}`;
  const bindingOf = (value: string) =>
    createHmac('sha256', options.token)
      .update(`subscriber-mirror admin session ${idOf(value)}`)
      .digest();
  return {
    async create() {
      const value = randomBytes(32).toString('base64url');
      await redis.set(keyOf(value), bindingOf(value).toString('base64url'), 'PX', ttlMs);
      return value;
    },
    async valid(value) {
      if (!value || !VALUE.test(value)) return false;
      const stored = await redis.get(keyOf(value)).catch(() => null);
      if (stored === null) return false;
      const presented = Buffer.from(stored, 'base64url');
      const binding = bindingOf(value);
      return presented.length === binding.length && timingSafeEqual(presented, binding);
    },
    async revoke(value) {
      if (value && VALUE.test(value)) await redis.del(keyOf(value));
    },
  };
}

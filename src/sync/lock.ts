/**
 * A Redis lock per (group, type) so at most one pass runs at a time across all replicas.
 *
 * BullMQ guarantees one worker per job, not one job per (group, type): a scheduled incremental job
 * and a manual backfill, or two ticks of a slow scheduler, can otherwise run the same pass at once.
 * The lock has a TTL (a crashed holder frees it) and is renewed while held; release and renewal
 * compare the owner token so a holder never frees someone else's lock.
 */
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';

const DELETE_IF_OWN = `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end`;

/** Deletes `key` only while it still holds `owner` (a lock's token, a waiting job's mark), so no one removes another's. */
export async function deleteIfOwn(redis: Redis, key: string, owner: string): Promise<void> {
  await redis.eval(DELETE_IF_OWN, 1, key, owner);
}
// Renewal also re-takes a lock whose key vanished (Redis restarted without persistence or was
// flushed: found by the fault suite), so the holder finishes its pass instead of stopping at a
// checkpoint that nothing resumes until the next start. Held by someone else → lost.
const RENEW = `
local v = redis.call('get', KEYS[1])
if v == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
if not v then redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
return 0`;

export interface HeldLock {
  /** Resolves false when the lock was lost (expired and taken); the holder should stop. */
  readonly lost: boolean;
  release(): Promise<void>;
}

export interface PassLockOptions {
  ttlMs?: number;
  renewEveryMs?: number;
}

export async function tryAcquirePassLock(redis: Redis, key: string, options: PassLockOptions = {}): Promise<HeldLock | null> {
  // Short enough that a replica killed mid-pass (kill -9) blocks its (group, type) only briefly.
  const ttlMs = options.ttlMs ?? 20_000;
  const token = randomUUID();
  const ok = await redis.set(key, token, 'PX', ttlMs, 'NX');
  if (ok !== 'OK') return null;
  let lost = false;
  const timer = setInterval(
    () => {
      redis.eval(RENEW, 1, key, token, String(ttlMs)).then(
        (renewed) => {
          if (Number(renewed) !== 1) lost = true;
        },
        () => {
          // Redis briefly unreachable: keep trying; the TTL bounds how long a dead holder blocks others.
        },
      );
    },
    options.renewEveryMs ?? Math.floor(ttlMs / 3),
  );
  timer.unref();
  return {
    get lost() {
      return lost;
    },
    async release() {
      clearInterval(timer);
      await deleteIfOwn(redis, key, token).catch(() => {});
    },
  };
}

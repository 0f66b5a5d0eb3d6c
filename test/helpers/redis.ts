/**
 * Per-file Redis isolation: a unique key prefix for BullMQ and the limiter. Tests never flush a
 * shared Redis; they delete only their own prefix.
 */
import { inject } from 'vitest';
import { Redis } from 'ioredis';

export function redisUrl(): string {
  return inject('redisUrl');
}

export function uniquePrefix(label = 'test'): string {
  return `smt-${inject('runId')}-${label}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
}

/** Deletes every key under the prefix (SCAN, not KEYS, so it is safe on a shared server). */
export async function deletePrefix(prefix: string): Promise<void> {
  const redis = new Redis(redisUrl(), { lazyConnect: true, maxRetriesPerRequest: 1 });
  await redis.connect();
  try {
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
      cursor = next;
      if (keys.length > 0) await redis.del(...keys);
    } while (cursor !== '0');
  } finally {
    redis.disconnect();
  }
}

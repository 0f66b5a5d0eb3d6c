/**
 * Deleting the keys under a prefix, without vitest, so the benches can use it too.
 */
import { Redis } from 'ioredis';

/** Deletes every key under the prefix (SCAN, not KEYS, so it is safe on a shared server); returns how many. */
export async function deleteKeysByPrefix(url: string, prefix: string): Promise<number> {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  await redis.connect();
  try {
    let deleted = 0;
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
      cursor = next;
      if (keys.length > 0) deleted += await redis.del(...keys);
    } while (cursor !== '0');
    return deleted;
  } finally {
    redis.disconnect();
  }
}

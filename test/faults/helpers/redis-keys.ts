/**
 * Direct Redis access for the fault scenarios (never through the service's proxy): clearing what a
 * dead worker left behind, and wiping an install's keys the way a Redis restart without persistence
 * does. Keys are found with SCAN under the test's own prefix only (never a flush of the shared server).
 */
import { Redis } from 'ioredis';
import { passLockKey } from '../../../src/sync/worker.js';
import { SYNC_QUEUE } from '../../../src/sync/schedule.js';
import { deleteInstallKeys, redisUrl } from '../../helpers/redis.js';

export async function withRedis<T>(fn: (redis: Redis) => Promise<T>): Promise<T> {
  const redis = new Redis(redisUrl(), { lazyConnect: true, maxRetriesPerRequest: 1 });
  await redis.connect();
  try {
    return await fn(redis);
  } finally {
    redis.disconnect();
  }
}

export interface DeadWorkerCleanup {
  passLockDeleted: boolean;
  /** Active sync jobs whose lock was dropped and which were marked stalled. */
  staleJobs: string[];
}

/**
 * What time does for a worker killed with SIGKILL, without waiting for it:
 * - its pass lock (`${prefix}:pass-lock:g…:type`, TTL 20 s) expires;
 * - BullMQ's lock of its active job (lockDuration 30 s) expires, and a stalled check (every 30 s in
 *   every live worker) has marked the job; the next check then moves it back to wait (or fails it
 *   when it stalled more than maxStalledCount times).
 * Deleting those keys, marking the jobs and clearing the check's throttle key is exactly the state
 * 30–60 s after the kill, which the restarted worker's first stalled check acts on at once. Nothing
 * else is touched: the job, its data and the dedupe key stay as the dead worker left them.
 */
export async function expireDeadWorker(prefix: string, groupId: string, type: string): Promise<DeadWorkerCleanup> {
  return withRedis(async (redis) => {
    const passLockDeleted = (await redis.del(passLockKey(prefix, groupId, type))) === 1;
    const queueKey = (suffix: string) => `${prefix}:${SYNC_QUEUE}:${suffix}`;
    const active = await redis.lrange(queueKey('active'), 0, -1);
    for (const jobId of active) {
      await redis.del(queueKey(`${jobId}:lock`));
      await redis.sadd(queueKey('stalled'), jobId);
    }
    await redis.del(queueKey('stalled-check'));
    return { passLockDeleted, staleJobs: active };
  });
}

/** Every key of the install (BullMQ queues, schedulers, locks, auth pause) and of its limiter (`b_<prefix>`). */
export function wipeInstall(prefix: string): Promise<number> {
  return deleteInstallKeys(prefix);
}

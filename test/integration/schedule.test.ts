import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tryAcquirePassLock } from '../../src/sync/lock.js';
import { createSyncQueue, enqueueBackfill, fullPassKey, restoreMissingSchedules, syncSchedules } from '../../src/sync/schedule.js';
import { authPauseKey, clearAuthPause, isPaused, readAuthPause, recordAuthFailure } from '../../src/sync/auth-pause.js';
import { deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

const noFullPasses = () => Promise.resolve(new Map<string, number>());

describe('poll scheduling', () => {
  const prefix = uniquePrefix('schedule');
  const connection = { url: redisUrl() };
  const queue = createSyncQueue(connection, prefix);
  let redis: Redis;

  beforeAll(() => {
    redis = new Redis(redisUrl());
  });

  afterAll(async () => {
    await queue.close();
    redis.disconnect();
    await deletePrefix(prefix);
  });

  it('creates one incremental and one full scheduler per group × type, idempotently', async () => {
    const config = { groups: ['1', '2'], types: ['active', 'bounced'] as const, everyMs: 60_000, reconcileEveryMs: 3_600_000 };
    const first = await syncSchedules(queue, { ...config, types: [...config.types] });
    expect(first.upserted.sort()).toEqual([
      'full-g1-active',
      'full-g1-bounced',
      'full-g2-active',
      'full-g2-bounced',
      'incremental-g1-active',
      'incremental-g1-bounced',
      'incremental-g2-active',
      'incremental-g2-bounced',
    ]);
    await syncSchedules(queue, { ...config, types: [...config.types] });
    const schedulers = await queue.getJobSchedulers(0, -1);
    expect(schedulers).toHaveLength(8);
    const incremental = schedulers.find((s) => s.key === 'incremental-g1-active');
    expect(Number(incremental?.every)).toBe(60_000);
  });

  it('removes schedulers of groups and types no longer configured', async () => {
    const changes = await syncSchedules(queue, { groups: ['2'], types: ['active'], everyMs: 30_000, reconcileEveryMs: 3_600_000 });
    expect(changes.removed.sort()).toEqual([
      'full-g1-active',
      'full-g1-bounced',
      'full-g2-bounced',
      'incremental-g1-active',
      'incremental-g1-bounced',
      'incremental-g2-bounced',
    ]);
    const keys = (await queue.getJobSchedulers(0, -1)).map((s) => s.key).sort();
    expect(keys).toEqual(['full-g2-active', 'incremental-g2-active']);
    await syncSchedules(queue, { groups: [], types: ['active'], everyMs: 30_000, reconcileEveryMs: 3_600_000 });
    expect(await queue.getJobSchedulers(0, -1)).toHaveLength(0);
  });

  it('re-creates only the schedulers that vanished from Redis, and nothing when all are there', async () => {
    const config = { groups: ['5'], types: ['active' as const, 'junk' as const], everyMs: 45_000, reconcileEveryMs: 3_600_000 };
    await syncSchedules(queue, config);
    expect(await restoreMissingSchedules(queue, config, noFullPasses)).toEqual([]);
    // What a Redis flushed or restarted without persistence leaves: some or all schedulers gone.
    await queue.removeJobScheduler('incremental-g5-junk');
    await queue.removeJobScheduler('full-g5-active');
    expect((await restoreMissingSchedules(queue, config, noFullPasses)).sort()).toEqual(['full-g5-active', 'incremental-g5-junk']);
    const schedulers = await queue.getJobSchedulers(0, -1);
    expect(schedulers.map((s) => s.key).sort()).toEqual(['full-g5-active', 'full-g5-junk', 'incremental-g5-active', 'incremental-g5-junk']);
    expect(Number(schedulers.find((s) => s.key === 'incremental-g5-junk')?.every)).toBe(45_000);
    await syncSchedules(queue, { ...config, groups: [] });
  });

  it('starts a new full scheduler RECONCILE_EVERY after the last completed full pass, or at once if none', async () => {
    const hour = 3_600_000;
    const now = Date.now();
    const config = { groups: ['8', '9'], types: ['active' as const], everyMs: 60_000, reconcileEveryMs: hour };
    // Group 8 completed a full pass 10 minutes ago; group 9 never did; a pass long ago counts as none.
    const lastFull = new Map([[fullPassKey('8', 'active'), now - 10 * 60_000]]);
    await syncSchedules(queue, config, lastFull, now);
    const next = async (id: string) => (await queue.getJobScheduler(id))?.next ?? NaN;
    expect(await next('full-g8-active')).toBeGreaterThanOrEqual(now + 50 * 60_000 - 1_000);
    expect(await next('full-g8-active')).toBeLessThanOrEqual(now + 50 * 60_000 + 1_000);
    expect(await next('full-g9-active')).toBeLessThanOrEqual(Date.now());
    expect(await next('incremental-g8-active')).toBeLessThanOrEqual(Date.now());

    // Restarting keeps the running schedule; a vanished scheduler is put back at the same time.
    await syncSchedules(queue, config, new Map(), Date.now());
    expect(await next('full-g8-active')).toBeGreaterThanOrEqual(now + 50 * 60_000 - 1_000);
    await queue.removeJobScheduler('full-g8-active');
    const restored = await restoreMissingSchedules(queue, config, () => Promise.resolve(lastFull));
    expect(restored).toEqual(['full-g8-active']);
    expect(await next('full-g8-active')).toBeGreaterThanOrEqual(now + 50 * 60_000 - 1_000);

    await queue.removeJobScheduler('full-g9-active');
    await restoreMissingSchedules(queue, config, () => Promise.resolve(new Map([[fullPassKey('9', 'active'), now - 2 * hour]])));
    expect(await next('full-g9-active')).toBeLessThanOrEqual(Date.now());
    await syncSchedules(queue, { ...config, groups: [] });
  });

  it('collapses piled-up backfill requests for the same group and type', async () => {
    const a = await enqueueBackfill(queue, '77', 'active');
    const b = await enqueueBackfill(queue, '77', 'active');
    const c = await enqueueBackfill(queue, '77', 'junk');
    expect(b).toBe(a);
    expect(c).not.toBe(a);
    expect(a).not.toMatch(/:/);
  });

  it('lets one holder at a time take a pass lock, and frees it on release or expiry', async () => {
    const key = `${prefix}:lock:g1:active`;
    // Renewed every 100 ms, a 2 s TTL survives a loaded machine's stalls; the lock must outlive it.
    const ttlMs = 2_000;
    const acquiredAt = Date.now();
    const first = await tryAcquirePassLock(redis, key, { ttlMs, renewEveryMs: 100 });
    expect(first).not.toBeNull();
    expect(await tryAcquirePassLock(redis, key)).toBeNull();
    await waitFor('the first TTL to have run out', () => Date.now() > acquiredAt + ttlMs + 200, 10_000);
    expect(await tryAcquirePassLock(redis, key)).toBeNull(); // renewed past its TTL while held
    expect(first!.lost).toBe(false);
    await first!.release();
    const second = await tryAcquirePassLock(redis, key, { ttlMs: 200, renewEveryMs: 60_000 });
    expect(second).not.toBeNull();
    // A dead holder (no renewal within the test) frees it by TTL: someone else gets it.
    const third = await waitFor('the unrenewed lock to expire', () => tryAcquirePassLock(redis, key, { ttlMs: 30_000 }), 10_000);
    // The expired holder's release must not free the lock someone else now holds.
    await second!.release();
    expect(await tryAcquirePassLock(redis, key)).toBeNull();
    await third.release();
  });

  it('pauses polling after an auth failure with a doubling back-off, and clears on success', async () => {
    const key = authPauseKey(prefix, 'some-api-key');
    expect(key).not.toContain('some-api-key');
    const now = 1_000_000;
    const p1 = await recordAuthFailure(redis, key, 'code 302', now);
    expect(p1.until - now).toBe(60_000);
    const p2 = await recordAuthFailure(redis, key, 'code 302', now);
    expect(p2.until - now).toBe(120_000);
    for (let i = 0; i < 10; i++) await recordAuthFailure(redis, key, 'code 302', now);
    const capped = await readAuthPause(redis, key);
    expect(capped!.until - now).toBe(3_600_000);
    expect(isPaused(capped, now + 1000)).toBe(true);
    expect(isPaused(capped, now + 3_600_001)).toBe(false);
    await clearAuthPause(redis, key);
    expect(await readAuthPause(redis, key)).toBeNull();
  });
});

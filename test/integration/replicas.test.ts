/**
 * The replicas' list in Redis (src/sync/replicas.ts, `joinReplicas`), in-process against the real
 * Redis: replicas see each other and what each serves, one that leaves is gone from the others' list at their next
 * heartbeat, one that stops beating at the end of its time to live, a replica busy handing
 * accounts over keeps beating meanwhile, and replicas that start one after the other deal once.
 */
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/ground/log.js';
import { joinReplicas, liveReplicaReads, liveReplicaServes, replicasKey, type ReplicaSpread } from '../../src/sync/replicas.js';
import { deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

const { logger } = createLogger({ level: 'silent' });
const EVERY_MS = 100;
const TTL_MS = 600;

describe('worker replicas in Redis', () => {
  const redis = new Redis(redisUrl());
  const joined: ReplicaSpread[] = [];

  afterAll(async () => {
    for (const spread of joined) await spread.leave();
    redis.disconnect();
  });

  /** A replica whose every list is recorded; `slow` makes its hand-overs take that long. */
  const join = async (namespace: string, id: string, slow = 0) => {
    const lists: string[][] = [];
    const spread = await joinReplicas({
      redis,
      namespace,
      id,
      serves: [`${id}-declared`, 'shared'],
      logger,
      everyMs: EVERY_MS,
      ttlMs: TTL_MS,
      async onReplicas(replicas) {
        lists.push([...replicas]);
        if (slow > 0 && lists.length > 1) await new Promise((r) => setTimeout(r, slow));
        return [`${id}-reads-${replicas.length}`];
      },
    });
    joined.push(spread);
    return { spread, lists, last: () => lists.at(-1) };
  };

  it('sees each replica that joins and each that leaves', async () => {
    const namespace = uniquePrefix('replicas');
    const a = await join(namespace, 'a');
    expect(a.last()).toEqual(['a']);
    const b = await join(namespace, 'b');
    expect(b.last()).toEqual(['a', 'b']);
    // What each serves is said from its first heartbeat on, before any hand-over.
    expect(Object.fromEntries(await liveReplicaServes(redis, namespace, TTL_MS))).toEqual({
      a: ['a-declared', 'shared'],
      b: ['b-declared', 'shared'],
    });
    await waitFor('a seeing b', async () => (a.last()?.length === 2 ? true : undefined), 5_000, 20);
    // Each one's heartbeats publish what it said it reads.
    await waitFor(
      'both publishing what they read with two replicas',
      async () => {
        const reads = await liveReplicaReads(redis, namespace, TTL_MS);
        return reads.get('a')?.[0] === 'a-reads-2' && reads.get('b')?.[0] === 'b-reads-2' ? true : undefined;
      },
      5_000,
      20,
    );
    await b.spread.leave();
    await waitFor('a alone again', async () => (a.last()?.length === 1 ? true : undefined), 5_000, 20);
    expect(await redis.zrange(replicasKey(namespace), 0, -1)).toEqual(['a']);
    expect([...(await liveReplicaReads(redis, namespace, TTL_MS)).keys()]).toEqual(['a']);
    expect([...(await liveReplicaServes(redis, namespace, TTL_MS)).keys()]).toEqual(['a']);
    await deletePrefix(namespace);
  });

  it('lets replicas that start one after the other, each within a few heartbeats of the one before, deal once', async () => {
    const namespace = uniquePrefix('replicas');
    // As replicas started together arrive on a busy host, each migrating under a lock after the one
    // before: 1.5 heartbeats apart, so a single heartbeat's wait would not see the next one coming.
    const gapMs = Math.round(1.5 * EVERY_MS);
    const late = (ms: number, id: string) => new Promise((r) => setTimeout(r, ms)).then(() => join(namespace, id));
    const [a, b, c] = await Promise.all([join(namespace, 'a'), late(gapMs, 'b'), late(2 * gapMs, 'c')]);
    for (const replica of [a, b, c]) expect(replica.lists[0]).toEqual(['a', 'b', 'c']);
    // No hand-over after: the first list was the one that stayed.
    await new Promise((r) => setTimeout(r, 3 * EVERY_MS));
    for (const replica of [a, b, c]) expect(replica.lists).toEqual([['a', 'b', 'c']]);
    await deletePrefix(namespace);
  });

  it('drops a replica that stopped beating once its time to live ran out', async () => {
    const namespace = uniquePrefix('replicas');
    const a = await join(namespace, 'a');
    // A replica killed without leaving: its entry stays, stamped by Redis's clock, and nothing renews it.
    const [seconds, micros] = await redis.time();
    await redis.zadd(replicasKey(namespace), Number(seconds) * 1000 + Math.floor(Number(micros) / 1000), 'killed');
    await waitFor('a seeing the killed one', async () => (a.last()?.length === 2 ? true : undefined), 5_000, 20);
    const seenAt = Date.now();
    await waitFor('a alone again', async () => (a.last()?.length === 1 ? true : undefined), 5_000, 20);
    expect(Date.now() - seenAt).toBeGreaterThan(TTL_MS / 3);
    expect([...(await liveReplicaReads(redis, namespace, TTL_MS)).keys()]).toEqual(['a']);
    await deletePrefix(namespace);
  });

  it('keeps beating while a hand-over takes longer than its time to live', async () => {
    const namespace = uniquePrefix('replicas');
    const a = await join(namespace, 'a', 3 * TTL_MS);
    const b = await join(namespace, 'b');
    await waitFor('a handing over for b', async () => (a.lists.length >= 2 ? true : undefined), 5_000, 20);
    // All along a's slow hand-over, b keeps seeing it.
    const until = Date.now() + 2 * TTL_MS;
    while (Date.now() < until) {
      expect(b.last()).toEqual(['a', 'b']);
      await new Promise((r) => setTimeout(r, EVERY_MS));
    }
    expect(b.lists.every((l) => l.length === 2)).toBe(true);
    await deletePrefix(namespace);
  });
});

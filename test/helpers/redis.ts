/**
 * Per-file Redis isolation: a unique key prefix for BullMQ and the limiter. Tests never flush a
 * shared Redis; they delete only their own prefix.
 */
import { Redis } from 'ioredis';
import { inject } from 'vitest';
import { deleteKeysByPrefix } from './redis-prefix.js';

export function redisUrl(): string {
  return inject('redisUrl');
}

export function uniquePrefix(label = 'test'): string {
  return `smt-${inject('runId')}-${label}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
}

/** Deletes every key under the prefix (SCAN, not KEYS, so it is safe on a shared server); returns how many. */
export function deletePrefix(prefix: string): Promise<number> {
  return deleteKeysByPrefix(redisUrl(), prefix);
}

/** Open connections whose name (CLIENT SETNAME) starts with `prefix`, counted by name, as Redis lists them. */
export async function connectionsByName(prefix: string): Promise<Record<string, number>> {
  const redis = new Redis(redisUrl());
  try {
    const counts: Record<string, number> = {};
    for (const line of ((await redis.client('LIST')) as string).split('\n')) {
      const name = / name=(\S+) /.exec(line)?.[1];
      if (name?.startsWith(prefix)) counts[name] = (counts[name] ?? 0) + 1;
    }
    return counts;
  } finally {
    redis.disconnect();
  }
}

/** Every key of an install: BullMQ queues, schedulers, locks under `prefix`, its limiter under `b_<prefix>`. */
export async function deleteInstallKeys(prefix: string): Promise<number> {
  return (await deletePrefix(prefix)) + (await deletePrefix(`b_${prefix}`));
}

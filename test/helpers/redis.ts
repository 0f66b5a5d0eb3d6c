/**
 * Per-file Redis isolation: a unique key prefix for BullMQ and the limiter. Tests never flush a
 * shared Redis; they delete only their own prefix.
 */
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

/** Every key of an install: BullMQ queues, schedulers, locks under `prefix`, its limiter under `b_<prefix>`. */
export async function deleteInstallKeys(prefix: string): Promise<number> {
  return (await deletePrefix(prefix)) + (await deletePrefix(`b_${prefix}`));
}

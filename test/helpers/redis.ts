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

/** Deletes every key under the prefix (SCAN, not KEYS, so it is safe on a shared server). */
export async function deletePrefix(prefix: string): Promise<void> {
  await deleteKeysByPrefix(redisUrl(), prefix);
}

/**
 * One erasure run (the worker's timer, docs/security.md, "Personal data and erasure"): erase subscribers out of every
 * configured group past the period, log forgotten ones, then redact the stored deliveries of every
 * erased subscriber not redacted yet.
 */
import { awaitingRedaction, eraseOutOfGroups, logForgotten, markRedacted } from './mirror/erasure.js';
import type { Queryable } from './ground/queryable.js';
import { redactDeliveries } from './webhooks/redact.js';

/** How often the worker runs it: the delay of the two timer paths. */
export const ERASURE_EVERY_MS = 3_600_000;

export interface ErasureOptions {
  groups: readonly string[];
  types: readonly string[];
  outOfGroupsAfterMs: number;
}

export interface ErasureResult {
  erased: number;
  forgotten: number;
  redactedDeliveries: number;
}

/** Subscribers whose deliveries one scan of the inbox redacts. */
const REDACT_BATCH = 500;

export async function runErasure(pool: Queryable, options: ErasureOptions): Promise<ErasureResult> {
  const erased = await eraseOutOfGroups(pool, {
    groups: options.groups,
    types: options.types,
    afterMs: options.outOfGroupsAfterMs,
  });
  const forgotten = await logForgotten(pool);
  let redactedDeliveries = 0;
  for (;;) {
    const ids = await awaitingRedaction(pool, REDACT_BATCH);
    if (ids.length === 0) break;
    redactedDeliveries += await redactDeliveries(pool, ids);
    await markRedacted(pool, ids);
    if (ids.length < REDACT_BATCH) break;
  }
  return { erased: erased.length, forgotten, redactedDeliveries };
}

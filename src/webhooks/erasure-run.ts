/**
 * One erasure run (the worker's timer, docs/security.md, "Personal data and erasure"): erase subscribers out of every
 * configured group past the period, log forgotten ones, then check every erased subscriber again:
 * past versions (whatever HISTORY is or was), activity links, stored deliveries not redacted yet and
 * those received since the last check. What the run erased once stays erased, however late a copy
 * arrives; an apply redacts a forgotten subscriber's delivery itself (`src/webhooks/apply-job.ts`).
 */
import { eraseVersionsOfErased } from '../mirror/history.js';
import { awaitingRedaction, databaseNow, eraseOutOfGroups, logForgotten, markChecked, markRedacted } from '../mirror/erasure.js';
import { eraseActivityLinksOfErased } from '../mirror/store/activity.js';
import type { Queryable } from '../ground/queryable.js';
import { redactDeliveries, redactDeliveriesSince } from './redact.js';

/** How often the worker runs it: the delay of the two timer paths. */
export const ERASURE_EVERY_MS = 3_600_000;

/**
 * How far before the last check the re-check looks at receipt times: a receipt's time is its
 * transaction's start, and one still uncommitted at the last check was invisible to it.
 */
export const RECHECK_MARGIN_MS = 600_000;

export interface ErasureOptions {
  groups: readonly string[];
  types: readonly string[];
  outOfGroupsAfterMs: number;
}

export interface ErasureResult {
  erased: number;
  forgotten: number;
  /** Stored deliveries rewritten (first redactions and late ones). */
  redactedDeliveries: number;
  /** Past versions that still held personal data. */
  erasedVersions: number;
  /** Activity rows whose links still had a query string. */
  erasedLinks: number;
}

/** Subscribers whose deliveries one scan of the inbox redacts. */
const REDACT_BATCH = 500;

export async function runErasure(pool: Queryable, options: ErasureOptions): Promise<ErasureResult> {
  const startedAt = await databaseNow(pool);
  const erased = await eraseOutOfGroups(pool, {
    groups: options.groups,
    types: options.types,
    afterMs: options.outOfGroupsAfterMs,
  });
  const forgotten = await logForgotten(pool);
  const erasedVersions = await eraseVersionsOfErased(pool);
  const erasedLinks = await eraseActivityLinksOfErased(pool);
  let redactedDeliveries = 0;
  for (;;) {
    const ids = await awaitingRedaction(pool, REDACT_BATCH);
    if (ids.length === 0) break;
    redactedDeliveries += await redactDeliveries(pool, ids);
    await markRedacted(pool, ids, startedAt);
    if (ids.length < REDACT_BATCH) break;
  }
  redactedDeliveries += await redactDeliveriesSince(pool, startedAt, RECHECK_MARGIN_MS);
  await markChecked(pool, startedAt);
  return { erased: erased.length, forgotten, redactedDeliveries, erasedVersions, erasedLinks };
}

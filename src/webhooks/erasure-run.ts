/**
 * One erasure run (the worker's timer, docs/security.md, "Personal data and erasure"): erase subscribers out of every
 * configured group past the period, log forgotten ones, then check every erased subscriber again:
 * past versions (whatever HISTORY is or was), activity links, stored deliveries not redacted yet and
 * those received since the last check. What the run erased once stays erased, however late a copy
 * arrives; an apply redacts a forgotten subscriber's delivery itself (`src/webhooks/apply-job.ts`).
 */
import type pg from 'pg';
import { eraseVersions, eraseVersionsOfErased } from '../mirror/history.js';
import {
  awaitingRedaction,
  databaseNow,
  eraseOnRequest,
  eraseOutOfGroups,
  logForgotten,
  markChecked,
  markRedacted,
  markRedactedNow,
} from '../mirror/erasure.js';
import { eraseActivityLinks, eraseActivityLinksOfErased } from '../mirror/store/activity.js';
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

/** What `subscriber-mirror erase` changed, per table. */
export interface RequestedErasure {
  /** `subscribers` rows whose personal columns held data. */
  subscribers: number;
  /** `subscriber_versions_past` rows that held personal data. */
  versions: number;
  /** `subscriber_activity` rows whose links were cut. */
  activityLinks: number;
  /** `webhook_deliveries` bodies redacted. */
  deliveries: number;
  /** Ids newly logged in `erasures` (reason `request`). */
  logged: string[];
}

/**
 * `subscriber-mirror erase` (docs/operations.md, "Erasing a person"): the forget's erasure of `ids`,
 * now and in one transaction: the subscribers marked forgotten and emptied, every past version, the
 * activity links, every stored delivery that carries them (with `emails` scrubbed besides the ones
 * the bodies give them), logged in `erasures`. A second run finds nothing left and changes nothing.
 */
export async function eraseNow(pool: pg.Pool, ids: readonly string[], emails: readonly string[]): Promise<RequestedErasure> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    const { subscribers, logged } = await eraseOnRequest(client, ids);
    const versions = await eraseVersions(client, ids);
    const activityLinks = await eraseActivityLinks(client, ids);
    const deliveries = await redactDeliveries(client, ids, { emails });
    await markRedactedNow(client, ids);
    await client.query('commit');
    return { subscribers, versions, activityLinks, deliveries, logged };
  } catch (error) {
    await client.query('rollback').catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}

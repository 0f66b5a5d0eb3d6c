/**
 * One poll pass for one (group, type) (DESIGN.md "Poll"). Takes its dependencies as arguments; the
 * worker wires them.
 *
 * - incremental: `filters[date_updated][$gt]=<day>` pages until the first short page; the cursor
 *   (max `date_updated` seen) moves only after the whole pass committed (invariant 3).
 * - full: no filter, reads to the first empty page; every page commits together with its offset
 *   checkpoint, so a crashed pass resumes where it stopped and repeats at most one page. After a
 *   complete full pass of every configured type of the group, members nobody listed are removed.
 *
 * The poller never writes mirrored tables itself: rows go through `mirror/normalize` and
 * `mirror/store`.
 */
import type pg from 'pg';
import type { SubscriberType } from '../db/schema.js';
import type { Logger } from '../log.js';
import { addDays, DAY_MS, dayInZone, latestTimestamp } from '../time.js';
import { normalizeLegacySubscriber, SUBSCRIBER_FIELDS, type SubscriberRow } from '../mirror/normalize.js';
import { versionTime } from '../mirror/version.js';
import {
  removeMembersNotSeenSince,
  upsertMemberships,
  upsertSubscribers,
  withTransaction,
  type UpsertCounts,
} from '../mirror/store.js';
import type { LegacyClient, DateFilter } from '../upstream/legacy.js';
import {
  completedFullPassCutoff,
  markRunFailed,
  markRunStarted,
  markRunSucceeded,
  openFullPass,
  readSyncState,
  saveFullCheckpoint,
  saveUpstreamCount,
  type PassMode,
} from './state.js';

/**
 * The service's date filters have undocumented timezone semantics (invariant 4). Shifting the
 * cursor back by the largest offset difference (±14 h) before taking its day makes the filter
 * include every change after the cursor whatever zone the service compares in.
 */
const TIMEZONE_MARGIN_MS = 14 * 3_600_000;

export interface PassDeps {
  pool: pg.Pool;
  legacy: LegacyClient;
  logger: Logger;
  sourceTimezone: string;
  lookbackMs: number;
  pageSize: number;
  /** Every configured type of the group: removal waits for complete full passes of all of them. */
  groupTypes: readonly SubscriberType[];
  /** Reports progress after each committed page (backfill --wait, admin API). */
  onProgress?: (progress: PassProgress) => void | Promise<void>;
  /** Checked after each committed page: a graceful shutdown stops at a checkpoint. */
  shouldStop?: () => boolean;
}

export interface PassProgress {
  mode: PassMode;
  offset: number;
  rowsSeen: number;
  total: number | null;
}

export interface PassResult {
  mode: PassMode;
  rowsSeen: number;
  rowsWritten: number;
  counts: UpsertCounts;
  requests: number;
  removed: number;
  maxUpdatedAt: string | null;
  filterDay: string | null;
}

/** The pass stopped at a checkpoint because the process is shutting down; it resumes later. */
export class PassInterruptedError extends Error {
  constructor(readonly offset: number) {
    super(`pass interrupted by shutdown at offset ${offset}; it resumes from there`);
    this.name = 'PassInterruptedError';
  }
}

/**
 * The `$gt` day for an incremental pass: the cursor minus the timezone margin, as a day in the
 * source timezone, minus the lookback (at least one day, so that a service reading `$gt D` as
 * "after the whole day D" still includes the cursor's own day).
 */
export function incrementalFilterDay(cursor: string, lookbackMs: number, sourceTimezone: string): string {
  const shifted = Date.parse(cursor) - TIMEZONE_MARGIN_MS;
  if (Number.isNaN(shifted)) throw new TypeError(`cursor "${cursor}" is not a timestamp`);
  const day = dayInZone(shifted, sourceTimezone);
  const lookbackDays = Math.max(1, Math.ceil(lookbackMs / DAY_MS));
  return addDays(day, -lookbackDays);
}

/**
 * A page's rows as versions: normalized, and alive. The service lists only subscribers that are not
 * deleted, so a listed version asserts `deleted_at` null: when it is newer than a stored deletion
 * (a restore the webhooks did not announce) the subscriber is current again; an older one is
 * skipped by the version guard and the deletion stands.
 */
function listedRows(deps: PassDeps, raws: readonly Record<string, unknown>[]): SubscriberRow[] {
  return raws.map((raw) => {
    const row = normalizeLegacySubscriber(raw, { sourceTimezone: deps.sourceTimezone });
    return { ...row, provided: SUBSCRIBER_FIELDS.filter((f) => f === 'deletedAt' || row.provided.includes(f)) };
  });
}

function addCounts(into: UpsertCounts, more: UpsertCounts): void {
  into.inserted += more.inserted;
  into.updated += more.updated;
  into.unchanged += more.unchanged;
  into.skipped += more.skipped;
}

/**
 * Writes one page (subscribers + memberships, plus the checkpoint for full passes) in one
 * transaction. A malformed row fails the page: wrongly shaped data is an error, never data.
 */
async function commitPage(
  deps: PassDeps,
  groupId: string,
  type: SubscriberType,
  rows: SubscriberRow[],
  full: { seenAt: string; nextOffset: number } | null,
): Promise<UpsertCounts> {
  return withTransaction(deps.pool, async (client) => {
    const counts = await upsertSubscribers(client, rows);
    await upsertMemberships(
      client,
      groupId,
      rows.map((r) => ({ subscriberId: r.values.id, type, at: versionTime(r.values) })),
      full ? { via: 'poll', seenAt: full.seenAt } : { via: 'poll' },
    );
    if (full) await saveFullCheckpoint(client, groupId, type, full.nextOffset);
    return counts;
  });
}

export async function runPass(
  deps: PassDeps,
  groupId: string,
  type: SubscriberType,
  requestedMode: PassMode,
): Promise<PassResult> {
  const log = deps.logger.child({ groupId, type });
  const state = await readSyncState(deps.pool, groupId, type);
  // Without a cursor there is nothing to be incremental from: the first pass is a full one.
  const mode: PassMode = requestedMode === 'incremental' && !state?.cursor ? 'full' : requestedMode;
  await markRunStarted(deps.pool, groupId, type, mode);
  log.info({ mode }, 'pass started');
  const requestsBefore = deps.legacy.stats().requests;
  const counts: UpsertCounts = { inserted: 0, updated: 0, unchanged: 0, skipped: 0 };
  let rowsSeen = 0;
  let maxUpdatedAt: string | null = null;
  let effectiveLimit: number | null = null;
  const requests = () => deps.legacy.stats().requests - requestsBefore;

  try {
    let filterDay: string | null = null;
    let removed = 0;
    let upstreamCount: number | null = null;
    if (mode === 'full') {
      const { startedAt, offset } = await openFullPass(deps.pool, groupId, type);
      upstreamCount = await deps.legacy.count(groupId, type);
      await saveUpstreamCount(deps.pool, groupId, type, upstreamCount);
      if (offset > 0) log.info({ offset }, 'resuming full pass from its checkpoint');
      const pages = deps.legacy.pages(groupId, {
        type,
        limit: deps.pageSize,
        startOffset: offset,
        mode: 'full',
        ...(state?.effectiveLimit ? { effectiveLimit: state.effectiveLimit } : {}),
        onEffectiveLimit: (n) => {
          effectiveLimit = n;
        },
      });
      for await (const page of pages) {
        const rows = listedRows(deps, page.rows);
        const nextOffset = page.offset + page.rows.length;
        addCounts(counts, await commitPage(deps, groupId, type, rows, { seenAt: startedAt, nextOffset }));
        rowsSeen += rows.length;
        for (const r of rows) maxUpdatedAt = latestTimestamp(maxUpdatedAt, r.values.updatedAt);
        await deps.onProgress?.({ mode, offset: nextOffset, rowsSeen, total: upstreamCount });
        if (deps.shouldStop?.()) throw new PassInterruptedError(nextOffset);
      }
    } else {
      filterDay = incrementalFilterDay(state?.cursor as string, deps.lookbackMs, deps.sourceTimezone);
      const filters: DateFilter[] = [{ key: 'date_updated', op: '$gt', date: filterDay }];
      const pages = deps.legacy.pages(groupId, {
        type,
        limit: deps.pageSize,
        mode: 'incremental',
        filters,
        ...(state?.effectiveLimit ? { effectiveLimit: state.effectiveLimit } : {}),
        onEffectiveLimit: (n) => {
          effectiveLimit = n;
        },
      });
      for await (const page of pages) {
        const rows = listedRows(deps, page.rows);
        addCounts(counts, await commitPage(deps, groupId, type, rows, null));
        rowsSeen += rows.length;
        for (const r of rows) maxUpdatedAt = latestTimestamp(maxUpdatedAt, r.values.updatedAt);
        await deps.onProgress?.({ mode, offset: page.offset + page.rows.length, rowsSeen, total: null });
        // An incremental pass has no checkpoint: stopping early just leaves the cursor where it was.
        if (deps.shouldStop?.()) throw new PassInterruptedError(page.offset + page.rows.length);
      }
    }

    const rowsWritten = counts.inserted + counts.updated;
    await markRunSucceeded(deps.pool, groupId, type, {
      mode,
      maxUpdatedAt,
      rowsWritten,
      rowsSeen,
      requests: requests(),
      fullCompleted: mode === 'full',
      effectiveLimit,
      upstreamCount,
    });
    // After the pass is recorded complete, so that it counts towards the removal cutoff.
    if (mode === 'full') removed = await removeUnseenMembers(deps, groupId);
    log.info({ mode, rowsSeen, rowsWritten, removed, requests: requests(), filterDay }, 'pass succeeded');
    return { mode, rowsSeen, rowsWritten, counts, requests: requests(), removed, maxUpdatedAt, filterDay };
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    await markRunFailed(deps.pool, groupId, type, {
      mode,
      error: message,
      rowsWritten: counts.inserted + counts.updated,
      rowsSeen,
      requests: requests(),
    }).catch((e: unknown) => log.error({ err: e }, 'could not record the failed pass'));
    throw error;
  }
}

/**
 * Only a complete full pass of every configured type may conclude that a membership ended: the
 * cutoff is the earliest start among those passes, and a member nobody listed since then is gone.
 */
async function removeUnseenMembers(deps: PassDeps, groupId: string): Promise<number> {
  const cutoff = await completedFullPassCutoff(deps.pool, groupId, deps.groupTypes);
  if (!cutoff) return 0;
  const now = new Date().toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
  let removed = 0;
  for (const type of deps.groupTypes) {
    removed += await removeMembersNotSeenSince(deps.pool, groupId, cutoff, now, { type });
  }
  return removed;
}

/**
 * One full pass of one (group, status) of the current API (docs/upstream-current.md, "Cursor paging
 * while the list changes, and the removal proof"). The API has no date filter, so every pass is a
 * full one: webhooks carry freshness, these passes are the safety net.
 *
 * - The group's count of the status is read first (drift and progress, one request).
 * - Pages follow the service's cursor to its end; each page commits with the next cursor as the
 *   checkpoint (invariant 3), so a crashed or stopped pass resumes at the page it had not committed.
 * - A cursor over the subscriber id skips no member that stays in the list, but a member whose status
 *   changes during a pass can be in no list it read. So one complete pass missing a member only
 *   makes it a candidate; the removal cutoff (`removalCutoff`, the same as the legacy poll's) ends
 *   memberships that two complete passes in a row of every configured status did not list and that
 *   no newer fact (a webhook) covers (invariant 11). A pass that ends early proves nothing.
 */
import type { SubscriberType } from '../db/schema.js';
import { latestTimestamp } from '../ground/time.js';
import { normalizeCurrentSubscriber, SUBSCRIBER_FIELDS, type SubscriberRow } from '../mirror/normalize.js';
import { versionTime } from '../mirror/version.js';
import {
  membersAwaitingProof,
  upsertGroups,
  upsertMemberships,
  upsertSubscribers,
  withTransaction,
  type UpsertCounts,
} from '../mirror/store/index.js';
import type { CurrentClient } from '../upstream/current/client.js';
import { PassInterruptedError, removeUnseenMembers, type PassResult } from './legacy-pass.js';
import type { PassContext, ReadSource } from './source.js';
import { markRunFailed, markRunStarted, markRunSucceeded, openCursorPass, saveCursorCheckpoint, saveUpstreamCount } from './state.js';

export interface CurrentSourceOptions {
  /** A fresh client per pass, so the per-pass request count is exact; all share one limiter. */
  clientFactory: () => CurrentClient;
  /** MAILER_SOURCE_TZ: the zone of the lists' zoneless dates. */
  sourceTimezone: string;
  /** Rows asked for per page (the service may send fewer). */
  pageSize: number;
}

/** The current platform's API as a read source: full passes by cursor only. */
export function currentSource(options: CurrentSourceOptions): ReadSource {
  return {
    name: 'current',
    incremental: false,
    via: 'current',
    runPass: (ctx, groupId, type) => runCurrentPass({ ...ctx, ...options, client: options.clientFactory() }, groupId, type),
  };
}

interface CurrentPassDeps extends PassContext {
  client: CurrentClient;
  sourceTimezone: string;
  pageSize: number;
}

/** Listed rows are alive: a listed version asserts `deleted_at` null (as in the legacy poll). */
function listedRows(deps: CurrentPassDeps, raws: readonly Record<string, unknown>[]): SubscriberRow[] {
  return raws.map((raw) => {
    const row = normalizeCurrentSubscriber(raw, { sourceTimezone: deps.sourceTimezone });
    return {
      ...row,
      provided: SUBSCRIBER_FIELDS.filter((f) => f === 'deletedAt' || row.provided.includes(f)),
    };
  });
}

function addCounts(into: UpsertCounts, more: UpsertCounts): void {
  into.inserted += more.inserted;
  into.updated += more.updated;
  into.unchanged += more.unchanged;
  into.skipped += more.skipped;
}

interface CursorTotals {
  counts: UpsertCounts;
  rowsSeen: number;
  maxVersion: string | null;
  upstreamCount: number | null;
  /** When the pass (perhaps resumed) started: the `seen_at` of what it listed. */
  startedAt: string | null;
}

/** Reads the list from the checkpoint to its end; each page commits with the cursor after it. */
async function commitCursorPages(deps: CurrentPassDeps, groupId: string, type: SubscriberType, totals: CursorTotals): Promise<void> {
  const open = await openCursorPass(deps.pool, groupId, type, { restart: deps.restart ?? false });
  totals.startedAt = open.startedAt;
  // The last page committed and the pass stopped before it was recorded complete: nothing left to read.
  if (open.pages > 0 && open.cursor === null) return;
  if (open.pages > 0) deps.logger.info({ pages: open.pages }, 'resuming full pass from its cursor checkpoint');
  let pages = open.pages;
  for await (const page of deps.client.pages(groupId, {
    status: type,
    limit: deps.pageSize,
    cursor: open.cursor,
  })) {
    const rows = listedRows(deps, page.rows);
    pages += 1;
    const checkpoint = { nextCursor: page.nextCursor, pages };
    const counts = await withTransaction(deps.pool, async (client) => {
      const written = await upsertSubscribers(client, rows);
      const members = rows.map((r) => ({ subscriberId: r.values.id, type, at: versionTime(r.values) }));
      await upsertMemberships(client, groupId, members, { via: 'current', seenAt: open.startedAt });
      await saveCursorCheckpoint(client, groupId, type, checkpoint);
      return written;
    });
    addCounts(totals.counts, counts);
    totals.rowsSeen += rows.length;
    for (const r of rows) totals.maxVersion = latestTimestamp(totals.maxVersion, versionTime(r.values));
    await deps.onProgress?.({
      mode: 'full',
      offset: totals.rowsSeen,
      rowsSeen: totals.rowsSeen,
      total: totals.upstreamCount,
    });
    if (deps.shouldStop?.() && page.nextCursor !== null) throw new PassInterruptedError(pages);
  }
}

/** The group's name and its count of `type` (drift and progress). */
async function readCounts(deps: CurrentPassDeps, groupId: string, type: SubscriberType): Promise<number> {
  const group = await deps.client.group(groupId);
  if (group.name !== null) await upsertGroups(deps.pool, [{ id: group.id, name: group.name }]);
  await saveUpstreamCount(deps.pool, groupId, type, group.counts[type]);
  return group.counts[type];
}

export async function runCurrentPass(deps: CurrentPassDeps, groupId: string, type: SubscriberType): Promise<PassResult> {
  const log = deps.logger.child({ groupId, type, source: 'current' });
  await markRunStarted(deps.pool, groupId, type, 'full');
  log.info({ mode: 'full' }, 'pass started');
  const requestsBefore = deps.client.stats().requests;
  const requests = () => deps.client.stats().requests - requestsBefore;
  const totals: CursorTotals = {
    counts: { inserted: 0, updated: 0, unchanged: 0, skipped: 0 },
    rowsSeen: 0,
    maxVersion: null,
    upstreamCount: null,
    startedAt: null,
  };
  const written = () => totals.counts.inserted + totals.counts.updated;
  try {
    totals.upstreamCount = await readCounts(deps, groupId, type);
    await commitCursorPages({ ...deps, logger: log }, groupId, type, totals);
    await markRunSucceeded(deps.pool, groupId, type, {
      mode: 'full',
      maxUpdatedAt: totals.maxVersion,
      rowsWritten: written(),
      rowsSeen: totals.rowsSeen,
      requests: requests(),
      fullCompleted: true,
      upstreamCount: totals.upstreamCount,
    });
    // After the pass is recorded complete, so that it counts towards the removal cutoff.
    const removed = await removeUnseenMembers(deps.pool, groupId, deps.groupTypes, 'current');
    // Members of this status the pass did not list and no newer fact covers: candidates, proven gone
    // only by the next complete pass (the worker runs it at once: decideAfterPass, passesToProve).
    const awaitingProof = totals.startedAt === null ? null : await membersAwaitingProof(deps.pool, groupId, totals.startedAt, { type });
    log.info(
      {
        mode: 'full',
        rowsSeen: totals.rowsSeen,
        rowsWritten: written(),
        removed,
        awaitingProof: awaitingProof?.count,
        requests: requests(),
      },
      'pass succeeded',
    );
    return {
      mode: 'full',
      rowsSeen: totals.rowsSeen,
      rowsWritten: written(),
      counts: totals.counts,
      requests: requests(),
      removed,
      maxUpdatedAt: totals.maxVersion,
      filterDay: null,
      futureRows: 0,
      gaps: 0,
      stepBacks: 0,
      startedAt: totals.startedAt,
      awaitingProof,
    };
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    await markRunFailed(deps.pool, groupId, type, {
      mode: 'full',
      error: message,
      rowsWritten: written(),
      rowsSeen: totals.rowsSeen,
      requests: requests(),
    }).catch((e: unknown) => log.error({ err: e }, 'could not record the failed pass'));
    throw error;
  }
}

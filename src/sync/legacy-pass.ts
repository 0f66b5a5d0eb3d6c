/**
 * One poll pass for one (group, type) (docs/architecture.md, "Poll path"). Takes its dependencies as arguments; the
 * worker wires them.
 *
 * - incremental: `filters[date_updated][$gt]=<day>` (and, for `unsubscribed`, the same on
 *   `date_unsubscribe`: the service does not always move `date_updated` on an unsubscribe) pages
 *   until a page shorter than any cap the service can have; the cursor (max version time seen)
 *   moves only after the whole pass committed (invariant 3) and never past the service's now plus
 *   the timezone margin, so one row dated in the future cannot stop incremental polling.
 * - full: no filter, overlapping pages to the end of the list; every page commits together with its
 *   offset checkpoint, so a crashed pass resumes where it stopped and repeats at most one page. A
 *   member is removed only when two complete full passes in a row that skipped nothing (every page
 *   joined to the previous one) did not list it and no newer fact about it is stored (invariant 11).
 *
 * The poller never writes mirrored tables itself: rows go through `mirror/normalize` and
 * `mirror/store`.
 */
import type pg from 'pg';
import type { MirrorSource, SubscriberType } from '../db/schema.js';
import type { Logger } from '../ground/log.js';
import { addDays, DAY_MS, dayInZone, formatEpochMs, latestTimestamp } from '../ground/time.js';
import { normalizeLegacySubscriber, SUBSCRIBER_FIELDS, type SubscriberRow } from '../mirror/normalize.js';
import { versionTime } from '../mirror/version.js';
import {
  membersAwaitingProof,
  removeMembersNotSeenSince,
  upsertMemberships,
  upsertSubscribers,
  withTransaction,
  type UpsertCounts,
} from '../mirror/store/index.js';
import type { AwaitingProof } from '../mirror/store/memberships.js';
import type { DateFilter, FilterKey, LegacyClient, LegacyPage, PageCapKnowledge, PageOptions } from '../upstream/legacy/client.js';
import {
  markRunFailed,
  markRunStarted,
  markRunSucceeded,
  openFullPass,
  readPaging,
  readSyncState,
  removalCutoff,
  saveFullCheckpoint,
  savePaging,
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
  /** Full pass: start a new pass even when an older one left a checkpoint open (a backfill is served only by a pass that starts after it). */
  restart?: boolean;
  /** Incremental pass: read every change since this time even when the cursor is later (source.ts, `PassContext`). */
  changedSince?: string;
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
  /** Rows dated after the service's now + the timezone margin: stored, but the cursor did not follow them. */
  futureRows: number;
  /** Full pass: pages that could not be joined to the previous one (then the pass proves no removal). */
  gaps: number;
  /** Full pass: requests spent stepping back because the list moved by more than the overlap. */
  stepBacks: number;
  /** Full pass: when it started (the `seen_at` of what it listed); null for an incremental pass. */
  startedAt: string | null;
  /**
   * Full pass: current members of this group and type it did not list, still awaiting a second
   * pass to prove they left, and the latest time any of them was seen; null for an incremental pass.
   */
  awaitingProof: AwaitingProof | null;
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

/** Canonical UTC timestamp (µs) → epoch ms. */
function epochMs(ts: string): number {
  return Date.parse(`${ts.slice(0, 23)}Z`);
}

/** The filters an incremental pass of `type` reads with: every date the service stamps that type's changes in. */
export function incrementalFilterKeys(type: SubscriberType): FilterKey[] {
  return type === 'unsubscribed' ? ['date_updated', 'date_unsubscribe'] : ['date_updated'];
}

/**
 * What a pass saw, for its cursor: the newest version time (`versionTime`: `date_updated`, or the
 * `date_unsubscribe` of an unsubscribed row when later) among rows not dated after the service's
 * now + the timezone margin. Rows dated later (a clock or timezone error upstream) are stored like
 * any other but only counted here.
 */
class CursorTally {
  maxVersion: string | null = null;
  futureRows = 0;
  ceilingMs: number;

  constructor(nowMs: number) {
    this.ceilingMs = nowMs + TIMEZONE_MARGIN_MS;
  }

  add(rows: readonly SubscriberRow[], serviceTime: number | null): void {
    if (serviceTime !== null) this.ceilingMs = serviceTime + TIMEZONE_MARGIN_MS;
    for (const r of rows) {
      const version = versionTime(r.values);
      if (epochMs(version) > this.ceilingMs) this.futureRows += 1;
      else this.maxVersion = latestTimestamp(this.maxVersion, version);
    }
  }

  get ceiling(): string {
    return formatEpochMs(this.ceilingMs);
  }
}

function minTimestamp(a: string, b: string): string {
  return b < a ? b : a;
}

/**
 * The pass's mode and where an incremental one reads from: the cursor, or `changedSince` when that
 * is earlier (or there is no cursor). With neither there is nothing to be incremental from: the
 * first pass is a full one.
 */
function startingPoint(
  requested: PassMode,
  stored: string | null,
  changedSince: string | undefined,
): { mode: PassMode; cursor: string | null } {
  const since = changedSince === undefined ? null : formatEpochMs(Date.parse(changedSince));
  const cursor = stored === null ? since : since === null ? stored : minTimestamp(stored, since);
  return { mode: requested === 'incremental' && !cursor ? 'full' : requested, cursor };
}

function addCounts(into: UpsertCounts, more: UpsertCounts): void {
  into.inserted += more.inserted;
  into.updated += more.updated;
  into.unchanged += more.unchanged;
  into.skipped += more.skipped;
}

interface FullCheckpoint {
  seenAt: string;
  nextOffset: number;
  tailIds: readonly string[];
  continuous: boolean;
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
  full: FullCheckpoint | null,
): Promise<UpsertCounts> {
  return withTransaction(deps.pool, async (client) => {
    const counts = await upsertSubscribers(client, rows);
    await upsertMemberships(
      client,
      groupId,
      rows.map((r) => ({ subscriberId: r.values.id, type, at: versionTime(r.values) })),
      full ? { via: 'poll', seenAt: full.seenAt } : { via: 'poll' },
    );
    if (full) await saveFullCheckpoint(client, groupId, type, full);
    return counts;
  });
}

function capKnowledgeOf(stored: Awaited<ReturnType<typeof readPaging>>): PageCapKnowledge {
  return { cap: stored.cap, longestPage: stored.longestPage, candidate: stored.candidate };
}

/** What a pass reads: its lists, and what its pages are committed and reported with. */
interface PassPlan {
  /** Each call starts one read of the list (a full pass has one, an incremental one per date filter). */
  reads: Array<() => AsyncGenerator<LegacyPage, void, undefined>>;
  /** Full pass: when it started, the `seen_at` its memberships get; null for an incremental pass (no checkpoint). */
  seenAt: string | null;
  upstreamCount: number | null;
  filterDay: string | null;
}

type PageReadOptions = Pick<PageOptions, 'capKnowledge' | 'onCapKnowledge'>;

/**
 * Opens (or resumes) a full pass, or sets the day an incremental pass filters from. `caps` is read
 * when each read starts, so a read begins with what the reads before it learned.
 */
async function planPass(
  deps: PassDeps,
  log: Logger,
  groupId: string,
  type: SubscriberType,
  mode: PassMode,
  cursor: string | null,
  ceiling: string,
  caps: () => PageReadOptions,
): Promise<PassPlan> {
  if (mode === 'full') {
    const open = await openFullPass(deps.pool, groupId, type, { restart: deps.restart ?? false });
    const upstreamCount = await deps.legacy.count(groupId, type);
    await saveUpstreamCount(deps.pool, groupId, type, upstreamCount);
    if (open.offset > 0) log.info({ offset: open.offset }, 'resuming full pass from its checkpoint');
    const read = () =>
      deps.legacy.pages(groupId, {
        type,
        limit: deps.pageSize,
        startOffset: open.offset,
        startTail: open.tailIds,
        mode: 'full',
        knownLength: upstreamCount,
        ...caps(),
      });
    return { reads: [read], seenAt: open.startedAt, upstreamCount, filterDay: null };
  }
  // A cursor that ran away before this release (or a clock jump here) is read from the ceiling.
  const filterDay = incrementalFilterDay(minTimestamp(cursor as string, ceiling), deps.lookbackMs, deps.sourceTimezone);
  const reads = incrementalFilterKeys(type).map((key) => () => {
    const filters: DateFilter[] = [{ key, op: '$gt', date: filterDay }];
    return deps.legacy.pages(groupId, { type, limit: deps.pageSize, mode: 'incremental', filters, ...caps() });
  });
  return { reads, seenAt: null, upstreamCount: null, filterDay };
}

/** What a pass's pages added up to so far (also reported when it fails). */
interface PassTotals {
  counts: UpsertCounts;
  rowsSeen: number;
  /** Full pass: pages that could not be joined to the previous one. */
  gaps: number;
  stepBacks: number;
  tally: CursorTally;
}

/** One loop for every read of a pass: each page commits (with its checkpoint in a full pass), then reports progress. */
async function commitPages(
  deps: PassDeps,
  log: Logger,
  pass: { groupId: string; type: SubscriberType; mode: PassMode },
  plan: PassPlan,
  totals: PassTotals,
): Promise<void> {
  for (const read of plan.reads) {
    for await (const page of read()) {
      const rows = listedRows(deps, page.rows);
      totals.stepBacks += page.stepBacks ?? 0;
      if (!page.continuous) {
        totals.gaps += 1;
        log.warn({ offset: page.offset }, 'the list shifted by more than the page overlap; this pass proves no removal');
      }
      const checkpoint =
        plan.seenAt === null ? null : { seenAt: plan.seenAt, nextOffset: page.nextOffset, tailIds: page.tail, continuous: page.continuous };
      addCounts(totals.counts, await commitPage(deps, pass.groupId, pass.type, rows, checkpoint));
      totals.rowsSeen += rows.length;
      totals.tally.add(rows, page.serviceTime);
      await deps.onProgress?.({ mode: pass.mode, offset: page.nextOffset, rowsSeen: totals.rowsSeen, total: plan.upstreamCount });
      // A full pass resumes from its checkpoint; an incremental one just leaves the cursor where it was.
      if (deps.shouldStop?.()) throw new PassInterruptedError(page.nextOffset);
    }
  }
}

/** Rows dated past the service's now + the timezone margin are stored, but the cursor does not follow them. */
function warnFutureRows(log: Logger, tally: CursorTally): void {
  if (tally.futureRows === 0) return;
  log.warn(
    { futureRows: tally.futureRows, cursorCeiling: tally.ceiling },
    `${tally.futureRows} row(s) dated after the service's now + ${TIMEZONE_MARGIN_MS / 3_600_000} h; stored, but the cursor does not follow them`,
  );
}

export async function runPass(deps: PassDeps, groupId: string, type: SubscriberType, requestedMode: PassMode): Promise<PassResult> {
  const log = deps.logger.child({ groupId, type });
  const state = await readSyncState(deps.pool, groupId, type);
  const { mode, cursor } = startingPoint(requestedMode, state?.cursor ?? null, deps.changedSince);
  await markRunStarted(deps.pool, groupId, type, mode);
  log.info({ mode }, 'pass started');
  const requestsBefore = deps.legacy.stats().requests;
  const totals: PassTotals = {
    counts: { inserted: 0, updated: 0, unchanged: 0, skipped: 0 },
    rowsSeen: 0,
    gaps: 0,
    stepBacks: 0,
    tally: new CursorTally(Date.now()),
  };
  const { counts, tally } = totals;
  let caps = capKnowledgeOf(await readPaging(deps.pool));
  const capOptions = (): PageReadOptions => ({ capKnowledge: caps, onCapKnowledge: (k) => (caps = k) });
  const requests = () => deps.legacy.stats().requests - requestsBefore;

  try {
    const plan = await planPass(deps, log, groupId, type, mode, cursor, tally.ceiling, capOptions);
    const { upstreamCount, filterDay } = plan;
    await commitPages(deps, log, { groupId, type, mode }, plan, totals);

    const rowsWritten = counts.inserted + counts.updated;
    await markRunSucceeded(deps.pool, groupId, type, {
      mode,
      maxUpdatedAt: tally.maxVersion,
      rowsWritten,
      rowsSeen: totals.rowsSeen,
      requests: requests(),
      fullCompleted: mode === 'full',
      upstreamCount,
      cursorCeiling: tally.ceiling,
      futureRows: tally.futureRows,
      stepBacks: mode === 'full' ? totals.stepBacks : undefined,
    });
    warnFutureRows(log, tally);
    // After the pass is recorded complete, so that it counts towards the removal cutoff.
    const { removed, awaitingProof } = await settleRemovals(deps, groupId, type, plan.seenAt);
    log.info(
      {
        mode,
        rowsSeen: totals.rowsSeen,
        rowsWritten,
        removed,
        gaps: totals.gaps,
        stepBacks: totals.stepBacks,
        awaitingProof: awaitingProof?.count,
        requests: requests(),
        filterDay,
      },
      'pass succeeded',
    );
    return {
      mode,
      rowsSeen: totals.rowsSeen,
      rowsWritten,
      counts,
      requests: requests(),
      removed,
      maxUpdatedAt: tally.maxVersion,
      filterDay,
      futureRows: tally.futureRows,
      gaps: totals.gaps,
      stepBacks: totals.stepBacks,
      startedAt: plan.seenAt,
      awaitingProof,
    };
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    await markRunFailed(deps.pool, groupId, type, {
      mode,
      error: message,
      rowsWritten: counts.inserted + counts.updated,
      rowsSeen: totals.rowsSeen,
      requests: requests(),
    }).catch((e: unknown) => log.error({ err: e }, 'could not record the failed pass'));
    throw error;
  } finally {
    // What the pages taught about the service's page cap is true whatever became of the pass.
    await savePaging(deps.pool, caps).catch((e: unknown) => log.warn({ err: e }, 'could not save the page cap knowledge'));
  }
}

/**
 * After a full pass (started at `seenAt`) is recorded complete: ends what two passes proved gone,
 * and counts the members of its type it did not list (awaiting a confirming pass). Nothing for an
 * incremental pass (`seenAt` null).
 */
async function settleRemovals(
  deps: PassDeps,
  groupId: string,
  type: SubscriberType,
  seenAt: string | null,
): Promise<{ removed: number; awaitingProof: AwaitingProof | null }> {
  if (seenAt === null) return { removed: 0, awaitingProof: null };
  const removed = await removeUnseenMembers(deps.pool, groupId, deps.groupTypes);
  return { removed, awaitingProof: await membersAwaitingProof(deps.pool, groupId, seenAt, { type }) };
}

/**
 * Ends the memberships two complete, gap-free full passes in a row of every configured type did
 * not list (the cutoff is the start of the earlier one; see `removalCutoff`). One pass is no proof:
 * paging over a changing list can skip a member (docs/architecture.md, invariant 11). Both read
 * sources end memberships here; `via` records which one proved it.
 */
export async function removeUnseenMembers(
  pool: PassDeps['pool'],
  groupId: string,
  groupTypes: PassDeps['groupTypes'],
  via: MirrorSource = 'poll',
): Promise<number> {
  const cutoff = await removalCutoff(pool, groupId, groupTypes);
  if (!cutoff) return 0;
  const now = formatEpochMs(Date.now());
  let removed = 0;
  for (const type of groupTypes) removed += await removeMembersNotSeenSince(pool, groupId, cutoff, now, { type, via });
  return removed;
}

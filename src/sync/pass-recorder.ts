/**
 * The bookkeeping of one pass of one (group, type), whatever reads it (docs/architecture.md, "Read
 * sources"). A reader (the legacy pass, the current pass) says only how it reads and commits its
 * pages; `recordPass` does the rest, the same way for every reader:
 *
 * 1. opens the pass's row in the history (`sync_passes`, pass-history.ts) and logs 'pass started';
 * 2. runs the reader, adding up what each committed page wrote and reporting progress after it;
 * 3. when the reader returns, in one transaction: moves the cursor, closes a complete full pass's
 *    checkpoint, closes the row with what the pass did (complete, gap-free, what it swept), and ends
 *    what the removal rule now proves (invariant 11), recording on the row the passes that proved
 *    it; then counts the members awaiting proof, logs 'pass succeeded' and returns the `PassResult`;
 * 4. when the reader throws: closes the row as failed (cursor and checkpoint stay) and rethrows.
 *
 * A reader that lists no complete list (an incremental pass) returns `startedAt: null`: it completes
 * nothing; as a sweep it may still be what the rule was waiting for. Requests are counted on the
 * reader's own client (a fresh one per pass, sharing the limiter), so the figure is the pass's.
 */
import type pg from 'pg';
import type { MirrorSource, PassTrigger, ReadSourceName, SubscriberType } from '../db/schema.js';
import type { Logger } from '../ground/log.js';
import type { PageGate } from '../upstream/page-gate.js';
import type { Queryable } from '../ground/queryable.js';
import { formatEpochMs } from '../ground/time.js';
import {
  membersAwaitingProof,
  removeMembersNotSeenSince,
  withTransaction,
  type AwaitingProof,
  type UpsertCounts,
} from '../mirror/store/index.js';
import { closeRow, openRow, pruneHistory, removalRule, saveRemovals } from './pass-history.js';
import { advanceCursor, closeFullPass, ensureSyncState, type PassMode } from './state.js';

/** How long the pass history keeps rows the removal rule no longer reads (PASS_HISTORY_RETENTION's default). */
export const DEFAULT_HISTORY_RETENTION_MS = 30 * 24 * 3_600_000;

/** What every pass gets from the worker, whatever its source. */
export interface PassContext {
  pool: pg.Pool;
  logger: Logger;
  /** Every configured type of the group: removal waits for complete full passes of all of them. */
  groupTypes: readonly SubscriberType[];
  /** Reports progress after each committed page (backfill --wait, admin API). */
  onProgress?: (progress: PassProgress) => void | Promise<void>;
  /** Checked after each committed page: a graceful shutdown stops at a checkpoint. */
  shouldStop?: () => boolean;
  /** Full pass: start a new pass even when an older one left a checkpoint open (a backfill is served only by a pass that starts after it). */
  restart?: boolean;
  /**
   * Incremental pass: read every change since this time (ISO) even when the cursor is later; without
   * a cursor, read from it instead of turning into a full pass (the sweep between confirming rounds).
   */
  changedSince?: string;
  /** Room for list pages in memory, shared by every pass of the process (page-gate.ts); none = unbounded. */
  pageGate?: PageGate;
  /** Why the pass runs (recorded in the history); null when the caller does not say. */
  trigger?: PassTrigger | null;
  /** How long the history keeps rows the removal rule no longer reads (default 30 days). */
  historyRetentionMs?: number;
}

export interface PassProgress {
  mode: PassMode;
  offset: number;
  rowsSeen: number;
  total: number | null;
}

export interface PassResult {
  /** The pass's row in the history (`sync_passes.id`). */
  passId: number;
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

/** Which pass is recorded, and what it is measured with. */
export interface RecordedPass {
  groupId: string;
  type: SubscriberType;
  mode: PassMode;
  /** The pass's logger (bound to its group and type by the reader, which logs too). */
  log: Logger;
  /** Recorded on the memberships it ends: which source proved them gone. */
  via: MirrorSource;
  /** Recorded in the history: where the pass read. */
  source: ReadSourceName;
  /**
   * The source reads what changed since a time (its incremental passes are sweeps): then a removal
   * in a group of several types also waits for a sweep after the first round (`removalRule`).
   */
  sweeps: boolean;
  /** The reader's own client: the requests it sent while the pass ran are the pass's. */
  client: { stats(): { requests: number } };
}

/** What the recorder hands the reader: the running totals, and the call after each committed page. */
export interface PassTally {
  /** The pass's row in the history, for what the reader records while it reads (the service's count). */
  readonly passId: number;
  readonly counts: UpsertCounts;
  readonly rowsSeen: number;
  /**
   * After a page committed: adds its upsert counts and its rows, then reports progress (`offset`:
   * where the pass stands in the reader's terms; `total`: the upstream count, when known).
   */
  committed(page: { counts: UpsertCounts; rows: number; offset: number; total: number | null }): Promise<void>;
}

/** What the reader found, beyond what the tally counted. Optional fields are the legacy reader's. */
export interface PassReading {
  /**
   * When the complete listing it read started (the `seen_at` of the memberships it wrote); null
   * when it read no complete list (an incremental pass): then it completes no full pass and proves
   * no removal.
   */
  startedAt: string | null;
  /** The newest version time it saw that the cursor may follow (the cursor never moves back). */
  maxUpdatedAt: string | null;
  upstreamCount: number | null;
  /** Whether the complete listing skipped nothing (every page joined the one before); a source without gaps leaves it out. */
  gapFree?: boolean;
  /** Offset paging: pages not joined to the previous one, and requests spent stepping back. */
  gaps?: number;
  stepBacks?: number;
  /** Date filters: the day it filtered from, the ceiling the cursor stops at, rows dated past it. */
  filterDay?: string | null;
  cursorCeiling?: string;
  futureRows?: number;
  /** Date filters: the earliest change time the reading certainly read (it was a sweep since then). */
  sweptSince?: string | null;
}

export function addCounts(into: UpsertCounts, more: UpsertCounts): void {
  into.inserted += more.inserted;
  into.updated += more.updated;
  into.unchanged += more.unchanged;
  into.skipped += more.skipped;
}

function newTally(ctx: Pick<PassContext, 'onProgress'>, mode: PassMode, passId: number): PassTally {
  const tally = {
    passId,
    counts: { inserted: 0, updated: 0, unchanged: 0, skipped: 0 },
    rowsSeen: 0,
    async committed(page: { counts: UpsertCounts; rows: number; offset: number; total: number | null }): Promise<void> {
      addCounts(tally.counts, page.counts);
      tally.rowsSeen += page.rows;
      await ctx.onProgress?.({ mode, offset: page.offset, rowsSeen: tally.rowsSeen, total: page.total });
    },
  };
  return tally;
}

const written = (counts: UpsertCounts): number => counts.inserted + counts.updated;

/** Records one pass around `read` (steps 1 to 4 above). */
export async function recordPass(
  ctx: PassContext,
  pass: RecordedPass,
  read: (tally: PassTally) => Promise<PassReading>,
): Promise<PassResult> {
  const { pool } = ctx;
  const { groupId, type, mode, log } = pass;
  await ensureSyncState(pool, groupId, type);
  const passId = await openRow(pool, { groupId, type, kind: mode, source: pass.source, trigger: ctx.trigger ?? null });
  log.info({ mode, passId }, 'pass started');
  const requestsBefore = pass.client.stats().requests;
  const requests = () => pass.client.stats().requests - requestsBefore;
  const tally = newTally(ctx, mode, passId);
  let reading: PassReading;
  let removed: number;
  try {
    reading = await read(tally);
    removed = await withTransaction(pool, (db) => recordSuccess(db, ctx, pass, passId, reading, tally, requests()));
  } catch (error) {
    // A failed recording rolled back whole: cursor and checkpoint stay where they were, the row says why.
    const message = error instanceof Error ? error.message : String(error);
    const closed = {
      status: 'failed',
      rowsWritten: written(tally.counts),
      rowsSeen: tally.rowsSeen,
      requests: requests(),
      error: message,
    } as const;
    await closeRow(pool, passId, closed).catch((e: unknown) => log.error({ err: e }, 'could not record the failed pass'));
    throw error;
  }
  // Counted after the rule ran: what this pass missed that is not proven gone yet.
  const awaitingProof =
    reading.startedAt === null ? null : await membersAwaitingProof(pool, groupId, reading.startedAt, { type: pass.type });
  await pruneHistory(pool, groupId, type, ctx.historyRetentionMs ?? DEFAULT_HISTORY_RETENTION_MS).catch((e: unknown) =>
    log.warn({ err: e }, 'could not prune the pass history'),
  );
  const result: PassResult = {
    passId,
    mode,
    rowsSeen: tally.rowsSeen,
    rowsWritten: written(tally.counts),
    counts: tally.counts,
    requests: requests(),
    removed,
    maxUpdatedAt: reading.maxUpdatedAt,
    filterDay: reading.filterDay ?? null,
    futureRows: reading.futureRows ?? 0,
    gaps: reading.gaps ?? 0,
    stepBacks: reading.stepBacks ?? 0,
    startedAt: reading.startedAt,
    awaitingProof,
  };
  logSuccess(log, result, reading);
  return result;
}

/**
 * Step 3's transaction: the cursor, the checkpoint, the pass's row, and the removals the rule now
 * proves, all or nothing. Returns the memberships ended.
 */
async function recordSuccess(
  db: Queryable,
  ctx: PassContext,
  pass: RecordedPass,
  passId: number,
  reading: PassReading,
  tally: PassTally,
  requests: number,
): Promise<number> {
  const { groupId, type } = pass;
  const complete = reading.startedAt !== null;
  await advanceCursor(db, groupId, type, reading.maxUpdatedAt, reading.cursorCeiling ?? null);
  if (complete) await closeFullPass(db, groupId, type);
  await closeRow(db, passId, {
    status: 'succeeded',
    listedFrom: reading.startedAt,
    complete,
    gapFree: complete ? (reading.gapFree ?? true) : null,
    readSince: reading.sweptSince ?? null,
    rowsSeen: tally.rowsSeen,
    rowsWritten: written(tally.counts),
    requests,
    upstreamCount: reading.upstreamCount,
    futureRows: reading.futureRows ?? 0,
    stepBacks: complete ? (reading.stepBacks ?? 0) : 0,
    gaps: reading.gaps ?? 0,
  });
  return settleRemovals(db, ctx.groupTypes, pass, passId);
}

/** The 'pass succeeded' line: the fields every pass has, and those of the reading that has them. */
function logSuccess(log: Logger, result: PassResult, reading: PassReading): void {
  log.info(
    {
      mode: result.mode,
      rowsSeen: result.rowsSeen,
      rowsWritten: result.rowsWritten,
      removed: result.removed,
      gaps: reading.gaps,
      stepBacks: reading.stepBacks,
      // A resumed full pass started when it was first opened: what the removal proof counts.
      startedAt: result.startedAt ?? undefined,
      awaitingProof: result.awaitingProof?.count,
      requests: result.requests,
      filterDay: reading.filterDay,
    },
    'pass succeeded',
  );
}

/**
 * Ends what the history now proves gone (`removalRule`: two complete, gap-free full passes of every
 * type since the member was last listed, and a sweep after the first of them where the source
 * sweeps) and records on the pass's row the passes that proved it. Every pass settles, incremental
 * ones included: it may be the sweep the rule was waiting for.
 */
async function settleRemovals(
  db: Queryable,
  groupTypes: readonly SubscriberType[],
  pass: Pick<RecordedPass, 'groupId' | 'via' | 'sweeps'>,
  passId: number,
): Promise<number> {
  const rule = await removalRule(db, pass.groupId, groupTypes, { sweeps: pass.sweeps });
  if (!rule) return 0;
  const now = formatEpochMs(Date.now());
  const removed = await removeMembersNotSeenSince(db, pass.groupId, rule.cutoff, now, {
    types: groupTypes,
    via: pass.via,
    endedBy: passId,
  });
  if (removed > 0) await saveRemovals(db, passId, removed, rule.proof);
  return removed;
}

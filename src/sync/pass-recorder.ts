/**
 * The bookkeeping of one pass of one (group, type), whatever reads it (docs/architecture.md, "Read
 * sources"). A reader (the legacy pass, the current pass) says only how it reads and commits its
 * pages; `recordPass` does the rest, the same way for every reader:
 *
 * 1. marks the run started in `sync_state` and logs 'pass started';
 * 2. runs the reader, adding up what each committed page wrote and reporting progress after it;
 * 3. when the reader returns: marks the run succeeded (a complete listing also completes a full
 *    pass, and a sweep is recorded as one, so that they count towards the removal cutoff), then
 *    settles removals (invariant 11), logs 'pass succeeded' and returns the `PassResult`;
 * 4. when the reader throws: records the failure (cursor and checkpoint stay) and rethrows.
 *
 * A reader that lists no complete list (an incremental pass, a sample) returns `startedAt: null`:
 * nothing is completed; as a sweep it may still complete a proof the full passes left waiting for
 * it. Requests are counted on the reader's own client (a fresh one per pass, sharing the limiter),
 * so the figure is the pass's.
 */
import type pg from 'pg';
import type { MirrorSource, SubscriberType } from '../db/schema.js';
import type { Logger } from '../ground/log.js';
import type { PageGate } from '../upstream/page-gate.js';
import { formatEpochMs } from '../ground/time.js';
import { membersAwaitingProof, removeMembersNotSeenSince, type UpsertCounts } from '../mirror/store/index.js';
import type { AwaitingProof } from '../mirror/store/memberships.js';
import { markRunFailed, markRunStarted, markRunSucceeded, removalCutoff, type PassMode } from './state.js';

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

/** Which pass is recorded, and what it is measured with. */
export interface RecordedPass {
  groupId: string;
  type: SubscriberType;
  mode: PassMode;
  /** The pass's logger (bound to its group and type by the reader, which logs too). */
  log: Logger;
  /** Recorded on the memberships it ends: which source proved them gone. */
  via: MirrorSource;
  /**
   * The source reads what changed since a time (its incremental passes are sweeps): then a removal
   * in a group of several types also waits for a sweep after the first round (`removalCutoff`).
   */
  sweeps: boolean;
  /** The reader's own client: the requests it sent while the pass ran are the pass's. */
  client: { stats(): { requests: number } };
}

/** What the recorder hands the reader: the running totals, and the call after each committed page. */
export interface PassTally {
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

function newTally(ctx: Pick<PassContext, 'onProgress'>, mode: PassMode): PassTally {
  const tally = {
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
  await markRunStarted(pool, groupId, type, mode);
  log.info({ mode }, 'pass started');
  const requestsBefore = pass.client.stats().requests;
  const requests = () => pass.client.stats().requests - requestsBefore;
  const tally = newTally(ctx, mode);
  try {
    const reading = await read(tally);
    const complete = reading.startedAt !== null;
    await markRunSucceeded(pool, groupId, type, {
      mode,
      maxUpdatedAt: reading.maxUpdatedAt,
      rowsWritten: written(tally.counts),
      rowsSeen: tally.rowsSeen,
      requests: requests(),
      fullCompleted: complete,
      upstreamCount: reading.upstreamCount,
      cursorCeiling: reading.cursorCeiling,
      futureRows: reading.futureRows,
      stepBacks: complete ? reading.stepBacks : undefined,
      sweptSince: reading.sweptSince,
    });
    // After the pass is recorded complete, so that it counts towards the removal cutoff.
    const { removed, awaitingProof } = await settleRemovals(ctx, pass, reading.startedAt);
    const result: PassResult = {
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
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    await markRunFailed(pool, groupId, type, {
      mode,
      error: message,
      rowsWritten: written(tally.counts),
      rowsSeen: tally.rowsSeen,
      requests: requests(),
    }).catch((e: unknown) => log.error({ err: e }, 'could not record the failed pass'));
    throw error;
  }
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
 * After a pass is recorded: ends what the passes and sweeps so far proved gone, and, after a
 * complete listing (started at `startedAt`), counts the members of its type it did not list and no
 * newer fact covers. Those are candidates, proven gone only by the next complete pass (the worker
 * runs it at once: `decideAfterPass`, `passesToProve`). An incremental pass ends members too: it may
 * be the sweep the proof was waiting for.
 */
async function settleRemovals(
  ctx: PassContext,
  pass: RecordedPass,
  startedAt: string | null,
): Promise<{ removed: number; awaitingProof: AwaitingProof | null }> {
  const removed = await removeUnseenMembers(ctx.pool, pass, ctx.groupTypes);
  if (startedAt === null) return { removed, awaitingProof: null };
  return { removed, awaitingProof: await membersAwaitingProof(ctx.pool, pass.groupId, startedAt, { type: pass.type }) };
}

/**
 * Ends the memberships two complete, gap-free full passes in a row of every configured type did
 * not list (the cutoff is the start of the earlier one; see `removalCutoff`), once a sweep after the
 * first of them found no newer fact, where the source sweeps. One pass is no proof: paging over a
 * changing list can skip a member (docs/architecture.md, invariant 11). `via` records which source
 * proved it.
 */
async function removeUnseenMembers(
  pool: pg.Pool,
  pass: Pick<RecordedPass, 'groupId' | 'via' | 'sweeps'>,
  groupTypes: readonly SubscriberType[],
): Promise<number> {
  const cutoff = await removalCutoff(pool, pass.groupId, groupTypes, { sweeps: pass.sweeps });
  if (!cutoff) return 0;
  const now = formatEpochMs(Date.now());
  let removed = 0;
  for (const type of groupTypes) removed += await removeMembersNotSeenSince(pool, pass.groupId, cutoff, now, { type, via: pass.via });
  return removed;
}

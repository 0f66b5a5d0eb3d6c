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
 * `mirror/store`. The run's bookkeeping (start, success, removals, failure, the result) is the
 * shared `recordPass` (pass-recorder.ts); this file says only how a legacy pass reads its pages.
 */
import type { SubscriberType } from '../db/schema.js';
import type { Logger } from '../ground/log.js';
import { addDays, DAY_MS, dayInZone, formatEpochMs, latestTimestamp } from '../ground/time.js';
import { listedRow, normalizeLegacySubscriber, type SubscriberRow } from '../mirror/normalize.js';
import { versionTime } from '../mirror/version.js';
import { upsertMemberships, upsertSubscribers, withRetriedTransaction, type UpsertCounts } from '../mirror/store/index.js';
import type { DateFilter, FilterKey, LegacyClient, LegacyPage, PageCapKnowledge, PageOptions } from '../upstream/legacy/client.js';
import { admissionOf } from '../upstream/page-gate.js';
import { PassInterruptedError, recordPass, type PassContext, type PassReading, type PassResult, type PassTally } from './pass-recorder.js';
import { saveUpstreamCount } from './pass-history.js';
import { fullPassContinuous, openFullPass, readCursor, readPaging, saveFullCheckpoint, savePaging, type PassMode } from './state.js';

/**
 * The service's date filters have undocumented timezone semantics (invariant 4). Shifting the
 * cursor back by the largest offset difference (±14 h) before taking its day makes the filter
 * include every change after the cursor whatever zone the service compares in.
 */
const TIMEZONE_MARGIN_MS = 14 * 3_600_000;

/** What the legacy pass needs beyond what every pass gets (`PassContext`). */
export interface PassDeps extends PassContext {
  legacy: LegacyClient;
  sourceTimezone: string;
  lookbackMs: number;
  pageSize: number;
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
 * What an incremental pass from `cursor` certainly reads: every change stamped since the cursor less
 * the timezone margin, because its `$gt` day (`incrementalFilterDay`) is at least a day before the
 * day that time falls in, whichever way the service reads `$gt`.
 */
export function sweptSince(cursor: string): string {
  return formatEpochMs(Date.parse(cursor) - TIMEZONE_MARGIN_MS);
}

/** A page's rows as versions: normalized, and alive (`listedRow`). */
function listedRows(deps: PassDeps, raws: readonly Record<string, unknown>[]): SubscriberRow[] {
  return raws.map((raw) => listedRow(normalizeLegacySubscriber(raw, { sourceTimezone: deps.sourceTimezone })));
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
  return withRetriedTransaction(deps.pool, async (client) => {
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
  /** Incremental pass: the earliest change time its filters certainly read (`sweptSince`). */
  sweptSince: string | null;
}

type PageReadOptions = Pick<PageOptions, 'capKnowledge' | 'onCapKnowledge' | 'memory'>;

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
  passId: number,
): Promise<PassPlan> {
  if (mode === 'full') {
    const open = await openFullPass(deps.pool, groupId, type, { restart: deps.restart ?? false });
    const upstreamCount = await deps.legacy.count(groupId, type);
    await saveUpstreamCount(deps.pool, passId, upstreamCount);
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
    return { reads: [read], seenAt: open.startedAt, upstreamCount, filterDay: null, sweptSince: null };
  }
  // A cursor that ran away before this release (or a clock jump here) is read from the ceiling.
  const from = minTimestamp(cursor as string, ceiling);
  const filterDay = incrementalFilterDay(from, deps.lookbackMs, deps.sourceTimezone);
  const reads = incrementalFilterKeys(type).map((key) => () => {
    const filters: DateFilter[] = [{ key, op: '$gt', date: filterDay }];
    return deps.legacy.pages(groupId, { type, limit: deps.pageSize, mode: 'incremental', filters, ...caps() });
  });
  return { reads, seenAt: null, upstreamCount: null, filterDay, sweptSince: sweptSince(from) };
}

/** What only offset paging and the cursor add up over a pass (the recorder counts rows and writes). */
interface LegacyTotals {
  /** Full pass: pages that could not be joined to the previous one. */
  gaps: number;
  stepBacks: number;
  cursor: CursorTally;
}

/**
 * The pages of `pages`, the next one already asked for while the caller commits this one: with a
 * budget per endpoint a pass's speed is its slots, and a commit that takes most of a slot would
 * otherwise delay every next request by that long. At most two pages are asked for at once, whatever
 * the list's length (with the worker's page gate, the second one's body waits for the first's
 * room). A stop (break or error) waits for the page in flight and ends the read.
 */
export async function* readAhead<T>(pages: AsyncGenerator<T, void, undefined>): AsyncGenerator<T, void, undefined> {
  let next = pages.next();
  try {
    for (;;) {
      const current = await next;
      if (current.done === true) return;
      next = pages.next();
      // Its failure is the caller's when it asks for that page; until then it must not go unhandled.
      next.catch(() => {});
      yield current.value;
    }
  } finally {
    await pages.return(undefined).catch(() => {});
  }
}

/**
 * Commits one page (with its checkpoint in a full pass) and reports progress. Its own function so
 * that the page's rows die with its frame: the loop waiting for the next page must not still hold
 * this one (docs/benchmarks.md, "memory").
 */
async function commitOne(
  deps: PassDeps,
  log: Logger,
  pass: { groupId: string; type: SubscriberType },
  plan: PassPlan,
  page: LegacyPage,
  totals: LegacyTotals,
  tally: PassTally,
): Promise<void> {
  const rows = listedRows(deps, page.rows);
  // The service's own objects are not needed past here; held through the commit, five passes'
  // worth is a few megabytes the garbage collector must carry (docs/benchmarks.md, "memory").
  page.rows = [];
  totals.stepBacks += page.stepBacks ?? 0;
  if (!page.continuous) {
    totals.gaps += 1;
    log.warn({ offset: page.offset }, 'the list shifted by more than the page overlap; this pass proves no removal');
  }
  const checkpoint =
    plan.seenAt === null ? null : { seenAt: plan.seenAt, nextOffset: page.nextOffset, tailIds: page.tail, continuous: page.continuous };
  const counts = await commitPage(deps, pass.groupId, pass.type, rows, checkpoint).finally(() => page.release?.());
  totals.cursor.add(rows, page.serviceTime);
  await tally.committed({ counts, rows: rows.length, offset: page.nextOffset, total: plan.upstreamCount });
}

/** One loop for every read of a pass: each page commits, then a stop is honoured at that checkpoint. */
async function commitPages(
  deps: PassDeps,
  log: Logger,
  pass: { groupId: string; type: SubscriberType },
  plan: PassPlan,
  totals: LegacyTotals,
  tally: PassTally,
): Promise<void> {
  for (const read of plan.reads) {
    for await (const page of readAhead(read())) {
      await commitOne(deps, log, pass, plan, page, totals, tally);
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

/**
 * Reads one pass's pages, from its plan to its last page: what the legacy pass adds to the shared
 * bookkeeping of `recordPass`. `paging` holds the cap knowledge, which the reads update.
 */
async function readLegacyPass(
  deps: PassDeps,
  log: Logger,
  pass: { groupId: string; type: SubscriberType; mode: PassMode; cursor: string | null },
  paging: { caps: PageCapKnowledge | null },
  tally: PassTally,
): Promise<PassReading> {
  const totals: LegacyTotals = { gaps: 0, stepBacks: 0, cursor: new CursorTally(Date.now()) };
  const stored = capKnowledgeOf(await readPaging(deps.pool));
  paging.caps = stored;
  const memory = deps.pageGate ? admissionOf(deps.pageGate) : undefined;
  const readOptions = (): PageReadOptions => ({ capKnowledge: paging.caps ?? stored, onCapKnowledge: (k) => (paging.caps = k), memory });
  const plan = await planPass(deps, log, pass.groupId, pass.type, pass.mode, pass.cursor, totals.cursor.ceiling, readOptions, tally.passId);
  try {
    await commitPages(deps, log, pass, plan, totals, tally);
  } finally {
    // A read-ahead page a stop or an error left uncommitted still holds its room.
    memory?.close();
  }
  warnFutureRows(log, totals.cursor);
  return {
    startedAt: plan.seenAt,
    // Over every run of the pass, a resumed one included: the checkpoint keeps it.
    gapFree: plan.seenAt === null ? undefined : await fullPassContinuous(deps.pool, pass.groupId, pass.type),
    maxUpdatedAt: totals.cursor.maxVersion,
    upstreamCount: plan.upstreamCount,
    gaps: totals.gaps,
    stepBacks: totals.stepBacks,
    filterDay: plan.filterDay,
    sweptSince: plan.sweptSince,
    cursorCeiling: totals.cursor.ceiling,
    futureRows: totals.cursor.futureRows,
  };
}

export async function runPass(deps: PassDeps, groupId: string, type: SubscriberType, requestedMode: PassMode): Promise<PassResult> {
  const log = deps.logger.child({ groupId, type });
  const stored = await readCursor(deps.pool, groupId, type);
  const { mode, cursor } = startingPoint(requestedMode, stored, deps.changedSince);
  const paging: { caps: PageCapKnowledge | null } = { caps: null };
  try {
    return await recordPass(deps, { groupId, type, mode, log, via: 'poll', source: 'legacy', sweeps: true, client: deps.legacy }, (tally) =>
      readLegacyPass(deps, log, { groupId, type, mode, cursor }, paging, tally),
    );
  } finally {
    // What the pages taught about the service's page cap is true whatever became of the pass.
    if (paging.caps)
      await savePaging(deps.pool, paging.caps).catch((e: unknown) => log.warn({ err: e }, 'could not save the page cap knowledge'));
  }
}

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
 *   makes it a candidate; the removal rule (`removalRule`, the same as the legacy poll's) ends
 *   memberships that two complete passes in a row of every configured status did not list and that
 *   no newer fact (a webhook) covers (invariant 11). A pass that ends early proves nothing.
 */
import { SUBSCRIBER_TYPES, type SubscriberType } from '../db/schema.js';
import { formatEpochMs, latestTimestamp } from '../ground/time.js';
import { listedRow, normalizeCurrentSubscriber, type SubscriberRow } from '../mirror/normalize.js';
import { versionTime } from '../mirror/version.js';
import {
  removeMembersNotSeenSince,
  upsertGroups,
  upsertMemberships,
  upsertSubscribers,
  withRetriedTransaction,
  withTransaction,
} from '../mirror/store/index.js';
import type { CurrentClient, CurrentPage } from '../upstream/current/client.js';
import { admissionOf } from '../upstream/page-gate.js';
import { PassInterruptedError, recordPass, type PassContext, type PassResult, type PassTally } from './pass-recorder.js';
import type { Candidates, CheckOutcome, ReadSource } from './source.js';
import { closeRow, openRow, saveRemovals, saveUpstreamCount } from './pass-history.js';
import { openCursorPass, saveCursorCheckpoint } from './state.js';

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
    checkCandidates: (ctx, groupId, candidates) =>
      checkCandidates(
        { pool: ctx.pool, logger: ctx.logger, client: options.clientFactory(), sourceTimezone: options.sourceTimezone },
        groupId,
        candidates,
      ),
  };
}

interface CurrentPassDeps extends PassContext {
  client: CurrentClient;
  sourceTimezone: string;
  pageSize: number;
}

/** A page's rows as versions: normalized, and alive (`listedRow`). */
function listedRows(deps: CurrentPassDeps, raws: readonly Record<string, unknown>[]): SubscriberRow[] {
  return raws.map((raw) => listedRow(normalizeCurrentSubscriber(raw, { sourceTimezone: deps.sourceTimezone })));
}

/**
 * Commits one page with the cursor after it; returns the newest version in it. Its own function so
 * that the page's rows die with its frame: the loop waiting for the next page must not still hold
 * this one (docs/benchmarks.md, "memory").
 */
async function commitCursorPage(
  deps: CurrentPassDeps,
  pass: { groupId: string; type: SubscriberType; seenAt: string; pages: number; upstreamCount: number },
  page: CurrentPage,
  tally: PassTally,
): Promise<string | null> {
  const { groupId, type } = pass;
  const rows = listedRows(deps, page.rows);
  // The service's own objects are not needed past here (see commitOne in legacy-pass.ts).
  page.rows = [];
  const checkpoint = { nextCursor: page.nextCursor, pages: pass.pages };
  const counts = await withRetriedTransaction(deps.pool, async (client) => {
    const written = await upsertSubscribers(client, rows);
    const members = rows.map((r) => ({ subscriberId: r.values.id, type, at: versionTime(r.values) }));
    await upsertMemberships(client, groupId, members, { via: 'current', seenAt: pass.seenAt });
    await saveCursorCheckpoint(client, groupId, type, checkpoint);
    return written;
  }).finally(() => page.release?.());
  let maxVersion: string | null = null;
  for (const r of rows) maxVersion = latestTimestamp(maxVersion, versionTime(r.values));
  await tally.committed({ counts, rows: rows.length, offset: tally.rowsSeen + rows.length, total: pass.upstreamCount });
  return maxVersion;
}

/** Reads the list from the checkpoint to its end; each page commits with the cursor after it. */
async function commitCursorPages(
  deps: CurrentPassDeps,
  groupId: string,
  type: SubscriberType,
  upstreamCount: number,
  tally: PassTally,
): Promise<{ startedAt: string; maxVersion: string | null }> {
  const open = await openCursorPass(deps.pool, groupId, type, { restart: deps.restart ?? false });
  let maxVersion: string | null = null;
  // The last page committed and the pass stopped before it was recorded complete: nothing left to read.
  if (open.pages > 0 && open.cursor === null) return { startedAt: open.startedAt, maxVersion };
  if (open.pages > 0) deps.logger.info({ pages: open.pages }, 'resuming full pass from its cursor checkpoint');
  let pages = open.pages;
  const memory = deps.pageGate ? admissionOf(deps.pageGate) : undefined;
  try {
    for await (const page of deps.client.pages(groupId, { status: type, limit: deps.pageSize, cursor: open.cursor, memory })) {
      pages += 1;
      const pass = { groupId, type, seenAt: open.startedAt, pages, upstreamCount };
      maxVersion = latestTimestamp(maxVersion, await commitCursorPage(deps, pass, page, tally));
      if (deps.shouldStop?.() && page.nextCursor !== null) throw new PassInterruptedError(pages);
    }
  } finally {
    // A page a stop or an error left uncommitted still holds its room.
    memory?.close();
  }
  return { startedAt: open.startedAt, maxVersion };
}

/** The group's name and its count of `type` (drift and progress). */
async function readCounts(deps: CurrentPassDeps, groupId: string, type: SubscriberType, passId: number): Promise<number> {
  const group = await deps.client.group(groupId);
  if (group.name !== null) await upsertGroups(deps.pool, [{ id: group.id, name: group.name }]);
  await saveUpstreamCount(deps.pool, passId, group.counts[type]);
  return group.counts[type];
}

/** One pass: the counts, then the pages by cursor; the bookkeeping is the shared `recordPass`. */
export async function runCurrentPass(deps: CurrentPassDeps, groupId: string, type: SubscriberType): Promise<PassResult> {
  const log = deps.logger.child({ groupId, type, source: 'current' });
  return recordPass(
    deps,
    { groupId, type, mode: 'full', log, via: 'current', source: 'current', sweeps: false, client: deps.client },
    async (tally) => {
      const upstreamCount = await readCounts(deps, groupId, type, tally.passId);
      const { startedAt, maxVersion } = await commitCursorPages({ ...deps, logger: log }, groupId, type, upstreamCount, tally);
      return { startedAt, maxUpdatedAt: maxVersion, upstreamCount };
    },
  );
}

// ---------------------------------------------------------------------------------------------
// The exact proof: one request per candidate (docs/upstream-current.md, "One subscriber")

/** What a check needs: the pool and logger, and a client of its own (its requests are the check's). */
export interface CheckDeps {
  pool: PassContext['pool'];
  logger: PassContext['logger'];
  client: CurrentClient;
  sourceTimezone: string;
}

/** Asks the service about each candidate, then writes what it said for the whole type in one transaction. */
async function checkType(deps: CheckDeps, groupId: string, candidates: Candidates): Promise<CheckOutcome> {
  const { pool, client } = deps;
  const { type } = candidates;
  const requestsBefore = client.stats().requests;
  const rowId = await openRow(pool, { groupId, type, kind: 'check', source: 'current', trigger: 'proof' });
  // Whatever the service answers describes it at or after this time: facts newer than it are kept.
  const checkedFrom = formatEpochMs(Date.now());
  const gone: string[] = [];
  const kept: SubscriberRow[] = [];
  let undecided = 0;
  try {
    for (const id of candidates.ids) {
      const answer = await client.subscriber(id);
      if (!answer.found) gone.push(id);
      else if (answer.groupIds === null) undecided += 1;
      else if (!answer.groupIds.includes(groupId)) gone.push(id);
      else kept.push(listedRow(normalizeCurrentSubscriber(answer.record, { sourceTimezone: deps.sourceTimezone })));
    }
    const requests = client.stats().requests - requestsBefore;
    const removed = await withTransaction(pool, async (db) => {
      const counts = await upsertSubscribers(db, kept);
      const members = kept.map((r) => ({ subscriberId: r.values.id, type: statusOf(r), at: versionTime(r.values) }));
      await upsertMemberships(db, groupId, members, { via: 'current', seenAt: checkedFrom });
      const ended =
        gone.length === 0
          ? 0
          : await removeMembersNotSeenSince(db, groupId, checkedFrom, formatEpochMs(Date.now()), {
              types: [type],
              via: 'current',
              endedBy: rowId,
              ids: gone,
            });
      await closeRow(db, rowId, {
        status: 'succeeded',
        rowsSeen: candidates.ids.length,
        rowsWritten: counts.inserted + counts.updated,
        requests,
      });
      if (ended > 0) await saveRemovals(db, rowId, ended, [candidates.missedBy]);
      return ended;
    });
    return { requests, removed, kept: kept.length, undecided };
  } catch (error) {
    const failed = { status: 'failed', rowsSeen: 0, rowsWritten: 0, requests: client.stats().requests - requestsBefore } as const;
    await closeRow(pool, rowId, { ...failed, error: error instanceof Error ? error.message : String(error) }).catch(() => {});
    throw error;
  }
}

/** The membership type a subscriber's own status says (the group lists it under that status). */
function statusOf(row: SubscriberRow): SubscriberType | null {
  const status = row.values.status;
  return typeof status === 'string' && (SUBSCRIBER_TYPES as readonly string[]).includes(status) ? (status as SubscriberType) : null;
}

/**
 * Checks every candidate of every type, one request each, and ends those the service says left the
 * group. Candidates whose answer lists no groups stay: `undecided` says the rounds must prove them.
 */
export async function checkCandidates(deps: CheckDeps, groupId: string, candidates: readonly Candidates[]): Promise<CheckOutcome> {
  const total: CheckOutcome = { requests: 0, removed: 0, kept: 0, undecided: 0 };
  for (const c of candidates) {
    if (c.ids.length === 0) continue;
    const done = await checkType(deps, groupId, c);
    total.requests += done.requests;
    total.removed += done.removed;
    total.kept += done.kept;
    total.undecided += done.undecided;
  }
  deps.logger.info({ groupId, ...total }, 'removal proof: candidates checked one by one');
  return total;
}

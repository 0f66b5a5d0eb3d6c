/**
 * The audit (docs/operations.md, "The audit"): per (group, type), every `AUDIT_EVERY`, the service's
 * count against the mirror and a sample page read back and compared field by field; what no stamped
 * change explains is a mismatch, counted, logged with ids (never personal data) and repaired.
 *
 * - An audit read is a read like any other: its rows go through the same guarded upsert. A row whose
 *   stamp equals the mirror's to the second but whose content differs (a change the service did not
 *   stamp) is written with the mirror's sub-second stamp, so on that tie the later read wins
 *   (invariant 2's rule for equal version times).
 * - A member the service lists that the mirror lacks is added; members the mirror has that the service
 *   does not list (extras) and count gaps need proof (invariant 11): they schedule a full pass of that
 *   type with its removal proof, at most one per type per audit period.
 * - Requests go through the shared limiter; a pair whose pass is running is skipped (the pass reads it
 *   anyway), and a tick stops when passes of this process wait for the limiter.
 */
import type pg from 'pg';
import type { Redis } from 'ioredis';
import type { SubscriberType } from '../db/schema.js';
import type { Logger } from '../ground/log.js';
import type { Metrics } from '../ground/metrics.js';
import { formatEpochMs } from '../ground/time.js';
import { listedRow, normalizeCurrentSubscriber, normalizeLegacySubscriber, type SubscriberRow } from '../mirror/normalize.js';
import { versionTime } from '../mirror/version.js';
import { upsertMemberships, upsertSubscribers, withTransaction } from '../mirror/store/index.js';
import type { CurrentClient, CurrentGroup } from '../upstream/current/client.js';
import type { LegacyClient } from '../upstream/legacy/client.js';
import {
  announcedChange,
  checkCount,
  classifyRow,
  confirmExtras,
  extraCandidates,
  nextCursor,
  nextOffset,
  pageRange,
  startOffset,
  type AuditClock,
  type IdRange,
  type ListedRow,
  type MirrorRow,
  type PendingExtra,
  type RowFinding,
} from './core.js';
import { membershipNow, mirrorCountAt, mirrorMembersInRange, mirrorRowsFor } from './reads.js';
import {
  emptyTally,
  markFullPassAsked,
  recordAuditResult,
  saveAuditError,
  savePending,
  saveSamplePosition,
  type AuditStateRow,
  type AuditTally,
  type SampleAdvance,
} from './state.js';
import { readSyncState } from '../sync/state.js';

/** How far a count's instant is widened for clock skew between the service and us, and for stamps in whole seconds. */
export const COUNT_MARGIN_MS = 30_000;

/** One sample page as read: normalized rows, where the next sample reads, and the id range it covers (cursor pages). */
export interface SampleRead {
  rows: SubscriberRow[];
  advance: SampleAdvance;
  range: IdRange | null;
}

/** How the audit reads one source. A reader lives for one tick (its counts are read once per group). */
export interface AuditReader {
  readonly name: 'legacy' | 'current';
  count(groupId: string, type: SubscriberType): Promise<number>;
  sample(groupId: string, type: SubscriberType, state: AuditStateRow, limit: number, count: number): Promise<SampleRead>;
  requests(): number;
}

export function legacyAuditReader(client: LegacyClient, sourceTimezone: string): AuditReader {
  return {
    name: 'legacy',
    count: (groupId, type) => client.count(groupId, type),
    async sample(groupId, type, state, limit, count) {
      const offset = startOffset(state.sampleOffset, count);
      if (count === 0) return { rows: [], advance: { offset: 0 }, range: null };
      const raws = await client.listGroupSubscribers(groupId, { type, limit, offset });
      const rows = raws.map((raw) => listedRow(normalizeLegacySubscriber(raw, { sourceTimezone })));
      return { rows, advance: { offset: nextOffset(offset, raws.length, limit, count) }, range: null };
    },
    requests: () => client.stats().requests,
  };
}

export function currentAuditReader(client: CurrentClient, sourceTimezone: string): AuditReader {
  const groups = new Map<string, Promise<CurrentGroup>>();
  const group = (groupId: string) => {
    let read = groups.get(groupId);
    if (!read) groups.set(groupId, (read = client.group(groupId)));
    return read;
  };
  return {
    name: 'current',
    count: async (groupId, type) => (await group(groupId)).counts[type],
    async sample(groupId, type, state, limit) {
      const page = await client.listPage(groupId, { status: type, limit, cursor: state.sampleCursor });
      const rows = page.rows.map((raw) => listedRow(normalizeCurrentSubscriber(raw, { sourceTimezone })));
      const ids = rows.map((r) => r.values.id);
      const range = pageRange(state.sampleCursor === null ? null : state.sampleAfterId, ids, page.nextCursor === null);
      const next = nextCursor({ nextCursor: page.nextCursor, ids });
      return { rows, advance: { cursor: next.cursor, afterId: next.afterId }, range };
    },
    requests: () => client.stats().requests,
  };
}

export interface AuditDeps {
  pool: pg.Pool;
  logger: Logger;
  metrics?: Metrics;
  /** AUDIT_EVERY: the period (one full pass asked at most once per period per pair). */
  everyMs: number;
  /** AUDIT_SAMPLE: rows read back per pair per tick. */
  sampleSize: number;
  /** How long a stamped change may take to reach the mirror (webhook batching, the incremental interval). */
  settleMs: number;
  /** Asks for a full pass of (group, type) with its removal proof; returns the job id. */
  askFullPass?: (groupId: string, type: SubscriberType) => Promise<string>;
  now?: () => number;
}

/** What one pair's audit found and did, for the log and `subscriber-mirror audit`. */
export interface PairAudit {
  groupId: string;
  type: SubscriberType;
  tally: AuditTally;
  /** Ids of rows found wrong, by kind (ids only: no personal data). */
  ids: Record<'content' | 'missing' | 'extra' | 'unrepaired', string[]>;
  serviceCount: number;
  countGap: number | null;
  fullPassJob: string | null;
}

function emptyAudit(groupId: string, type: SubscriberType, serviceCount: number): PairAudit {
  return {
    groupId,
    type,
    tally: emptyTally(),
    ids: { content: [], missing: [], extra: [], unrepaired: [] },
    serviceCount,
    countGap: null,
    fullPassJob: null,
  };
}

/** Audits one (group, type) whose audit this process claimed (`state`). */
export async function auditPair(deps: AuditDeps, reader: AuditReader, state: AuditStateRow): Promise<PairAudit> {
  const groupId = state.groupId;
  const type = state.type as SubscriberType;
  const clock: AuditClock = { now: (deps.now ?? Date.now)(), settleMs: deps.settleMs };
  try {
    const serviceCount = await reader.count(groupId, type);
    const audit = emptyAudit(groupId, type, serviceCount);
    const due = await checkPending(deps, state, clock, audit);
    const sample = await reader.sample(groupId, type, state, deps.sampleSize, serviceCount);
    await checkSample(deps, reader, groupId, type, sample.rows, clock, audit);
    const extras = sample.range ? await extraCandidatesOf(deps, groupId, type, sample) : [];
    if (due || state.pendingCountAt === null) {
      await savePending(deps.pool, groupId, type, { count: serviceCount, at: formatEpochMs(clock.now), extras });
    }
    await saveSamplePosition(deps.pool, groupId, type, sample.advance);
    await saveAuditError(deps.pool, groupId, type, null);
    await recordAuditResult(deps.pool, groupId, type, audit.tally);
    recordMetrics(deps, audit);
    logAudit(deps, audit);
    return audit;
  } catch (error) {
    await saveAuditError(deps.pool, groupId, type, error instanceof Error ? error.message : String(error)).catch(() => {});
    throw error;
  }
}

/**
 * The count and extras a tick `settleMs` or more ago saw, against what the mirror holds now about
 * that instant. Returns whether they were due (then the caller saves this tick's as the next).
 */
async function checkPending(deps: AuditDeps, state: AuditStateRow, clock: AuditClock, audit: PairAudit): Promise<boolean> {
  if (state.pendingCountAt === null || state.pendingCount === null) return false;
  const at = Date.parse(state.pendingCountAt);
  if (clock.now - at < clock.settleMs) return false;
  const { groupId, type } = audit;
  const held = await mirrorCountAt(deps.pool, groupId, type, formatEpochMs(at - COUNT_MARGIN_MS));
  const count = checkCount(state.pendingCount, held);
  const pending = state.pendingExtras ?? [];
  const extras =
    pending.length === 0
      ? []
      : confirmExtras(
          pending,
          await membershipNow(
            deps.pool,
            groupId,
            type,
            pending.map((p) => p.id),
          ),
        );
  audit.tally.rowsChecked += pending.length;
  audit.tally.extra += extras.length;
  audit.ids.extra.push(...extras);
  if (!count.explained) {
    audit.tally.count += 1;
    audit.countGap = count.gap;
  }
  if (count.explained && extras.length === 0) return true;
  if (await persistsAfterFullPass(deps, state, at)) {
    audit.tally.unrepaired += (count.explained ? 0 : 1) + extras.length;
    audit.ids.unrepaired.push(...extras);
  }
  audit.fullPassJob = await askFullPassOnce(deps, state, clock);
  if (audit.fullPassJob !== null) audit.tally.repaired += (count.explained ? 0 : 1) + extras.length;
  return true;
}

/** A gap seen at `observedAt` after the full pass the audit asked for completed: the repair did not hold. */
async function persistsAfterFullPass(deps: AuditDeps, state: AuditStateRow, observedAt: number): Promise<boolean> {
  if (state.fullPassAskedAt === null) return false;
  const completed = (await readSyncState(deps.pool, state.groupId, state.type))?.lastFullCompletedAt;
  if (!completed) return false;
  return Date.parse(completed) > Date.parse(state.fullPassAskedAt) && observedAt > Date.parse(completed);
}

/** A full pass of the pair with its removal proof, unless one was asked for within the last period. */
async function askFullPassOnce(deps: AuditDeps, state: AuditStateRow, clock: AuditClock): Promise<string | null> {
  if (!deps.askFullPass) return null;
  if (state.fullPassAskedAt !== null && clock.now - Date.parse(state.fullPassAskedAt) < deps.everyMs) return null;
  const job = await deps.askFullPass(state.groupId, state.type as SubscriberType);
  await markFullPassAsked(deps.pool, state.groupId, state.type);
  return job;
}

/** Mirror members in a cursor page's id range that it did not list: checked again once stamped changes had time to arrive. */
async function extraCandidatesOf(deps: AuditDeps, groupId: string, type: SubscriberType, sample: SampleRead): Promise<PendingExtra[]> {
  const held = await mirrorMembersInRange(deps.pool, groupId, type, sample.range as IdRange);
  const candidates = new Set(
    extraCandidates(
      sample.rows.map((r) => r.values.id),
      held.map((h) => h.id),
    ),
  );
  return held.filter((h) => candidates.has(h.id));
}

function listedRowOf(row: SubscriberRow): ListedRow {
  const v = row.values;
  return {
    id: v.id,
    version: versionTime(v),
    values: {
      email: v.email,
      name: v.name,
      status: v.status,
      sent: v.sent,
      opensCount: v.opensCount,
      clicksCount: v.clicksCount,
      fields: v.fields,
      updatedAt: v.updatedAt,
      unsubscribedAt: v.unsubscribedAt,
      createdAt: v.createdAt,
    },
    provided: new Set(row.provided),
  };
}

/** Classifies every sample row, writes them (repairs and in-flight alike), then checks that each repair took. */
async function checkSample(
  deps: AuditDeps,
  reader: AuditReader,
  groupId: string,
  type: SubscriberType,
  rows: readonly SubscriberRow[],
  clock: AuditClock,
  audit: PairAudit,
): Promise<void> {
  const held = await mirrorRowsFor(
    deps.pool,
    groupId,
    rows.map((r) => r.values.id),
  );
  const repairs: Array<{ row: SubscriberRow; mirror: MirrorRow }> = [];
  for (const row of rows) {
    const mirror = held.get(row.values.id) ?? { version: null, values: null, membership: null };
    const finding = classifyRow(listedRowOf(row), mirror, type, clock);
    tallyFinding(audit, row.values.id, finding);
    if (finding.kind !== 'match') repairs.push({ row, mirror });
  }
  audit.tally.rowsChecked += rows.length;
  if (repairs.length === 0) return;
  await writeRows(deps, reader, groupId, type, repairs);
  const wrong = [...audit.ids.content, ...audit.ids.missing];
  if (wrong.length === 0) return;
  const after = await mirrorRowsFor(deps.pool, groupId, wrong);
  for (const { row } of repairs) {
    const id = row.values.id;
    if (!wrong.includes(id)) continue;
    const again = classifyRow(listedRowOf(row), after.get(id) as MirrorRow, type, clock);
    if (again.kind === 'content' || again.kind === 'missing') {
      audit.tally.unrepaired += 1;
      audit.ids.unrepaired.push(id);
    } else audit.tally.repaired += 1;
  }
}

function tallyFinding(audit: PairAudit, id: string, finding: RowFinding): void {
  if (finding.kind === 'in-flight') {
    audit.tally.inFlight += 1;
    if (finding.overdue && announcedChange(finding.fields)) audit.tally.missedDeliveries += 1;
  } else if (finding.kind === 'content') {
    audit.tally.content += 1;
    audit.ids.content.push(id);
  } else if (finding.kind === 'missing') {
    audit.tally.missing += 1;
    audit.ids.missing.push(id);
  }
}

/**
 * Writes what the audit read through the guarded upsert. A row of the mirror's second (an unstamped
 * change) carries the mirror's sub-second stamp so that the later read wins on the tie; a membership
 * the mirror holds with a newer fact than the listed row is written at that fact's time (the service
 * lists the member now).
 */
async function writeRows(
  deps: AuditDeps,
  reader: AuditReader,
  groupId: string,
  type: SubscriberType,
  repairs: ReadonlyArray<{ row: SubscriberRow; mirror: MirrorRow }>,
): Promise<void> {
  const via = reader.name === 'legacy' ? 'poll' : 'current';
  const rows = repairs.map(({ row, mirror }) => liftToMirrorSecond({ ...row, via }, mirror.version));
  await withTransaction(deps.pool, async (client) => {
    await upsertSubscribers(client, rows);
    const members = rows.map((r, i) => {
      const at = versionTime(r.values);
      const fact = repairs[i]?.mirror.membership?.factAt ?? null;
      return { subscriberId: r.values.id, type, at: fact !== null && fact > at ? fact : at };
    });
    await upsertMemberships(client, groupId, members, { via });
  });
}

function liftToMirrorSecond(row: SubscriberRow, mirrorVersion: string | null): SubscriberRow {
  if (mirrorVersion === null) return row;
  const version = versionTime(row.values);
  if (version >= mirrorVersion || version.slice(0, 19) !== mirrorVersion.slice(0, 19)) return row;
  return { ...row, values: { ...row.values, updatedAt: mirrorVersion } };
}

function recordMetrics(deps: AuditDeps, audit: PairAudit): void {
  const m = deps.metrics;
  if (!m) return;
  const labels = { group: audit.groupId, type: audit.type };
  const t = audit.tally;
  m.auditRowsChecked.inc(labels, t.rowsChecked);
  for (const kind of ['content', 'missing', 'extra', 'count'] as const) m.auditMismatches.inc({ ...labels, kind }, t[kind]);
  m.auditRepaired.inc(labels, t.repaired);
  m.auditUnrepaired.inc(labels, t.unrepaired);
  m.auditMissedDeliveries.inc(labels, t.missedDeliveries);
}

function logAudit(deps: AuditDeps, audit: PairAudit): void {
  const t = audit.tally;
  const mismatches = t.content + t.missing + t.extra + t.count;
  const context = {
    groupId: audit.groupId,
    type: audit.type,
    rowsChecked: t.rowsChecked,
    inFlight: t.inFlight,
    serviceCount: audit.serviceCount,
    countGap: audit.countGap,
    contentIds: audit.ids.content,
    missingIds: audit.ids.missing,
    extraIds: audit.ids.extra,
    unrepairedIds: audit.ids.unrepaired,
    repaired: t.repaired,
    fullPassJob: audit.fullPassJob,
    missedDeliveries: t.missedDeliveries,
  };
  if (t.unrepaired > 0) deps.logger.warn(context, 'audit: mismatches persist after a repair');
  else if (mismatches > 0) deps.logger.warn(context, 'audit: the mirror differed from the service; repaired');
  else deps.logger.debug(context, 'audit: the mirror matches the service');
}

/** Whether a pass of (group, type) holds its lock now: the audit yields to it. */
export async function passRunning(redis: Redis, lockKey: string): Promise<boolean> {
  return (await redis.exists(lockKey).catch(() => 0)) > 0;
}

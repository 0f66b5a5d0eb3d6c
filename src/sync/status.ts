/**
 * What `subscriber-mirror status` (and the admin API) shows: per account and group × type the cursor,
 * last run, last error, rows mirrored, upstream count, drift and rows dated in the future. Reads only
 * our own tables: the upstream count is the one the last full pass fetched, so `status` never spends
 * an account's rate limit.
 *
 * The reader is deployment-wide (docs/operations.md, "Several accounts"): each statement names the
 * accounts it reads and reads them all at once, so one call, on a pool of any account or of none,
 * shows every account, and the gauges refresh every account with the same few statements.
 */
import type { Queryable } from '../ground/queryable.js';
import type { SyncStateRow } from './state.js';
import { listSyncStatesOf } from './state.js';
import { accuracy, formatPeriod, type AuditSchedule } from '../audit/core.js';
import { auditWindowOf, listWebhookHealthOf, type AuditWindowRow, type WebhookHealth } from '../audit/state.js';

export interface StatusRow {
  /** The account the pair is of (docs/operations.md, "Several accounts"). */
  account: string;
  groupId: string;
  type: string;
  cursor: string | null;
  lastStatus: SyncStateRow['lastStatus'];
  lastMode: SyncStateRow['lastMode'];
  lastRunFinishedAt: string | null;
  lastSuccessAt: string | null;
  lastError: string | null;
  fullPassOpenAt: number | null;
  mirrored: number;
  upstreamCount: number | null;
  upstreamCountAt: string | null;
  /** upstreamCount − mirrored; null when the upstream count is unknown. */
  drift: number | null;
  /** Rows of the last run dated after the service's now + 14 h (stored; the cursor did not follow them). */
  futureRows: number;
  /** Current members the last complete gap-free full pass did not list: ended once a second pass confirms (invariant 11). */
  awaitingProof: number;
  /** Requests the last complete full pass spent stepping back (the list moved by more than the overlap); null before one. */
  stepBacks: number | null;
  /** The audit's last 24 h (docs/operations.md, "The audit"): rows checked, mismatches by kind, and the accuracy. */
  audit: AuditFigure;
  /** The period this pair is really audited at within AUDIT_BUDGET; null when the audit is off or the pair is not configured. */
  auditPeriod: AuditPeriod | null;
}

/** AUDIT_EVERY as asked beside the period the pair is really checked at (null: never, the budget pays for no audit). */
export interface AuditPeriod {
  askedMs: number;
  effectiveMs: number | null;
  honoured: boolean;
}

export interface AuditFigure {
  rowsChecked: number;
  mismatches: { content: number; missing: number; extra: number; count: number };
  /** Share of checked rows that matched (content, missing and extra against rows checked); null before any check. */
  accuracy: number | null;
  unrepaired: number;
  missedDeliveries: number;
  lastAuditAt: string | null;
}

/** What one account's status covers: its configured pairs (SYNC_GROUPS × SYNC_TYPES) and the audit's schedule for them. */
export interface StatusScope {
  account: string;
  groups: readonly string[];
  types: readonly string[];
  auditSchedule?: AuditSchedule | null;
}

/** One account's pairs (configured ones, and any its tables hold) and its webhooks as the audit last read them back. */
export interface AccountStatus {
  account: string;
  passes: StatusRow[];
  webhooks: WebhookHealth[];
}

/** A pair's key within the deployment: account names, numeric group ids and types hold no `:`. */
const pairKey = (account: string, groupId: string, type: string): string => `${account}:${groupId}:${type}`;

/** What the deployment's tables say of the accounts named, each fact read for all of them in one statement. */
interface DeploymentFacts {
  states: Map<string, SyncStateRow>;
  mirrored: Map<string, number>;
  awaiting: Map<string, number>;
  audits: Map<string, AuditWindowRow>;
  webhooks: Map<string, WebhookHealth[]>;
}

/**
 * The status of every account of `scopes`, in their order: per account its configured pairs and the
 * pairs its tables hold, sorted by group and type, and its webhooks' health.
 */
export async function collectAccountsStatus(db: Queryable, scopes: readonly StatusScope[]): Promise<AccountStatus[]> {
  const facts = await readDeploymentFacts(
    db,
    scopes.map((s) => s.account),
  );
  return scopes.map((scope) => ({
    account: scope.account,
    passes: accountRows(scope, facts),
    webhooks: facts.webhooks.get(scope.account) ?? [],
  }));
}

/**
 * One account's rows, on that account's pool (`mirror_account()` names it): the deployment-wide
 * reader for that account alone.
 */
export async function collectStatus(
  db: Queryable,
  configured: { groups: readonly string[]; types: readonly string[]; auditSchedule?: AuditSchedule | null },
): Promise<StatusRow[]> {
  const { rows } = await db.query<{ account: string }>(`select mirror_account() as account`);
  const account = rows[0]?.account ?? '';
  const [status] = await collectAccountsStatus(db, [{ account, ...configured }]);
  return status?.passes ?? [];
}

async function readDeploymentFacts(db: Queryable, accounts: readonly string[]): Promise<DeploymentFacts> {
  const [states, mirrored, awaiting, audits, webhooks] = await Promise.all([
    listSyncStatesOf(db, accounts),
    countMirrored(db, accounts),
    countAwaitingProof(db, accounts),
    auditWindowOf(db, accounts),
    listWebhookHealthOf(db, accounts),
  ]);
  const webhooksOf = new Map<string, WebhookHealth[]>();
  for (const { account, ...health } of webhooks) webhooksOf.set(account, [...(webhooksOf.get(account) ?? []), health]);
  return {
    states: new Map(states.map((s) => [pairKey(s.account, s.groupId, s.type), s])),
    mirrored,
    awaiting,
    audits: new Map(audits.map(({ account, groupId, type, ...window }) => [pairKey(account, groupId, type), window])),
    webhooks: webhooksOf,
  };
}

function accountRows(scope: StatusScope, facts: DeploymentFacts): StatusRow[] {
  const schedule = scope.auditSchedule ?? null;
  const period: AuditPeriod | null = schedule
    ? { askedMs: schedule.askedMs, effectiveMs: schedule.effectiveMs, honoured: schedule.honoured }
    : null;
  const pairs = new Map<string, { groupId: string; type: string; configured: boolean }>();
  for (const s of facts.states.values()) {
    if (s.account === scope.account)
      pairs.set(pairKey(s.account, s.groupId, s.type), { groupId: s.groupId, type: s.type, configured: false });
  }
  for (const groupId of scope.groups) {
    for (const type of scope.types) pairs.set(pairKey(scope.account, groupId, type), { groupId, type, configured: true });
  }
  return [...pairs.entries()]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([key, { groupId, type, configured }]) => {
      const s = facts.states.get(key);
      const n = facts.mirrored.get(key) ?? 0;
      const upstream = s?.upstreamCount ?? null;
      return {
        account: scope.account,
        groupId,
        type,
        cursor: s?.cursor ?? null,
        lastStatus: s?.lastStatus ?? null,
        lastMode: s?.lastMode ?? null,
        lastRunFinishedAt: s?.lastRunFinishedAt ?? null,
        lastSuccessAt: s?.lastSuccessAt ?? null,
        lastError: s?.lastError ?? null,
        fullPassOpenAt: s?.fullPassOpen ? s.fullPassAt : null,
        mirrored: n,
        upstreamCount: upstream,
        upstreamCountAt: s?.upstreamCountAt ?? null,
        drift: upstream === null ? null : upstream - n,
        futureRows: s?.futureRowsLastRun ?? 0,
        awaitingProof: facts.awaiting.get(key) ?? 0,
        stepBacks: s?.stepBacksLastFull ?? null,
        audit: auditFigure(facts.audits.get(key)),
        auditPeriod: configured ? period : null,
      };
    });
}

/** Current members per pair of the accounts named. */
async function countMirrored(db: Queryable, accounts: readonly string[]): Promise<Map<string, number>> {
  const { rows } = await db.query<{ account: string; groupId: string; type: string; n: number }>(
    `select account, group_id as "groupId", type, count(*)::int as n
       from group_members where account = any($1::text[]) and removed_at is null
      group by account, group_id, type`,
    [accounts],
  );
  return new Map(rows.map((r) => [pairKey(r.account, r.groupId, r.type), r.n]));
}

/** The figure of a pair the audit has not checked yet. */
export function noAuditFigure(): AuditFigure {
  return {
    rowsChecked: 0,
    mismatches: { content: 0, missing: 0, extra: 0, count: 0 },
    accuracy: null,
    unrepaired: 0,
    missedDeliveries: 0,
    lastAuditAt: null,
  };
}

function auditFigure(w: AuditWindowRow | undefined): AuditFigure {
  if (!w) return noAuditFigure();
  return {
    rowsChecked: w.rowsChecked,
    mismatches: { content: w.content, missing: w.missing, extra: w.extra, count: w.count },
    accuracy: accuracy(w.rowsChecked, w.content + w.missing + w.extra),
    unrepaired: w.unrepaired,
    missedDeliveries: w.missedDeliveries,
    lastAuditAt: w.lastAuditAt,
  };
}

/** `15s` when honoured, `2m45s (asked 15s)` when the budget stretches it, `never` when it pays for no audit, `-` when off. */
export function formatAuditPeriod(p: AuditPeriod | null): string {
  if (!p) return '-';
  if (p.effectiveMs === null) return `never (asked ${formatPeriod(p.askedMs)})`;
  return p.honoured ? formatPeriod(p.askedMs) : `${formatPeriod(p.effectiveMs)} (asked ${formatPeriod(p.askedMs)})`;
}

/** `99.5 % of 1200` style text for the accuracy column; `-` before any check. */
export function formatAccuracy(a: AuditFigure): string {
  if (a.accuracy === null) return '-';
  const mismatches = a.mismatches.content + a.mismatches.missing + a.mismatches.extra;
  return `${(a.accuracy * 100).toFixed(1)}% (${mismatches}/${a.rowsChecked})`;
}

/**
 * Per pair of the accounts named, current members not listed since the start of that type's last
 * gap-free full pass (the poller's removal condition, one pass short). Counted per pair through the
 * index of current members: a join of the two lists, planned on tables not yet analyzed (a new
 * install before autovacuum's first analyze), re-read the pass list once per member.
 */
async function countAwaitingProof(db: Queryable, accounts: readonly string[]): Promise<Map<string, number>> {
  const { rows } = await db.query<{ account: string; groupId: string; type: string; n: number }>(
    `select p.account, p.group_id as "groupId", p.type, a.n
       from (select distinct on (account, group_id, type) account, group_id, type, listed_from
               from sync_passes
              where account = any($1::text[]) and kind = 'full' and status = 'succeeded' and complete and gap_free
              order by account, group_id, type, listed_from desc, id desc) p
       cross join lateral (
         select count(*)::int as n
           from group_members m
          where m.account = p.account and m.group_id = p.group_id and m.type = p.type and m.removed_at is null
            and (m.last_seen_at is null or m.last_seen_at < p.listed_from)
            and (m.source_updated_at is null or m.source_updated_at < p.listed_from)) a`,
    [accounts],
  );
  return new Map(rows.map((r) => [pairKey(r.account, r.groupId, r.type), r.n]));
}

function short(ts: string | null): string {
  return ts ? ts.replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '-';
}

/** A fixed-width table for terminals. */
export function formatStatusTable(rows: readonly StatusRow[]): string {
  const header = [
    'group',
    'type',
    'cursor',
    'last run',
    'last success',
    'mirrored',
    'upstream',
    'drift',
    'future',
    'awaiting proof',
    'step backs',
    'accuracy 24h',
    'count gaps',
    'audited every',
    'last error',
  ];
  const body = rows.map((r) => [
    r.groupId,
    r.type,
    short(r.cursor),
    r.lastStatus ? `${r.lastStatus} ${r.lastMode ?? ''}${r.fullPassOpenAt !== null ? ` @${r.fullPassOpenAt}` : ''}`.trim() : 'never',
    short(r.lastSuccessAt),
    String(r.mirrored),
    r.upstreamCount === null ? '-' : String(r.upstreamCount),
    r.drift === null ? '-' : String(r.drift),
    String(r.futureRows),
    String(r.awaitingProof),
    r.stepBacks === null ? '-' : String(r.stepBacks),
    formatAccuracy(r.audit),
    String(r.audit.mismatches.count),
    formatAuditPeriod(r.auditPeriod),
    r.lastError ? r.lastError.slice(0, 80) : '',
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => (b[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd();
  return [line(header), ...body.map(line)].join('\n');
}

/** The line `status` prints under the table when AUDIT_EVERY is not honoured. */
export function auditScheduleNotice(schedule: AuditSchedule, share: number): string {
  const budget = `${Math.round(share * 10_000) / 100}%`;
  const effective = schedule.effectiveMs === null ? 'never' : `every ${formatPeriod(schedule.effectiveMs)}`;
  const remedy =
    schedule.shareNeeded === null
      ? 'no AUDIT_BUDGET up to 100% honours it'
      : `AUDIT_BUDGET=${Math.round(schedule.shareNeeded * 100)}% would honour it`;
  return `AUDIT: AUDIT_EVERY=${formatPeriod(schedule.askedMs)} is not honoured within AUDIT_BUDGET=${budget}: each group × type is audited ${effective} (${remedy})`;
}

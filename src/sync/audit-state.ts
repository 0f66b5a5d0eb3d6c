/**
 * The audit's own tables (docs/operations.md, "The audit"): `audit_state` (where each pair's sample
 * reads next and what a later tick checks again), `audit_results` (one row per pair per tick, summed
 * into the accuracy figure) and `audit_webhooks` (the webhooks as last read back). This module is
 * their only writer (test/unit/layers.test.ts).
 */
import type { Queryable } from '../ground/queryable.js';
import type { PendingExtra } from './audit-core.js';

function iso(column: string): string {
  return `to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
}

export interface AuditStateRow {
  groupId: string;
  type: string;
  sampleOffset: number;
  sampleCursor: string | null;
  sampleAfterId: string | null;
  pendingCount: number | null;
  pendingCountAt: string | null;
  pendingExtras: PendingExtra[] | null;
  lastAuditAt: string | null;
  /** The previous `last_audit_at` (before this claim). */
  previousAuditAt: string | null;
  lastError: string | null;
  fullPassAskedAt: string | null;
}

const COLUMNS = `group_id as "groupId", type, sample_offset as "sampleOffset", sample_cursor as "sampleCursor",
  sample_after_id as "sampleAfterId", pending_count as "pendingCount", ${iso('pending_count_at')} as "pendingCountAt",
  pending_extras as "pendingExtras", ${iso('last_audit_at')} as "lastAuditAt", last_error as "lastError",
  ${iso('full_pass_asked_at')} as "fullPassAskedAt"`;

/**
 * Claims this period's audit of (group, type): moves `last_audit_at` to now unless another replica
 * audited it less than 90 % of `everyMs` ago (`force`: always, for `subscriber-mirror audit`). Null
 * when the claim is someone else's.
 */
export async function claimAudit(
  db: Queryable,
  groupId: string,
  type: string,
  everyMs: number,
  force = false,
): Promise<AuditStateRow | null> {
  const { rows } = await db.query<AuditStateRow>(
    `with prev as (select last_audit_at from audit_state where group_id = $1 and type = $2)
     insert into audit_state as a (group_id, type, last_audit_at, updated_at) values ($1, $2, now(), now())
     on conflict (group_id, type) do update set last_audit_at = now(), updated_at = now()
       where $4 or a.last_audit_at is null or a.last_audit_at < now() - make_interval(secs => $3::double precision / 1000)
     returning ${COLUMNS}, (select ${iso('last_audit_at')} from prev) as "previousAuditAt"`,
    [groupId, type, everyMs * 0.9, force],
  );
  return rows[0] ?? null;
}

export interface SampleAdvance {
  offset?: number;
  cursor?: string | null;
  afterId?: string | null;
}

/** Where the next sample of (group, type) reads. */
export async function saveSamplePosition(db: Queryable, groupId: string, type: string, next: SampleAdvance): Promise<void> {
  await db.query(
    `update audit_state set sample_offset = coalesce($3, sample_offset),
            sample_cursor = case when $6 then $4 else sample_cursor end,
            sample_after_id = case when $6 then $5 else sample_after_id end, updated_at = now()
      where group_id = $1 and type = $2`,
    [groupId, type, next.offset ?? null, next.cursor ?? null, next.afterId ?? null, next.cursor !== undefined],
  );
}

/** The count (and the extras) a later tick checks, once the mirror had time to catch up with what was stamped before. */
export async function savePending(
  db: Queryable,
  groupId: string,
  type: string,
  pending: { count: number | null; at: string | null; extras?: PendingExtra[] | null },
): Promise<void> {
  await db.query(
    `update audit_state set pending_count = $3, pending_count_at = $4::timestamptz,
            pending_extras = case when $6 then $5::jsonb else pending_extras end, updated_at = now()
      where group_id = $1 and type = $2`,
    [groupId, type, pending.count, pending.at, JSON.stringify(pending.extras ?? null), pending.extras !== undefined],
  );
}

export async function markFullPassAsked(db: Queryable, groupId: string, type: string): Promise<void> {
  await db.query(`update audit_state set full_pass_asked_at = now(), updated_at = now() where group_id = $1 and type = $2`, [
    groupId,
    type,
  ]);
}

export async function saveAuditError(db: Queryable, groupId: string, type: string, error: string | null): Promise<void> {
  await db.query(`update audit_state set last_error = $3, updated_at = now() where group_id = $1 and type = $2`, [
    groupId,
    type,
    error?.slice(0, 2000) ?? null,
  ]);
}

export interface AuditTally {
  rowsChecked: number;
  inFlight: number;
  content: number;
  missing: number;
  extra: number;
  count: number;
  repaired: number;
  unrepaired: number;
  missedDeliveries: number;
}

export function emptyTally(): AuditTally {
  return { rowsChecked: 0, inFlight: 0, content: 0, missing: 0, extra: 0, count: 0, repaired: 0, unrepaired: 0, missedDeliveries: 0 };
}

export async function recordAuditResult(db: Queryable, groupId: string, type: string, t: AuditTally): Promise<void> {
  await db.query(
    `insert into audit_results (group_id, type, rows_checked, in_flight, content, missing, extra, count, repaired, unrepaired, missed_deliveries)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
    [groupId, type, t.rowsChecked, t.inFlight, t.content, t.missing, t.extra, t.count, t.repaired, t.unrepaired, t.missedDeliveries],
  );
}

/** Results older than this are deleted (the figure covers 24 h; a week stays for looking back). */
export const AUDIT_RESULTS_KEEP_MS = 7 * 86_400_000;

export async function purgeAuditResults(db: Queryable, keepMs = AUDIT_RESULTS_KEEP_MS): Promise<number> {
  const { rowCount } = await db.query(`delete from audit_results where at < now() - make_interval(secs => $1::double precision / 1000)`, [
    keepMs,
  ]);
  return rowCount ?? 0;
}

export type AuditWindowRow = AuditTally & { lastAuditAt: string | null };

/** Per `group:type`, the sums over the results of the last `windowMs` (24 h for the accuracy figure), and when the pair was last audited. */
export async function auditWindow(db: Queryable, windowMs = 86_400_000): Promise<Map<string, AuditWindowRow>> {
  const { rows } = await db.query<AuditTally & { groupId: string; type: string; lastAuditAt: string | null }>(
    `select group_id as "groupId", type, sum(rows_checked)::int as "rowsChecked", sum(in_flight)::int as "inFlight",
            sum(content)::int as content, sum(missing)::int as missing, sum(extra)::int as extra, sum(count)::int as count,
            sum(repaired)::int as repaired, sum(unrepaired)::int as unrepaired, sum(missed_deliveries)::int as "missedDeliveries",
            ${iso('max(at)')} as "lastAuditAt"
       from audit_results where at >= now() - make_interval(secs => $1::double precision / 1000)
      group by group_id, type`,
    [windowMs],
  );
  return new Map(rows.map(({ groupId, type, ...rest }) => [`${groupId}:${type}`, rest]));
}

export const WEBHOOK_PROBLEMS = ['missing', 'disabled', 'wrong-url', 'missing-events'] as const;
export type WebhookProblem = (typeof WEBHOOK_PROBLEMS)[number];

export interface WebhookHealth {
  id: string;
  enabled: boolean | null;
  problems: WebhookProblem[];
  missingEvents: string[];
  checkedAt?: string;
  reenabledAt?: string | null;
}

/** Replaces what the audit knows about the webhooks with what it just read back. */
export async function saveWebhookHealth(db: Queryable, health: readonly WebhookHealth[], reenabled: readonly string[]): Promise<void> {
  await db.query(`delete from audit_webhooks where not (id = any($1::text[]))`, [health.map((h) => h.id)]);
  for (const h of health) {
    await db.query(
      `insert into audit_webhooks (id, enabled, problems, missing_events, checked_at, reenabled_at)
       values ($1, $2, $3::text[], $4::text[], now(), case when $5 then now() end)
       on conflict (id) do update set enabled = excluded.enabled, problems = excluded.problems,
         missing_events = excluded.missing_events, checked_at = now(),
         reenabled_at = case when $5 then now() else audit_webhooks.reenabled_at end`,
      [h.id, h.enabled, h.problems, h.missingEvents, reenabled.includes(h.id)],
    );
  }
}

export async function listWebhookHealth(db: Queryable): Promise<WebhookHealth[]> {
  const { rows } = await db.query<WebhookHealth>(
    `select id, enabled, problems, missing_events as "missingEvents", ${iso('checked_at')} as "checkedAt",
            ${iso('reenabled_at')} as "reenabledAt"
       from audit_webhooks order by id`,
  );
  return rows;
}

/**
 * The audit's own tables (docs/operations.md, "The audit"): `audit_state` (where each pair's sample
 * reads next and what a later tick checks again), `audit_results` (one row per pair per tick, summed
 * into the accuracy figure) and `audit_webhooks` (the webhooks as last read back). This module is
 * their only writer (test/unit/layers.test.ts).
 */
import { canonicalTimestampSql as iso, rowSelectSql, sqlNames, type RowOf } from '../db/columns.js';
import { auditResults, auditState, auditWebhooks, type PendingExtra } from '../db/schema.js';
import type { Queryable } from '../ground/queryable.js';

export { WEBHOOK_PROBLEMS, type WebhookProblem } from '../db/schema.js';

/** An `audit_state` row as drizzle infers it (less `updated_at`), and the `last_audit_at` this claim replaced. */
export type AuditStateRow = Omit<RowOf<typeof auditState>, 'updatedAt'> & {
  /** The previous `last_audit_at` (before this claim). */
  previousAuditAt: string | null;
};

const STATE_COLUMNS = rowSelectSql(auditState, { omit: ['updatedAt'] });

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
    `with prev as (select last_audit_at from audit_state where account = mirror_account() and group_id = $1 and type = $2)
     insert into audit_state as a (group_id, type, last_audit_at, updated_at) values ($1, $2, now(), now())
     on conflict (account, group_id, type) do update set last_audit_at = now(), updated_at = now()
       where $4 or a.last_audit_at is null or a.last_audit_at < now() - make_interval(secs => $3::double precision / 1000)
     returning ${STATE_COLUMNS}, (select ${iso('last_audit_at')} from prev) as "previousAuditAt"`,
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
      where account = mirror_account() and group_id = $1 and type = $2`,
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
      where account = mirror_account() and group_id = $1 and type = $2`,
    [groupId, type, pending.count, pending.at, JSON.stringify(pending.extras ?? null), pending.extras !== undefined],
  );
}

export async function markFullPassAsked(db: Queryable, groupId: string, type: string): Promise<void> {
  await db.query(
    `update audit_state set full_pass_asked_at = now(), updated_at = now() where account = mirror_account() and group_id = $1 and type = $2`,
    [groupId, type],
  );
}

export async function saveAuditError(db: Queryable, groupId: string, type: string, error: string | null): Promise<void> {
  await db.query(
    `update audit_state set last_error = $3, updated_at = now() where account = mirror_account() and group_id = $1 and type = $2`,
    [groupId, type, error?.slice(0, 2000) ?? null],
  );
}

/** What one audit of a pair counted: the figures of an `audit_results` row. */
export type AuditTally = Omit<RowOf<typeof auditResults>, 'id' | 'account' | 'groupId' | 'type' | 'at'>;

const RESULT_COLUMNS = sqlNames(auditResults);
/** The figures of a result, in the table's order (every column but the row's identity and time). */
const TALLY_KEYS = (Object.keys(RESULT_COLUMNS) as Array<keyof typeof RESULT_COLUMNS>).filter(
  (key): key is keyof AuditTally => key !== 'id' && key !== 'account' && key !== 'groupId' && key !== 'type' && key !== 'at',
);

export function emptyTally(): AuditTally {
  return Object.fromEntries(TALLY_KEYS.map((key) => [key, 0])) as AuditTally;
}

export async function recordAuditResult(db: Queryable, groupId: string, type: string, t: AuditTally): Promise<void> {
  const columns = TALLY_KEYS.map((key) => RESULT_COLUMNS[key]);
  const params = TALLY_KEYS.map((_, i) => `$${i + 3}`);
  await db.query(`insert into audit_results (group_id, type, ${columns.join(', ')}) values ($1, $2, ${params.join(', ')})`, [
    groupId,
    type,
    ...TALLY_KEYS.map((key) => t[key]),
  ]);
}

/** Results older than this are deleted (the figure covers 24 h; a week stays for looking back). */
export const AUDIT_RESULTS_KEEP_MS = 7 * 86_400_000;

export async function purgeAuditResults(db: Queryable, keepMs = AUDIT_RESULTS_KEEP_MS): Promise<number> {
  const { rowCount } = await db.query(
    `delete from audit_results where account = mirror_account() and at < now() - make_interval(secs => $1::double precision / 1000)`,
    [keepMs],
  );
  return rowCount ?? 0;
}

export type AuditWindowRow = AuditTally & { lastAuditAt: string | null };

/** Per `group:type`, the sums over the results of the last `windowMs` (24 h for the accuracy figure), and when the pair was last audited. */
export async function auditWindow(db: Queryable, windowMs = 86_400_000): Promise<Map<string, AuditWindowRow>> {
  const { rows } = await db.query<AuditTally & { groupId: string; type: string; lastAuditAt: string | null }>(
    `select group_id as "groupId", type, ${TALLY_KEYS.map((key) => `sum(${RESULT_COLUMNS[key]})::int as "${key}"`).join(', ')},
            ${iso('max(at)')} as "lastAuditAt"
       from audit_results where account = mirror_account() and at >= now() - make_interval(secs => $1::double precision / 1000)
      group by group_id, type`,
    [windowMs],
  );
  return new Map(rows.map(({ groupId, type, ...rest }) => [`${groupId}:${type}`, rest]));
}

/** A webhook as the audit last read it back: an `audit_webhooks` row. */
export type WebhookHealth = Omit<RowOf<typeof auditWebhooks>, 'account'>;

/** What one read-back found of a webhook (the rest of its row is stamped when saved). */
export type WebhookCheck = Pick<WebhookHealth, 'id' | 'enabled' | 'problems' | 'missingEvents'>;

/** Replaces what the audit knows about the webhooks with what it just read back. */
export async function saveWebhookHealth(db: Queryable, health: readonly WebhookCheck[], reenabled: readonly string[]): Promise<void> {
  await db.query(`delete from audit_webhooks where account = mirror_account() and not (id = any($1::text[]))`, [health.map((h) => h.id)]);
  for (const h of health) {
    await db.query(
      `insert into audit_webhooks (id, enabled, problems, missing_events, checked_at, reenabled_at)
       values ($1, $2, $3::text[], $4::text[], now(), case when $5 then now() end)
       on conflict (account, id) do update set enabled = excluded.enabled, problems = excluded.problems,
         missing_events = excluded.missing_events, checked_at = now(),
         reenabled_at = case when $5 then now() else audit_webhooks.reenabled_at end`,
      [h.id, h.enabled, h.problems, h.missingEvents, reenabled.includes(h.id)],
    );
  }
}

export async function listWebhookHealth(db: Queryable): Promise<WebhookHealth[]> {
  const { rows } = await db.query<WebhookHealth>(
    `select ${rowSelectSql(auditWebhooks, { omit: ['account'] })} from audit_webhooks where account = mirror_account() order by id`,
  );
  return rows;
}

// ---------------------------------------------------------------------------------------------
// Deployment-wide reads: every account named, in one statement, on a pool of any account or of none
// (the deployment's status and gauges, src/sync/status.ts)

/** One pair's audit window (`auditWindow`), with the account and pair it is of. */
export type AccountAuditWindowRow = AuditWindowRow & { account: string; groupId: string; type: string };

/** `auditWindow` of every pair of the accounts named. */
export async function auditWindowOf(db: Queryable, accounts: readonly string[], windowMs = 86_400_000): Promise<AccountAuditWindowRow[]> {
  const { rows } = await db.query<AccountAuditWindowRow>(
    `select account, group_id as "groupId", type, ${TALLY_KEYS.map((key) => `sum(${RESULT_COLUMNS[key]})::int as "${key}"`).join(', ')},
            ${iso('max(at)')} as "lastAuditAt"
       from audit_results
      where account = any($1::text[]) and at >= now() - make_interval(secs => $2::double precision / 1000)
      group by account, group_id, type`,
    [accounts, windowMs],
  );
  return rows;
}

/** The webhooks of the accounts named as the audit last read them back, each with its account. */
export async function listWebhookHealthOf(db: Queryable, accounts: readonly string[]): Promise<Array<RowOf<typeof auditWebhooks>>> {
  const { rows } = await db.query<RowOf<typeof auditWebhooks>>(
    `select ${rowSelectSql(auditWebhooks)} from audit_webhooks where account = any($1::text[]) order by account, id`,
    [accounts],
  );
  return rows;
}

/**
 * The deployment's status as `status`, `status --json`, `/admin/status` and the status page show it:
 * per account its pairs (src/sync/status.ts, one deployment-wide read), what the worker keeps of it in
 * Redis (the auth pause, the rate budgets its limiter learned, the replicas that read it) and the
 * audit's schedule for it. One
 * account shows as a single-account install always did; several, each under its name
 * (docs/operations.md, "Several accounts").
 */
import type { AuditSchedule } from '../audit/core.js';
import type { WebhookHealth } from '../audit/state.js';
import type { Queryable } from '../ground/queryable.js';
import type { BudgetReport } from '../ratelimit/budget-limiter.js';
import { isPaused, type AuthPause } from '../sync/auth-pause.js';
import { collectAccountsStatus, type StatusRow, type StatusScope } from '../sync/status.js';

export type ReadSourceName = 'legacy' | 'current';

/** What the edges know of one account besides its tables: its settings, and readers of what the worker keeps in Redis. */
export interface AccountSource extends StatusScope {
  /** Where its passes read; null: nothing reconciles (webhook-only); absent: the caller does not say. */
  source?: ReadSourceName | null;
  /** Said above its status: a webhook-only account, where nothing reconciles. */
  notice?: string;
  /** How often a pass of each pair is due (SYNC_EVERY; RECONCILE_EVERY on the current API): freshness is judged against it. */
  passEveryMs: number;
  /** Its auth pause (absent: it polls nothing, so it has none). */
  authPause?: () => Promise<AuthPause | null>;
  /** The rate budgets its limiter learned (absent or null: none published). */
  rateBudgets?: () => Promise<BudgetReport | null>;
  /** The live worker replicas that read it now (absent: it polls nothing, or Redis is not read). */
  readBy?: () => Promise<string[] | null>;
}

/** One account's status: its pairs and webhooks, its pause and budgets, its audit schedule. */
export interface AccountReport {
  account: string;
  source?: ReadSourceName | null;
  notice: string | null;
  passEveryMs: number;
  /** Set only while polling is paused (the service rejected the account's read credential). */
  authPause: AuthPause | null;
  rateBudgets: BudgetReport | null;
  /** The live worker replicas that read it now (empty: none does); null when not known. */
  readBy: string[] | null;
  audit: AuditSchedule | null;
  passes: StatusRow[];
  webhooks: WebhookHealth[];
}

/** Every account of `sources`, in their order; the tables of all of them are read together. */
export async function collectReports(db: Queryable, sources: readonly AccountSource[], now = Date.now()): Promise<AccountReport[]> {
  const [statuses, kept] = await Promise.all([collectAccountsStatus(db, sources), Promise.all(sources.map(readKept))]);
  return sources.map((source, i) => ({
    account: source.account,
    ...(source.source === undefined ? {} : { source: source.source }),
    notice: source.notice ?? null,
    passEveryMs: source.passEveryMs,
    authPause: isPaused(kept[i]?.authPause ?? null, now) ? (kept[i]?.authPause ?? null) : null,
    rateBudgets: kept[i]?.rateBudgets ?? null,
    readBy: kept[i]?.readBy ?? null,
    audit: source.auditSchedule ?? null,
    passes: statuses[i]?.passes ?? [],
    webhooks: statuses[i]?.webhooks ?? [],
  }));
}

async function readKept(
  source: AccountSource,
): Promise<{ authPause: AuthPause | null; rateBudgets: BudgetReport | null; readBy: string[] | null }> {
  const [authPause, rateBudgets, readBy] = await Promise.all([
    source.authPause?.() ?? null,
    source.rateBudgets?.() ?? null,
    source.readBy?.() ?? null,
  ]);
  return { authPause, rateBudgets, readBy };
}

/** One account's part of the JSON: what is per account besides its pairs. */
function accountJson(r: AccountReport) {
  return {
    ...(r.source === undefined ? {} : { source: r.source }),
    ...(r.notice === null ? {} : { notice: r.notice }),
    authPause: r.authPause,
    rateBudgets: r.rateBudgets,
    ...(r.readBy === null ? {} : { readBy: r.readBy }),
    audit: r.audit,
  };
}

/**
 * `status --json` and `/admin/status`. One account: its fields at the top, as a single-account install
 * always had them. Several: `accounts`, each one's section (name, source, notice, auth pause, rate
 * budgets, audit schedule, webhooks), and `passes` of every account, each pair naming its account.
 */
export function statusJson(reports: readonly AccountReport[]): object {
  const [only, ...others] = reports;
  if (only !== undefined && others.length === 0) return { ...accountJson(only), passes: only.passes, webhooks: only.webhooks };
  return {
    accounts: reports.map((r) => ({ account: r.account, ...accountJson(r), webhooks: r.webhooks })),
    passes: reports.flatMap((r) => r.passes),
  };
}

/**
 * Prometheus metrics (prom-client). One registry per process, created at start and passed to the
 * modules that record into it; modules take an optional `Metrics` so the library core runs without.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export interface Metrics {
  registry: Registry;
  httpRequests: Counter<'method' | 'route' | 'status'>;
  httpDuration: Histogram<'method' | 'route'>;
  deliveries: Counter<'outcome'>;
  queueDepth: Gauge<'queue' | 'state'>;
  passDuration: Histogram<'mode' | 'outcome'>;
  rowsWritten: Counter<'via' | 'result'>;
  upstreamRequests: Counter<'api' | 'outcome'>;
  syncErrors: Counter<'mode' | 'error'>;
  limiterWait: Histogram;
  cursorAge: Gauge<'group' | 'type'>;
  drift: Gauge<'group' | 'type'>;
  authPaused: Gauge;
  deliveryLag: Histogram;
  futureRows: Counter<'group' | 'type'>;
  passGaps: Counter<'group' | 'type'>;
  passStepBacks: Counter<'group' | 'type'>;
  membersAwaitingProof: Gauge<'group' | 'type'>;
  membersRemoved: Counter<'via'>;
  lastSuccess: Gauge<'group' | 'type'>;
  syncInterval: Gauge<'group' | 'type'>;
  upstreamCount: Gauge<'group' | 'type'>;
  mirrored: Gauge<'group' | 'type'>;
  inbox: Gauge<'status'>;
  adminActions: Counter<'action' | 'outcome'>;
  syncJobsRefused: Counter<'reason'>;
  auditRowsChecked: Counter<'group' | 'type'>;
  auditMismatches: Counter<'group' | 'type' | 'kind'>;
  auditRepaired: Counter<'group' | 'type'>;
  auditUnrepaired: Counter<'group' | 'type'>;
  auditMissedDeliveries: Counter<'group' | 'type'>;
  auditRequests: Counter;
  auditAccuracy: Gauge<'group' | 'type'>;
  webhookProblems: Gauge<'webhook' | 'problem'>;
  webhooksReenabled: Counter;
  rateBudgetModel: Gauge<'model'>;
  rateBudget: Gauge<'budget'>;
  /** Reads the limiter's learned budget model when metrics are scraped. */
  watchBudgets(read: () => BudgetSnapshot): void;
}

/** What the metrics show of the rate limiter's learned budgets (upstream/budget-limiter.ts reports it). */
export interface BudgetSnapshot {
  model: string;
  budgets: ReadonlyArray<{ budget: string; perWindow: number }>;
}

const BUDGET_MODELS = ['unknown', 'account', 'endpoint', 'mixed'] as const;

export function createMetrics(options: { defaultMetrics?: boolean } = {}): Metrics {
  const registry = new Registry();
  if (options.defaultMetrics !== false) collectDefaultMetrics({ register: registry, prefix: 'subscriber_mirror_' });
  const registers = [registry];
  return {
    registry,
    httpRequests: new Counter({
      name: 'subscriber_mirror_http_requests_total',
      help: 'HTTP requests served, by route and status',
      labelNames: ['method', 'route', 'status'],
      registers,
    }),
    httpDuration: new Histogram({
      name: 'subscriber_mirror_http_request_duration_seconds',
      help: 'HTTP request latency',
      labelNames: ['method', 'route'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 3],
      registers,
    }),
    deliveries: new Counter({
      name: 'subscriber_mirror_webhook_deliveries_total',
      help: 'Webhook deliveries by outcome: received, rejected, duplicate, applied, failed, ignored, purged (deleted after WEBHOOK_RETENTION)',
      labelNames: ['outcome'],
      registers,
    }),
    queueDepth: new Gauge({
      name: 'subscriber_mirror_queue_depth',
      help: 'Jobs per BullMQ queue and state',
      labelNames: ['queue', 'state'],
      registers,
    }),
    passDuration: new Histogram({
      name: 'subscriber_mirror_sync_pass_duration_seconds',
      help: 'Duration of poll passes',
      labelNames: ['mode', 'outcome'],
      buckets: [0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 14400],
      registers,
    }),
    rowsWritten: new Counter({
      name: 'subscriber_mirror_rows_total',
      help: 'Subscriber rows handed to the store, by path and result (inserted, updated, unchanged, skipped)',
      labelNames: ['via', 'result'],
      registers,
    }),
    upstreamRequests: new Counter({
      name: 'subscriber_mirror_upstream_requests_total',
      help: 'Requests made to the mailing service, by API and outcome',
      labelNames: ['api', 'outcome'],
      registers,
    }),
    syncErrors: new Counter({
      name: 'subscriber_mirror_sync_errors_total',
      help: 'Failed poll passes by error class',
      labelNames: ['mode', 'error'],
      registers,
    }),
    limiterWait: new Histogram({
      name: 'subscriber_mirror_limiter_wait_seconds',
      help: 'Time a request waited for the shared rate limiter',
      buckets: [0.001, 0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120],
      registers,
    }),
    cursorAge: new Gauge({
      name: 'subscriber_mirror_sync_cursor_age_seconds',
      help: 'Age of the newest upstream change mirrored, per group and type',
      labelNames: ['group', 'type'],
      registers,
    }),
    drift: new Gauge({
      name: 'subscriber_mirror_sync_drift',
      help: 'Upstream /count minus current mirrored members, per group and type',
      labelNames: ['group', 'type'],
      registers,
    }),
    authPaused: new Gauge({
      name: 'subscriber_mirror_upstream_auth_paused',
      help: '1 while polling is paused because the service rejected the API key',
      registers,
    }),
    deliveryLag: new Histogram({
      name: 'subscriber_mirror_webhook_apply_lag_seconds',
      help: 'Time from a delivery being stored to its events being applied',
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 30, 120],
      registers,
    }),
    futureRows: new Counter({
      name: 'subscriber_mirror_poll_future_rows_total',
      help: "Rows dated after the service's now + 14 h (stored; the incremental cursor does not follow them)",
      labelNames: ['group', 'type'],
      registers,
    }),
    passGaps: new Counter({
      name: 'subscriber_mirror_full_pass_gaps_total',
      help: 'Full-pass pages that could not be joined to the previous page (the list shifted more than the overlap); such a pass proves no removal',
      labelNames: ['group', 'type'],
      registers,
    }),
    passStepBacks: new Counter({
      name: 'subscriber_mirror_full_pass_step_backs_total',
      help: 'Requests full passes spent stepping back because the list moved by more than the page overlap (members leaving during the pass)',
      labelNames: ['group', 'type'],
      registers,
    }),
    membersAwaitingProof: new Gauge({
      name: 'subscriber_mirror_members_awaiting_proof',
      help: 'Current members the last complete full pass did not list: ended only when a second pass confirms they left',
      labelNames: ['group', 'type'],
      registers,
    }),
    membersRemoved: new Counter({
      name: 'subscriber_mirror_members_removed_total',
      help: 'Memberships ended by the poll (missed by two complete gap-free full passes in a row)',
      labelNames: ['via'],
      registers,
    }),
    lastSuccess: new Gauge({
      name: 'subscriber_mirror_sync_last_success_timestamp_seconds',
      help: 'Unix time of the last successful pass (incremental or full), per group and type',
      labelNames: ['group', 'type'],
      registers,
    }),
    syncInterval: new Gauge({
      name: 'subscriber_mirror_sync_interval_seconds',
      help: 'Configured SYNC_EVERY per group and type (alerts compare pass age against it)',
      labelNames: ['group', 'type'],
      registers,
    }),
    upstreamCount: new Gauge({
      name: 'subscriber_mirror_sync_upstream_count',
      help: 'Members the service reported (/count) at the last full pass, per group and type',
      labelNames: ['group', 'type'],
      registers,
    }),
    mirrored: new Gauge({
      name: 'subscriber_mirror_sync_mirrored_members',
      help: 'Current members in the mirror (removed_at is null), per group and type',
      labelNames: ['group', 'type'],
      registers,
    }),
    inbox: new Gauge({
      name: 'subscriber_mirror_webhook_inbox_deliveries',
      help: 'Stored webhook deliveries by status (pending, applied, failed, ignored)',
      labelNames: ['status'],
      registers,
    }),
    adminActions: new Counter({
      name: 'subscriber_mirror_admin_actions_total',
      help: 'Admin requests that change something or present credentials: login, logout, backfill, queues (BullMQ dashboard actions), auth (credentials on any other request); outcome succeeded, failed (wrong credentials), refused (cross-site), throttled, rejected (bad request), error',
      labelNames: ['action', 'outcome'],
      registers,
    }),
    syncJobsRefused: new Counter({
      name: 'subscriber_mirror_sync_jobs_refused_total',
      help: 'Sync jobs the worker refused because their group (reason group) or type (reason type) is not configured, whoever queued them',
      labelNames: ['reason'],
      registers,
    }),
    ...auditMetrics(registers),
    ...budgetMetrics(registers),
  };
}

/** The audit's metrics (docs/operations.md, "The audit"). */
/** The rate limiter's learned budgets, read from the limiter when scraped. */
function budgetMetrics(registers: Registry[]): Pick<Metrics, 'rateBudgetModel' | 'rateBudget' | 'watchBudgets'> {
  const budgets: { read?: () => BudgetSnapshot } = {};
  return {
    rateBudgetModel: new Gauge({
      name: 'subscriber_mirror_rate_budget_model',
      help: 'The budget model learned from the rate-limit headers: 1 for the current one (unknown, account, endpoint, mixed)',
      labelNames: ['model'],
      registers,
      collect() {
        const snapshot = budgets.read?.();
        if (!snapshot) return;
        for (const model of BUDGET_MODELS) this.set({ model }, snapshot.model === model ? 1 : 0);
      },
    }),
    rateBudget: new Gauge({
      name: 'subscriber_mirror_rate_budget_per_window',
      help: 'Requests per window the limiter uses of each budget: shared, or the endpoint with a budget of its own',
      labelNames: ['budget'],
      registers,
      collect() {
        const snapshot = budgets.read?.();
        if (!snapshot) return;
        // Own budgets come and go: only the current ones are shown.
        this.reset();
        for (const b of snapshot.budgets) this.set({ budget: b.budget }, b.perWindow);
      },
    }),
    watchBudgets(read) {
      budgets.read = read;
    },
  };
}

function auditMetrics(registers: Registry[]) {
  return {
    auditRowsChecked: new Counter({
      name: 'subscriber_mirror_audit_rows_checked_total',
      help: 'Rows the audit read back from the service and compared with the mirror, per group and type',
      labelNames: ['group', 'type'],
      registers,
    }),
    auditMismatches: new Counter({
      name: 'subscriber_mirror_audit_mismatches_total',
      help: 'Mismatches the audit found that no stamped change explains: content, missing, extra, count',
      labelNames: ['group', 'type', 'kind'],
      registers,
    }),
    auditRepaired: new Counter({
      name: 'subscriber_mirror_audit_repairs_total',
      help: 'Mismatches the audit repaired (rows rewritten or added; full passes asked for extras and count gaps)',
      labelNames: ['group', 'type'],
      registers,
    }),
    auditUnrepaired: new Counter({
      name: 'subscriber_mirror_audit_unrepaired_total',
      help: 'Mismatches that persisted after a repair (a write the guard refused, a gap after the full pass asked for it)',
      labelNames: ['group', 'type'],
      registers,
    }),
    auditMissedDeliveries: new Counter({
      name: 'subscriber_mirror_audit_missed_deliveries_total',
      help: 'Rows the audit wrote that a webhook should have brought (stamped longer ago than the settle time)',
      labelNames: ['group', 'type'],
      registers,
    }),
    auditRequests: new Counter({
      name: 'subscriber_mirror_audit_requests_total',
      help: 'Requests the audit made to the service (counts, sample pages, the webhook read-back)',
      registers,
    }),
    auditAccuracy: new Gauge({
      name: 'subscriber_mirror_audit_accuracy',
      help: 'Share of the rows the audit checked in the last 24 h that matched the service, per group and type',
      labelNames: ['group', 'type'],
      registers,
    }),
    webhookProblems: new Gauge({
      name: 'subscriber_mirror_webhook_problems',
      help: 'Managed webhooks as the audit read them back: 1 per problem (missing, disabled, wrong-url, missing-events)',
      labelNames: ['webhook', 'problem'],
      registers,
    }),
    webhooksReenabled: new Counter({
      name: 'subscriber_mirror_webhooks_reenabled_total',
      help: 'Webhooks the service had disabled that the audit enabled again (WEBHOOKS_REENABLE)',
      registers,
    }),
  };
}

/**
 * Series that alerts and the dashboard select by label exist from the first scrape (at 0), so a
 * rule reads "nothing failed" rather than "no data", and a misspelled label shows up in tests.
 */
export function initSeries(metrics: Metrics, inboxStatuses: readonly string[]): void {
  for (const outcome of ['received', 'received_invalid', 'rejected', 'duplicate', 'applied', 'failed', 'ignored'])
    metrics.deliveries.inc({ outcome }, 0);
  for (const mode of ['incremental', 'full']) {
    for (const outcome of ['succeeded', 'failed']) metrics.passDuration.zero({ mode, outcome });
  }
  for (const status of inboxStatuses) metrics.inbox.set({ status }, 0);
  for (const reason of ['group', 'type']) metrics.syncJobsRefused.inc({ reason }, 0);
}

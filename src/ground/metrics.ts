/**
 * Prometheus metrics (prom-client). One registry per process, created at start and passed to the
 * modules that record into it; modules take an optional `Metrics` so the library core runs without.
 *
 * Every metric is declared once, in {@link METRICS}: its name, help and labels; the `Metrics` type
 * (each metric's prom-client class and label names) is derived from that table.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** What the metrics show of the rate limiter's learned budgets (the budget limiter reports it). */
export interface BudgetSnapshot {
  model: string;
  budgets: ReadonlyArray<{ budget: string; perWindow: number }>;
}

/** What the worker's shared Postgres connections are doing (`AccountPools.stats`, db/client.ts). */
export interface ConnectionsSnapshot {
  busy: number;
  idle: number;
  /** Checkouts waiting for a connection. */
  waiting: number;
}

/**
 * What gauges read when scraped, once the process hands it over: the limiter of each account (null:
 * no account label), and the worker's connections (null: a receiver, or the worker stopped).
 */
interface Watched {
  budgets: Map<string | null, WatchedBudgets>;
  connections: (() => ConnectionsSnapshot) | null;
}

interface WatchedBudgets {
  models: readonly string[];
  read: () => BudgetSnapshot;
}

/** One metric of the table: how to make it in a registry, and its labels. */
interface Declared<M> {
  labelNames: readonly string[];
  create(registers: Registry[], watched: Watched): M;
}

/**
 * The label of the metrics a part serving one account records (docs/operations.md, "Several
 * accounts"): its passes, limiter, audit and consumer. {@link Metrics.forAccount} sets it.
 */
const ACCOUNT = 'account';

/** `labels` and the account's. */
const perAccount = <L extends string>(...labels: L[]): Array<L | typeof ACCOUNT> => [...labels, ACCOUNT];

function counter<L extends string = never>(name: string, help: string, labelNames: readonly L[] = []): Declared<Counter<L>> {
  return { labelNames, create: (registers) => new Counter({ name, help, labelNames, registers }) };
}

function histogram<L extends string = never>(
  name: string,
  help: string,
  labelNames: readonly L[],
  buckets: number[],
): Declared<Histogram<L>> {
  return { labelNames, create: (registers) => new Histogram({ name, help, labelNames, buckets, registers }) };
}

function gauge<L extends string = never>(
  name: string,
  help: string,
  labelNames: readonly L[] = [],
  collect?: (gauge: Gauge<L>, watched: Watched) => void,
): Declared<Gauge<L>> {
  return {
    labelNames,
    create: (registers, watched) =>
      new Gauge({
        name,
        help,
        labelNames,
        registers,
        ...(collect
          ? {
              collect(this: Gauge<L>) {
                collect(this, watched);
              },
            }
          : {}),
      }),
  };
}

/**
 * A gauge set from each watched limiter's budgets when scraped (nothing while the process watches
 * none). Own budgets come and go: only the current ones are shown.
 */
function budgetGauge<L extends string>(
  name: string,
  help: string,
  labelNames: readonly L[],
  show: (set: (labels: Partial<Record<L, string>>, value: number) => void, snapshot: BudgetSnapshot, models: readonly string[]) => void,
): Declared<Gauge<L | typeof ACCOUNT>> {
  return gauge(name, help, perAccount(...labelNames), (g, { budgets }) => {
    g.reset();
    for (const [account, watched] of budgets) {
      const labels: Partial<Record<typeof ACCOUNT, string>> = account === null ? {} : { [ACCOUNT]: account };
      const set = (own: Partial<Record<L, string>>, value: number) =>
        g.set({ ...own, ...labels } as Partial<Record<L | typeof ACCOUNT, string>>, value);
      show(set, watched.read(), watched.models);
    }
  });
}

const METRICS = {
  httpRequests: counter('subscriber_mirror_http_requests_total', 'HTTP requests served, by route and status', [
    'method',
    'route',
    'status',
  ]),
  httpDuration: histogram(
    'subscriber_mirror_http_request_duration_seconds',
    'HTTP request latency',
    ['method', 'route'],
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 3],
  ),
  httpClientRefusals: counter(
    'subscriber_mirror_http_client_refusals_total',
    'Public port: connections closed at accept (connections) and requests answered 429 (rate) by the per-client limits',
    ['limit'],
  ),
  deliveries: counter(
    'subscriber_mirror_webhook_deliveries_total',
    'Webhook deliveries by outcome: received, rejected, duplicate, applied, failed, ignored, purged (deleted after WEBHOOK_RETENTION)',
    perAccount('outcome'),
  ),
  queueDepth: gauge('subscriber_mirror_queue_depth', 'Jobs per BullMQ queue and state', perAccount('queue', 'state')),
  redisMemoryUsed: gauge('subscriber_mirror_redis_memory_used_bytes', "Redis's used_memory (INFO memory), read by the worker", []),
  redisMemoryMax: gauge('subscriber_mirror_redis_memory_max_bytes', "Redis's maxmemory (INFO memory; 0: no limit), read by the worker", []),
  passDuration: histogram(
    'subscriber_mirror_sync_pass_duration_seconds',
    'Duration of poll passes',
    perAccount('mode', 'outcome'),
    [0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 14400],
  ),
  rowsWritten: counter(
    'subscriber_mirror_rows_total',
    'Subscriber rows handed to the store, by path and result (inserted, updated, unchanged, skipped)',
    perAccount('via', 'result'),
  ),
  upstreamRequests: counter(
    'subscriber_mirror_upstream_requests_total',
    'Requests made to the mailing service, by API and outcome',
    perAccount('api', 'outcome'),
  ),
  syncErrors: counter('subscriber_mirror_sync_errors_total', 'Failed poll passes by error class', perAccount('mode', 'error')),
  limiterWait: histogram(
    'subscriber_mirror_limiter_wait_seconds',
    'Time a request waited for the shared rate limiter',
    perAccount(),
    [0.001, 0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120],
  ),
  // The worker's accounts share its Postgres connections (db/client.ts, `openAccountPools`).
  dbCheckoutWait: histogram(
    'subscriber_mirror_db_checkout_wait_seconds',
    "Time a checkout of the account (a statement, or a transaction's statements) waited for one of the worker's shared Postgres connections",
    perAccount(),
    [0.001, 0.01, 0.1, 0.5, 1, 2, 5, 10],
  ),
  dbCheckoutFailures: counter(
    'subscriber_mirror_db_checkout_failures_total',
    "Checkouts of the account that got none of the worker's Postgres connections: timeout (all busy for 10 s) or error (connecting failed)",
    perAccount('reason'),
  ),
  dbPool: gauge(
    'subscriber_mirror_db_pool',
    "The worker's shared Postgres connections: busy, idle, and the checkouts waiting for one (waiting)",
    ['state'],
    (g, { connections }) => {
      g.reset();
      if (!connections) return;
      const now = connections();
      g.set({ state: 'busy' }, now.busy);
      g.set({ state: 'idle' }, now.idle);
      g.set({ state: 'waiting' }, now.waiting);
    },
  ),
  // No account label: what one replica's memory grows with (docs/operations.md, "Replicas for memory").
  accountsRead: gauge(
    'subscriber_mirror_worker_accounts_read',
    "Accounts whose poll path this worker replica runs (it reads them from the service), by read source; 0 in a replica that reads none of that source's accounts",
    ['source'],
  ),
  cursorAge: gauge(
    'subscriber_mirror_sync_cursor_age_seconds',
    'Age of the newest upstream change mirrored, per group and type',
    perAccount('group', 'type'),
  ),
  drift: gauge(
    'subscriber_mirror_sync_drift',
    'Upstream /count minus current mirrored members, per group and type',
    perAccount('group', 'type'),
  ),
  authPaused: gauge(
    'subscriber_mirror_upstream_auth_paused',
    '1 while polling is paused because the service rejected the API key',
    perAccount(),
  ),
  deliveryLag: histogram(
    'subscriber_mirror_webhook_apply_lag_seconds',
    'Time from a delivery being stored to its events being applied',
    perAccount(),
    [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 30, 120],
  ),
  futureRows: counter(
    'subscriber_mirror_poll_future_rows_total',
    "Rows dated after the service's now + 14 h (stored; the incremental cursor does not follow them)",
    perAccount('group', 'type'),
  ),
  passGaps: counter(
    'subscriber_mirror_full_pass_gaps_total',
    'Full-pass pages that could not be joined to the previous page (the list shifted more than the overlap); such a pass proves no removal',
    perAccount('group', 'type'),
  ),
  passStepBacks: counter(
    'subscriber_mirror_full_pass_step_backs_total',
    'Requests full passes spent stepping back because the list moved by more than the page overlap (members leaving during the pass)',
    perAccount('group', 'type'),
  ),
  membersAwaitingProof: gauge(
    'subscriber_mirror_members_awaiting_proof',
    'Current members the last complete full pass did not list: ended only when a second pass confirms they left',
    perAccount('group', 'type'),
  ),
  membersRemoved: counter(
    'subscriber_mirror_members_removed_total',
    'Memberships ended by the poll (missed by two complete gap-free full passes in a row)',
    perAccount('via'),
  ),
  lastSuccess: gauge(
    'subscriber_mirror_sync_last_success_timestamp_seconds',
    'Unix time of the last successful pass (incremental or full), per group and type',
    perAccount('group', 'type'),
  ),
  syncInterval: gauge(
    'subscriber_mirror_sync_interval_seconds',
    'Configured SYNC_EVERY per group and type (alerts compare pass age against it)',
    perAccount('group', 'type'),
  ),
  upstreamCount: gauge(
    'subscriber_mirror_sync_upstream_count',
    'Members the service reported (/count) at the last full pass, per group and type',
    perAccount('group', 'type'),
  ),
  mirrored: gauge(
    'subscriber_mirror_sync_mirrored_members',
    'Current members in the mirror (removed_at is null), per group and type',
    perAccount('group', 'type'),
  ),
  inbox: gauge(
    'subscriber_mirror_webhook_inbox_deliveries',
    'Stored webhook deliveries by status (pending, applied, failed, ignored)',
    perAccount('status'),
  ),
  adminActions: counter(
    'subscriber_mirror_admin_actions_total',
    'Admin requests that change something or present credentials: login, logout, backfill, queues (BullMQ dashboard actions), auth (credentials on any other request); outcome succeeded, failed (wrong credentials), refused (cross-site), throttled, rejected (bad request), error',
    ['action', 'outcome'],
  ),
  syncJobsRefused: counter(
    'subscriber_mirror_sync_jobs_refused_total',
    'Sync jobs the worker refused because their group (reason group) or type (reason type) is not configured, whoever queued them',
    perAccount('reason'),
  ),

  // The audit's (docs/operations.md, "The audit").
  auditRowsChecked: counter(
    'subscriber_mirror_audit_rows_checked_total',
    'Rows the audit read back from the service and compared with the mirror, per group and type',
    perAccount('group', 'type'),
  ),
  auditMismatches: counter(
    'subscriber_mirror_audit_mismatches_total',
    'Mismatches the audit found that no stamped change explains: content, missing, extra, count',
    perAccount('group', 'type', 'kind'),
  ),
  auditRepaired: counter(
    'subscriber_mirror_audit_repairs_total',
    'Mismatches the audit repaired (rows rewritten or added; full passes asked for extras and count gaps)',
    perAccount('group', 'type'),
  ),
  auditUnrepaired: counter(
    'subscriber_mirror_audit_unrepaired_total',
    'Mismatches that persisted after a repair (a write the guard refused, a gap after the full pass asked for it)',
    perAccount('group', 'type'),
  ),
  auditMissedDeliveries: counter(
    'subscriber_mirror_audit_missed_deliveries_total',
    'Rows the audit wrote that a webhook should have brought (stamped longer ago than the settle time)',
    perAccount('group', 'type'),
  ),
  auditRequests: counter(
    'subscriber_mirror_audit_requests_total',
    'Requests the audit made to the service (counts, sample pages, the webhook read-back)',
    perAccount(),
  ),
  auditAccuracy: gauge(
    'subscriber_mirror_audit_accuracy',
    'Share of the rows the audit checked in the last 24 h that matched the service, per group and type',
    perAccount('group', 'type'),
  ),
  webhookProblems: gauge(
    'subscriber_mirror_webhook_problems',
    'Managed webhooks as the audit read them back: 1 per problem (missing, disabled, wrong-url, missing-events)',
    perAccount('webhook', 'problem'),
  ),
  webhooksReenabled: counter(
    'subscriber_mirror_webhooks_reenabled_total',
    'Webhooks the service had disabled that the audit enabled again (WEBHOOKS_REENABLE)',
  ),

  // The rate limiter's learned budgets, read from the limiter when scraped.
  rateBudgetModel: budgetGauge(
    'subscriber_mirror_rate_budget_model',
    'The budget model learned from the rate-limit headers: 1 for the current one (unknown, account, endpoint, mixed)',
    ['model'],
    (set, snapshot, models) => {
      for (const model of models) set({ model }, snapshot.model === model ? 1 : 0);
    },
  ),
  rateBudget: budgetGauge(
    'subscriber_mirror_rate_budget_per_window',
    'Requests per window the limiter uses of each budget: shared, or the endpoint with a budget of its own',
    ['budget'],
    (set, snapshot) => {
      for (const b of snapshot.budgets) set({ budget: b.budget }, b.perWindow);
    },
  ),
};

export type Metrics = { -readonly [K in keyof typeof METRICS]: (typeof METRICS)[K] extends Declared<infer M> ? M : never } & {
  registry: Registry;
  /**
   * Reads the limiter's learned budget model (one of `models`) when metrics are scraped, until the
   * returned function is called (the limiter closed: its account is read by another replica now).
   */
  watchBudgets(models: readonly string[], read: () => BudgetSnapshot): () => void;
  /** Reads the worker's shared connections when metrics are scraped, until the returned function is called. */
  watchConnections(read: () => ConnectionsSnapshot): () => void;
  /**
   * The same metrics as recorded by a part serving account `account`: every metric with an
   * `account` label gets it (the part's code stays as it is), `watchBudgets` watches that account's
   * limiter, and a `reset` forgets only the series that account recorded. The others are shared.
   */
  forAccount(account: string): Metrics;
};

/** The methods of prom-client's metrics that take the labels first (or only a value). */
const RECORDING = new Set(['inc', 'dec', 'set', 'observe', 'zero']);

/** A metric's method arguments with `fixed` labels added: `inc()`, `inc(2)` and `inc({a}, 2)` alike. */
function withFixed(args: unknown[], fixed: Record<string, string>): [Record<string, string>, ...unknown[]] {
  const [first, ...rest] = args;
  if (typeof first === 'object' && first !== null) return [{ ...(first as Record<string, string>), ...fixed }, ...rest];
  return [fixed, ...args];
}

/**
 * `metric` recording every series with `fixed` labels too. Its `reset` removes only the series
 * recorded through it, so that one account's refresh (the audit's webhook gauge) leaves the others'.
 */
function withLabels<M extends object>(metric: M, fixed: Record<string, string>): M {
  const recorded = new Map<string, Record<string, string>>();
  const target = metric as M & { remove(labels: Record<string, string>): void };
  return new Proxy(target, {
    get(own, property) {
      const value: unknown = Reflect.get(own, property, own);
      if (typeof value !== 'function') return value;
      if (property === 'reset') {
        return () => {
          for (const labels of recorded.values()) own.remove(labels);
          recorded.clear();
        };
      }
      if (typeof property !== 'string' || !RECORDING.has(property)) return (value as (...a: unknown[]) => unknown).bind(own);
      return (...args: unknown[]) => {
        const labelled = withFixed(args, fixed);
        recorded.set(JSON.stringify(Object.entries(labelled[0]).sort()), labelled[0]);
        return (value as (...a: unknown[]) => unknown).apply(own, labelled);
      };
    },
  });
}

export function createMetrics(options: { defaultMetrics?: boolean } = {}): Metrics {
  const registry = new Registry();
  if (options.defaultMetrics !== false) collectDefaultMetrics({ register: registry, prefix: 'subscriber_mirror_' });
  const watched: Watched = { budgets: new Map(), connections: null };
  const declared = Object.entries(METRICS) as Array<[string, Declared<object>]>;
  const made = Object.fromEntries(declared.map(([key, d]) => [key, d.create([registry], watched)]));
  type Made = Omit<Metrics, 'registry' | 'watchBudgets' | 'watchConnections' | 'forAccount'>;
  const views = new Map<string, Metrics>();
  // A later watch of the same account replaces the earlier one, whose unwatch then leaves it be.
  const watchOne = (account: string | null, what: WatchedBudgets): (() => void) => {
    watched.budgets.set(account, what);
    return () => {
      if (watched.budgets.get(account) === what) watched.budgets.delete(account);
    };
  };
  const watchConnections = (read: () => ConnectionsSnapshot): (() => void) => {
    watched.connections = read;
    return () => {
      if (watched.connections === read) watched.connections = null;
    };
  };
  const forAccount = (account: string): Metrics => {
    const known = views.get(account);
    if (known) return known;
    const labelled = declared.map(([key, d]) => [
      key,
      d.labelNames.includes(ACCOUNT) ? withLabels(made[key] as object, { [ACCOUNT]: account }) : made[key],
    ]);
    const view: Metrics = {
      ...(Object.fromEntries(labelled) as Made),
      registry,
      watchBudgets: (models, read) => watchOne(account, { models, read }),
      watchConnections,
      forAccount,
    };
    views.set(account, view);
    return view;
  };
  return {
    ...(made as Made),
    registry,
    watchBudgets: (models, read) => watchOne(null, { models, read }),
    watchConnections,
    forAccount,
  };
}

/** The outcomes of a delivery the receiver records. */
const RECEIVER_OUTCOMES = ['received', 'received_invalid', 'rejected', 'duplicate'];
/** The outcomes of a delivery the worker's consumer records. */
const CONSUMER_OUTCOMES = ['applied', 'failed', 'ignored'];

/** Which parts of the service a process runs (`start --role`): whose series it starts at 0. */
export interface ProcessRoles {
  receiver: boolean;
  worker: boolean;
}

/**
 * Series that alerts and the dashboard select by label exist from the first scrape (at 0), so a
 * rule reads "nothing failed" rather than "no data", and a misspelled label shows up in tests. The
 * series of each part serving an account exist for each of `accounts`, in the processes that run
 * that part only: a receiver exporting a pass or a connection wait at 0 would show, per instance,
 * a worker that is not there. The inbox gauges are every role's (each reads the inbox).
 */
export function initSeries(
  metrics: Metrics,
  inboxStatuses: readonly string[],
  accounts: readonly string[],
  roles: ProcessRoles = { receiver: true, worker: true },
): void {
  // A request no account's route took is rejected without an account.
  if (roles.receiver) metrics.deliveries.inc({ outcome: 'rejected' }, 0);
  for (const account of accounts) {
    const m = metrics.forAccount(account);
    for (const status of inboxStatuses) m.inbox.set({ status }, 0);
    if (roles.receiver) for (const outcome of RECEIVER_OUTCOMES) m.deliveries.inc({ outcome }, 0);
    if (roles.worker) initWorkerSeries(m);
  }
}

/** One account's series of the worker's parts: its consumer, passes, limiter, connections and audit. */
function initWorkerSeries(m: Metrics): void {
  for (const outcome of CONSUMER_OUTCOMES) m.deliveries.inc({ outcome }, 0);
  // Its buckets exist before a delivery is applied (the dashboard's apply lag reads them).
  m.deliveryLag.zero({});
  for (const mode of ['incremental', 'full']) {
    for (const outcome of ['succeeded', 'failed']) m.passDuration.zero({ mode, outcome });
  }
  for (const reason of ['group', 'type']) m.syncJobsRefused.inc({ reason }, 0);
  for (const reason of ['timeout', 'error']) m.dbCheckoutFailures.inc({ reason }, 0);
  // Metrics with no label but the account's: without a recorded series they would show nothing.
  m.limiterWait.zero({});
  m.dbCheckoutWait.zero({});
  m.authPaused.set(0);
  m.auditRequests.inc(0);
  m.webhooksReenabled.inc(0);
}

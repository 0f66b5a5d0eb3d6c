/**
 * The audit loop (docs/operations.md, "The audit"): every `AUDIT_EVERY`, the (group, type) pairs a
 * tick can afford within its share of the request budget (AUDIT_BUDGET, 5 % by default), each claimed in
 * Postgres so that replicas do not audit the same pair twice in a period; then the webhooks read back
 * (their health), by one replica per period.
 */
import type { Redis } from 'ioredis';
import type { SubscriberType } from '../db/schema.js';
import { repeat, type Repeating } from '../ground/repeat.js';
import { sleep } from '../ground/wait.js';
import type { WebhooksApi } from '../upstream/webhooks-api.js';
import { auditSchedule, nextAllowance, planLoopTick, tickBudget, tickCost, tickEarning, type AuditSchedule } from './core.js';
import { auditPair, passRunning, type AuditDeps, type AuditReader, type PairAudit } from './pair.js';
import { managedWebhooks } from './reads.js';
import { reenableWebhook } from '../webhooks/manage.js';
import {
  claimAudit,
  listWebhookHealth,
  purgeAuditResults,
  saveWebhookHealth,
  WEBHOOK_PROBLEMS,
  type WebhookCheck,
  type WebhookHealth,
  type WebhookProblem,
} from './state.js';
import { isPaused, readAuthPause } from '../sync/auth-pause.js';
import { readSyncState } from '../sync/state.js';
import { passLockKey } from '../sync/worker.js';

export interface AuditLoopDeps extends AuditDeps {
  redis: Redis;
  prefix: string;
  groups: readonly string[];
  types: readonly SubscriberType[];
  /** A reader with fresh clients (exact request counts); all share the limiter. */
  readerFactory: () => AuditReader;
  /** API_RATE_LIMIT: the audit spends at most its share of it. */
  perMinute: number;
  /** AUDIT_BUDGET as a fraction (0.05 for `5%`). */
  share: number;
  /** Requests of this process waiting for the shared limiter: a tick yields to them. */
  limiterWaiting?: () => number;
  /** The auth pause's key: no audit while the credential is rejected. */
  pauseKey?: string;
  /** Webhook management, when configured: the webhooks are read back every period. */
  webhooks?: { api: () => WebhooksApi; reenable: boolean };
}

export interface TickOutcome {
  audits: PairAudit[];
  /** Pairs left for a later tick: a pass ran, passes waited for the limiter, or another replica had it. */
  skipped: Array<{ groupId: string; type: SubscriberType; reason: string }>;
  failed: Array<{ groupId: string; type: SubscriberType; error: string }>;
  webhooks: WebhookHealth[] | null;
  requests: number;
  /** Pairs the tick's allowance paid for (audited, skipped for a pass or a claim, or failed): the rotation moves on by these. */
  planned: number;
}

export interface TickOptions {
  /** Audit now whatever the claims say (`subscriber-mirror audit`). */
  force?: boolean;
  groupId?: string;
  type?: SubscriberType;
  /** Where the rotation starts (the loop moves it on when not every pair fits). */
  rotation?: number;
  /** Requests this tick may make (the loop's carried allowance); default: one period's share. */
  allowance?: number;
}

/** One tick: the pairs it can afford, then the webhooks. */
export async function runAuditTick(deps: AuditLoopDeps, options: TickOptions = {}): Promise<TickOutcome> {
  const outcome: TickOutcome = { audits: [], skipped: [], failed: [], webhooks: null, requests: 0, planned: 0 };
  if (deps.pauseKey && isPaused(await readAuthPause(deps.redis, deps.pauseKey))) return outcome;
  const reader = deps.readerFactory();
  const pairs = deps.groups
    .filter((g) => options.groupId === undefined || g === options.groupId)
    .flatMap((groupId) => deps.types.filter((t) => options.type === undefined || t === options.type).map((type) => ({ groupId, type })));
  const budget = options.force ? Number.POSITIVE_INFINITY : (options.allowance ?? tickBudget(deps.perMinute, deps.everyMs, deps.share));
  const plan = planLoopTick(pairs, reader.name, budget, options.rotation ?? 0, deps.webhooks ? 1 : 0);
  for (const pair of pairs) if (!plan.pairs.includes(pair)) outcome.skipped.push({ ...pair, reason: 'over the audit budget this tick' });
  outcome.planned = plan.pairs.length;
  for (const pair of plan.pairs) await auditOne(deps, reader, pair, options, outcome);
  if (deps.webhooks && (options.force || (plan.webhooks && (await claimWebhookCheck(deps))))) outcome.webhooks = await checkWebhooks(deps);
  outcome.requests = reader.requests();
  deps.metrics?.auditRequests.inc(outcome.requests);
  return outcome;
}

async function auditOne(
  deps: AuditLoopDeps,
  reader: AuditReader,
  pair: { groupId: string; type: SubscriberType },
  options: TickOptions,
  outcome: TickOutcome,
): Promise<void> {
  const skip = (reason: string) => outcome.skipped.push({ ...pair, reason });
  const inTheWay = await passesInTheWay(deps, pair, options.force === true);
  if (inTheWay !== null) return void skip(inTheWay);
  // Before its first complete full pass the mirror does not claim to hold the pair: nothing to audit yet.
  if (!(await readSyncState(deps.pool, pair.groupId, pair.type))?.lastFullCompletedAt) return void skip('no complete full pass yet');
  const state = await claimAudit(deps.pool, pair.groupId, pair.type, deps.everyMs, options.force);
  if (!state) return void skip('audited within this period');
  try {
    outcome.audits.push(await auditPair(deps, reader, state));
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    outcome.failed.push({ ...pair, error: message });
    deps.logger.warn({ groupId: pair.groupId, type: pair.type, err: message }, 'audit failed; it is tried again next period');
  }
}

/** The longest a pair waits for passes to get out of its way before it is left for a later tick (at most a tenth of the period). */
const YIELD_WAIT_MS = 2_000;
const YIELD_POLL_MS = 50;

/**
 * Why the pair must yield to passes (null: it need not): passes of this process waiting for the
 * limiter (not with `force`), or a pass of the pair running. Waits a moment for either to clear
 * first: a request queued for a few milliseconds, or an incremental pass of a short list, is no
 * reason to leave the pair for a whole period; passes that keep the budget busy still are.
 */
async function passesInTheWay(
  deps: AuditLoopDeps,
  pair: { groupId: string; type: SubscriberType },
  force: boolean,
): Promise<string | null> {
  const deadline = Date.now() + Math.min(YIELD_WAIT_MS, deps.everyMs / 10);
  for (;;) {
    let reason: string | null = null;
    if (!force && (deps.limiterWaiting?.() ?? 0) > 0) reason = 'passes are waiting for the rate limit';
    else if (await passRunning(deps.redis, passLockKey(deps.prefix, pair.groupId, pair.type))) reason = 'a pass of it is running';
    if (reason === null || Date.now() >= deadline) return reason;
    await sleep(YIELD_POLL_MS);
  }
}

/** One replica reads the webhooks back per period. */
async function claimWebhookCheck(deps: AuditLoopDeps): Promise<boolean> {
  const ttl = Math.max(1_000, Math.floor(deps.everyMs * 0.9));
  return (await deps.redis.set(`${deps.prefix}:audit-webhooks`, '1', 'PX', ttl, 'NX').catch(() => null)) === 'OK';
}

/** What is wrong with one managed webhook as the service has it. */
export function webhookProblems(
  managed: { url: string; events: readonly string[] },
  upstream: { url: string; events: readonly string[]; enabled: boolean } | undefined,
): { problems: WebhookProblem[]; missingEvents: string[] } {
  if (!upstream) return { problems: ['missing'], missingEvents: [...managed.events] };
  const missingEvents = managed.events.filter((e) => !upstream.events.includes(e));
  const problems: WebhookProblem[] = [];
  if (!upstream.enabled) problems.push('disabled');
  if (upstream.url !== managed.url) problems.push('wrong-url');
  if (missingEvents.length > 0) problems.push('missing-events');
  return { problems, missingEvents };
}

/**
 * Reads the managed webhooks back: disabled, wrong URL or missing event kinds show in `status` and as
 * a metric. With WEBHOOKS_REENABLE a webhook the service disabled is enabled again (logged).
 */
export async function checkWebhooks(deps: AuditLoopDeps): Promise<WebhookHealth[]> {
  const settings = deps.webhooks;
  if (!settings) return [];
  const api = settings.api();
  const upstream = new Map((await api.list()).map((w) => [w.id, w]));
  const health: WebhookCheck[] = [];
  const reenabled: string[] = [];
  for (const managed of await managedWebhooks(deps.pool)) {
    const found = upstream.get(managed.id);
    let { problems, missingEvents } = webhookProblems(managed, found);
    // Only what the service disabled: an operator's `webhooks update --disable` is a decision.
    const now = settings.reenable && found && !found.enabled ? await reenableWebhook(api, deps.pool, managed.id) : null;
    if (now) {
      reenabled.push(managed.id);
      ({ problems, missingEvents } = webhookProblems(managed, now));
      deps.logger.warn(
        { webhookId: managed.id },
        'the service had disabled this webhook (failed deliveries?); re-enabled it (WEBHOOKS_REENABLE)',
      );
      deps.metrics?.webhooksReenabled.inc();
    } else if (found && !found.enabled && managed.disabledByOperator) {
      deps.logger.info(
        { webhookId: managed.id, problems, missingEvents },
        'a managed webhook is disabled by an operator (webhooks update --disable); left disabled',
      );
    } else if (problems.length > 0) {
      deps.logger.warn({ webhookId: managed.id, problems, missingEvents }, 'a managed webhook is not as registered');
    }
    const enabled = found ? found.enabled || reenabled.includes(managed.id) : null;
    health.push({ id: managed.id, enabled, problems, missingEvents });
  }
  await saveWebhookHealth(deps.pool, health, reenabled);
  recordWebhookGauges(deps, health);
  return listWebhookHealth(deps.pool);
}

function recordWebhookGauges(deps: AuditLoopDeps, health: readonly WebhookCheck[]): void {
  const gauge = deps.metrics?.webhookProblems;
  if (!gauge) return;
  gauge.reset();
  for (const h of health)
    for (const problem of WEBHOOK_PROBLEMS) {
      gauge.set({ webhook: h.id, problem }, h.problems.includes(problem) ? 1 : 0);
    }
}

/** What the loop carries from one tick to the next. */
export interface AuditLoopState {
  /** Where the next tick's plan starts among the pairs. */
  rotation: number;
  /** Requests carried over (`nextAllowance`). */
  allowance: number;
}

/** One tick of the loop: its allowance (one tick's earning added to what was left), the tick, the rotation moved on. */
export async function loopTick(deps: AuditLoopDeps, state: AuditLoopState): Promise<TickOutcome> {
  const earning = tickEarning(deps.perMinute, deps.everyMs, deps.share);
  // Legacy's pair cost bounds both sources'.
  const wholeTick = tickCost(deps.groups.length, deps.types.length, 'legacy', deps.webhooks ? 1 : 0);
  state.allowance = nextAllowance(state.allowance, earning, wholeTick);
  const outcome = await runAuditTick(deps, { rotation: state.rotation, allowance: state.allowance });
  state.allowance -= outcome.requests;
  // Only past the pairs it paid for: a tick that could afford none leaves the next pair first in line,
  // so pairs take strict turns and the schedule `auditSchedule` reports is the one kept.
  state.rotation += outcome.planned;
  return outcome;
}

/** The schedule this loop keeps: the period each pair is really audited at within its share (`auditSchedule`). */
export function loopSchedule(
  deps: Pick<AuditLoopDeps, 'perMinute' | 'share' | 'everyMs' | 'groups' | 'types' | 'webhooks'>,
  source: 'legacy' | 'current',
): AuditSchedule {
  return auditSchedule({
    perMinute: deps.perMinute,
    share: deps.share,
    everyMs: deps.everyMs,
    groups: deps.groups.length,
    types: deps.types.length,
    source,
    webhookReads: deps.webhooks ? 1 : 0,
  });
}

/** The loop of a worker: a tick every `everyMs` (results older than a week are purged daily). */
export function startAuditLoop(deps: AuditLoopDeps): Repeating {
  const state: AuditLoopState = { rotation: 0, allowance: 0 };
  let lastPurge = 0;
  return repeat(
    async () => {
      const outcome = await loopTick(deps, state);
      if (outcome.skipped.length > 0) deps.logger.debug({ skipped: outcome.skipped }, 'audit: pairs left for a later tick');
      if (Date.now() - lastPurge > 86_400_000) {
        lastPurge = Date.now();
        await purgeAuditResults(deps.pool);
      }
    },
    {
      firstDelayMs: Math.min(deps.everyMs, 30_000),
      nextDelayMs: () => deps.everyMs,
      onError: (error) => deps.logger.warn({ err: error }, 'audit tick failed; trying again next period'),
    },
  );
}

/**
 * The gauges the service refreshes every METRICS_REFRESH from its own tables and queues (no upstream
 * requests): queue depths, the inbox of every account by status and, on a poll role, per account and
 * group × type the cursor age, drift, last success, members awaiting proof and the audit's accuracy.
 * Every account is read by the same few statements (the deployment-wide status reader), never one
 * round of statements per account.
 */
import type pg from 'pg';
import { accountConfig, type Config } from '../config.js';
import type { Metrics } from '../ground/metrics.js';
import { repeat, type Repeating } from '../ground/repeat.js';
import { collectAccountsStatus, type StatusScope } from '../sync/status.js';
import { countDeliveriesOf } from '../webhooks/inbox/report.js';

type CountedQueue = { name: string; getJobCounts(...types: string[]): Promise<Record<string, number>> };
/** Each account has a sync queue of its own (under its Redis prefix), all named alike: the account tells them apart. */
export interface AccountQueue {
  account: string;
  syncQueue: CountedQueue;
}
/** The one Redis command read here (the worker's user may run it; the receiver's may not). */
type RedisInfo = { info(section: 'memory'): Promise<string> };

/**
 * Refreshes the gauges at once and then every METRICS_REFRESH; `polls`: the per-pair gauges too;
 * `redis`: Redis's memory against its maxmemory (BullMQ needs noeviction, so a full Redis refuses writes).
 */
export function startGauges(
  metrics: Metrics,
  parts: { pool: pg.Pool; queues: readonly AccountQueue[]; config: Config; polls: boolean; redis?: RedisInfo },
): Repeating {
  const accounts = parts.config.accounts.map((a) => a.name);
  const refresh = async () => {
    await recordQueueDepths(metrics, parts.queues);
    await recordInboxGauges(metrics, parts.pool, accounts);
    if (parts.polls) await recordSyncGauges(metrics, parts.pool, parts.config);
    if (parts.redis) await recordRedisMemory(metrics, parts.redis);
  };
  return repeat(refresh, { firstDelayMs: 0, nextDelayMs: () => parts.config.metricsRefreshMs, onError: () => {} });
}

async function recordQueueDepths(metrics: Metrics, queues: readonly AccountQueue[]): Promise<void> {
  for (const { account, syncQueue } of queues) {
    try {
      const counts = await syncQueue.getJobCounts('waiting', 'active', 'delayed', 'failed', 'prioritized');
      for (const [state, n] of Object.entries(counts)) metrics.queueDepth.set({ account, queue: syncQueue.name, state }, n);
    } catch {
      // Redis unavailable: readiness reports it; the gauge keeps its last value.
    }
  }
}

/** How often a pass of each group × type is due: SYNC_EVERY, or RECONCILE_EVERY for the current API (full passes only). */
export function passIntervalMs(config: Config): number {
  return config.sync.source === 'current' ? config.sync.reconcileEveryMs : config.sync.everyMs;
}

/** An account's configured pairs, as the status reads them (the audit's schedule plays no part in a gauge). */
function scopeOf(config: Config): StatusScope {
  return { account: config.account, groups: config.sync.groups, types: config.sync.types };
}

/** Cursor age, drift, last success, awaiting proof and accuracy per account and group × type, from our own tables (no upstream requests). */
async function recordSyncGauges(metrics: Metrics, pool: pg.Pool, config: Config): Promise<void> {
  try {
    const statuses = await collectAccountsStatus(
      pool,
      config.accounts.map(({ name }) => scopeOf(accountConfig(config, name))),
    );
    const now = Date.now();
    for (const { account, passes } of statuses) {
      const intervalSeconds = passIntervalMs(accountConfig(config, account)) / 1000;
      const m = metrics.forAccount(account);
      for (const r of passes) {
        const labels = { group: r.groupId, type: r.type };
        m.syncInterval.set(labels, intervalSeconds);
        m.mirrored.set(labels, r.mirrored);
        if (r.cursor) m.cursorAge.set(labels, Math.max(0, (now - Date.parse(r.cursor)) / 1000));
        if (r.lastSuccessAt) m.lastSuccess.set(labels, Date.parse(r.lastSuccessAt) / 1000);
        if (r.upstreamCount !== null) m.upstreamCount.set(labels, r.upstreamCount);
        if (r.drift !== null) m.drift.set(labels, r.drift);
        m.membersAwaitingProof.set(labels, r.awaitingProof);
        if (r.audit.accuracy !== null) m.auditAccuracy.set(labels, r.audit.accuracy);
        zeroPairCounters(m, labels);
      }
    }
  } catch {
    // Postgres unavailable: readiness reports it.
  }
}

/**
 * The series of the audit's and the passes' counters exist from the first scrape (dashboards and
 * alerts read 0, not "no data"). Those counters are recorded by the audit and the passes of the
 * account `metrics` is the view of (`Metrics.forAccount`).
 */
function zeroPairCounters(metrics: Metrics, labels: { group: string; type: string }): void {
  for (const kind of ['content', 'missing', 'extra', 'count']) metrics.auditMismatches.inc({ ...labels, kind }, 0);
  metrics.auditRowsChecked.inc(labels, 0);
  metrics.auditUnrepaired.inc(labels, 0);
  metrics.passStepBacks.inc(labels, 0);
}

async function recordInboxGauges(metrics: Metrics, pool: pg.Pool, accounts: readonly string[]): Promise<void> {
  try {
    for (const [account, counts] of await countDeliveriesOf(pool, accounts)) {
      const m = metrics.forAccount(account);
      for (const [status, n] of Object.entries(counts)) m.inbox.set({ status }, n);
    }
  } catch {
    // Postgres unavailable: readiness reports it.
  }
}

/** used_memory and maxmemory (bytes; maxmemory 0 = no limit) of an `INFO memory` reply; null when either is missing. */
export function parseRedisMemory(info: string): { used: number; max: number } | null {
  const field = (name: string) => {
    const match = new RegExp(`^${name}:(\\d+)\\r?$`, 'm').exec(info);
    return match ? Number(match[1]) : null;
  };
  const used = field('used_memory');
  const max = field('maxmemory');
  return used === null || max === null ? null : { used, max };
}

async function recordRedisMemory(metrics: Metrics, redis: RedisInfo): Promise<void> {
  try {
    const memory = parseRedisMemory(await redis.info('memory'));
    if (!memory) return;
    metrics.redisMemoryUsed.set(memory.used);
    metrics.redisMemoryMax.set(memory.max);
  } catch {
    // Redis unavailable: readiness reports it; the gauges keep their last value.
  }
}

/**
 * The gauges the service refreshes every METRICS_REFRESH from its own tables and queues (no upstream
 * requests): per account, its queue's depths, its inbox by status and, on a poll role, per group ×
 * type the cursor age, drift, last success, members awaiting proof and the audit's accuracy; once,
 * Redis's memory.
 */
import type pg from 'pg';
import { accuracy } from '../audit/core.js';
import { auditWindow } from '../audit/state.js';
import type { Config } from '../config.js';
import type { Metrics } from '../ground/metrics.js';
import { repeat, type Repeating } from '../ground/repeat.js';
import { collectStatus } from '../sync/status.js';
import { countDeliveriesByStatus } from '../webhooks/inbox/report.js';

type CountedQueue = { name: string; getJobCounts(...types: string[]): Promise<Record<string, number>> };
/** The one Redis command read here (the worker's user may run it; the receiver's may not). */
type RedisInfo = { info(section: 'memory'): Promise<string> };

/** One account's share of the gauges: a pool serving it, its config (`accountConfig`) and its sync queue (none on a receiver). */
export interface GaugedAccount {
  pool: pg.Pool;
  config: Config;
  queue?: CountedQueue;
}

/**
 * Refreshes the gauges at once and then every METRICS_REFRESH, each account's with its `account`
 * label; `polls`: the per-pair gauges too; `redis`: Redis's memory against its maxmemory (BullMQ
 * needs noeviction, so a full Redis refuses writes).
 */
export function startGauges(
  metrics: Metrics,
  parts: { accounts: readonly GaugedAccount[]; polls: boolean; refreshMs: number; redis?: RedisInfo },
): Repeating {
  const refresh = async () => {
    for (const account of parts.accounts) {
      const labelled = metrics.forAccount(account.config.account);
      if (account.queue) await recordQueueDepths(labelled, account.queue);
      await recordInboxGauges(labelled, account.pool);
      if (parts.polls) await recordSyncGauges(labelled, account.pool, account.config);
    }
    if (parts.redis) await recordRedisMemory(metrics, parts.redis);
  };
  return repeat(refresh, { firstDelayMs: 0, nextDelayMs: () => parts.refreshMs, onError: () => {} });
}

async function recordQueueDepths(metrics: Metrics, queue: CountedQueue): Promise<void> {
  try {
    const counts = await queue.getJobCounts('waiting', 'active', 'delayed', 'failed', 'prioritized');
    for (const [state, n] of Object.entries(counts)) metrics.queueDepth.set({ queue: queue.name, state }, n);
  } catch {
    // Redis unavailable: readiness reports it; the gauge keeps its last value.
  }
}

/** How often a pass of each group × type is due: SYNC_EVERY, or RECONCILE_EVERY for the current API (full passes only). */
export function passIntervalMs(config: Config): number {
  return config.sync.source === 'current' ? config.sync.reconcileEveryMs : config.sync.everyMs;
}

/** Cursor age and drift per group × type, from our own tables (no upstream requests). */
async function recordSyncGauges(metrics: Metrics, pool: pg.Pool, config: Config): Promise<void> {
  try {
    const rows = await collectStatus(pool, { groups: config.sync.groups, types: config.sync.types });
    const audits = await auditWindow(pool);
    const now = Date.now();
    for (const r of rows) {
      const labels = { group: r.groupId, type: r.type };
      metrics.syncInterval.set(labels, passIntervalMs(config) / 1000);
      metrics.mirrored.set(labels, r.mirrored);
      if (r.cursor) metrics.cursorAge.set(labels, Math.max(0, (now - Date.parse(r.cursor)) / 1000));
      if (r.lastSuccessAt) metrics.lastSuccess.set(labels, Date.parse(r.lastSuccessAt) / 1000);
      if (r.upstreamCount !== null) metrics.upstreamCount.set(labels, r.upstreamCount);
      if (r.drift !== null) metrics.drift.set(labels, r.drift);
      metrics.membersAwaitingProof.set(labels, r.awaitingProof);
      const window = audits.get(`${r.groupId}:${r.type}`);
      const share = window ? accuracy(window.rowsChecked, window.content + window.missing + window.extra) : null;
      if (share !== null) metrics.auditAccuracy.set(labels, share);
      for (const kind of ['content', 'missing', 'extra', 'count']) metrics.auditMismatches.inc({ ...labels, kind }, 0);
      metrics.auditRowsChecked.inc(labels, 0);
      metrics.auditUnrepaired.inc(labels, 0);
      // The series exists from the first scrape (dashboards and alerts read 0, not "no data").
      metrics.passStepBacks.inc(labels, 0);
    }
  } catch {
    // Postgres unavailable: readiness reports it.
  }
}

async function recordInboxGauges(metrics: Metrics, pool: pg.Pool): Promise<void> {
  try {
    for (const [status, n] of Object.entries(await countDeliveriesByStatus(pool))) metrics.inbox.set({ status }, n);
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

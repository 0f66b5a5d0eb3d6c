/**
 * The gauges the service refreshes every METRICS_REFRESH from its own tables and queues (no upstream
 * requests): queue depths, the inbox by status and, on a poll role, per group × type the cursor age,
 * drift, last success, members awaiting proof and the audit's accuracy.
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

/** Refreshes the gauges at once and then every METRICS_REFRESH; `polls`: the per-pair gauges too. */
export function startGauges(metrics: Metrics, parts: { pool: pg.Pool; queues: CountedQueue[]; config: Config; polls: boolean }): Repeating {
  const refresh = async () => {
    await recordQueueDepths(metrics, parts.queues);
    await recordInboxGauges(metrics, parts.pool);
    if (parts.polls) await recordSyncGauges(metrics, parts.pool, parts.config);
  };
  return repeat(refresh, { firstDelayMs: 0, nextDelayMs: () => parts.config.metricsRefreshMs, onError: () => {} });
}

async function recordQueueDepths(metrics: Metrics, queues: CountedQueue[]): Promise<void> {
  for (const queue of queues) {
    try {
      const counts = await queue.getJobCounts('waiting', 'active', 'delayed', 'failed', 'prioritized');
      for (const [state, n] of Object.entries(counts)) metrics.queueDepth.set({ queue: queue.name, state }, n);
    } catch {
      // Redis unavailable: readiness reports it; the gauge keeps its last value.
    }
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

/**
 * The BullMQ worker of queue "sync": turns pass jobs into `runPass` calls, one (group, type) at a
 * time across all replicas, honouring the auth pause (invariant 9), and resuming full passes that a
 * crash or shutdown left open.
 */
import { DelayedError, UnrecoverableError, Worker, type ConnectionOptions, type Job, type Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type pg from 'pg';
import { SUBSCRIBER_TYPES, type PassTrigger, type SubscriberType } from '../db/schema.js';
import type { Metrics } from '../ground/metrics.js';
import type { Logger } from '../ground/log.js';
import { UpstreamAuthError } from '../upstream/errors.js';
import type { LegacyClient } from '../upstream/legacy/client.js';
import { authPauseKey, clearAuthPause, isPaused, readAuthPause, recordAuthFailure } from './auth-pause.js';
import { decide, type DecisionJob, type DecisionState, type Need } from './decide.js';
import { deleteIfOwn, tryAcquirePassLock, type HeldLock } from './lock.js';
import { PassInterruptedError, type PassProgress, type PassResult } from './pass-recorder.js';
import { confirmRemovals, passLockKey, type ProofContext } from './proof.js';
import { legacySource, type ReadSource } from './source.js';
import {
  SYNC_QUEUE,
  enqueueResume,
  fullPassDedupId,
  fullPassKey,
  type LastFullPasses,
  type PassJobData,
  type PassJobResult,
} from './schedule.js';
import { listSyncStates, readSyncState, type SyncStateRow } from './state.js';
import { createPageGate, PAGES_IN_MEMORY, type PageGate } from '../upstream/page-gate.js';

export interface SyncWorkerDeps {
  pool: pg.Pool;
  /** Fails fast; used for locks and the auth pause. */
  redis: Redis;
  /** For BullMQ's blocking connection (needs `maxRetriesPerRequest: null`). */
  connection: ConnectionOptions;
  prefix: string;
  /** A fresh client per pass, so the per-pass request count is exact; all share one limiter. */
  legacyFactory?: () => LegacyClient;
  /** Where passes read from (source.ts); the legacy API through `legacyFactory` when not given. */
  source?: ReadSource;
  apiKey: string;
  logger: Logger;
  sourceTimezone: string;
  lookbackMs: number;
  pageSize: number;
  /** SYNC_GROUPS: a job for any other group is refused, whoever queued it (docs/security.md). */
  groups: readonly string[];
  /** SYNC_TYPES, per group (for membership removal); a job for any other type is refused too. */
  types: readonly SubscriberType[];
  concurrency?: number;
  metrics?: Metrics;
  /** How long a backfill waits before trying again when its (group, type) is busy. */
  busyRetryMs?: number;
  authPauseLimits?: { minMs?: number; maxMs?: number };
  /** How long a confirming pass waits for another type's pass lock before leaving the proof to the next full pass (default 30 min). */
  confirmLockWaitMs?: number;
  /** PASS_HISTORY_RETENTION: how long the pass history keeps rows the removal rule no longer reads. */
  historyRetentionMs?: number;
  /**
   * Room for list pages in memory: one gate per process, shared by the workers of every account
   * (the process's memory stays that of one account's passes); a gate of its own when not given.
   */
  pageGate?: PageGate;
}

export interface SyncWorker {
  worker: Worker<PassJobData, PassJobResult>;
  /** Stops taking jobs, lets running passes stop at their next checkpoint, waits at most `timeoutMs`. */
  close(timeoutMs: number): Promise<void>;
}

export { passLockKey, proofLockKey } from './proof.js';

/**
 * Set while a backfill or resume waits for a busy (group, type): scheduled ticks skip until it got
 * its turn. Otherwise, with passes back to back (a short SYNC_EVERY), a backfill that retries every
 * few seconds can wait minutes for a gap.
 */
export function passWantedKey(prefix: string, groupId: string, type: string): string {
  return `${prefix}:pass-wanted:g${groupId}:${type}`;
}

function skipped(reason: string): PassJobResult {
  return { status: 'skipped', reason, rowsSeen: 0, rowsWritten: 0, requests: 0 };
}

function assertJobData(data: unknown): asserts data is PassJobData {
  const d = data as Partial<PassJobData> | null;
  if (
    !d ||
    typeof d.groupId !== 'string' ||
    !/^\d+$/.test(d.groupId) ||
    !(SUBSCRIBER_TYPES as readonly string[]).includes(d.type ?? '') ||
    (d.mode !== 'full' && d.mode !== 'incremental') ||
    (d.trigger !== 'schedule' && d.trigger !== 'backfill' && d.trigger !== 'resume')
  ) {
    throw new UnrecoverableError(`malformed sync job data: ${JSON.stringify(data)}`);
  }
}

/**
 * One scope wherever jobs come from (docs/security.md, "Admin authentication"): /admin/backfill and
 * the CLI check it before queueing, but anyone who can add to the queue (the dashboard, Redis itself)
 * bypasses them, so the worker checks it again where the job is consumed. Unrecoverable: retrying
 * cannot make a group configured.
 */
function refuseOutOfScope(deps: SyncWorkerDeps, log: Logger, job: Job<PassJobData, PassJobResult>): void {
  const { groupId, type, trigger } = job.data;
  const reason = !deps.groups.includes(groupId) ? 'group' : !deps.types.includes(type) ? 'type' : null;
  if (reason === null) return;
  deps.metrics?.syncJobsRefused.inc({ reason });
  log.warn({ jobId: job.id, name: job.name, groupId, type, trigger }, 'sync job refused: outside the configured scope');
  const configured = reason === 'group' ? `SYNC_GROUPS: ${deps.groups.join(', ') || 'none'}` : `SYNC_TYPES: ${deps.types.join(', ')}`;
  throw new UnrecoverableError(`${reason} ${reason === 'group' ? groupId : type} is not configured (${configured})`);
}

/** What the worker's functions share. */
interface WorkerContext {
  deps: SyncWorkerDeps;
  log: Logger;
  pauseKey: string;
  /** The worker is shutting down: running passes stop at their next checkpoint. */
  closing: () => boolean;
  /** Room for list pages in memory, shared by this worker's passes. */
  pageGate: PageGate;
}

export function createSyncWorker(deps: SyncWorkerDeps): SyncWorker {
  let closing = false;
  const log = deps.logger.child({ component: 'sync-worker' });
  const ctx: WorkerContext = {
    deps,
    log,
    pauseKey: authPauseKey(deps.prefix, deps.apiKey),
    closing: () => closing,
    pageGate: deps.pageGate ?? createPageGate(PAGES_IN_MEMORY),
  };

  /** Runs `decide` (decide.ts): gathers each fact it asks for, then does what it decided. */
  const process = async (job: Job<PassJobData, PassJobResult>, token?: string): Promise<PassJobResult> => {
    assertJobData(job.data);
    refuseOutOfScope(deps, log, job);
    const { mode, trigger } = job.data;
    // A scheduler's job is added ahead of its due time, with the rest as delay.
    const decisionJob: DecisionJob = {
      mode,
      trigger,
      id: job.id ?? '1',
      dueAt: job.timestamp + (job.opts.delay ?? 0),
      canWait: Boolean(token),
    };
    const state: DecisionState = {};
    const held: { lock: HeldLock | null } = { lock: null };
    try {
      for (;;) {
        const action = decide(decisionJob, state);
        if (action.kind === 'need') await gather(ctx, job.data, action.need, state, held);
        else if (action.kind === 'skip') return skipped(action.reason);
        else if (action.kind === 'fail') throw new UnrecoverableError(action.reason);
        else if (action.kind === 'wait') return await waitForTurn(ctx, job, token as string);
        else {
          const lock = held.lock as HeldLock;
          held.lock = null; // runLocked releases it
          return await runLocked(ctx, job, lock);
        }
      }
    } finally {
      await held.lock?.release();
    }
  };

  const worker = new Worker<PassJobData, PassJobResult>(SYNC_QUEUE, process, {
    connection: deps.connection,
    prefix: deps.prefix,
    concurrency: deps.concurrency ?? 2,
    // A killed replica's job counts as stalled after this long and is picked up again.
    lockDuration: 30_000,
    autorun: true,
  });
  worker.on('error', (error) => log.warn({ err: error }, 'sync worker error'));

  return {
    worker,
    async close(timeoutMs: number) {
      closing = true;
      // worker.close() waits for active jobs forever (docs/architecture.md, "Traps we work around"): race it.
      const closed = worker.close();
      const timer = new Promise<'timeout'>((resolve) => setTimeout(() => resolve('timeout'), timeoutMs).unref());
      if ((await Promise.race([closed.then(() => 'closed' as const), timer])) === 'timeout') {
        log.warn({ timeoutMs }, 'sync worker did not stop in time; closing forcefully');
        await worker.close(true);
      }
    },
  };
}

/** Reads the fact `decide` asked for (or makes the effect) into `state`. */
async function gather(
  ctx: WorkerContext,
  data: PassJobData,
  need: Need,
  state: DecisionState,
  held: { lock: HeldLock | null },
): Promise<void> {
  const { deps, pauseKey } = ctx;
  const { groupId, type } = data;
  const wantedKey = passWantedKey(deps.prefix, groupId, type);
  switch (need) {
    case 'paused': {
      const pause = await readAuthPause(deps.redis, pauseKey);
      state.paused = isPaused(pause) ? pause : null;
      deps.metrics?.authPaused.set(state.paused ? 1 : 0);
      return;
    }
    case 'waiting':
      state.waiting = await deps.redis.get(wantedKey).catch(() => null);
      return;
    case 'lock':
      held.lock = await tryAcquirePassLock(deps.redis, passLockKey(deps.prefix, groupId, type));
      state.locked = held.lock !== null;
      return;
    case 'clear-wanted':
      await deps.redis.del(wantedKey).catch(() => 0);
      state.wantedCleared = true;
      return;
    case 'drop-own-mark':
      // Only while the mark is still this job's: a backfill may have marked the key since.
      await deleteIfOwn(deps.redis, wantedKey, state.waiting ?? '').catch(() => {});
      state.ownMarkDropped = true;
      return;
    case 'full-pass-running': {
      const sync = await readSyncState(deps.pool, groupId, type).catch(() => null);
      state.fullPassRunning = sync?.lastStatus === 'running' && sync.lastMode === 'full';
      return;
    }
    case 'open-full-pass':
      state.openFullPass = (await readSyncState(deps.pool, groupId, type))?.fullPassOpen === true;
      return;
    case 'last-full-completed': {
      const completed = (await readSyncState(deps.pool, groupId, type))?.lastFullCompletedAt;
      state.lastFullCompletedAt = completed != null ? Date.parse(completed) : null;
      return;
    }
  }
}

/** Someone else runs this (group, type): marks it wanted (scheduled ticks skip meanwhile) and tries again shortly. */
async function waitForTurn(ctx: WorkerContext, job: Job<PassJobData, PassJobResult>, token: string): Promise<never> {
  const { deps } = ctx;
  const retryMs = deps.busyRetryMs ?? 5_000;
  await deps.redis.set(passWantedKey(deps.prefix, job.data.groupId, job.data.type), job.id ?? '1', 'PX', Math.max(3 * retryMs, 15_000));
  await job.moveToDelayed(Date.now() + retryMs, token);
  throw new DelayedError();
}

/** The configured read source, else the legacy API from the worker's legacy settings. */
function readSourceOf(deps: SyncWorkerDeps): ReadSource {
  if (deps.source) return deps.source;
  if (!deps.legacyFactory) throw new Error('sync worker: neither a read source nor a legacy client factory was given');
  return legacySource({
    legacyFactory: deps.legacyFactory,
    sourceTimezone: deps.sourceTimezone,
    lookbackMs: deps.lookbackMs,
    pageSize: deps.pageSize,
  });
}

/** Runs one pass of (groupId, type) under `lock` and records its metrics; a failure is recorded and thrown. */
async function runOnePass(
  ctx: WorkerContext,
  job: Job<PassJobData, PassJobResult>,
  type: SubscriberType,
  lock: HeldLock,
  pass: { mode: PassJobData['mode']; trigger: PassTrigger; restart?: boolean; changedSince?: string },
): Promise<PassResult> {
  const { deps, log, pauseKey } = ctx;
  const { groupId } = job.data;
  const { mode } = pass;
  const startedAt = Date.now();
  try {
    const result = await readSourceOf(deps).runPass(
      {
        pool: deps.pool,
        logger: log,
        groupTypes: deps.types,
        // Best effort: progress lives in Redis, which may have lost the job (restart without
        // persistence); the pass's real state is in Postgres and must not fail with it.
        onProgress: (p: PassProgress) => job.updateProgress({ ...p, type }).catch(() => {}),
        shouldStop: () => ctx.closing() || lock.lost,
        restart: pass.restart ?? false,
        pageGate: ctx.pageGate,
        trigger: pass.trigger,
        historyRetentionMs: deps.historyRetentionMs,
        ...(pass.changedSince ? { changedSince: pass.changedSince } : {}),
      },
      groupId,
      type,
      mode,
    );
    await clearAuthPause(deps.redis, pauseKey).catch(() => {});
    recordPassMetrics(deps, groupId, type, result, startedAt);
    return result;
  } catch (error) {
    deps.metrics?.passDuration.observe({ mode, outcome: 'failed' }, (Date.now() - startedAt) / 1000);
    deps.metrics?.syncErrors.inc({ mode, error: (error as Error).name ?? 'Error' });
    if (error instanceof UpstreamAuthError) {
      const pause = await recordAuthFailure(deps.redis, pauseKey, error.message, Date.now(), deps.authPauseLimits);
      deps.metrics?.authPaused.set(1);
      log.error(
        { groupId, type, failures: pause.failures, pausedUntil: new Date(pause.until).toISOString() },
        `${error.message}; polling paused`,
      );
      throw new UnrecoverableError(error.message);
    }
    if (error instanceof PassInterruptedError) log.info({ groupId, type }, error.message);
    else log.error({ groupId, type, err: error }, 'pass failed');
    throw error;
  }
}

function recordPassMetrics(deps: SyncWorkerDeps, groupId: string, type: SubscriberType, result: PassResult, startedAt: number): void {
  const metrics = deps.metrics;
  if (!metrics) return;
  metrics.authPaused.set(0);
  metrics.passDuration.observe({ mode: result.mode, outcome: 'succeeded' }, (Date.now() - startedAt) / 1000);
  for (const outcome of ['inserted', 'updated', 'unchanged', 'skipped'] as const)
    metrics.rowsWritten.inc({ via: readSourceOf(deps).via, result: outcome }, result.counts[outcome]);
  if (result.futureRows > 0) metrics.futureRows.inc({ group: groupId, type }, result.futureRows);
  if (result.gaps > 0) metrics.passGaps.inc({ group: groupId, type }, result.gaps);
  if (result.removed > 0) metrics.membersRemoved.inc({ via: readSourceOf(deps).via }, result.removed);
  if (result.mode === 'full') {
    metrics.passStepBacks.inc({ group: groupId, type }, result.stepBacks);
  }
}

async function runLocked(ctx: WorkerContext, job: Job<PassJobData, PassJobResult>, lock: HeldLock): Promise<PassJobResult> {
  const { groupId, type } = job.data;
  let result: PassResult;
  try {
    // A backfill is served only by a pass that starts after it was asked for: an open checkpoint
    // of an older pass is dropped, not resumed.
    const { mode, trigger } = job.data;
    result = await runOnePass(ctx, job, type, lock, { mode, trigger, restart: trigger === 'backfill' });
  } catch (error) {
    await lock.release();
    throw error;
  }
  const proof = await confirmRemovals(proofContext(ctx, job), job.data, lock, result);
  if (proof.passes > 0 || proof.checked > 0) {
    ctx.log.info(
      {
        groupId,
        type,
        confirmingPasses: proof.passes,
        checked: proof.checked,
        proofRequests: proof.requests,
        removed: proof.removed,
        awaitingProof: proof.awaitingProof,
      },
      'removal proof done',
    );
  }
  return {
    status: 'succeeded',
    rowsSeen: result.rowsSeen,
    rowsWritten: result.rowsWritten,
    requests: result.requests + proof.requests,
    mode: result.mode,
    startedAt: result.startedAt,
    removed: result.removed + proof.removed,
    confirmingPasses: proof.passes,
    proofRequests: proof.requests,
    awaitingProof: proof.awaitingProof,
    stepBacks: result.stepBacks,
    gaps: result.gaps,
    groupId,
    type,
  };
}

/** What the removal proof after this job's pass needs from the worker. */
function proofContext(ctx: WorkerContext, job: Job<PassJobData, PassJobResult>): ProofContext {
  const { deps } = ctx;
  return {
    pool: deps.pool,
    redis: deps.redis,
    prefix: deps.prefix,
    types: deps.types,
    source: readSourceOf(deps),
    log: ctx.log,
    closing: ctx.closing,
    confirmLockWaitMs: deps.confirmLockWaitMs,
    busyRetryMs: deps.busyRetryMs,
    runPass: (type, lock, pass) => runOnePass(ctx, job, type, lock, { ...pass, trigger: 'proof' }),
  };
}

/**
 * After a crash or shutdown, full passes with an open checkpoint resume now rather than at the
 * next RECONCILE_EVERY tick. Returns the ids of the jobs enqueued (deduplicated per group × type).
 */
export async function resumeOpenFullPasses(
  queue: Queue<PassJobData, PassJobResult>,
  pool: pg.Pool,
  groups: readonly string[],
  types: readonly SubscriberType[],
): Promise<string[]> {
  const ids: string[] = [];
  for (const s of await openFullPasses(pool, groups, types)) ids.push(await enqueueResume(queue, s.groupId, s.type));
  return ids;
}

/** Full passes with an open checkpoint among the configured groups and types. */
async function openFullPasses(pool: pg.Pool, groups: readonly string[], types: readonly SubscriberType[]): Promise<SyncStateRow[]> {
  return (await listSyncStates(pool)).filter((s) => s.fullPassOpen && groups.includes(s.groupId) && types.includes(s.type));
}

export interface OrphanResumerDeps {
  queue: Queue<PassJobData, PassJobResult>;
  pool: pg.Pool;
  redis: Redis;
  prefix: string;
  groups: readonly string[];
  types: readonly SubscriberType[];
  /** Wait before resuming the same pass again while its checkpoint has not moved (default 1 min)... */
  minRetryMs?: number;
  /** ...doubling each time up to this (default 1 h). */
  maxRetryMs?: number;
  now?: () => number;
}

/**
 * Finds open full passes that nothing is running or about to run (no one holds the pass lock, no
 * backfill or resume job is queued) and enqueues a resume for each; returns the job ids.
 *
 * A pass is left so when the job carrying it is lost: Redis lost its data, or a worker killed
 * mid-pass more than once got the same job failed as "stalled more than allowable limit" (BullMQ's
 * maxStalledCount) after the restart had already tried to resume it. A pass that failed (its
 * checkpoint stays open) looks the same, so while a pass's checkpoint does not move it is resumed
 * again only after a delay that doubles up to `maxRetryMs`, not at every check.
 */
export function createOrphanResumer(deps: OrphanResumerDeps): () => Promise<string[]> {
  const minRetryMs = deps.minRetryMs ?? 60_000;
  const maxRetryMs = deps.maxRetryMs ?? 3_600_000;
  const now = deps.now ?? Date.now;
  const tried = new Map<string, { offset: number | null; at: number; waitMs: number }>();
  return async () => {
    const ids: string[] = [];
    for (const s of await openFullPasses(deps.pool, deps.groups, deps.types)) {
      if ((await deps.redis.exists(passLockKey(deps.prefix, s.groupId, s.type))) > 0) continue;
      if (await deps.queue.getDeduplicationJobId(fullPassDedupId('resume', s.groupId, s.type))) continue;
      if (await deps.queue.getDeduplicationJobId(fullPassDedupId('backfill', s.groupId, s.type))) continue;
      const key = fullPassKey(s.groupId, s.type);
      const last = tried.get(key);
      const stuck = last !== undefined && last.offset === s.fullPassAt;
      if (stuck && now() < last.at + last.waitMs) continue;
      tried.set(key, { offset: s.fullPassAt, at: now(), waitMs: stuck ? Math.min(last.waitMs * 2, maxRetryMs) : minRetryMs });
      ids.push(await enqueueResume(deps.queue, s.groupId, s.type));
    }
    return ids;
  };
}

/** When each (group, type) last completed a full pass, for scheduling the next one (schedule.ts). */
export async function lastFullPasses(pool: pg.Pool): Promise<LastFullPasses> {
  const out = new Map<string, number>();
  for (const s of await listSyncStates(pool)) {
    if (s.lastFullCompletedAt) out.set(fullPassKey(s.groupId, s.type), Date.parse(s.lastFullCompletedAt));
  }
  return out;
}

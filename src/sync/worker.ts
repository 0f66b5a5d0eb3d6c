/**
 * The BullMQ worker of queue "sync": turns pass jobs into `runPass` calls, one (group, type) at a
 * time across all replicas, honouring the auth pause (invariant 9), and resuming full passes that a
 * crash or shutdown left open.
 */
import { DelayedError, UnrecoverableError, Worker, type ConnectionOptions, type Job, type Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type pg from 'pg';
import { SUBSCRIBER_TYPES, type SubscriberType } from '../db/schema.js';
import type { Metrics } from '../ground/metrics.js';
import { formatEpochMs } from '../ground/time.js';
import type { Logger } from '../ground/log.js';
import { UpstreamAuthError } from '../upstream/http.js';
import type { LegacyClient } from '../upstream/legacy/client.js';
import { authPauseKey, clearAuthPause, isPaused, readAuthPause, recordAuthFailure } from './auth-pause.js';
import {
  decide,
  decideAfterPass,
  nextProofStep,
  passesToProve,
  type DecisionJob,
  type DecisionState,
  type Need,
  type TypeProof,
} from './decide.js';
import { tryAcquirePassLock, type HeldLock } from './lock.js';
import { membersAwaitingProof } from '../mirror/store/index.js';
import { PassInterruptedError, type PassProgress, type PassResult } from './pass-recorder.js';
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
}

export interface SyncWorker {
  worker: Worker<PassJobData, PassJobResult>;
  /** Stops taking jobs, lets running passes stop at their next checkpoint, waits at most `timeoutMs`. */
  close(timeoutMs: number): Promise<void>;
}

export function passLockKey(prefix: string, groupId: string, type: string): string {
  return `${prefix}:pass-lock:g${groupId}:${type}`;
}

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
    pageGate: createPageGate(PAGES_IN_MEMORY),
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
    case 'full-pass-running': {
      const sync = await readSyncState(deps.pool, groupId, type).catch(() => null);
      state.fullPassRunning = sync?.lastStatus === 'running' && sync.lastMode === 'full';
      return;
    }
    case 'open-full-pass':
      state.openFullPass = (await readSyncState(deps.pool, groupId, type))?.fullOffset != null;
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
  pass: { mode: PassJobData['mode']; restart?: boolean; changedSince?: string },
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
    result = await runOnePass(ctx, job, type, lock, { mode: job.data.mode, restart: job.data.trigger === 'backfill' });
  } catch (error) {
    await lock.release();
    throw error;
  }
  const proof = await confirmRemovals(ctx, job, lock, result);
  if (proof.passes > 0) {
    ctx.log.info(
      {
        groupId,
        type,
        confirmingPasses: proof.passes,
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

/** What the confirming passes after a job's pass did. */
interface ProofOutcome {
  passes: number;
  removed: number;
  requests: number;
  /** Members of the job's (group, type) the job's pass missed that are still current: not proven gone. */
  awaitingProof: number;
}

/** The locks a confirming job holds: the group's proof lock, and at most one pass lock (of the type it reads now). */
interface ProofLocks {
  /** The pass lock held now, and its type (the job's own at first). */
  pass: { type: SubscriberType; lock: HeldLock } | null;
  /** The group's proof lock: one confirming job per group at a time, so the rounds of two jobs never interleave. */
  proof: HeldLock | null;
}

export function proofLockKey(prefix: string, groupId: string): string {
  return `${prefix}:proof-lock:g${groupId}`;
}

/**
 * Runs the confirming passes a full pass that missed members needs (decideAfterPass, then
 * nextProofStep until nothing is left to prove: two rounds of full passes with a sweep of what
 * changed between them) and releases `lock`. The proof is the group's: it plans for the members
 * every type's last pass missed, not only this job's, and runs under the group's proof lock with at
 * most one pass lock at a time, taking each type's lock when that type's turn comes.
 *
 * A job that finds another job proving the group lets go of its pass lock (that job may need it):
 * a backfill then waits to report the outcome; a scheduled pass or resume leaves its members to that
 * proof, which covers them, instead of holding a worker slot.
 */
async function confirmRemovals(
  ctx: WorkerContext,
  job: Job<PassJobData, PassJobResult>,
  lock: HeldLock,
  first: PassResult,
): Promise<ProofOutcome> {
  const { deps } = ctx;
  const { groupId, type } = job.data;
  const outcome: ProofOutcome = { passes: 0, removed: 0, requests: 0, awaitingProof: first.awaitingProof?.count ?? 0 };
  const locks: ProofLocks = { pass: { type, lock }, proof: null };
  const startedAt = first.startedAt;
  try {
    const maxConfirmingPasses = 2 * deps.types.length + 1;
    const decideAt = (awaitingProof: number) =>
      decideAfterPass({ mode: first.mode }, { awaitingProof, confirmingPasses: outcome.passes, maxConfirmingPasses });
    if (decideAt(outcome.awaitingProof).kind === 'done' || startedAt === null) return outcome;
    if (!(await takeProofLock(ctx, job, locks))) return outcome;
    const progress = { swept: false, sweptLast: false, canSweep: readSourceOf(deps).incremental };
    for (;;) {
      const proofs = await groupProofs(deps, groupId);
      // Read afresh before every step: another job's proof (it held the proof lock first) or this
      // job's last pass may have settled them.
      outcome.awaitingProof = (await membersAwaitingProof(deps.pool, groupId, startedAt, { type })).count;
      const awaiting = await awaitingInTypes(deps, groupId, proofs);
      if (awaiting.count === 0 || ctx.closing()) return outcome;
      // With its passes spent, the job still gives the sweep that members proven by passes may be
      // waiting for (the passes of other jobs came between its rounds); a sweep is no pass.
      const passesLeft = decideAt(awaiting.count).kind !== 'done';
      const step = nextProofStep(passesLeft ? passesToProve(proofs, awaiting.lastSeenAt, type) : [], progress);
      if (!step) return outcome;
      progress.sweptLast = step.kind === 'sweep';
      if (step.kind === 'sweep') {
        outcome.requests += await sweepChanges(ctx, job, locks, proofSince(proofs, startedAt));
        progress.swept = true;
        continue;
      }
      const held = await passLockFor(ctx, groupId, step.type, locks);
      if (!held) return outcome;
      const confirm = await runOnePass(ctx, job, step.type, held, { mode: 'full' });
      outcome.passes += 1;
      outcome.removed += confirm.removed;
      outcome.requests += confirm.requests;
    }
  } catch (error) {
    // The job's own pass succeeded: a confirming pass that fails leaves the proof to the next full pass.
    ctx.log.warn({ groupId, type, err: error }, 'confirming pass failed; members awaiting proof wait for the next full pass');
    return outcome;
  } finally {
    await locks.pass?.lock.release();
    await locks.proof?.release();
  }
}

/**
 * Members of the group that the last gap-free full pass of their type missed, over every type that
 * had one, and the latest time any of them was seen (epoch ms; null when none was ever seen by a
 * full pass).
 */
async function awaitingInTypes(
  deps: SyncWorkerDeps,
  groupId: string,
  proofs: ReadonlyArray<TypeProof<SubscriberType>>,
): Promise<{ count: number; lastSeenAt: number | null }> {
  let count = 0;
  let lastSeenAt: number | null = null;
  for (const p of proofs) {
    if (p.proofStartedAt === null) continue;
    const awaiting = await membersAwaitingProof(deps.pool, groupId, formatEpochMs(p.proofStartedAt), { type: p.type });
    count += awaiting.count;
    if (awaiting.lastSeenAt !== null) lastSeenAt = Math.max(lastSeenAt ?? -Infinity, Date.parse(awaiting.lastSeenAt));
  }
  return { count, lastSeenAt };
}

/**
 * Takes the group's proof lock. When another job holds it, releases the pass lock held first (that
 * job may be waiting for it); a backfill then waits (bounded by `confirmLockWaitMs`), anything else
 * leaves the proof to that job.
 */
async function takeProofLock(ctx: WorkerContext, job: Job<PassJobData, PassJobResult>, locks: ProofLocks): Promise<boolean> {
  const key = proofLockKey(ctx.deps.prefix, job.data.groupId);
  locks.proof = await tryAcquirePassLock(ctx.deps.redis, key);
  if (locks.proof) return true;
  await locks.pass?.lock.release();
  locks.pass = null;
  if (job.data.trigger !== 'backfill') {
    ctx.log.info(
      { groupId: job.data.groupId, type: job.data.type },
      'another job is proving the removals of this group; it covers this pass',
    );
    return false;
  }
  locks.proof = await waitForLock(ctx, key);
  return locks.proof !== null;
}

/** The pass lock of `type`: the one held when it is that type's, else the held one is released first and `type`'s taken (waiting, bounded). */
async function passLockFor(ctx: WorkerContext, groupId: string, type: SubscriberType, locks: ProofLocks): Promise<HeldLock | null> {
  if (locks.pass?.type === type && !locks.pass.lock.lost) return locks.pass.lock;
  await locks.pass?.lock.release();
  locks.pass = null;
  const lock = await waitForLock(ctx, passLockKey(ctx.deps.prefix, groupId, type));
  if (lock) locks.pass = { type, lock };
  return lock;
}

/**
 * The earliest time a change can have hidden an awaiting member from the passes that will prove its
 * removal: the start of the earlier of each type's last two passes, or of the job's own pass.
 */
function proofSince(proofs: ReadonlyArray<TypeProof<SubscriberType>>, startedAt: string): string {
  let since = Date.parse(startedAt);
  for (const p of proofs) for (const at of [p.prevProofStartedAt, p.proofStartedAt]) if (at !== null) since = Math.min(since, at);
  return formatEpochMs(since);
}

/**
 * The sweep: an incremental pass of every configured type reading every change since `since`. A
 * member that changed type while round one read is listed by it under its new type and its newer
 * version keeps it (removal needs no fact newer than the cutoff). It holds every type's pass lock
 * from its first read to its last, so that no pass ends while it reads: the passes a removal counts
 * then all ended before it began (`removalCutoff`), and its last type's pass settles the removals
 * they prove. Taking the locks in order may hold some while waiting for a pass still running: that
 * delays the passes of the other types, never the proof. Returns its requests.
 */
async function sweepChanges(ctx: WorkerContext, job: Job<PassJobData, PassJobResult>, locks: ProofLocks, since: string): Promise<number> {
  const { groupId } = job.data;
  const held = new Map<SubscriberType, HeldLock>();
  if (locks.pass && !locks.pass.lock.lost) held.set(locks.pass.type, locks.pass.lock);
  else await locks.pass?.lock.release();
  locks.pass = null;
  try {
    for (const type of ctx.deps.types) {
      if (held.has(type)) continue;
      const lock = await waitForLock(ctx, passLockKey(ctx.deps.prefix, groupId, type));
      if (!lock) throw new Error(`could not take the pass lock of ${type} for the removal proof's sweep`);
      held.set(type, lock);
    }
    const startedAt = new Date().toISOString();
    let requests = 0;
    for (const [type, lock] of held)
      requests += (await runOnePass(ctx, job, type, lock, { mode: 'incremental', changedSince: since })).requests;
    ctx.log.info({ groupId, since, startedAt, types: [...held.keys()], requests }, 'removal proof: swept every type');
    return requests;
  } finally {
    for (const lock of held.values()) await lock.release();
  }
}

async function groupProofs(deps: SyncWorkerDeps, groupId: string): Promise<Array<TypeProof<SubscriberType>>> {
  const states = new Map((await listSyncStates(deps.pool)).filter((s) => s.groupId === groupId).map((s) => [s.type, s]));
  const at = (ts: string | null | undefined) => (ts ? Date.parse(ts) : null);
  return deps.types.map((t) => ({
    type: t,
    proofStartedAt: at(states.get(t)?.proofStartedAt),
    prevProofStartedAt: at(states.get(t)?.prevProofStartedAt),
  }));
}

/** Takes the lock at `key` (a pass lock, or a group's proof lock), waiting while another holds it (bounded). */
async function waitForLock(ctx: WorkerContext, key: string): Promise<HeldLock | null> {
  const { deps } = ctx;
  const deadline = Date.now() + (deps.confirmLockWaitMs ?? 30 * 60_000);
  const retryMs = Math.min(deps.busyRetryMs ?? 5_000, 1_000);
  while (!ctx.closing() && Date.now() < deadline) {
    const lock = await tryAcquirePassLock(deps.redis, key);
    if (lock) return lock;
    await new Promise((resolve) => setTimeout(resolve, retryMs));
  }
  return null;
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
async function openFullPasses(
  pool: pg.Pool,
  groups: readonly string[],
  types: readonly SubscriberType[],
): Promise<Array<SyncStateRow & { fullOffset: number }>> {
  return (await listSyncStates(pool)).filter(
    (s): s is SyncStateRow & { fullOffset: number } => s.fullOffset !== null && groups.includes(s.groupId) && types.includes(s.type),
  );
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
  const tried = new Map<string, { offset: number; at: number; waitMs: number }>();
  return async () => {
    const ids: string[] = [];
    for (const s of await openFullPasses(deps.pool, deps.groups, deps.types)) {
      if ((await deps.redis.exists(passLockKey(deps.prefix, s.groupId, s.type))) > 0) continue;
      if (await deps.queue.getDeduplicationJobId(fullPassDedupId('resume', s.groupId, s.type))) continue;
      if (await deps.queue.getDeduplicationJobId(fullPassDedupId('backfill', s.groupId, s.type))) continue;
      const key = fullPassKey(s.groupId, s.type);
      const last = tried.get(key);
      const stuck = last !== undefined && last.offset === s.fullOffset;
      if (stuck && now() < last.at + last.waitMs) continue;
      tried.set(key, { offset: s.fullOffset, at: now(), waitMs: stuck ? Math.min(last.waitMs * 2, maxRetryMs) : minRetryMs });
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

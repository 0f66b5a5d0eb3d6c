/**
 * The removal proof after a full pass that missed members (docs/architecture.md, "Pass history and the removal rule"):
 * on a source that answers for one member, a check of each candidate when that costs fewer requests
 * than another round; otherwise two rounds of full passes with a sweep of what changed between
 * them, run at once instead of at the next RECONCILE_EVERY. What it proves is settled by the rule
 * in `pass-history.ts`, never here: this module only runs the passes the rule is waiting for.
 */
import type { Redis } from 'ioredis';
import type pg from 'pg';
import type { PassTrigger, SubscriberType } from '../db/schema.js';
import type { Logger } from '../ground/log.js';
import { formatEpochMs } from '../ground/time.js';
import { sleep } from '../ground/wait.js';
import { awaitingProofIds, membersAwaitingProof } from '../mirror/store/index.js';
import { decideAfterPass, nextProofStep, passesToProve, type TypeProof } from './decide.js';
import { tryAcquirePassLock, type HeldLock } from './lock.js';
import { lastProvingPasses, proofPasses } from './pass-history.js';
import type { PassResult } from './pass-recorder.js';
import type { Candidates, ReadSource } from './source.js';
import type { PassMode } from './state.js';

/** What the proof needs from the worker. */
export interface ProofContext {
  pool: pg.Pool;
  redis: Redis;
  prefix: string;
  /** Every configured type of the group. */
  types: readonly SubscriberType[];
  source: ReadSource;
  log: Logger;
  /** The worker is shutting down: the proof stops after the step it runs. */
  closing: () => boolean;
  /** How long a confirming pass waits for another type's pass lock (default 30 min). */
  confirmLockWaitMs?: number;
  busyRetryMs?: number;
  /** Runs one pass of `type` under `lock`, recorded as the proof's. */
  runPass(type: SubscriberType, lock: HeldLock, pass: { mode: PassMode; changedSince?: string }): Promise<PassResult>;
}

/** The job whose pass the proof follows. */
export interface ProofJob {
  groupId: string;
  type: SubscriberType;
  trigger: PassTrigger;
}

export function passLockKey(prefix: string, groupId: string, type: string): string {
  return `${prefix}:pass-lock:g${groupId}:${type}`;
}

/** What the confirming passes after a job's pass did. */
export interface ProofOutcome {
  passes: number;
  /** Candidates asked about one request each (a source that answers for one member). */
  checked: number;
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
 * The candidates of every type, when asking about each costs fewer requests than one more round of
 * passes (the requests of each type's last proving pass); null when a round is cheaper, or a type has
 * had no complete, gap-free pass yet (then the rounds are needed anyway).
 */
async function plannedChecks(ctx: ProofContext, groupId: string): Promise<Candidates[] | null> {
  const proving = await lastProvingPasses(ctx.pool, groupId, ctx.types);
  if (proving.length < ctx.types.length) return null;
  const roundCost = proving.reduce((n, p) => n + p.requests, 0);
  const candidates: Candidates[] = [];
  let count = 0;
  for (const p of proving) {
    const ids = await awaitingProofIds(ctx.pool, groupId, p.type, p.listedFrom, roundCost + 1 - count);
    count += ids.length;
    if (count > roundCost) return null;
    candidates.push({ type: p.type as SubscriberType, ids, missedBy: p.id });
  }
  return candidates;
}

/**
 * Where the source answers for one member: checks the candidates instead of running rounds when that
 * is cheaper. True when every candidate was settled (ended or confirmed a member).
 */
async function checkInsteadOfRounds(ctx: ProofContext, groupId: string, outcome: ProofOutcome): Promise<boolean> {
  if (!ctx.source.checkCandidates) return false;
  const candidates = await plannedChecks(ctx, groupId);
  if (candidates === null) return false;
  const checked = await ctx.source.checkCandidates({ pool: ctx.pool, logger: ctx.log }, groupId, candidates);
  outcome.checked += candidates.reduce((n, c) => n + c.ids.length, 0);
  outcome.requests += checked.requests;
  outcome.removed += checked.removed;
  return checked.undecided === 0;
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
export async function confirmRemovals(ctx: ProofContext, job: ProofJob, lock: HeldLock, first: PassResult): Promise<ProofOutcome> {
  const { groupId, type } = job;
  const outcome: ProofOutcome = { passes: 0, checked: 0, removed: 0, requests: 0, awaitingProof: first.awaitingProof?.count ?? 0 };
  const locks: ProofLocks = { pass: { type, lock }, proof: null };
  const startedAt = first.startedAt;
  try {
    const maxConfirmingPasses = 2 * ctx.types.length + 1;
    const decideAt = (awaitingProof: number) =>
      decideAfterPass({ mode: first.mode }, { awaitingProof, confirmingPasses: outcome.passes, maxConfirmingPasses });
    if (decideAt(outcome.awaitingProof).kind === 'done' || startedAt === null) return outcome;
    if (!(await takeProofLock(ctx, job, locks))) return outcome;
    if (await checkInsteadOfRounds(ctx, groupId, outcome)) {
      outcome.awaitingProof = (await membersAwaitingProof(ctx.pool, groupId, startedAt, { type })).count;
      return outcome;
    }
    const progress = { swept: false, sweptLast: false, canSweep: ctx.source.incremental };
    for (;;) {
      const proofs = await proofPasses(ctx.pool, groupId, ctx.types);
      // Read afresh before every step: another job's proof (it held the proof lock first) or this
      // job's last pass may have settled them.
      outcome.awaitingProof = (await membersAwaitingProof(ctx.pool, groupId, startedAt, { type })).count;
      const awaiting = await awaitingInTypes(ctx, groupId, proofs);
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
      const confirm = await ctx.runPass(step.type, held, { mode: 'full' });
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
  ctx: Pick<ProofContext, 'pool'>,
  groupId: string,
  proofs: ReadonlyArray<TypeProof<SubscriberType>>,
): Promise<{ count: number; lastSeenAt: number | null }> {
  let count = 0;
  let lastSeenAt: number | null = null;
  for (const p of proofs) {
    if (p.proofStartedAt === null) continue;
    const awaiting = await membersAwaitingProof(ctx.pool, groupId, formatEpochMs(p.proofStartedAt), { type: p.type });
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
async function takeProofLock(ctx: ProofContext, job: ProofJob, locks: ProofLocks): Promise<boolean> {
  const key = proofLockKey(ctx.prefix, job.groupId);
  locks.proof = await tryAcquirePassLock(ctx.redis, key);
  if (locks.proof) return true;
  await locks.pass?.lock.release();
  locks.pass = null;
  if (job.trigger !== 'backfill') {
    ctx.log.info({ groupId: job.groupId, type: job.type }, 'another job is proving the removals of this group; it covers this pass');
    return false;
  }
  locks.proof = await waitForLock(ctx, key);
  return locks.proof !== null;
}

/** The pass lock of `type`: the one held when it is that type's, else the held one is released first and `type`'s taken (waiting, bounded). */
async function passLockFor(ctx: ProofContext, groupId: string, type: SubscriberType, locks: ProofLocks): Promise<HeldLock | null> {
  if (locks.pass?.type === type && !locks.pass.lock.lost) return locks.pass.lock;
  await locks.pass?.lock.release();
  locks.pass = null;
  const lock = await waitForLock(ctx, passLockKey(ctx.prefix, groupId, type));
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
 * then all ended before it began (`removalRule`), and its last type's pass settles the removals
 * they prove. Taking the locks in order may hold some while waiting for a pass still running: that
 * delays the passes of the other types, never the proof. Returns its requests.
 */
async function sweepChanges(ctx: ProofContext, job: ProofJob, locks: ProofLocks, since: string): Promise<number> {
  const { groupId } = job;
  const held = new Map<SubscriberType, HeldLock>();
  if (locks.pass && !locks.pass.lock.lost) held.set(locks.pass.type, locks.pass.lock);
  else await locks.pass?.lock.release();
  locks.pass = null;
  try {
    for (const type of ctx.types) {
      if (held.has(type)) continue;
      const lock = await waitForLock(ctx, passLockKey(ctx.prefix, groupId, type));
      if (!lock) throw new Error(`could not take the pass lock of ${type} for the removal proof's sweep`);
      held.set(type, lock);
    }
    const startedAt = new Date().toISOString();
    let requests = 0;
    for (const [type, lock] of held) requests += (await ctx.runPass(type, lock, { mode: 'incremental', changedSince: since })).requests;
    ctx.log.info({ groupId, since, startedAt, types: [...held.keys()], requests }, 'removal proof: swept every type');
    return requests;
  } finally {
    for (const lock of held.values()) await lock.release();
  }
}

/** Takes the lock at `key` (a pass lock, or a group's proof lock), waiting while another holds it (bounded). */
async function waitForLock(ctx: ProofContext, key: string): Promise<HeldLock | null> {
  const deadline = Date.now() + (ctx.confirmLockWaitMs ?? 30 * 60_000);
  const retryMs = Math.min(ctx.busyRetryMs ?? 5_000, 1_000);
  while (!ctx.closing() && Date.now() < deadline) {
    const lock = await tryAcquirePassLock(ctx.redis, key);
    if (lock) return lock;
    await sleep(retryMs);
  }
  return null;
}

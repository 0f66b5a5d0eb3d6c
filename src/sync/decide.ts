/**
 * What the sync worker does with a pass job, as a pure decision (the worker in `worker.ts` runs it).
 *
 * The decision needs facts that cost a round trip (the auth pause, a waiting backfill's mark, the
 * pass lock, the sync state), and some only on some branches. So `decide` is asked again each time
 * a fact arrives: it answers with the next fact or effect it needs (`need`), or with what to do
 * (`run`, `skip`, `wait`, `fail`). The worker gathers facts in exactly the order asked, so the
 * requests it makes are those of the decision tree, no more.
 */
import type { AuthPause } from './auth-pause.js';
import type { PassJobData } from './schedule.js';

/** The job as the decision sees it. */
export interface DecisionJob {
  mode: PassJobData['mode'];
  trigger: PassJobData['trigger'];
  /** The job's id (its mark in the "wanted" key). */
  id: string;
  /** When the job was due: a scheduler's job is added ahead of its due time, with the rest as delay. */
  dueAt: number;
  /** The worker can put the job back with a delay (BullMQ gave it a token). */
  canWait: boolean;
}

/** Facts gathered so far; `undefined` = not gathered yet. */
export interface DecisionState {
  /** The auth pause in force when it was read, or null. */
  paused?: AuthPause | null;
  /** The id of a job waiting for its turn at this (group, type) ("wanted" key), or null. */
  waiting?: string | null;
  /** Whether this worker got the pass lock. */
  locked?: boolean;
  /** The "wanted" mark was removed after taking the lock. */
  wantedCleared?: boolean;
  /** This job's own "wanted" mark was removed before it skipped (it no longer waits). */
  ownMarkDropped?: boolean;
  /** The sync state says a full pass of this (group, type) is running. */
  fullPassRunning?: boolean;
  /** The sync state has an open full-pass checkpoint. */
  openFullPass?: boolean;
  /** When the last full pass completed (epoch ms), null if never. */
  lastFullCompletedAt?: number | null;
}

/** A fact to read, or an effect to make, before deciding on. */
export type Need =
  'paused' | 'waiting' | 'lock' | 'clear-wanted' | 'drop-own-mark' | 'full-pass-running' | 'open-full-pass' | 'last-full-completed';

export type Action =
  | { kind: 'need'; need: Need }
  /** Run the pass (the lock is held). */
  | { kind: 'run' }
  /** Do nothing, successfully; the worker releases the lock if it holds it. */
  | { kind: 'skip'; reason: string }
  /** Mark the (group, type) wanted and try again shortly: another pass holds it. */
  | { kind: 'wait' }
  /** Fail the job for good. */
  | { kind: 'fail'; reason: string };

const need = (what: Need): Action => ({ kind: 'need', need: what });

export function decide(job: DecisionJob, state: DecisionState): Action {
  if (state.paused === undefined) return need('paused');
  if (state.paused !== null) {
    const until = new Date(state.paused.until).toISOString();
    // A manual backfill must not report success; a scheduled tick just waits for the next one.
    if (job.trigger === 'backfill') return { kind: 'fail', reason: `polling is paused until ${until}: ${state.paused.message}` };
    return { kind: 'skip', reason: `auth paused until ${until}` };
  }
  if (job.trigger === 'schedule') {
    if (state.waiting === undefined) return need('waiting');
    // Another full pass (backfill, resume or scheduled) waits for its turn; a waiting scheduled
    // full pass finds its own mark here and goes on.
    if (state.waiting !== null && state.waiting !== job.id)
      return {
        kind: 'skip',
        reason: 'a full pass of this group and type (a backfill, a resume or a scheduled one) is waiting for its turn',
      };
  }
  if (state.locked === undefined) return need('lock');
  return state.locked ? decideLocked(job, state) : decideBusy(job, state);
}

/**
 * A full pass comes once per RECONCILE_EVERY: dropping a scheduled one because another pass held
 * the lock would postpone removals and unstamped changes by a whole interval (docs/architecture.md, "Pass history and the removal rule").
 */
function mustRun(job: DecisionJob): boolean {
  return job.trigger !== 'schedule' || job.mode === 'full';
}

/** Another pass holds the lock of this (group, type). */
function decideBusy(job: DecisionJob, state: DecisionState): Action {
  if (job.trigger === 'schedule' && job.mode === 'full') {
    if (state.fullPassRunning === undefined) return need('full-pass-running');
    // What it meets is itself a full pass: the tick is served (the next one comes in
    // RECONCILE_EVERY), and queueing it would run full passes back to back when one takes longer.
    // A job that marked itself wanted earlier (it met that pass before the pass recorded itself as
    // full: the first pass of a type with no cursor) takes its mark away first, or the scheduled
    // ticks would skip until the mark expires, saying that something waits.
    if (state.fullPassRunning) {
      if (state.waiting === job.id && !state.ownMarkDropped) return need('drop-own-mark');
      return { kind: 'skip', reason: 'a full pass of this group and type is running' };
    }
  }
  // Try again shortly instead of dropping the request, and keep scheduled ticks from taking the lock first meanwhile.
  if (mustRun(job) && job.canWait) return { kind: 'wait' };
  return { kind: 'skip', reason: 'another pass of this group and type is running' };
}

/** This worker holds the lock. */
function decideLocked(job: DecisionJob, state: DecisionState): Action {
  if (mustRun(job) && !state.wantedCleared) return need('clear-wanted');
  if (job.trigger === 'resume') {
    if (state.openFullPass === undefined) return need('open-full-pass');
    // The pass it was meant to continue finished meanwhile (it was running elsewhere, or here).
    if (!state.openFullPass) return { kind: 'skip', reason: 'no open full pass to resume' };
  }
  if (job.trigger === 'schedule' && job.mode === 'full') {
    if (state.lastFullCompletedAt === undefined) return need('last-full-completed');
    // It waited behind a pass that turned out to be full (the first pass of a type with no
    // cursor, or a backfill): that pass served this tick.
    if (state.lastFullCompletedAt !== null && state.lastFullCompletedAt >= job.dueAt) {
      return { kind: 'skip', reason: 'a full pass of this group and type completed after this one was due' };
    }
  }
  return { kind: 'run' };
}

// ---------------------------------------------------------------------------------------------
// After a full pass: the confirming pass (invariant 11's proof, at once instead of a day later)
// ---------------------------------------------------------------------------------------------

/** What the worker knows after a full pass of the job's (group, type). */
export interface AfterPassFacts {
  /** Members of this group and type the pass did not list (still current, awaiting proof). */
  awaitingProof: number;
  /** Full passes this job already ran to confirm. */
  confirmingPasses: number;
  /** The most confirming passes one job may run (every type of the group, twice, plus one). */
  maxConfirmingPasses: number;
}

export type AfterPass = { kind: 'done'; reason: string } | { kind: 'confirm' };

/**
 * A full pass that missed members proves nothing alone (docs/architecture.md, invariant 11): the
 * confirming passes follow at once, for a backfill (it returns with the mirror equal to the
 * service) and for a scheduled full pass alike, instead of waiting for the next RECONCILE_EVERY.
 * A resume finishes a pass some other job started; that job is gone, so it confirms too.
 */
export function decideAfterPass(job: Pick<DecisionJob, 'mode'>, facts: AfterPassFacts): AfterPass {
  if (job.mode !== 'full') return { kind: 'done', reason: 'an incremental pass proves no removal' };
  if (facts.awaitingProof === 0) return { kind: 'done', reason: 'no member awaits proof' };
  if (facts.confirmingPasses >= facts.maxConfirmingPasses)
    return { kind: 'done', reason: 'confirming passes spent; the next full pass goes on' };
  return { kind: 'confirm' };
}

/** The next thing the confirming job does: a full pass of one type, or the sweep of what changed. */
export type ProofStep<T extends string = string> = { kind: 'pass'; type: T } | { kind: 'sweep' };

/**
 * The confirming passes run in two rounds, with a sweep between them (docs/architecture.md,
 * invariant 11, "Pass history and the removal rule"). Round one gives every type that has no pass yet since the
 * member was last seen its first pass; then the sweep re-reads, in every type, what changed since
 * the proof began; round two gives every type its second pass. A member still in the group that
 * every pass missed changed type while each round read (a type that holds still during a round is
 * listed by that round's pass of it): its change in round one moved its `date_updated` (or
 * `date_unsubscribe`), so the sweep lists it and the newer fact keeps it. Passes run back to back
 * by type ("active" twice, then "unsubscribed" twice) would let one change per type's pair hide it.
 *
 * When every type already had its two passes and members still await (passes of other jobs made
 * the rounds, and no sweep came after the first of them: the removal waits for one,
 * `removalRule`), one more sweep; then nothing.
 *
 * `needs` comes from `passesToProve`; `swept` says whether this job's sweep ran, `sweptLast` whether
 * its last step was one; `canSweep` is false for a source with no date filter (rounds alone then).
 * Null when nothing is left to prove.
 */
export function nextProofStep<T extends string>(
  needs: ReadonlyArray<{ type: T; passes: number }>,
  progress: { swept: boolean; sweptLast: boolean; canSweep: boolean },
): ProofStep<T> | null {
  const next = needs[0];
  if (!next) return progress.canSweep && !progress.sweptLast ? { kind: 'sweep' } : null;
  const firstRound = needs.find((n) => n.passes >= 2);
  if (firstRound) return { kind: 'pass', type: firstRound.type };
  if (progress.canSweep && !progress.swept) return { kind: 'sweep' };
  return { kind: 'pass', type: next.type };
}

/** The removal proof of one type of the group: starts of its last two complete, gap-free full passes (epoch ms). */
export interface TypeProof<T extends string = string> {
  type: T;
  proofStartedAt: number | null;
  prevProofStartedAt: number | null;
}

/**
 * Full passes each type must still run before members last seen at `lastSeenAt` (null: never seen
 * by a full pass) can be ended: the removal cutoff is the earliest start of the earlier of each
 * type's last two gap-free passes, so every type needs two passes that started after it. `first`
 * (the job's own type) comes first; types that need nothing are left out.
 */
export function passesToProve<T extends string>(
  proofs: readonly TypeProof<T>[],
  lastSeenAt: number | null,
  first: T,
): Array<{ type: T; passes: number }> {
  const since = lastSeenAt ?? -Infinity;
  const after = (at: number | null) => at !== null && at > since;
  const needs = proofs
    .map((p) => ({ type: p.type, passes: after(p.prevProofStartedAt) ? 0 : after(p.proofStartedAt) ? 1 : 2 }))
    .filter((n) => n.passes > 0);
  return [...needs.filter((n) => n.type === first), ...needs.filter((n) => n.type !== first)];
}

/**
 * BullMQ job schedulers for the poll path (docs/architecture.md, "Poll path"): one incremental scheduler per
 * (group, type) every SYNC_EVERY (legacy source only: the current API has no date filter) and one full
 * scheduler every RECONCILE_EVERY. `syncSchedules` is
 * idempotent (run at every start by every replica) and removes schedulers of groups or types that
 * are no longer configured.
 */
import { Queue, type ConnectionOptions, type JobsOptions } from 'bullmq';
import type { SubscriberType } from '../db/schema.js';
import type { PassMode } from './state.js';

export const SYNC_QUEUE = 'sync';

export interface PassJobData {
  groupId: string;
  type: SubscriberType;
  mode: PassMode;
  /** `resume` continues an open full pass's checkpoint, and does nothing once no pass is open. */
  trigger: 'schedule' | 'backfill' | 'resume';
}

export interface PassJobResult {
  status: 'succeeded' | 'skipped';
  reason?: string;
  rowsSeen: number;
  rowsWritten: number;
  /** Every request of the job: its pass and the confirming passes. */
  requests: number;
  /** The pass that served the job (a backfill: one that started after it was asked for). */
  groupId?: string;
  type?: SubscriberType;
  mode?: PassMode;
  /** When that pass started (ISO); null for an incremental pass. */
  startedAt?: string | null;
  /** Memberships ended by the pass and its confirming passes. */
  removed?: number;
  /** Full passes run at once after it because it missed members (docs/architecture.md, "Pass history and the removal rule"). */
  confirmingPasses?: number;
  /** Requests of those passes and of the sweep between their rounds (included in `requests`). */
  proofRequests?: number;
  /** Members of this group and type the pass missed that are still current (not yet proven gone). */
  awaitingProof?: number;
  /** Requests the pass spent stepping back because the list moved by more than the overlap. */
  stepBacks?: number;
  /** Pages the pass could not join to the previous one (then it proves no removal). */
  gaps?: number;
}

// BullMQ job and scheduler ids must not contain ':' nor be all digits (docs/architecture.md, "Traps we work around"), so group
// ids are always prefixed.
export function schedulerId(mode: PassMode, groupId: string, type: SubscriberType): string {
  return `${mode}-g${groupId}-${type}`;
}

const SCHEDULER_ID = /^(incremental|full)-g(\d+)-([a-z]+)$/;

export function parseSchedulerId(id: string): { mode: PassMode; groupId: string; type: string } | null {
  const match = SCHEDULER_ID.exec(id);
  if (!match) return null;
  return { mode: match[1] as PassMode, groupId: match[2] as string, type: match[3] as string };
}

/** Finished jobs are kept briefly for `backfill --wait` and the admin API, then trimmed. */
export const PASS_JOB_OPTIONS: JobsOptions = {
  attempts: 1,
  removeOnComplete: { age: 24 * 3600, count: 1000 },
  removeOnFail: { age: 7 * 24 * 3600, count: 1000 },
};

export function createSyncQueue(connection: ConnectionOptions, prefix: string): Queue<PassJobData, PassJobResult> {
  return new Queue<PassJobData, PassJobResult>(SYNC_QUEUE, { connection, prefix, defaultJobOptions: PASS_JOB_OPTIONS });
}

export interface ScheduleConfig {
  groups: readonly string[];
  types: readonly SubscriberType[];
  everyMs: number;
  reconcileEveryMs: number;
  /** The source reads by date filter (legacy); without, only full passes are scheduled (default true). */
  incremental?: boolean;
}

/**
 * When each (group, type) last completed a full pass, in ms (from the pass history, keyed by
 * {@link fullPassKey}). A full scheduler created afresh (first start against this Redis, or after
 * Redis lost its data) starts RECONCILE_EVERY after that instead of at once, so losing Redis does not
 * cost an unplanned full pass of every group; with no completed pass it starts at once.
 */
export type LastFullPasses = ReadonlyMap<string, number>;

export function fullPassKey(groupId: string, type: SubscriberType): string {
  return `${groupId}/${type}`;
}

interface WantedScheduler {
  every: number;
  startDate?: number;
  data: PassJobData;
}

export interface ScheduleChanges {
  upserted: string[];
  removed: string[];
}

function wantedSchedulers(config: ScheduleConfig, lastFull: LastFullPasses, now: number): Map<string, WantedScheduler> {
  const wanted = new Map<string, WantedScheduler>();
  for (const groupId of config.groups) {
    for (const type of config.types) {
      if (config.incremental !== false) {
        wanted.set(schedulerId('incremental', groupId, type), {
          every: config.everyMs,
          data: { groupId, type, mode: 'incremental', trigger: 'schedule' },
        });
      }
      const completed = lastFull.get(fullPassKey(groupId, type));
      const due = completed === undefined ? undefined : completed + config.reconcileEveryMs;
      wanted.set(schedulerId('full', groupId, type), {
        every: config.reconcileEveryMs,
        ...(due !== undefined && due > now ? { startDate: due } : {}),
        data: { groupId, type, mode: 'full', trigger: 'schedule' },
      });
    }
  }
  return wanted;
}

function upsertScheduler(queue: Queue<PassJobData, PassJobResult>, id: string, wanted: WantedScheduler): Promise<unknown> {
  // startDate only counts when BullMQ creates the scheduler (or its interval changed); an existing
  // scheduler keeps its next run.
  const repeat = wanted.startDate === undefined ? { every: wanted.every } : { every: wanted.every, startDate: wanted.startDate };
  return queue.upsertJobScheduler(id, repeat, { name: wanted.data.mode, data: wanted.data, opts: PASS_JOB_OPTIONS });
}

export async function syncSchedules(
  queue: Queue<PassJobData, PassJobResult>,
  config: ScheduleConfig,
  lastFull: LastFullPasses = new Map(),
  now: number = Date.now(),
): Promise<ScheduleChanges> {
  const wanted = wantedSchedulers(config, lastFull, now);
  const removed: string[] = [];
  const existing = await queue.getJobSchedulers(0, -1);
  for (const scheduler of existing) {
    const id = scheduler.key;
    if (parseSchedulerId(id) && !wanted.has(id)) {
      await queue.removeJobScheduler(id);
      removed.push(id);
    }
  }

  for (const [id, scheduler] of wanted) await upsertScheduler(queue, id, scheduler);
  return { upserted: [...wanted.keys()], removed };
}

/**
 * Re-creates configured schedulers that are missing and returns their ids (empty when all are there).
 * Schedulers live only in Redis: a Redis that restarts without persistence, or is flushed, takes
 * them along, and a running service would otherwise never poll again until restarted.
 */
export async function restoreMissingSchedules(
  queue: Queue<PassJobData, PassJobResult>,
  config: ScheduleConfig,
  lastFull: () => Promise<LastFullPasses>,
  now: () => number = Date.now,
): Promise<string[]> {
  const present = new Set((await queue.getJobSchedulers(0, -1)).map((s) => s.key));
  const missing = [...wantedSchedulers(config, new Map(), now()).keys()].filter((id) => !present.has(id));
  if (missing.length === 0) return [];
  // Only now read Postgres: this check runs every SYNC_EVERY and almost always finds everything there.
  const wanted = wantedSchedulers(config, await lastFull(), now());
  for (const id of missing) await upsertScheduler(queue, id, wanted.get(id) as WantedScheduler);
  return missing;
}

/** Enqueues a manual full pass; piled-up requests for the same (group, type) collapse into one. */
export function enqueueBackfill(queue: Queue<PassJobData, PassJobResult>, groupId: string, type: SubscriberType): Promise<string> {
  return enqueueFullPass(queue, groupId, type, 'backfill');
}

/**
 * Enqueues the continuation of an open full pass. Deduplicated apart from manual backfills, so a
 * user's backfill never collapses into a resume that may turn out to have nothing to do.
 */
export function enqueueResume(queue: Queue<PassJobData, PassJobResult>, groupId: string, type: SubscriberType): Promise<string> {
  return enqueueFullPass(queue, groupId, type, 'resume');
}

/** The deduplication id of a backfill or resume job; BullMQ holds it until the job finishes. */
export function fullPassDedupId(trigger: 'backfill' | 'resume', groupId: string, type: SubscriberType): string {
  return `${trigger}-g${groupId}-${type}`;
}

/**
 * A backfill is served only by a pass that starts after it was asked for: one that already started
 * (active) reads a list that may have changed behind its read position, so a new backfill does not
 * collapse into it but queues behind it (the pass lock makes it wait). One not started yet serves it.
 */
async function releaseStartedBackfill(queue: Queue<PassJobData, PassJobResult>, dedupId: string): Promise<void> {
  const existing = await queue.getDeduplicationJobId(dedupId);
  if (!existing) return;
  const state = await queue.getJobState(existing);
  if (state === 'active' || state === 'completed' || state === 'failed') await queue.removeDeduplicationKey(dedupId);
}

async function enqueueFullPass(
  queue: Queue<PassJobData, PassJobResult>,
  groupId: string,
  type: SubscriberType,
  trigger: 'backfill' | 'resume',
): Promise<string> {
  if (trigger === 'backfill') await releaseStartedBackfill(queue, fullPassDedupId(trigger, groupId, type));
  const job = await queue.add(
    'full',
    { groupId, type, mode: 'full', trigger },
    { ...PASS_JOB_OPTIONS, deduplication: { id: fullPassDedupId(trigger, groupId, type) } },
  );
  if (!job.id) throw new Error('BullMQ returned a job without an id');
  return job.id;
}

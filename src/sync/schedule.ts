/**
 * BullMQ job schedulers for the poll path (DESIGN.md "Poll"): one incremental scheduler per
 * (group, type) every SYNC_EVERY and one full scheduler every RECONCILE_EVERY. `syncSchedules` is
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
  trigger: 'schedule' | 'backfill';
}

export interface PassJobResult {
  status: 'succeeded' | 'skipped';
  reason?: string;
  rowsSeen: number;
  rowsWritten: number;
  requests: number;
}

// BullMQ job and scheduler ids must not contain ':' nor be all digits (DESIGN.md "Traps"), so group
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
}

export interface ScheduleChanges {
  upserted: string[];
  removed: string[];
}

export async function syncSchedules(
  queue: Queue<PassJobData, PassJobResult>,
  config: ScheduleConfig,
): Promise<ScheduleChanges> {
  const wanted = new Map<string, { every: number; data: PassJobData }>();
  for (const groupId of config.groups) {
    for (const type of config.types) {
      wanted.set(schedulerId('incremental', groupId, type), {
        every: config.everyMs,
        data: { groupId, type, mode: 'incremental', trigger: 'schedule' },
      });
      wanted.set(schedulerId('full', groupId, type), {
        every: config.reconcileEveryMs,
        data: { groupId, type, mode: 'full', trigger: 'schedule' },
      });
    }
  }

  const removed: string[] = [];
  const existing = await queue.getJobSchedulers(0, -1);
  for (const scheduler of existing) {
    const id = scheduler.key;
    if (parseSchedulerId(id) && !wanted.has(id)) {
      await queue.removeJobScheduler(id);
      removed.push(id);
    }
  }

  for (const [id, { every, data }] of wanted) {
    await queue.upsertJobScheduler(id, { every }, { name: data.mode, data, opts: PASS_JOB_OPTIONS });
  }
  return { upserted: [...wanted.keys()], removed };
}

/** Enqueues a manual full pass; piled-up requests for the same (group, type) collapse into one. */
export async function enqueueBackfill(
  queue: Queue<PassJobData, PassJobResult>,
  groupId: string,
  type: SubscriberType,
): Promise<string> {
  const job = await queue.add(
    'full',
    { groupId, type, mode: 'full', trigger: 'backfill' },
    { ...PASS_JOB_OPTIONS, deduplication: { id: `backfill-g${groupId}-${type}` } },
  );
  if (!job.id) throw new Error('BullMQ returned a job without an id');
  return job.id;
}

/**
 * Manual backfill: enqueue full passes and optionally wait for them with progress.
 *
 * `QueueEvents` misses events emitted before it listens (docs/architecture.md, "Traps we work around"), so the wait polls the
 * job's state and progress instead of relying on events alone.
 */
import type { Job, Queue } from 'bullmq';
import type { SubscriberType } from '../db/schema.js';
import { sleep } from '../ground/wait.js';
import type { PassProgress } from './pass-recorder.js';
import { enqueueBackfill, type PassJobData, type PassJobResult } from './schedule.js';

export interface BackfillTarget {
  groupId: string;
  type: SubscriberType;
}

export async function enqueueBackfills(
  queue: Queue<PassJobData, PassJobResult>,
  targets: readonly BackfillTarget[],
): Promise<Array<BackfillTarget & { jobId: string }>> {
  const out = [];
  for (const t of targets) out.push({ ...t, jobId: await enqueueBackfill(queue, t.groupId, t.type) });
  return out;
}

export type WaitOutcome = { state: 'completed'; result: PassJobResult } | { state: 'failed'; error: string };

export interface WaitOptions {
  pollMs?: number;
  onProgress?: (progress: PassProgress | null, state: string) => void;
  signal?: AbortSignal;
}

export async function waitForPass(
  queue: Queue<PassJobData, PassJobResult>,
  jobId: string,
  options: WaitOptions = {},
): Promise<WaitOutcome> {
  for (;;) {
    options.signal?.throwIfAborted();
    // State first, then the job: a job read while active and found completed a moment later would
    // still carry no return value (seen in the soak test under load).
    const state = await queue.getJobState(jobId);
    const job: Job<PassJobData, PassJobResult> | undefined = await queue.getJob(jobId);
    if (!job || state === 'unknown') return { state: 'failed', error: `job ${jobId} no longer exists (removed or expired)` };
    const progress = typeof job.progress === 'object' && job.progress !== null ? (job.progress as unknown as PassProgress) : null;
    options.onProgress?.(progress, state);
    if (state === 'completed') return { state, result: job.returnvalue };
    if (state === 'failed') return { state, error: job.failedReason || 'the pass failed' };
    await sleep(options.pollMs ?? 500);
  }
}

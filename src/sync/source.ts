/**
 * Where a pass reads from (docs/architecture.md, "Read sources"): the legacy v2 API (incremental
 * passes by date filter, full passes by offset) or the current platform's API (full passes by
 * cursor only: it has no date filter). The worker, the job decision, backfills and the removal proof
 * are shared; a source only says how one pass of one (group, type) reads and commits its pages.
 */
import type pg from 'pg';
import type { MirrorSource, SubscriberType } from '../db/schema.js';
import type { Logger } from '../ground/log.js';
import type { LegacyClient } from '../upstream/legacy/client.js';
import { runPass, type PassProgress, type PassResult } from './legacy-pass.js';
import type { PassMode } from './state.js';

export type ReadSourceName = 'legacy' | 'current';

/** What every pass gets from the worker, whatever its source. */
export interface PassContext {
  pool: pg.Pool;
  logger: Logger;
  /** Every configured type of the group: removal waits for complete full passes of all of them. */
  groupTypes: readonly SubscriberType[];
  onProgress?: (progress: PassProgress) => void | Promise<void>;
  shouldStop?: () => boolean;
  /** Full pass: start a new pass even when an older one left a checkpoint open (a backfill is served only by a pass that starts after it). */
  restart?: boolean;
  /**
   * Incremental pass: read every change since this time (ISO) even when the cursor is later; without
   * a cursor, read from it instead of turning into a full pass (the sweep between confirming rounds).
   */
  changedSince?: string;
}

export interface ReadSource {
  readonly name: ReadSourceName;
  /** Whether the source can read only what changed (a date filter). Without, every pass is full. */
  readonly incremental: boolean;
  /** The `mirrored_via` of the rows its passes write. */
  readonly via: Exclude<MirrorSource, 'webhook'>;
  runPass(ctx: PassContext, groupId: string, type: SubscriberType, mode: PassMode): Promise<PassResult>;
}

export interface LegacySourceOptions {
  /** A fresh client per pass, so the per-pass request count is exact; all share one limiter. */
  legacyFactory: () => LegacyClient;
  sourceTimezone: string;
  lookbackMs: number;
  pageSize: number;
}

/** The legacy v2 API: `runPass` (legacy-pass.ts) as it is. */
export function legacySource(options: LegacySourceOptions): ReadSource {
  return {
    name: 'legacy',
    incremental: true,
    via: 'poll',
    runPass: (ctx, groupId, type, mode) =>
      runPass(
        {
          ...ctx,
          legacy: options.legacyFactory(),
          sourceTimezone: options.sourceTimezone,
          lookbackMs: options.lookbackMs,
          pageSize: options.pageSize,
        },
        groupId,
        type,
        mode,
      ),
  };
}

/**
 * Where a pass reads from (docs/architecture.md, "Read sources"): the legacy v2 API (incremental
 * passes by date filter, full passes by offset) or the current platform's API (full passes by
 * cursor only: it has no date filter). The worker, the job decision, backfills and the removal proof
 * are shared, and so is a pass's bookkeeping (`recordPass`, pass-recorder.ts); a source only says how
 * one pass of one (group, type) reads and commits its pages.
 */
import type { MirrorSource, SubscriberType } from '../db/schema.js';
import type { LegacyClient } from '../upstream/legacy/client.js';
import { runPass } from './legacy-pass.js';
import type { PassContext, PassResult } from './pass-recorder.js';
import type { PassMode } from './state.js';

export type ReadSourceName = 'legacy' | 'current';

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

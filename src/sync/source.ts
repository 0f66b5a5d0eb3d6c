/**
 * Where a pass reads from (docs/architecture.md, "Read sources"): the legacy v2 API (incremental
 * passes by date filter, full passes by offset) or the current platform's API (full passes by
 * cursor only: it has no date filter). The worker, the job decision, backfills and the removal proof
 * are shared, and so is a pass's bookkeeping (`recordPass`, pass-recorder.ts); a source only says how
 * one pass of one (group, type) reads and commits its pages.
 */
import type { MirrorSource, ReadSourceName, SubscriberType } from '../db/schema.js';
import type { LegacyClient } from '../upstream/legacy/client.js';
import { runPass } from './legacy-pass.js';
import type { PassContext, PassResult } from './pass-recorder.js';
import type { PassMode } from './state.js';

export type { ReadSourceName } from '../db/schema.js';

/** The members of one type a complete pass missed, and that pass. */
export interface Candidates {
  type: SubscriberType;
  ids: readonly string[];
  /** The complete, gap-free pass that did not list them: the proof the check's row records. */
  missedBy: number;
}

/** What a check of candidates did. */
export interface CheckOutcome {
  requests: number;
  /** Memberships the service said ended: ended, with the check as their proof. */
  removed: number;
  /** Candidates the service still lists in the group: their version and membership are written. */
  kept: number;
  /** Answers without a `groups` list: they prove nothing, and the rounds remain the proof. */
  undecided: number;
}

export interface ReadSource {
  readonly name: ReadSourceName;
  /** Whether the source can read only what changed (a date filter). Without, every pass is full. */
  readonly incremental: boolean;
  /** The `mirrored_via` of the rows its passes write. */
  readonly via: Exclude<MirrorSource, 'webhook'>;
  runPass(ctx: PassContext, groupId: string, type: SubscriberType, mode: PassMode): Promise<PassResult>;
  /**
   * Where the service answers for one member (the current API): asks about each removal candidate,
   * one request each, and ends those that left. The proof uses it when it costs fewer requests than
   * another round of passes.
   */
  checkCandidates?(ctx: Pick<PassContext, 'pool' | 'logger'>, groupId: string, candidates: readonly Candidates[]): Promise<CheckOutcome>;
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

/**
 * `subscriber-mirror audit --verify` (docs/operations.md, "The audit"): after a forced audit has
 * repaired what it can, whether the mirror now equals the service, pair by pair, for cron and CI.
 *
 * What still differs: rows a repair did not fix, members the service no longer lists (their removal
 * needs a full pass with its proof, invariant 11, which one run cannot wait for), and a count the
 * mirror's facts cannot explain as of the start of the tick (the audit's own count rule, `checkCount`,
 * without its settle margin, so that a silent removal shows at once). A pair the audit skipped or
 * failed was not checked, which is not "equal" either.
 */
import type pg from 'pg';
import type { SubscriberType } from '../db/schema.js';
import { formatEpochMs } from '../ground/time.js';
import { checkCount } from './core.js';
import type { TickOutcome } from './loop.js';
import { mirrorCountAt } from './reads.js';

export interface PairDifference {
  groupId: string;
  type: SubscriberType;
  /** What differs, one sentence each (ids only: no personal data). */
  what: string[];
}

export interface Verdict {
  /** True when every pair was checked and nothing differs. */
  exact: boolean;
  differences: PairDifference[];
}

/** Asks the full pass with its removal proof that settles a count gap; returns its job id (null: none asked). */
export type AskFullPass = (groupId: string, type: SubscriberType) => Promise<string | null>;

function ids(list: readonly string[]): string {
  const shown = list.slice(0, 10).join(', ');
  return list.length > 10 ? `${shown} … (${list.length})` : shown;
}

/** The verdict on one forced tick that started at `startedAt` (epoch ms). */
export async function verifyTick(pool: pg.Pool, outcome: TickOutcome, startedAt: number, askFullPass?: AskFullPass): Promise<Verdict> {
  const differences: PairDifference[] = [];
  const add = (groupId: string, type: SubscriberType, what: string[]) => {
    if (what.length > 0) differences.push({ groupId, type, what });
  };
  for (const f of outcome.failed) add(f.groupId, f.type, [`not checked: the audit failed (${f.error})`]);
  for (const s of outcome.skipped) add(s.groupId, s.type, [`not checked: ${s.reason}`]);
  const at = formatEpochMs(startedAt);
  for (const audit of outcome.audits) {
    const what: string[] = [];
    if (audit.ids.unrepaired.length > 0) what.push(`rows still differ after repair: ${ids(audit.ids.unrepaired)}`);
    if (audit.ids.extra.length > 0) what.push(`members the service does not list: ${ids(audit.ids.extra)}`);
    const held = await mirrorCountAt(pool, audit.groupId, audit.type, at);
    const count = checkCount(audit.serviceCount, held);
    if (!count.explained) {
      let job = audit.fullPassJob;
      if (job === null && askFullPass) job = await askFullPass(audit.groupId, audit.type);
      const repair =
        job === null ? 'no full pass could be asked' : `a full pass with its removal proof was asked (job ${job}); run again once it ended`;
      what.push(
        `count: the service lists ${audit.serviceCount}, the mirror holds ${held.certain}${held.uncertain > 0 ? ` (+${held.uncertain} changing)` : ''}: ${count.gap > 0 ? 'missing' : 'extra'} ${Math.abs(count.gap)}; ${repair}`,
      );
    }
    add(audit.groupId, audit.type, what);
  }
  return { exact: differences.length === 0, differences };
}

export function formatVerdict(verdict: Verdict): string {
  if (verdict.exact) return 'verify: the mirror equals the service for every pair checked';
  const lines = ['verify: the mirror differs from the service after repair:'];
  for (const d of verdict.differences) for (const w of d.what) lines.push(`  group ${d.groupId} ${d.type}: ${w}`);
  return lines.join('\n');
}

/** Waiting for the poll path to have covered every configured group × type. */
import { SUBSCRIBER_TYPES } from '../../src/db/schema.js';
import { collectStatus, type StatusRow } from '../../src/sync/status.js';
import type { Queryable } from '../../src/ground/queryable.js';
import { waitFor } from './wait.js';

/** Resolves once every group × type (all five types) has a successful pass and a known upstream count. */
export function waitForFullPasses(db: Queryable, groups: readonly string[], timeoutMs = 120_000): Promise<StatusRow[]> {
  return waitFor(
    'a successful full pass of every group × type',
    async () => {
      const rows = await collectStatus(db, { groups, types: SUBSCRIBER_TYPES });
      const done =
        rows.length === groups.length * SUBSCRIBER_TYPES.length && rows.every((r) => r.lastSuccessAt && r.upstreamCount !== null);
      return done ? rows : null;
    },
    timeoutMs,
    250,
  );
}

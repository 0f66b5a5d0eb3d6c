/**
 * Replay (`subscriber-mirror webhooks replay`): failed rows, or ignored rows whose kind became known,
 * go back to `pending` when an operator asks (invariant 9: nothing is applied behind the operator's
 * back); the update notifies the workers, which claim them (drizzle/0028_inbox_notify.sql).
 */
import type { Queryable } from '../ground/queryable.js';
import { assertDeliveryId } from './apply-job.js';
import { ignoredDeliveries, reopenFailed, reopenIgnored, type ReplayFilter } from './inbox/lifecycle.js';
import { parseDelivery, PayloadError } from './payloads.js';

export interface ReplayOptions {
  /** Which rows (default `failed`). `ignored` rows are re-parsed: only those with a now-known kind come back. */
  status?: 'failed' | 'ignored';
  /** Only rows received at or after this instant (ISO 8601). */
  since?: string;
  /** Only these ids. */
  ids?: readonly string[];
}

/**
 * Sets matching `failed` (or `ignored`) rows back to `pending`, due at once with their tries reset,
 * and returns their ids, in id order; the workers are notified when the update commits.
 * An `ignored` row comes back only when its body now has a known kind (the registry grew); the
 * others stay ignored. Attempts are kept (they count every try), the error is replaced at the next.
 */
export async function replayDeliveries(pool: Queryable, options: ReplayOptions = {}): Promise<string[]> {
  const since = options.since ?? null;
  if (since !== null && Number.isNaN(Date.parse(since))) throw new TypeError(`since must be an ISO 8601 instant, got ${since}`);
  options.ids?.forEach(assertDeliveryId);
  const filter: ReplayFilter = { since, ids: options.ids ? [...options.ids] : null };
  let ids: string[];
  if ((options.status ?? 'failed') === 'failed') {
    ids = await reopenFailed(pool, filter);
  } else {
    const candidates = await ignoredDeliveries(pool, filter);
    ids = await reopenIgnored(
      pool,
      candidates.filter((r) => hasKnownEvents(r.body)).map((r) => r.id),
    );
  }
  return ids.sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : 1));
}

function hasKnownEvents(body: unknown): boolean {
  try {
    return parseDelivery(body).events.length > 0;
  } catch (error) {
    // Now a known kind with a bad shape: replaying lets the apply record why it fails.
    if (error instanceof PayloadError) return true;
    throw error;
  }
}

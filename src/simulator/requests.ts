/**
 * Log of every request the simulator received, so tests can check what a client did (e.g. that it
 * never exceeded the rate limit in any window).
 */

export type RequestApi = 'legacy' | 'webhooks' | 'current' | 'preflight' | 'other';

export interface RequestRecord {
  seq: number;
  /** Arrival, epoch ms (fractional). */
  at: number;
  method: string;
  /** Path with query string, as sent. */
  url: string;
  /** Route pattern, e.g. `/api/v2/groups/:groupId/subscribers/:type`; null when no route matched. */
  route: string | null;
  api: RequestApi;
  /** HTTP status sent; 0 while unanswered or when the connection was reset. */
  status: number;
  durationMs: number;
  /** Injected fault applied to it, if any: `status`, `reset`, `html`, `delay`. */
  fault: string | null;
}

export type RequestFilter = (record: RequestRecord) => boolean;

/** By default only legacy API calls count: they are what the rate limit governs. */
export const LEGACY_REQUESTS: RequestFilter = (record) => record.api === 'legacy';

/** Calls of the current API's group reads (its own limit of 120 a minute). */
export const CURRENT_REQUESTS: RequestFilter = (record) => record.api === 'current';

export class RequestLog {
  readonly records: RequestRecord[] = [];
  private seq = 0;

  add(record: Omit<RequestRecord, 'seq'>): RequestRecord {
    const full = { seq: ++this.seq, ...record };
    this.records.push(full);
    return full;
  }

  clear(): void {
    this.records.length = 0;
  }

  maxInAnyWindow(windowMs: number, filter: RequestFilter = LEGACY_REQUESTS): number {
    return maxInAnyWindow(
      this.records.filter(filter).map((r) => r.at),
      windowMs,
    );
  }
}

/** Largest number of instants falling in any half-open window [s, s + windowMs). */
export function maxInAnyWindow(instants: readonly number[], windowMs: number): number {
  const sorted = [...instants].sort((a, b) => a - b);
  let best = 0;
  let first = 0;
  for (let last = 0; last < sorted.length; last++) {
    while ((sorted[last] ?? 0) - (sorted[first] ?? 0) >= windowMs) first++;
    best = Math.max(best, last - first + 1);
  }
  return best;
}

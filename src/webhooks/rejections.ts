/**
 * Rejected webhook requests in the log without letting a flood write the log: the first few of each
 * period are logged one by one (samples), the rest only counted, and a summary with the counts by
 * reason (and by account, for a receiver of several) is logged at the end of every period that had any. Values that come from the request
 * (Content-Type, the client address) are truncated: a forged request must not be able to write
 * kilobytes per line either. The deliveries metric still counts every request.
 */
import type { Logger } from '../ground/log.js';

export interface Rejection {
  status: number;
  reason: string;
  /** The account of the route that refused it, and its path (a receiver of several accounts). */
  account?: string;
  path?: string;
  ip: string;
  bytes: number;
  contentType: string | undefined;
  /** Our own error text (503): a message, never a stack. */
  error?: string;
  /**
   * Which other account's secret the signature is of (a delivery posted to the wrong account's path),
   * asked only for the lines logged one by one: the answer costs an HMAC per secret.
   */
  signedFor?: () => string | undefined;
}

export interface RejectionLogOptions {
  /** Length of a period (default 60 s). */
  periodMs?: number;
  /** Rejections logged one by one per period (default 5). */
  samplesPerPeriod?: number;
  /** Longest request-supplied value kept in a line (default 200 characters). */
  maxValueChars?: number;
}

export interface RejectionLog {
  record(rejection: Rejection): void;
  /** Logs the summary of the current period now (when it has any) and starts a new one. */
  flush(): void;
  /** Flushes and stops the timer. */
  close(): void;
}

export function truncate(value: string | undefined, max: number): string | undefined {
  if (value === undefined || value.length <= max) return value;
  return `${value.slice(0, max)}…(${value.length} chars)`;
}

export function createRejectionLog(log: Logger, options: RejectionLogOptions = {}): RejectionLog {
  const periodMs = options.periodMs ?? 60_000;
  const samples = options.samplesPerPeriod ?? 5;
  const max = options.maxValueChars ?? 200;
  let counts = new Map<string, number>();
  let accounts = new Map<string, number>();
  let total = 0;
  let periodStart = Date.now();

  const flush = () => {
    if (total > 0) {
      const line = {
        periodSeconds: Math.round((Date.now() - periodStart) / 1000),
        total,
        logged: Math.min(total, samples),
        byReason: Object.fromEntries(counts),
        ...(accounts.size > 0 ? { byAccount: Object.fromEntries(accounts) } : {}),
      };
      log.warn(line, 'webhook requests rejected (summary)');
    }
    counts = new Map();
    accounts = new Map();
    total = 0;
    periodStart = Date.now();
  };
  const timer = setInterval(flush, periodMs);
  timer.unref();

  return {
    record(r) {
      const key = `${r.status} ${r.reason}`;
      counts.set(key, (counts.get(key) ?? 0) + 1);
      if (r.account !== undefined) accounts.set(r.account, (accounts.get(r.account) ?? 0) + 1);
      total += 1;
      if (total > samples) return;
      const signedFor = r.signedFor?.();
      const line = {
        status: r.status,
        reason: r.reason,
        ...(r.account !== undefined ? { account: r.account, path: r.path } : {}),
        ...(signedFor !== undefined ? { signedFor } : {}),
        ip: truncate(r.ip, max),
        bytes: r.bytes,
        contentType: truncate(r.contentType, max),
        ...(r.error !== undefined ? { error: truncate(r.error, max * 4) } : {}),
        ...(total === samples ? { note: `further rejections this period are counted in the summary only` } : {}),
      };
      if (r.status >= 500) log.error(line, 'webhook delivery not stored');
      else log.warn(line, 'webhook delivery rejected');
    },
    flush,
    close() {
      clearInterval(timer);
      flush();
    },
  };
}

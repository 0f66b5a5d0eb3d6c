/**
 * Fault injection, settable while the simulator runs: random 500s, slow answers, connection
 * resets, requests that hang with no answer, HTML bodies with 200, and "fail the next N requests
 * with status S".
 */
import { mulberry32 } from './prng.js';
import type { RequestApi } from './requests.js';

export type FaultScope = 'legacy' | 'webhooks' | 'current' | 'all';

export interface FaultSettings {
  /** Fraction [0,1] of requests answered with `errorStatus` (default 500). */
  errorRate?: number;
  errorStatus?: number;
  /** Added before answering every request, ms. */
  delayMs?: number;
  /** Fraction of requests whose connection is destroyed without an answer. */
  resetRate?: number;
  /** Fraction of requests answered 200 with an HTML error page instead of JSON. */
  htmlRate?: number;
  /** Fraction of requests left without an answer for `hangMs`, then dropped: a client sees a timeout. */
  hangRate?: number;
  /** How long a hung request is held before its connection is destroyed (default 60 s). */
  hangMs?: number;
  /** Which API the faults hit (default legacy). */
  scope?: FaultScope;
}

export type FaultAction =
  { kind: 'none' } | { kind: 'status'; status: number } | { kind: 'reset' } | { kind: 'hang'; ms: number } | { kind: 'html' };

export interface FaultDecision {
  delayMs: number;
  action: FaultAction;
}

const NO_FAULT: FaultDecision = { delayMs: 0, action: { kind: 'none' } };

export class Faults {
  private current: Required<FaultSettings> = defaults();
  private forced: { remaining: number; status: number } = { remaining: 0, status: 500 };
  private readonly random: () => number;

  constructor(seed: number, initial: FaultSettings = {}) {
    this.random = mulberry32(seed ^ 0xfa17);
    this.set(initial);
  }

  get settings(): Readonly<Required<FaultSettings>> {
    return this.current;
  }

  /** Merges into the current settings (keys left out keep their value); clear() resets all. */
  set(settings: FaultSettings): void {
    const next = { ...this.current, ...withoutUndefined(settings) };
    for (const key of ['errorRate', 'resetRate', 'htmlRate', 'hangRate'] as const) {
      if (!(next[key] >= 0 && next[key] <= 1)) throw new RangeError(`${key} must be within [0, 1], got ${next[key]}`);
    }
    if (!(next.delayMs >= 0)) throw new RangeError(`delayMs must be >= 0, got ${next.delayMs}`);
    if (!(next.hangMs >= 0)) throw new RangeError(`hangMs must be >= 0, got ${next.hangMs}`);
    if (next.resetRate + next.errorRate + next.htmlRate + next.hangRate > 1) {
      throw new RangeError('errorRate, resetRate, htmlRate and hangRate must add up to at most 1');
    }
    this.current = next;
  }

  /** The next `count` requests in scope fail with `status` (before any other fault). */
  failNext(count: number, status = 500): void {
    this.forced = { remaining: count, status };
  }

  clear(): void {
    this.current = defaults();
    this.forced = { remaining: 0, status: 500 };
  }

  decide(api: RequestApi): FaultDecision {
    if (!this.inScope(api)) return NO_FAULT;
    const delayMs = this.current.delayMs;
    if (this.forced.remaining > 0) {
      this.forced.remaining--;
      return { delayMs, action: { kind: 'status', status: this.forced.status } };
    }
    const r = this.random();
    const { resetRate, errorRate, htmlRate, hangRate, hangMs, errorStatus } = this.current;
    if (r < resetRate) return { delayMs, action: { kind: 'reset' } };
    if (r < resetRate + errorRate) return { delayMs, action: { kind: 'status', status: errorStatus } };
    if (r < resetRate + errorRate + htmlRate) return { delayMs, action: { kind: 'html' } };
    if (r < resetRate + errorRate + htmlRate + hangRate) return { delayMs, action: { kind: 'hang', ms: hangMs } };
    return { delayMs, action: { kind: 'none' } };
  }

  private inScope(api: RequestApi): boolean {
    const scope = this.current.scope;
    return scope === 'all' ? api === 'legacy' || api === 'webhooks' || api === 'current' : api === scope;
  }
}

function defaults(): Required<FaultSettings> {
  return { errorRate: 0, errorStatus: 500, delayMs: 0, resetRate: 0, htmlRate: 0, hangRate: 0, hangMs: 60_000, scope: 'legacy' };
}

function withoutUndefined(settings: FaultSettings): FaultSettings {
  return Object.fromEntries(Object.entries(settings).filter(([, v]) => v !== undefined));
}

export const HTML_ERROR_PAGE =
  '<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>' +
  '<body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>\n';

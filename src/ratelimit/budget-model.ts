/**
 * Which budget the service counts each endpoint's requests against, learned from the rate-limit
 * headers every answer carries (docs/upstream.md, "Limits": `X-RateLimit-Limit`, `-Remaining`,
 * `-Reset`). Pure: the limiter (limiter.ts) feeds it answers and asks it where to schedule.
 *
 * The service does not say how it counts. The counters do, as proofs rather than guesses. For an
 * answer on endpoint K, `used = limit - remaining` counts K's request and every other request on
 * the same counter within the same window (the same `Reset`):
 *
 * - K has its own budget when its counter leaves out a request we know the service handled in that
 *   window before K's request: an answer on another endpoint, received before K's request was sent
 *   (and after K's previous answer, when there was one in the window), yet `used` grew by at most
 *   one. No account-wide counter can do that.
 * - K shares a budget when its counter grew by more than its own request (some other request,
 *   ours or another tool's, counted on it).
 *
 * Answers in different windows prove nothing (a new window restarts the counter), so a service
 * whose windows slide per endpoint (a different `Reset` on every endpoint) is never proven to give
 * own budgets: it is read on the shared budget, as before. An endpoint not seen yet is presumed to
 * share, unless an endpoint was proven to have its own budget and none to share (the per-endpoint
 * model), so a new list starts at its own pace at once. One proof is enough: a pass asks for its
 * count first, so where counts share one budget (the mixed model) the second answer already shows
 * it, before any list is presumed; a presumption the service does not bear out costs one 429, which
 * drops everyone back to the shared budget. A 429 drops every endpoint back
 * to the shared budget for a window past its reset, and what was learned is forgotten.
 */

export const ENDPOINT_BUDGETS = ['own', 'shared'] as const;
export type EndpointBudget = (typeof ENDPOINT_BUDGETS)[number];
export const BUDGET_MODELS = ['unknown', 'account', 'endpoint', 'mixed'] as const;
export type BudgetModel = (typeof BUDGET_MODELS)[number];

export interface RateHeaders {
  limit: number;
  remaining: number;
  /** X-RateLimit-Reset as sent (epoch seconds); only compared for equality, and read for a pause. */
  reset: number;
}

/** The X-RateLimit-* counters of an answer; null when any is missing or not a number. */
export function readRateHeaders(headers: Pick<Headers, 'get'>): RateHeaders | null {
  const limit = Number(headers.get('x-ratelimit-limit') ?? Number.NaN);
  const remaining = Number(headers.get('x-ratelimit-remaining') ?? Number.NaN);
  const reset = Number(headers.get('x-ratelimit-reset') ?? Number.NaN);
  if (!Number.isInteger(limit) || limit <= 0 || !Number.isInteger(remaining) || remaining < 0 || !Number.isFinite(reset)) return null;
  return { limit, remaining, reset };
}

/** What the learner knows of one endpoint. */
export interface EndpointKnowledge {
  endpoint: string;
  budget: EndpointBudget | null;
  /** The latest X-RateLimit-Limit announced on it. */
  announcedLimit: number | null;
}

interface Answer {
  seq: number;
  endpoint: string;
  reset: number;
}

interface EndpointState {
  budget: EndpointBudget | null;
  announcedLimit: number | null;
  last: { seq: number; used: number; reset: number } | null;
}

/** Answers kept to prove with: more than ever arrive while one request of a pass is in flight. */
const ANSWER_LOG = 256;

export interface LearnerOptions {
  windowMs: number;
  now?: () => number;
  /** Endpoints remembered (least recently answered forgotten first); default 1000. */
  maxEndpoints?: number;
}

export class BudgetLearner {
  private seq = 0;
  private readonly log: Answer[] = [];
  private readonly endpoints = new Map<string, EndpointState>();
  private sharedUntilMs = 0;
  private readonly now: () => number;
  private readonly windowMs: number;
  private readonly maxEndpoints: number;
  /** Times the model changed (what `model()` answers), for the 429 budget of a change. */
  changes = 0;
  private lastModel: BudgetModel = 'unknown';

  constructor(options: LearnerOptions) {
    this.windowMs = options.windowMs;
    this.now = options.now ?? Date.now;
    this.maxEndpoints = options.maxEndpoints ?? 1000;
  }

  /** Call when a request is sent; hand the token to `answered`. */
  sent(): number {
    return this.seq;
  }

  /** An answer on `endpoint` to a request sent with token `sentAt`. */
  answered(endpoint: string, sentAt: number, status: number, headers: RateHeaders | null): void {
    if (status === 429) {
      this.fallBack(headers);
      return;
    }
    if (!headers) return;
    const seq = ++this.seq;
    const state = this.stateOf(endpoint);
    state.announcedLimit = headers.limit;
    const used = headers.limit - headers.remaining;
    const last = state.last && state.last.reset === headers.reset ? state.last : null;
    // Answers on other endpoints the service handled in this window before this request, after our previous one on it.
    const others = this.otherAnswers(endpoint, headers.reset, last ? last.seq : 0, sentAt);
    const grew = last ? used - last.used : used;
    if (grew >= 2) state.budget = 'shared';
    else if (others >= 1 && grew <= 1) state.budget = 'own';
    state.last = { seq, used, reset: headers.reset };
    this.log.push({ seq, endpoint, reset: headers.reset });
    if (this.log.length > ANSWER_LOG) this.log.shift();
    this.noteModel();
  }

  private otherAnswers(endpoint: string, reset: number, afterSeq: number, upToSeq: number): number {
    let n = 0;
    for (const a of this.log) if (a.seq > afterSeq && a.seq <= upToSeq && a.reset === reset && a.endpoint !== endpoint) n += 1;
    return n;
  }

  private stateOf(endpoint: string): EndpointState {
    let state = this.endpoints.get(endpoint);
    if (state) {
      // Most recently answered last, so the first key is the one to forget.
      this.endpoints.delete(endpoint);
    } else {
      state = { budget: null, announcedLimit: null, last: null };
      if (this.endpoints.size >= this.maxEndpoints) {
        const oldest = this.endpoints.keys().next().value;
        if (oldest !== undefined) this.endpoints.delete(oldest);
      }
    }
    this.endpoints.set(endpoint, state);
    return state;
  }

  /** A 429: the shared budget for everyone until a window past the reset (or past now, without one). */
  private fallBack(headers: RateHeaders | null): void {
    const resetMs = headers ? headers.reset * 1000 : this.now();
    this.sharedUntilMs = Math.max(this.sharedUntilMs, Math.max(resetMs, this.now()) + this.windowMs);
    this.endpoints.clear();
    this.log.length = 0;
    this.noteModel();
  }

  /** True while a 429 holds everyone on the shared budget. */
  fallenBack(): boolean {
    return this.now() < this.sharedUntilMs;
  }

  fallbackUntilMs(): number | null {
    return this.fallenBack() ? this.sharedUntilMs : null;
  }

  budgetOf(endpoint: string): EndpointBudget {
    if (this.fallenBack()) return 'shared';
    const known = this.endpoints.get(endpoint)?.budget;
    if (known) return known;
    const { own, shared } = this.counts();
    return own >= 1 && shared === 0 ? 'own' : 'shared';
  }

  announcedLimit(endpoint: string): number | null {
    return this.endpoints.get(endpoint)?.announcedLimit ?? null;
  }

  private counts(): { own: number; shared: number } {
    let own = 0;
    let shared = 0;
    for (const s of this.endpoints.values()) {
      if (s.budget === 'own') own += 1;
      else if (s.budget === 'shared') shared += 1;
    }
    return { own, shared };
  }

  /** The model the counters showed: own budgets only, shared only, both, or nothing proven yet. */
  model(): BudgetModel {
    if (this.fallenBack()) return 'account';
    const { own, shared } = this.counts();
    if (own > 0 && shared > 0) return 'mixed';
    if (own > 0) return 'endpoint';
    if (shared > 0) return 'account';
    return 'unknown';
  }

  private noteModel(): void {
    const model = this.model();
    if (model !== this.lastModel && !(this.lastModel === 'unknown' && model === 'account')) this.changes += 1;
    this.lastModel = model;
  }

  knowledge(): EndpointKnowledge[] {
    return [...this.endpoints].map(([endpoint, s]) => ({ endpoint, budget: s.budget, announcedLimit: s.announcedLimit }));
  }
}

/**
 * The limiter that reads at the budget the service actually grants (docs/architecture.md, "Rate
 * limit"): the budget model is learned from the rate-limit headers (budget-model.ts), and each
 * endpoint proven to have its own budget is scheduled on a spaced limiter of its own (limiter.ts:
 * same spacing and send ledger, shared by every replica through Redis under its own key). Every other
 * endpoint, and every request while the model is unknown or after a 429, goes through the one shared
 * budget, as the plain limiter does.
 *
 * - `perMinute` (API_RATE_LIMIT) is the most any one budget is used for; with `auto`, each budget is
 *   what its headers announce less a reserve (the shared one starts at `autoStart` less the reserve,
 *   since nothing was announced before the first answer).
 * - Never more than the headers allow: an own budget is at most the limit announced on it, and an
 *   answer showing nothing left pauses that budget until its reset.
 * - A 429 pauses everyone (the shared pause every replica checks) and drops the model back to the
 *   shared budget for that window (budget-model.ts).
 */
import type { Redis } from 'ioredis';
import { z } from 'zod';
import { sleep } from '../ground/wait.js';
import { BUDGET_MODELS, BudgetLearner, ENDPOINT_BUDGETS, readRateHeaders } from './budget-model.js';
import type { GateScheduleOptions, GateSlot } from '../upstream/http.js';
import { createLimiter, type Limiter, type LimiterOptions, type LimiterStats } from './limiter.js';

export interface BudgetLimiterOptions extends Omit<LimiterOptions, 'perMinute'> {
  /** API_RATE_LIMIT: a number (the most any one budget is used for) or `auto`. */
  perMinute: number | 'auto';
  /** With `auto`: the shared budget before any answer announced one (the platform's documented limit). */
  autoStart?: number;
  /** With `auto`: the share of an announced limit left to other tools; default 0.1 (at least one request). */
  reserve?: number;
  /** Own budgets kept at most; endpoints past this read on the shared budget. Default 32. */
  maxOwnBudgets?: number;
  /** Publishes the learned model here (for `status` and the status page of other processes). */
  publish?: { client: Redis; key: string };
}

/** The Redis key the learned model is published under (read by `status` and the status page). */
export function rateBudgetsKey(prefix: string): string {
  return `${prefix}:rate-budgets`;
}

/** One budget as `status`, the status page and the metrics show it. */
const budgetViewSchema = z.object({
  /** `shared`, or the endpoint (method and path) an own budget belongs to. */
  budget: z.string(),
  /** Requests per window this process schedules on it. */
  perWindow: z.number().nonnegative(),
  announcedLimit: z.number().nullable(),
});
export type BudgetView = z.infer<typeof budgetViewSchema>;

/** The learned model as published in Redis and shown by `status` and the status page; its type is inferred from it. */
const budgetReportSchema = z.object({
  model: z.enum(BUDGET_MODELS),
  /** Until when a 429 holds everyone on the shared budget (ISO), null when it does not. */
  fallbackUntil: z.string().nullable(),
  windowMs: z.number().int().positive(),
  budgets: z.array(budgetViewSchema),
  /** Endpoints answered so far and the budget they were proven (or presumed) to use. */
  endpoints: z.array(z.object({ endpoint: z.string(), budget: z.enum(ENDPOINT_BUDGETS), announcedLimit: z.number().nullable() })),
  modelChanges: z.number().int().nonnegative(),
  at: z.string(),
});
export type BudgetReport = z.infer<typeof budgetReportSchema>;

/**
 * The published report, or null when none was published or what is there is not one (another
 * release's shape, a hand edit): `status` and the status page then say nothing was learned.
 */
export async function readRateBudgets(redis: Pick<Redis, 'get'>, prefix: string): Promise<BudgetReport | null> {
  const text = await redis.get(rateBudgetsKey(prefix));
  if (!text) return null;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return null;
  }
  const parsed = budgetReportSchema.safeParse(value);
  return parsed.success ? parsed.data : null;
}

/** The report as lines of text, for `status`. */
export function formatBudgetReport(report: BudgetReport): string {
  const perMinute = (n: number): string => `${Math.round((n * 60_000) / report.windowMs)}/min`;
  const shared = report.budgets.find((b) => b.budget === 'shared');
  const own = report.budgets.filter((b) => b.budget !== 'shared');
  const lines = [
    `RATE BUDGETS (learned from the rate-limit headers, ${report.at}): model ${report.model}` +
      (report.fallbackUntil ? `, on the shared budget after a 429 until ${report.fallbackUntil}` : ''),
    `  shared: ${shared ? perMinute(shared.perWindow) : '–'}`,
    ...own.map((b) => `  ${b.budget}: ${perMinute(b.perWindow)} (announced ${b.announcedLimit ?? '–'})`),
  ];
  return lines.join('\n');
}

export interface BudgetLimiter extends Limiter {
  report(): BudgetReport;
}

/** The budget used of an announced `limit`: all of it up to API_RATE_LIMIT, or with `auto` all but the reserve. */
export function budgetFor(setting: number | 'auto', announced: number | null, fallback: number, reserve: number): number {
  if (setting === 'auto') {
    const base = announced ?? fallback;
    return Math.max(1, base - Math.max(1, Math.ceil(base * reserve)));
  }
  return announced === null ? setting : Math.max(1, Math.min(setting, announced));
}

interface OwnBudget {
  limiter: Limiter;
  perWindow: number;
  lastUsedMs: number;
  active: number;
}

const REROUTE = Symbol('reroute');

/** An own budget unused this many windows is closed (its Redis connections freed). */
const IDLE_WINDOWS = 3;

export function createBudgetLimiter(options: BudgetLimiterOptions): BudgetLimiter {
  const limiter = new LearningLimiter(options);
  return {
    schedule: (fn, scheduleOptions) => limiter.schedule(fn, scheduleOptions),
    pauseFor: (ms) => limiter.shared.pauseFor(ms),
    pausedForMs: () => limiter.shared.pausedForMs(),
    stats: () => limiter.stats(),
    report: () => limiter.report(),
    close: () => limiter.close(),
  };
}

class LearningLimiter {
  shared: Limiter;
  private readonly windowMs: number;
  private readonly reserve: number;
  private readonly autoStart: number;
  private readonly maxOwn: number;
  private readonly name: string;
  private readonly learner: BudgetLearner;
  private sharedPerWindow: number;
  /** Requests scheduled on each shared limiter; one replaced (`auto`) is closed when its count is 0. */
  private readonly sharedInUse = new Map<Limiter, number>();
  private readonly own = new Map<string, OwnBudget>();
  private readonly retired: Limiter[] = [];
  private readonly waitingOnShared = new Set<{ endpoint: string; reroute: AbortController }>();
  private closed = false;
  private lastPublished = '';

  constructor(private readonly options: BudgetLimiterOptions) {
    this.windowMs = options.windowMs ?? 60_000;
    this.reserve = options.reserve ?? 0.1;
    this.autoStart = options.autoStart ?? 60;
    this.maxOwn = options.maxOwnBudgets ?? 32;
    this.name = options.name ?? 'legacy';
    this.learner = new BudgetLearner({ windowMs: this.windowMs });
    this.sharedPerWindow = budgetFor(options.perMinute, null, this.autoStart, this.reserve);
    this.shared = createLimiter({ ...options, perMinute: this.sharedPerWindow });
  }

  /** The endpoint's own budget at what its headers allow now; null when too many are open. */
  private ownBudget(endpoint: string): OwnBudget | null {
    const perWindow = budgetFor(this.options.perMinute, this.learner.announcedLimit(endpoint), this.autoStart, this.reserve);
    const existing = this.own.get(endpoint);
    if (existing && (existing.perWindow === perWindow || existing.active > 0)) return existing;
    if (existing) {
      // The announced limit changed: a new spacing (the old limiter has nothing queued).
      this.own.delete(endpoint);
      this.retired.push(existing.limiter);
      void existing.limiter.close();
    }
    if (this.own.size >= this.maxOwn) return null;
    const budget: OwnBudget = {
      limiter: createLimiter({ ...this.options, name: `${this.name}:${endpoint}`, perMinute: perWindow }),
      perWindow,
      lastUsedMs: Date.now(),
      active: 0,
    };
    this.own.set(endpoint, budget);
    return budget;
  }

  private closeIdle(): void {
    const now = Date.now();
    for (const [endpoint, budget] of this.own) {
      if (budget.active === 0 && now - budget.lastUsedMs > IDLE_WINDOWS * this.windowMs) {
        this.own.delete(endpoint);
        void budget.limiter.close();
      }
    }
  }

  /**
   * With `auto`, the shared budget is what the endpoints on it announce (the least of them) less the
   * reserve. A new rate is a new limiter under the same Redis id (so every replica's spacing follows
   * it); requests already queued on the old one go at the old rate, and it closes once they have.
   */
  private rateShared(): void {
    if (this.options.perMinute !== 'auto' || this.closed) return;
    let least: number | null = null;
    for (const k of this.learner.knowledge())
      if (k.announcedLimit !== null && this.learner.budgetOf(k.endpoint) === 'shared')
        least = Math.min(least ?? k.announcedLimit, k.announcedLimit);
    if (least === null) return;
    const perWindow = budgetFor('auto', least, this.autoStart, this.reserve);
    if (perWindow === this.sharedPerWindow) return;
    const old = this.shared;
    this.shared = createLimiter({ ...this.options, perMinute: perWindow });
    this.sharedPerWindow = perWindow;
    // A pause (a 429, a budget with nothing left) holds on the new limiter too.
    void old
      .pausedForMs()
      .then((ms) => (ms > 0 ? this.shared.pauseFor(ms) : undefined))
      .catch(() => {});
    if ((this.sharedInUse.get(old) ?? 0) === 0) void old.close();
    else this.retired.push(old);
  }

  /** Schedules on the shared limiter in force, counting what it holds (see rateShared). */
  private async onSharedLimiter<T>(fn: () => Promise<T>, options: { signal: AbortSignal } | undefined): Promise<T> {
    const limiter = this.shared;
    this.sharedInUse.set(limiter, (this.sharedInUse.get(limiter) ?? 0) + 1);
    try {
      return await limiter.schedule(fn, options);
    } finally {
      const left = (this.sharedInUse.get(limiter) ?? 1) - 1;
      if (left > 0) this.sharedInUse.set(limiter, left);
      else {
        this.sharedInUse.delete(limiter);
        if (limiter !== this.shared && this.retired.includes(limiter)) void limiter.close();
      }
    }
  }

  report(): BudgetReport {
    const until = this.learner.fallbackUntilMs();
    return {
      model: this.learner.model(),
      fallbackUntil: until === null ? null : new Date(until).toISOString(),
      windowMs: this.windowMs,
      budgets: [
        { budget: 'shared', perWindow: this.sharedPerWindow, announcedLimit: null },
        ...[...this.own].map(([endpoint, b]) => ({
          budget: endpoint,
          perWindow: b.perWindow,
          announcedLimit: this.learner.announcedLimit(endpoint),
        })),
      ],
      endpoints: this.learner
        .knowledge()
        .map((k) => ({ endpoint: k.endpoint, budget: this.learner.budgetOf(k.endpoint), announcedLimit: k.announcedLimit })),
      modelChanges: this.learner.changes,
      at: new Date().toISOString(),
    };
  }

  private publish(): void {
    const target = this.options.publish;
    if (!target) return;
    const view = this.report();
    const signature = JSON.stringify({ ...view, at: '' });
    if (signature === this.lastPublished) return;
    this.lastPublished = signature;
    // Read by `status` in other processes; kept a day past the last change.
    target.client.set(target.key, JSON.stringify(view), 'EX', 86_400).catch(() => {});
  }

  /** What an answer teaches: the model, and a budget with nothing left is paused until its reset. */
  private answered(endpoint: string, sentAt: number, status: number, headers: Headers, budget: OwnBudget | null): void {
    const counters = readRateHeaders(headers);
    this.learner.answered(endpoint, sentAt, status, counters);
    this.rerouteWaiting();
    if (counters && status !== 429) this.rateShared();
    if (counters && status !== 429 && counters.remaining === 0) {
      const waitMs = counters.reset * 1000 - Date.now();
      void (budget ? budget.limiter : this.shared).pauseFor(Math.min(waitMs, this.windowMs)).catch(() => {});
    }
    this.publish();
  }

  private async waitShared(signal: AbortSignal | undefined): Promise<void> {
    for (;;) {
      const ms = await this.shared.pausedForMs();
      if (ms <= 0) return;
      await sleep(ms, signal);
    }
  }

  async schedule<T>(fn: (slot?: GateSlot) => Promise<T>, scheduleOptions?: GateScheduleOptions): Promise<T> {
    const endpoint = scheduleOptions?.endpoint;
    const signal = scheduleOptions?.signal;
    if (endpoint === undefined || this.closed) return this.onSharedLimiter(() => fn(), signal ? { signal } : undefined);
    this.closeIdle();
    for (;;) {
      // A 429 anywhere holds every budget: own budgets do not see the shared pause themselves.
      await this.waitShared(signal);
      const budget = this.learner.budgetOf(endpoint) === 'own' ? this.ownBudget(endpoint) : null;
      const outcome = budget ? await this.onOwn(budget, endpoint, fn, signal) : await this.onShared(endpoint, fn, signal);
      if (outcome !== REROUTE) return outcome.value;
    }
  }

  private async onOwn<T>(budget: OwnBudget, endpoint: string, fn: (slot?: GateSlot) => Promise<T>, signal: AbortSignal | undefined) {
    budget.active += 1;
    budget.lastUsedMs = Date.now();
    try {
      return { value: await budget.limiter.schedule(() => this.send(endpoint, fn, budget), signal ? { signal } : undefined) };
    } finally {
      budget.active -= 1;
      budget.lastUsedMs = Date.now();
    }
  }

  /**
   * On the shared budget, until its slot comes or until the answers so far show the endpoint has a
   * budget of its own: then the request moves there (its shared slot goes unused), so a list queued
   * behind the first requests of a pass does not wait for them once the model is known.
   */
  private async onShared<T>(endpoint: string, fn: (slot?: GateSlot) => Promise<T>, signal: AbortSignal | undefined) {
    const reroute = new AbortController();
    const waiting = { endpoint, reroute };
    this.waitingOnShared.add(waiting);
    const both = signal ? AbortSignal.any([signal, reroute.signal]) : reroute.signal;
    try {
      return {
        value: await this.onSharedLimiter(() => (this.waitingOnShared.delete(waiting), this.send(endpoint, fn, null)), { signal: both }),
      };
    } catch (error) {
      if (reroute.signal.aborted && !signal?.aborted) return REROUTE;
      throw error;
    } finally {
      this.waitingOnShared.delete(waiting);
    }
  }

  private send<T>(endpoint: string, fn: (slot?: GateSlot) => Promise<T>, budget: OwnBudget | null): Promise<T> {
    const sentAt = this.learner.sent();
    return fn({ answered: (status, headers) => this.answered(endpoint, sentAt, status, headers, budget) });
  }

  /** Moves requests still waiting on the shared budget whose endpoint now has one of its own. */
  private rerouteWaiting(): void {
    for (const w of this.waitingOnShared) {
      if (this.learner.budgetOf(w.endpoint) === 'own') {
        this.waitingOnShared.delete(w);
        w.reroute.abort();
      }
    }
  }

  stats(): LimiterStats {
    const all = [this.shared, ...[...this.own.values()].map((b) => b.limiter)].map((l) => l.stats());
    const sum = (pick: (s: LimiterStats) => number): number => all.reduce((n, s) => n + pick(s), 0);
    return {
      ...this.shared.stats(),
      scheduled: sum((s) => s.scheduled),
      started: sum((s) => s.started),
      waiting: sum((s) => s.waiting),
      waitMsTotal: sum((s) => s.waitMsTotal),
      pauses: sum((s) => s.pauses),
      rebuilds: sum((s) => s.rebuilds),
      windowWaits: sum((s) => s.windowWaits),
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const own = [...this.own.values()].map((b) => b.limiter);
    this.own.clear();
    await Promise.all([this.shared.close(), ...own.map((l) => l.close()), ...this.retired.map((l) => l.close())]);
  }
}

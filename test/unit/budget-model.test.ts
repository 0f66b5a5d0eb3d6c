import { describe, expect, it } from 'vitest';
import { BudgetLearner, readRateHeaders, type RateHeaders } from '../../src/ratelimit/budget-model.js';
import { budgetFor } from '../../src/ratelimit/budget-limiter.js';

/** A service in one fixed window: counters keyed as the model says, answers in order. */
function service(keyOf: (endpoint: string) => string, limit = 60) {
  const used = new Map<string, number>();
  return (endpoint: string, reset = 1000): RateHeaders => {
    const key = keyOf(endpoint);
    const n = (used.get(key) ?? 0) + 1;
    used.set(key, n);
    return { limit, remaining: limit - n, reset };
  };
}

/** Sends one request on each endpoint in turn, `rounds` times, sequentially. */
function readSideBySide(learner: BudgetLearner, answer: (e: string) => RateHeaders, endpoints: string[], rounds: number): void {
  for (let r = 0; r < rounds; r++) {
    for (const e of endpoints) {
      const sentAt = learner.sent();
      learner.answered(e, sentAt, 200, answer(e));
    }
  }
}

const LISTS = ['GET /g/1/subscribers/active', 'GET /g/1/subscribers/junk', 'GET /g/1/subscribers/bounced'];
const COUNTS = ['GET /g/1/subscribers/active/count', 'GET /g/1/subscribers/junk/count', 'GET /g/1/subscribers/bounced/count'];

describe('BudgetLearner', () => {
  it('proves own budgets when each counter leaves out the others, and presumes them for new endpoints', () => {
    const learner = new BudgetLearner({ windowMs: 60_000, now: () => 0 });
    readSideBySide(
      learner,
      service((e) => e),
      LISTS,
      2,
    );
    expect(LISTS.map((e) => learner.budgetOf(e))).toEqual(['own', 'own', 'own']);
    expect(learner.model()).toBe('endpoint');
    expect(learner.budgetOf('GET /g/2/subscribers/active')).toBe('own');
  });

  it('one proof of an own budget is enough to presume one for an endpoint not seen yet', () => {
    const learner = new BudgetLearner({ windowMs: 60_000, now: () => 0 });
    const answer = service((e) => e);
    // The first answer proves nothing; the second, on another endpoint, left the first out.
    for (const endpoint of COUNTS.slice(0, 2)) {
      const sentAt = learner.sent();
      learner.answered(endpoint, sentAt, 200, answer(endpoint));
    }
    expect(learner.knowledge().map((k) => k.budget)).toEqual([null, 'own']);
    expect(learner.budgetOf(LISTS[0] ?? '')).toBe('own');
    expect(learner.model()).toBe('endpoint');
  });

  it('proves a shared budget when a counter counts other endpoints, and presumes nothing own', () => {
    const learner = new BudgetLearner({ windowMs: 60_000, now: () => 0 });
    readSideBySide(
      learner,
      service(() => 'account'),
      LISTS,
      2,
    );
    expect(LISTS.map((e) => learner.budgetOf(e))).toEqual(['shared', 'shared', 'shared']);
    expect(learner.model()).toBe('account');
    expect(learner.budgetOf('GET /g/2/subscribers/active')).toBe('shared');
  });

  it('mixed: lists own, counts shared', () => {
    const learner = new BudgetLearner({ windowMs: 60_000, now: () => 0 });
    const answer = service((e) => (e.endsWith('/count') ? 'counts' : e));
    readSideBySide(learner, answer, COUNTS, 1);
    readSideBySide(learner, answer, LISTS, 2);
    expect(LISTS.map((e) => learner.budgetOf(e))).toEqual(['own', 'own', 'own']);
    expect(COUNTS.slice(1).map((e) => learner.budgetOf(e))).toEqual(['shared', 'shared']);
    expect(learner.model()).toBe('mixed');
    // Not every endpoint proven own: a new one starts on the shared budget.
    expect(learner.budgetOf('GET /g/2/subscribers/active')).toBe('shared');
  });

  it('proves nothing across windows (a new Reset restarts the counter) nor from one endpoint alone', () => {
    const learner = new BudgetLearner({ windowMs: 60_000, now: () => 0 });
    const answer = service(() => 'account');
    let sentAt = learner.sent();
    learner.answered(LISTS[0] as string, sentAt, 200, answer(LISTS[0] as string, 1000));
    sentAt = learner.sent();
    // Same account counter, but the answer is in the next window (counter restarted).
    learner.answered(LISTS[1] as string, sentAt, 200, { limit: 60, remaining: 59, reset: 1060 });
    expect(learner.model()).toBe('unknown');
    const alone = new BudgetLearner({ windowMs: 60_000, now: () => 0 });
    readSideBySide(
      alone,
      service((e) => e),
      [LISTS[2] as string],
      5,
    );
    expect(alone.model()).toBe('unknown');
  });

  it('an answer that arrived after a request was sent proves nothing about it (it may have been counted later)', () => {
    const learner = new BudgetLearner({ windowMs: 60_000, now: () => 0 });
    const answer = service(() => 'account');
    // Both sent before either answered: the service may have handled them in any order.
    const sentA = learner.sent();
    const sentB = learner.sent();
    learner.answered(LISTS[0] as string, sentA, 200, answer(LISTS[0] as string));
    learner.answered(LISTS[1] as string, sentB, 200, { limit: 60, remaining: 59, reset: 1000 });
    expect(learner.budgetOf(LISTS[1] as string)).toBe('shared');
    expect(learner.model()).not.toBe('endpoint');
  });

  it('a 429 drops everyone to the shared budget for a window past the reset, and forgets the proofs', () => {
    let now = 0;
    const learner = new BudgetLearner({ windowMs: 60_000, now: () => now });
    readSideBySide(
      learner,
      service((e) => e),
      LISTS,
      2,
    );
    expect(learner.model()).toBe('endpoint');
    learner.answered(LISTS[0] as string, learner.sent(), 429, { limit: 60, remaining: 0, reset: 30 });
    expect(learner.budgetOf(LISTS[0] as string)).toBe('shared');
    expect(learner.model()).toBe('account');
    expect(learner.fallbackUntilMs()).toBe(90_000);
    now = 90_001;
    expect(learner.model()).toBe('unknown');
    expect(learner.changes).toBeGreaterThanOrEqual(2);
  });

  it('reads the headers, and ignores answers without them', () => {
    const h = new Headers({ 'x-ratelimit-limit': '60', 'x-ratelimit-remaining': '12', 'x-ratelimit-reset': '1700000000' });
    expect(readRateHeaders(h)).toEqual({ limit: 60, remaining: 12, reset: 1_700_000_000 });
    expect(readRateHeaders(new Headers({ 'x-ratelimit-limit': '60' }))).toBeNull();
    expect(readRateHeaders(new Headers({ 'x-ratelimit-limit': 'x', 'x-ratelimit-remaining': '1', 'x-ratelimit-reset': '1' }))).toBeNull();
  });
});

describe('budgetFor', () => {
  it('uses API_RATE_LIMIT but never more than announced', () => {
    expect(budgetFor(60, null, 60, 0.1)).toBe(60);
    expect(budgetFor(60, 30, 60, 0.1)).toBe(30);
    expect(budgetFor(40, 60, 60, 0.1)).toBe(40);
  });

  it('auto: what is announced (or the platform default before that) less the reserve, at least one', () => {
    expect(budgetFor('auto', 120, 60, 0.1)).toBe(108);
    expect(budgetFor('auto', null, 60, 0.1)).toBe(54);
    expect(budgetFor('auto', 5, 60, 0.1)).toBe(4);
    expect(budgetFor('auto', 1, 60, 0.1)).toBe(1);
  });
});

describe('readAhead (legacy pass)', () => {
  it('asks for the next page while the current one is handled, and yields every page in order', async () => {
    const { readAhead } = await import('../../src/sync/legacy-pass.js');
    const asked: number[] = [];
    async function* pages(): AsyncGenerator<number, void, undefined> {
      for (let i = 0; i < 4; i++) {
        asked.push(i);
        yield i;
      }
    }
    const seen: Array<[number, number[]]> = [];
    for await (const page of readAhead(pages())) {
      await new Promise((resolve) => setTimeout(resolve, 5));
      seen.push([page, [...asked]]);
    }
    expect(seen.map(([p]) => p)).toEqual([0, 1, 2, 3]);
    // While page 0 is handled, page 1 was already asked for.
    expect(seen[0]?.[1]).toEqual([0, 1]);
  });

  it('a failure of the page read ahead reaches the caller when it asks for that page; a stop ends the read', async () => {
    const { readAhead } = await import('../../src/sync/legacy-pass.js');
    const ended = { failing: false, endless: false };
    async function* failing(): AsyncGenerator<number, void, undefined> {
      try {
        yield 1;
        throw new Error('page 2 failed');
      } finally {
        ended.failing = true;
      }
    }
    const got: number[] = [];
    await expect(
      (async () => {
        for await (const page of readAhead(failing())) got.push(page);
      })(),
    ).rejects.toThrow('page 2 failed');
    expect(got).toEqual([1]);
    expect(ended.failing).toBe(true);
    async function* endless(): AsyncGenerator<number, void, undefined> {
      try {
        for (let i = 0; ; i++) yield i;
      } finally {
        ended.endless = true;
      }
    }
    for await (const page of readAhead(endless())) if (page === 2) break;
    expect(ended.endless).toBe(true);
  });
});

describe('readRateBudgets', () => {
  const store = (text: string | null) => ({ get: async () => text });

  it('reads back what a limiter published, and nothing from what is not a report', async () => {
    const { createBudgetLimiter, readRateBudgets } = await import('../../src/ratelimit/budget-limiter.js');
    const limiter = createBudgetLimiter({ mode: 'memory', perMinute: 60 });
    try {
      const report = limiter.report();
      expect(await readRateBudgets(store(JSON.stringify(report)), 'p')).toEqual(report);
    } finally {
      await limiter.close();
    }
    expect(await readRateBudgets(store(null), 'p')).toBeNull();
    expect(await readRateBudgets(store('{not json'), 'p')).toBeNull();
    expect(await readRateBudgets(store('{"model":"endpoint"}'), 'p')).toBeNull();
    expect(await readRateBudgets(store('[1,2]'), 'p')).toBeNull();
  });
});

/** The audit's schedule (docs/operations.md, "The audit"): the period each pair is really checked at within AUDIT_BUDGET. */
import { describe, expect, it } from 'vitest';
import { auditSchedule, formatPeriod, nextAllowance, planLoopTick } from '../../src/audit/core.js';

const base = { perMinute: 60, everyMs: 15_000, groups: 1, types: 5, source: 'legacy' as const, webhookReads: 0 };

describe('auditSchedule', () => {
  it('honours AUDIT_EVERY when one tick earns a whole audit of every pair', () => {
    // 600/min × 50 % × 15 s = 75 requests a tick; 5 pairs cost 10.
    expect(auditSchedule({ ...base, perMinute: 600, share: 0.5 })).toEqual({
      askedMs: 15_000,
      effectiveMs: 15_000,
      honoured: true,
      shareNeeded: null,
    });
  });

  it('says how long pairs really wait when the share cannot pay for every tick, and the share that would', () => {
    // 60/min × 5 % × 15 s = 0.75 requests a tick; a pair costs 2: one pair every 3 ticks, 5 pairs in turn.
    const s = auditSchedule({ ...base, share: 0.05 });
    expect(s.honoured).toBe(false);
    expect(s.effectiveMs).toBeGreaterThan(10 * 15_000);
    expect(s.effectiveMs! % 15_000).toBe(0);
    // 10 requests every 15 s is 40 a minute: two thirds of 60.
    expect(s.shareNeeded).toBe(0.67);
    expect(auditSchedule({ ...base, share: 0.67 }).honoured).toBe(true);
    expect(auditSchedule({ ...base, share: 0.66 }).honoured).toBe(false);
  });

  it('a larger share never gives a longer period', () => {
    let previous = Number.POSITIVE_INFINITY;
    for (const share of [0.01, 0.05, 0.1, 0.25, 0.5, 1]) {
      const p = auditSchedule({ ...base, share }).effectiveMs ?? Number.POSITIVE_INFINITY;
      expect(p).toBeLessThanOrEqual(previous);
      previous = p;
    }
  });

  it('counts the webhook read-back, paid from the same allowance, and never lets it starve the pairs', () => {
    const without = auditSchedule({ ...base, share: 0.1 });
    const withWebhooks = auditSchedule({ ...base, share: 0.1, webhookReads: 1 });
    expect(withWebhooks.effectiveMs!).toBeGreaterThan(without.effectiveMs!);
    // 0.75 requests a tick: a read-back every tick would take all of it.
    expect(auditSchedule({ ...base, share: 0.05, webhookReads: 1 }).effectiveMs).not.toBeNull();
  });

  it('no share up to 100 % honours a period shorter than the budget allows', () => {
    // 5 pairs × 2 requests every second is 600 a minute, ten times the limit.
    expect(auditSchedule({ ...base, everyMs: 1_000, share: 0.05 }).shareNeeded).toBeNull();
  });
});

describe('planLoopTick', () => {
  it('never spends more than its allowance, webhook read included', () => {
    const pairs = [{ groupId: 'g' }, { groupId: 'g' }];
    expect(planLoopTick(pairs, 'legacy', 0.75, 0, 1)).toEqual({ pairs: [], webhooks: false, cost: 0 });
    // The webhook read goes with the round's first pair, never alone: it cannot starve the pairs.
    expect(planLoopTick(pairs, 'legacy', 2, 0, 1)).toEqual({ pairs: [], webhooks: false, cost: 0 });
    expect(planLoopTick(pairs, 'legacy', 3, 0, 1)).toEqual({ pairs: [pairs[0]], webhooks: true, cost: 3 });
    // Mid-round, a pair costs only itself.
    expect(planLoopTick(pairs, 'legacy', 2, 1, 1)).toEqual({ pairs: [pairs[1]], webhooks: false, cost: 2 });
  });

  it('an allowance that a tick spends stays bounded below (no debt piles up)', () => {
    let allowance = 0;
    for (let i = 0; i < 100; i++) {
      allowance = nextAllowance(allowance, 0.75, 11);
      allowance -= planLoopTick([{ groupId: 'g' }], 'legacy', allowance, i, 1).cost;
      expect(allowance).toBeGreaterThanOrEqual(0);
    }
  });
});

describe('formatPeriod', () => {
  it('writes hours, minutes and seconds', () => {
    expect([formatPeriod(15_000), formatPeriod(165_000), formatPeriod(3_600_000), formatPeriod(0)]).toEqual(['15s', '2m45s', '1h', '0s']);
  });
});

/**
 * The accounts benchmark's `sizes` part reads how many accounts one replica holds within the memory
 * goal off a line through its peaks (test/bench/lib/accounts-per-replica.ts).
 */
import { describe, expect, it } from 'vitest';
import { accountsWithin, defaultSizes, fitPeaks } from '../bench/lib/accounts-per-replica.js';

describe('fitPeaks', () => {
  it('finds the slope and intercept of peaks on a line', () => {
    const line = fitPeaks([
      { accounts: 1, peakMb: 152 },
      { accounts: 4, peakMb: 158 },
      { accounts: 10, peakMb: 170 },
    ]);
    expect(line?.perAccountMb).toBeCloseTo(2, 9);
    expect(line?.interceptMb).toBeCloseTo(150, 9);
  });

  it('is the least-squares line through scattered peaks', () => {
    // Symmetric scatter around 150 + 2k: the fit is that line.
    const line = fitPeaks([
      { accounts: 1, peakMb: 155 },
      { accounts: 1, peakMb: 149 },
      { accounts: 11, peakMb: 175 },
      { accounts: 11, peakMb: 169 },
    ]);
    expect(line?.perAccountMb).toBeCloseTo(2, 9);
    expect(line?.interceptMb).toBeCloseTo(150, 9);
  });

  it('has no line with fewer than two sizes', () => {
    expect(fitPeaks([])).toBeNull();
    expect(
      fitPeaks([
        { accounts: 4, peakMb: 160 },
        { accounts: 4, peakMb: 170 },
      ]),
    ).toBeNull();
  });
});

describe('accountsWithin', () => {
  it('is the most accounts whose peak on the line stays within the goal', () => {
    // 1.1 × 155 = 170.5; 150 + 2k ≤ 170.5 up to k = 10.
    expect(accountsWithin({ perAccountMb: 2, interceptMb: 150 }, 155, 1.1)).toBe(10);
    expect(accountsWithin({ perAccountMb: 2.1, interceptMb: 150 }, 155, 1.1)).toBe(9);
  });

  it('is one account when even the line at one account is over the goal', () => {
    expect(accountsWithin({ perAccountMb: 5, interceptMb: 200 }, 155, 1.1)).toBe(1);
  });

  it('has no limit when accounts add nothing', () => {
    expect(accountsWithin({ perAccountMb: 0, interceptMb: 150 }, 155, 1.1)).toBeNull();
    expect(accountsWithin({ perAccountMb: -0.5, interceptMb: 150 }, 155, 1.1)).toBeNull();
  });
});

describe('defaultSizes', () => {
  it('runs 4, 8, 12 and 16 accounts below the deployment of every account', () => {
    expect(defaultSizes(20)).toEqual([4, 8, 12, 16]);
    expect(defaultSizes(10)).toEqual([4, 8]);
  });

  it('runs one smaller deployment when the benchmark has four accounts or fewer', () => {
    expect(defaultSizes(2)).toEqual([1]);
    expect(defaultSizes(4)).toEqual([3]);
    expect(defaultSizes(1)).toEqual([1]);
  });
});

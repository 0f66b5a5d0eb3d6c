import { describe, expect, it } from 'vitest';
import { hash32, mulberry32, pickWeighted, randomInt } from '../../src/simulator/prng.js';

describe('simulator prng', () => {
  it('repeats the same sequence for the same seed', () => {
    const a = mulberry32(42);
    const b = mulberry32(42);
    const seqA = Array.from({ length: 100 }, () => a());
    expect(Array.from({ length: 100 }, () => b())).toEqual(seqA);
  });

  it('gives different sequences for different seeds', () => {
    const a = mulberry32(1);
    const b = mulberry32(2);
    expect(Array.from({ length: 10 }, () => a())).not.toEqual(Array.from({ length: 10 }, () => b()));
  });

  it('stays in [0, 1) and spreads roughly evenly', () => {
    const rng = mulberry32(7);
    const buckets = new Array<number>(10).fill(0);
    let outOfRange = 0;
    for (let i = 0; i < 100_000; i++) {
      const x = rng();
      if (!(x >= 0 && x < 1)) outOfRange++;
      const bucket = Math.floor(x * 10);
      buckets[bucket] = (buckets[bucket] ?? 0) + 1;
    }
    expect(outOfRange).toBe(0);
    for (const count of buckets) expect(count).toBeGreaterThan(9_000);
  });

  it('hash32 is a pure function of its inputs', () => {
    expect(hash32(5, 10)).toBe(hash32(5, 10));
    expect(hash32(5, 10)).not.toBe(hash32(5, 11));
    expect(hash32(5, 10)).toBeGreaterThanOrEqual(0);
    expect(hash32(5, 10)).toBeLessThan(2 ** 32);
  });

  it('randomInt and pickWeighted respect their bounds', () => {
    const rng = mulberry32(3);
    for (let i = 0; i < 1000; i++) {
      const n = randomInt(rng, 3, 5);
      expect(n >= 3 && n <= 5).toBe(true);
      expect(pickWeighted(rng, [0, 1, 0])).toBe(1);
    }
  });
});

/**
 * Bounded body reading (docs/operations.md, "Public surface"): sizes checked from Content-Length and as bytes
 * arrive, one shared budget counted on arrival, a reserve that keeps room for small bodies.
 */
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { BodyError, createBodyBudget, readBody, SMALL_BODY_BYTES } from '../../src/webhooks/body.js';

const KiB = 1024;

describe('createBodyBudget', () => {
  it('counts bytes taken and given back', () => {
    const budget = createBodyBudget(800 * KiB);
    expect(budget.take(300 * KiB, 0)).toBe(true);
    expect(budget.used()).toBe(300 * KiB);
    budget.give(100 * KiB);
    expect(budget.used()).toBe(200 * KiB);
  });

  it('keeps the last eighth for small bodies', () => {
    const budget = createBodyBudget(800 * KiB); // reserve: 100 KiB
    // A large body may fill up to 700 KiB.
    expect(budget.take(400 * KiB, SMALL_BODY_BYTES)).toBe(true);
    expect(budget.take(300 * KiB, SMALL_BODY_BYTES)).toBe(true);
    expect(budget.take(1, SMALL_BODY_BYTES)).toBe(false);
    // A small one still finds room in the reserve, up to the total.
    expect(budget.take(64 * KiB, 0)).toBe(true);
    expect(budget.take(36 * KiB, 64 * KiB)).toBe(true);
    expect(budget.take(1, 0)).toBe(false);
  });
});

function stream(): PassThrough {
  return new PassThrough();
}

describe('readBody', () => {
  it('returns the bytes and gives the budget back on release', async () => {
    const budget = createBodyBudget(1024 * KiB);
    const s = stream();
    const reading = readBody(s, { maxBytes: 100, budget, announced: 5 });
    s.write('he');
    s.end('llo');
    const { body, release } = await reading;
    expect(body.toString()).toBe('hello');
    expect(budget.used()).toBe(5);
    release();
    release();
    expect(budget.used()).toBe(0);
  });

  it('refuses an announced size over the limit before reading (413)', async () => {
    const s = stream();
    const error = await readBody(s, { maxBytes: 100, budget: createBodyBudget(KiB * 1024), announced: 101 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BodyError);
    expect(error).toMatchObject({ status: 413 });
  });

  it('refuses a body that grows past the limit without announcing it (413), giving back what it held', async () => {
    const budget = createBodyBudget(1024 * KiB);
    const s = stream();
    const reading = readBody(s, { maxBytes: 10, budget, announced: undefined });
    s.write('123456');
    s.write('7890ab');
    await expect(reading).rejects.toMatchObject({ status: 413 });
    expect(budget.used()).toBe(0);
  });

  it('refuses a body the shared budget has no room for (503)', async () => {
    const budget = createBodyBudget(8 * SMALL_BODY_BYTES);
    expect(budget.take(7 * SMALL_BODY_BYTES, SMALL_BODY_BYTES)).toBe(true);
    const s = stream();
    const reading = readBody(s, { maxBytes: 10 * SMALL_BODY_BYTES, budget, announced: undefined });
    s.write(Buffer.alloc(SMALL_BODY_BYTES));
    s.write(Buffer.alloc(SMALL_BODY_BYTES)); // now over the small-body size, the reserve is closed
    await expect(reading).rejects.toMatchObject({ status: 503 });
    expect(budget.used()).toBe(7 * SMALL_BODY_BYTES);
  });

  it('refuses a body shorter than announced, and an aborted upload (400)', async () => {
    const budget = createBodyBudget(1024 * KiB);
    const short = stream();
    const reading = readBody(short, { maxBytes: 100, budget, announced: 10 });
    short.end('abc');
    await expect(reading).rejects.toMatchObject({ status: 400 });
    const aborted = stream();
    const abortedReading = readBody(aborted, { maxBytes: 100, budget, announced: 10 });
    aborted.write('abc');
    aborted.destroy();
    await expect(abortedReading).rejects.toMatchObject({ status: 400 });
    expect(budget.used()).toBe(0);
  });
});

import { describe, expect, it } from 'vitest';
import { admissionOf, createPageGate } from '../../src/upstream/page-gate.js';

/** Lets every settled promise's callbacks run. */
const settle = () => new Promise((resolve) => setImmediate(resolve));

describe('page gate', () => {
  it('refuses a capacity that is not a positive integer', () => {
    for (const bad of [0, -1, 1.5, Number.NaN]) expect(() => createPageGate(bad)).toThrow(/capacity must be an integer >= 1/);
  });

  it('admits up to its capacity, then in arrival order as rooms are freed', async () => {
    const gate = createPageGate(2);
    const a = await gate.admit();
    const b = await gate.admit();
    const order: string[] = [];
    const c = gate.admit().then((release) => (order.push('c'), release));
    const d = gate.admit().then((release) => (order.push('d'), release));
    await settle();
    expect(order).toEqual([]);
    expect(gate.stats()).toEqual({ capacity: 2, held: 2, waiting: 2 });
    b();
    await settle();
    expect(order).toEqual(['c']);
    a();
    await settle();
    expect(order).toEqual(['c', 'd']);
    (await c)();
    (await d)();
    expect(gate.stats()).toEqual({ capacity: 2, held: 0, waiting: 0 });
  });

  it('hands a freed room to the longest waiter, not to a newcomer', async () => {
    const gate = createPageGate(1);
    const first = await gate.admit();
    const order: string[] = [];
    const waiter = gate.admit().then((release) => (order.push('waiter'), release));
    first();
    // Asked after the room was freed but before the waiter ran: it must queue behind it.
    const newcomer = gate.admit().then((release) => (order.push('newcomer'), release));
    await settle();
    expect(order).toEqual(['waiter']);
    (await waiter)();
    await settle();
    expect(order).toEqual(['waiter', 'newcomer']);
    (await newcomer)();
  });

  it('frees a room once, however often its release is called', async () => {
    const gate = createPageGate(1);
    const release = await gate.admit();
    release();
    release();
    expect(gate.stats().held).toBe(0);
    const again = await gate.admit();
    expect(gate.stats().held).toBe(1);
    again();
  });

  it('take() never waits, even past the capacity (a probe read while its page is held)', async () => {
    const gate = createPageGate(1);
    const page = await gate.admit();
    const probe = gate.take();
    expect(gate.stats()).toEqual({ capacity: 1, held: 2, waiting: 0 });
    probe();
    page();
    expect(gate.stats().held).toBe(0);
  });

  it('a room freed while a probe keeps the gate at its capacity goes to no waiter', async () => {
    const gate = createPageGate(1);
    const page = await gate.admit();
    const probe = gate.take();
    let admitted = false;
    const waiter = gate.admit().then((release) => ((admitted = true), release));
    page();
    await settle();
    expect(admitted).toBe(false);
    expect(gate.stats()).toEqual({ capacity: 1, held: 1, waiting: 1 });
    probe();
    (await waiter)();
    expect(gate.stats()).toEqual({ capacity: 1, held: 0, waiting: 0 });
  });

  it("a pass's admission frees every room it still holds when closed", async () => {
    const gate = createPageGate(2);
    const pass = admissionOf(gate);
    const committed = await pass.admit();
    await pass.admit(); // a read-ahead page a stop left uncommitted
    pass.take();
    committed();
    expect(gate.stats().held).toBe(2);
    pass.close();
    expect(gate.stats().held).toBe(0);
    // Releases after the close change nothing.
    committed();
    expect(gate.stats().held).toBe(0);
  });
});

import { describe, expect, it } from 'vitest';
import { admissionOf, createPageGate, UNKNOWN_BODY_BYTES, type PageGate, type Release } from '../../src/upstream/page-gate.js';

/** Lets every settled promise's callbacks run. */
const settle = () => new Promise((resolve) => setImmediate(resolve));

/** Queues a page of `bytes` at `gate`; once admitted, its name goes to `order` and its room to `rooms`. */
function queue(gate: PageGate, name: string, bytes: number | null, order: string[], rooms: Release[]): void {
  void gate.admit(bytes).then((release) => {
    order.push(name);
    rooms.push(release);
  });
}

/** A gate of one room, held: every page queued next waits. `order` and `rooms` are for `queue`. */
async function heldGate() {
  const gate = createPageGate(1);
  const held = await gate.admit();
  return { gate, held, order: [] as string[], rooms: [] as Release[] };
}

/** Frees the rooms taken so far, one at a time, letting each next page in before the following is freed. */
async function drain(rooms: Release[]): Promise<void> {
  for (;;) {
    await settle();
    const room = rooms.shift();
    if (!room) return;
    room();
  }
}

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

describe('page gate between accounts (fair by bytes)', () => {
  it('a freed room goes to the account whose pages brought the fewest bytes, not to the longest waiter', async () => {
    const { gate, held, order, rooms } = await heldGate();
    const legacy = gate.forAccount('legacy');
    const current = gate.forAccount('current');
    for (const n of [1, 2, 3]) queue(legacy, `legacy${n}`, 1000, order, rooms);
    for (const n of [1, 2, 3]) queue(current, `current${n}`, 100, order, rooms);
    held();
    await drain(rooms);
    // Three small pages cost less than the big one admitted first: all go before the second big one.
    expect(order).toEqual(['legacy1', 'current1', 'current2', 'current3', 'legacy2', 'legacy3']);
    expect(gate.stats()).toEqual({ capacity: 1, held: 0, waiting: 0 });
  });

  it("keeps one account's pages in their arrival order, whatever their sizes", async () => {
    const { gate, held, order, rooms } = await heldGate();
    const one = gate.forAccount('one');
    queue(one, 'big', 5000, order, rooms);
    queue(one, 'small', 10, order, rooms);
    queue(one, 'middle', 500, order, rooms);
    held();
    await drain(rooms);
    expect(order).toEqual(['big', 'small', 'middle']);
  });

  it('an account that arrives late banks no turns for the time it waited for nothing', async () => {
    const { gate, held, order, rooms } = await heldGate();
    const early = gate.forAccount('early');
    for (const n of [1, 2, 3, 4]) queue(early, `early${n}`, 100, order, rooms);
    held();
    await settle();
    (rooms.shift() as Release)();
    await settle();
    expect(order).toEqual(['early1', 'early2']);
    const late = gate.forAccount('late');
    for (const n of [1, 2, 3, 4]) queue(late, `late${n}`, 100, order, rooms);
    await drain(rooms);
    // Taking turns from the page last let in on: not all four of its pages first.
    expect(order).toEqual(['early1', 'early2', 'late1', 'early3', 'late2', 'early4', 'late3', 'late4']);
  });

  it(`counts a body of unknown size (no Content-Length) as ${UNKNOWN_BODY_BYTES} bytes`, async () => {
    const { gate, held, order, rooms } = await heldGate();
    const chunked = gate.forAccount('chunked');
    const sized = gate.forAccount('sized');
    queue(chunked, 'chunked1', null, order, rooms);
    queue(chunked, 'chunked2', null, order, rooms);
    for (const n of [1, 2, 3]) queue(sized, `sized${n}`, UNKNOWN_BODY_BYTES / 2, order, rooms);
    held();
    await drain(rooms);
    expect(order).toEqual(['chunked1', 'sized1', 'sized2', 'chunked2', 'sized3']);
  });

  it('an account of its own still passes a probe through with take()', async () => {
    const gate = createPageGate(1);
    const one = gate.forAccount('one');
    const page = await one.admit(1000);
    const probe = one.take();
    expect(gate.stats()).toEqual({ capacity: 1, held: 2, waiting: 0 });
    probe();
    page();
    expect(gate.stats().held).toBe(0);
  });
});

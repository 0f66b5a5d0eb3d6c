/**
 * Which replica reads which account (src/sync/replicas.ts, `accountsToRead`): every replica derives
 * the same assignment from the same list, so together they read every account, each exactly once
 * when there are enough accounts, and none of them is left without one; and a starting replica
 * waits for the list of live replicas to settle before its first deal (`settledList`).
 */
import { describe, expect, it } from 'vitest';
import {
  accountsDeclaredApart,
  accountsToRead,
  SETTLE_HEARTBEATS_AT_MOST,
  SETTLE_QUIET_HEARTBEATS,
  settledList,
} from '../../src/sync/replicas.js';

const accounts = (n: number) => Array.from({ length: n }, (_, i) => `a${String(i).padStart(2, '0')}`);
const replicas = (n: number) => Array.from({ length: n }, (_, i) => `r${i}`);

/** How many replicas read each account, given every replica's own answer. */
function readers(all: readonly string[], live: readonly string[]): Map<string, number> {
  const counts = new Map(all.map((a) => [a, 0]));
  for (const self of live) for (const a of accountsToRead(all, live, self)) counts.set(a, (counts.get(a) ?? 0) + 1);
  return counts;
}

describe('accountsToRead', () => {
  it('deals twenty accounts over three replicas in turn: 7, 7 and 6, each read once', () => {
    const all = accounts(20);
    const live = replicas(3);
    expect(live.map((r) => accountsToRead(all, live, r).length)).toEqual([7, 7, 6]);
    expect([...readers(all, live).values()].every((n) => n === 1)).toBe(true);
    expect(accountsToRead(all, live, 'r1').slice(0, 3)).toEqual(['a01', 'a04', 'a07']);
  });

  it('lets every replica read the one account of a deployment that has one', () => {
    for (const r of replicas(4)) expect(accountsToRead(['default'], replicas(4), r)).toEqual(['default']);
  });

  it('with fewer accounts than replicas, reads each account on several and gives every replica one', () => {
    const live = replicas(5);
    expect(live.map((r) => accountsToRead(['x', 'y'], live, r))).toEqual([['x'], ['y'], ['x'], ['y'], ['x']]);
  });

  it('reads every account, and gives every replica one, for any number of either', () => {
    for (let a = 1; a <= 12; a++) {
      for (let r = 1; r <= 7; r++) {
        const all = accounts(a);
        const live = replicas(r);
        const counts = readers(all, live);
        expect(
          [...counts.values()].every((n) => n >= 1),
          `${a} accounts, ${r} replicas`,
        ).toBe(true);
        if (a >= r)
          expect(
            [...counts.values()].every((n) => n === 1),
            `${a} accounts, ${r} replicas`,
          ).toBe(true);
        for (const self of live) expect(accountsToRead(all, live, self).length, `${a} accounts, ${r} replicas`).toBeGreaterThan(0);
        // Balanced: no replica reads more than one account over another.
        const sizes = live.map((self) => accountsToRead(all, live, self).length);
        if (a >= r) expect(Math.max(...sizes) - Math.min(...sizes)).toBeLessThanOrEqual(1);
      }
    }
  });

  it('orders the replicas itself, so the order each one learned the list in does not matter', () => {
    const all = accounts(6);
    expect(accountsToRead(all, ['r2', 'r0', 'r1'], 'r1')).toEqual(accountsToRead(all, ['r0', 'r1', 'r2'], 'r1'));
  });

  it('reads every account when it is not on the list (its heartbeat did not reach Redis)', () => {
    expect(accountsToRead(accounts(4), ['r0', 'r1'], 'r9')).toEqual(accounts(4));
  });
});

describe('accountsDeclaredApart', () => {
  it('names the accounts some live replica serves and another does not', () => {
    const serves = new Map([
      ['r0', ['default', 'shop']],
      ['r1', ['default', 'shop', 'news']],
      ['r2', ['blog', 'default', 'shop']],
    ]);
    expect(accountsDeclaredApart(serves)).toEqual(['blog', 'news']);
  });

  it('finds nothing apart when every replica declares the same accounts, or only one said', () => {
    expect(
      accountsDeclaredApart(
        new Map([
          ['r0', ['a', 'b']],
          ['r1', ['b', 'a']],
        ]),
      ),
    ).toEqual([]);
    expect(accountsDeclaredApart(new Map([['r0', ['a', 'b']]]))).toEqual([]);
  });

  it('leaves out a replica that has not said what it serves', () => {
    expect(
      accountsDeclaredApart(
        new Map<string, string[] | null>([
          ['r0', ['a']],
          ['r1', null],
        ]),
      ),
    ).toEqual([]);
  });
});

describe('settledList', () => {
  /** Heartbeats that find these lists in turn (the last one from then on), and how many were made. */
  const beats = (...lists: string[][]) => {
    let made = 0;
    const beat = async () => [...(lists[Math.min(made++, lists.length - 1)] ?? [])];
    return { beat, made: () => made };
  };

  it('takes the list once it stayed the same for the quiet heartbeats', async () => {
    const b = beats(['r0', 'r1']);
    expect(await settledList(['r0', 'r1'], b.beat, 0)).toEqual(['r0', 'r1']);
    expect(b.made()).toBe(SETTLE_QUIET_HEARTBEATS);
  });

  it('waits out replicas that arrive one after the other, and starts the quiet count again at each', async () => {
    const b = beats(['r0'], ['r0', 'r1'], ['r0', 'r1'], ['r0', 'r1', 'r2']);
    expect(await settledList(['r0'], b.beat, 0)).toEqual(['r0', 'r1', 'r2']);
    // Four heartbeats to the last arrival (the first found no change yet), then the quiet ones.
    expect(b.made()).toBe(4 + SETTLE_QUIET_HEARTBEATS);
  });

  it('sees one leave as a change too', async () => {
    const b = beats(['r0']);
    expect(await settledList(['r0', 'gone'], b.beat, 0)).toEqual(['r0']);
    expect(b.made()).toBe(1 + SETTLE_QUIET_HEARTBEATS);
  });

  it('stops waiting after a bounded number of heartbeats when the list never settles', async () => {
    let made = 0;
    const flapping = async () => (made++ % 2 === 0 ? ['r0', 'r1'] : ['r0']);
    const last = await settledList(['r0'], flapping, 0);
    expect(made).toBe(SETTLE_HEARTBEATS_AT_MOST);
    // The last heartbeat's list: replica r1 comes and goes, and was gone at the tenth.
    expect(last).toEqual(['r0']);
  });
});

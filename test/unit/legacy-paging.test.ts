/**
 * The paging steps of `upstream/legacy/paging.ts` as tables: given what a pass has seen (its state),
 * the page just read and the page-cap knowledge, what the step does next. `upstream-legacy.test.ts`
 * runs the same steps through the client against fake services.
 */
import { describe, expect, it } from 'vitest';
import {
  emptyCapKnowledge,
  noteServedPage,
  observeShortPage,
  withKnownCap,
  type PageCapKnowledge,
} from '../../src/upstream/legacy/cap-knowledge.js';
import {
  adaptedOverlap,
  FAR_OFFSET,
  fullPassNeedsNoRead,
  measuredShift,
  stepBackBudget,
  fingerprint,
  fullStep,
  incrementalStep,
  MAX_STEP_BACKS,
  overlapFor,
  startFullPass,
  startIncrementalPass,
  type FullPassState,
  type PagingContext,
} from '../../src/upstream/legacy/paging.js';

type Row = { id: number };
/** Rows with ids `from`, `from + 1`, … (`n` of them). */
const rows = (from: number, n: number): Row[] => Array.from({ length: n }, (_, i) => ({ id: from + i }));
const knowledge = (over: Partial<PageCapKnowledge> = {}): PageCapKnowledge => ({ ...emptyCapKnowledge(), ...over });
const context: PagingContext = { limit: 10, list: '7/active' };

/** `expected` as a partial match; a `page: undefined` in it means the step emits no page. */
function expectStep(step: object, expected: Record<string, unknown>): void {
  const { page, ...rest } = expected;
  expect(step).toMatchObject(rest);
  if (!('page' in expected)) return;
  if (page === undefined) expect((step as { page?: unknown }).page).toBeUndefined();
  else expect(step).toMatchObject({ page });
}

/** Ids of `list` with the offsets they were read at (a page read at `at`). */
const readAt = (list: readonly Row[], at: number) => new Map(list.map((r, i) => [String(r.id), at + i] as const));

/** The state after a full-pass page of `previous` rows read at `offset - previous.length + overlap`. */
function after(previous: Row[], offset: number, over: Partial<FullPassState> = {}): FullPassState {
  const overlap = over.overlap ?? overlapFor(previous.length);
  return {
    offset,
    previous: readAt(previous, offset + overlap - previous.length),
    previousPrint: fingerprint(previous),
    overlap,
    shift: 0,
    shortBefore: null,
    stepBacks: 0,
    stepBacksInPass: 0,
    pages: 1,
    probed: false,
    continuous: true,
    ...over,
  };
}

describe('overlapFor', () => {
  it.each([
    [0, 0],
    [1, 1],
    [2, 1],
    [10, 1],
    [50, 2],
    [100, 4],
    [500, 20],
    [1000, 20],
  ])('a page of %i rows is re-read by %i', (length, overlap) => {
    expect(overlapFor(length)).toBe(overlap);
  });
});

describe('startFullPass', () => {
  it.each([
    ['from the top', 0, undefined, { offset: 0, overlap: 0, continuous: true, previous: null }],
    [
      'resumed with the saved tail',
      38,
      ['39', '40'],
      {
        offset: 38,
        overlap: 1,
        continuous: true,
        previous: new Map([
          ['39', 38],
          ['40', 39],
        ]),
      },
    ],
    [
      'resumed without a tail: cannot prove it skipped nothing',
      40,
      undefined,
      { offset: 40, overlap: 0, continuous: false, previous: null },
    ],
    ['resumed with an empty tail', 40, [], { offset: 40, overlap: 0, continuous: false, previous: null }],
  ] as const)('%s', (_name, offset, tail, expected) => {
    expect(startFullPass(offset, tail, 10)).toMatchObject(expected);
  });
});

describe('fullStep', () => {
  const page1 = rows(1, 10);
  const cases: Array<{
    name: string;
    state: FullPassState;
    page: Row[];
    probe?: Row[];
    known?: PageCapKnowledge;
    knownLength?: number;
    expected: Record<string, unknown>;
  }> = [
    {
      name: 'first page: emitted whole, the next request re-reads its last row',
      state: startFullPass(0, undefined, 10),
      page: page1,
      expected: {
        kind: 'next',
        page: { offset: 0, rows: page1, nextOffset: 9, tail: ['10'], continuous: true },
        state: { offset: 9, overlap: 1 },
      },
    },
    {
      name: 'overlap found: the re-read row is left out',
      state: after(page1, 9),
      page: rows(10, 10),
      expected: {
        kind: 'next',
        page: { offset: 9, rows: rows(11, 9), nextOffset: 18, tail: ['19'], continuous: true },
        state: { offset: 18 },
      },
    },
    {
      name: 'members left ahead of the read position, fewer than the overlap: still joined, nothing skipped',
      state: after(rows(1, 100), 96),
      page: rows(100, 100),
      expected: { kind: 'next', page: { offset: 96, rows: rows(101, 99), continuous: true } },
    },
    {
      name: 'members left ahead of the read position: the shift is measured and the next overlap covers twice it',
      state: after(rows(1, 100), 96),
      page: rows(100, 100),
      // Row 100 was read at offset 99 and is now at 96: three members left ahead of the read position.
      expected: { kind: 'next', state: { shift: 3, overlap: overlapFor(100) + 6, offset: 96 + 100 - (overlapFor(100) + 6) } },
    },
    {
      name: 'a quiet list: no shift, the base overlap',
      state: after(rows(1, 100), 96, { shift: 5, overlap: 14 }),
      page: rows(87, 100),
      expected: { kind: 'next', state: { shift: 0, overlap: overlapFor(100) } },
    },
    {
      name: 'one member left with an overlap of one: not joined, step back only as far as that shows (one row)',
      state: after(page1, 9),
      page: rows(11, 10),
      expected: { kind: 'back', state: { offset: 8, stepBacks: 1, stepBacksInPass: 1 } },
    },
    {
      name: 'a shift measured before: the first step back covers twice it',
      state: after(page1, 8, { shift: 3, overlap: 2 }),
      page: rows(40, 10),
      expected: { kind: 'back', state: { offset: 8 - 6, stepBacks: 1 } },
    },
    {
      name: 'still not joined: each step back goes twice as far as the one before',
      state: after(rows(11, 10), 18, { stepBacks: 2 }),
      page: rows(40, 10),
      expected: { kind: 'back', state: { offset: 14, stepBacks: 3, previous: readAt(rows(11, 10), 9) } },
    },
    {
      name: 'a step back never goes more than a page (less the overlap) at once',
      state: after(rows(11, 10), 40, { stepBacks: 5 }),
      page: rows(80, 10),
      expected: { kind: 'back', state: { offset: 31, stepBacks: 6 } },
    },
    {
      name: 'step back never goes below offset 0',
      state: after(rows(1, 10), 5, { overlap: 1, stepBacks: 3 }),
      page: rows(40, 10),
      expected: { kind: 'back', state: { offset: 0, stepBacks: 4 } },
    },
    {
      name: "the pass's step-back budget is spent: a gap, reported on the page, and the pass moves on",
      state: after(rows(11, 10), 18, { stepBacksInPass: stepBackBudget(1) }),
      page: rows(40, 10),
      expected: { kind: 'next', page: { offset: 18, rows: rows(40, 10), continuous: false }, state: { offset: 27 } },
    },
    {
      name: `still not found after ${MAX_STEP_BACKS} step backs: a gap, reported on the page`,
      state: after(rows(11, 10), 18, { stepBacks: MAX_STEP_BACKS }),
      page: rows(40, 10),
      expected: {
        kind: 'next',
        page: { offset: 18, rows: rows(40, 10), continuous: false },
        state: { offset: 27, stepBacks: 0, continuous: true },
      },
    },
    {
      name: 'stepped back to the top without finding it: nothing before offset 0 can be missed',
      state: after(rows(11, 10), 0, { stepBacks: 2 }),
      page: rows(40, 10),
      expected: { kind: 'next', page: { offset: 0, continuous: true } },
    },
    {
      name: 'a gap found on the last request still reaches the caller, as an empty page',
      state: after(rows(11, 10), 18, { stepBacks: MAX_STEP_BACKS }),
      page: [],
      expected: { kind: 'end', page: { offset: 18, rows: [], nextOffset: 18, tail: [], continuous: false } },
    },
    {
      name: 'end: only the re-read row came back',
      state: after(page1, 9),
      page: rows(10, 1),
      expected: { kind: 'end', page: undefined },
    },
    {
      name: 'end: an empty list',
      state: startFullPass(0, undefined, 10),
      page: [],
      expected: { kind: 'end', page: undefined },
    },
    {
      name: 'an empty page after a page: the list shrank, step back to find it',
      state: after(page1, 9),
      page: [],
      expected: { kind: 'back', state: { offset: 8, stepBacks: 1 } },
    },
    {
      name: 'a short page joined, shorter than a page the service served: the end, without another request',
      state: after(page1, 9),
      page: rows(10, 4),
      known: knowledge({ longestPage: 10 }),
      expected: { kind: 'end', page: { offset: 9, rows: rows(11, 3), continuous: true } },
    },
    {
      name: 'a short first page on a fresh install that the count agrees with: the end',
      state: startFullPass(0, undefined, 10),
      page: rows(1, 4),
      knownLength: 4,
      expected: { kind: 'end', page: { offset: 0, rows: rows(1, 4) } },
    },
    {
      name: 'a short first page on a fresh install that the count says goes on: maybe a cap, one more request',
      state: startFullPass(0, undefined, 10),
      page: rows(1, 4),
      knownLength: 40,
      expected: { kind: 'next', state: { offset: 3, shortBefore: { length: 4, offset: 0 } } },
    },
    {
      name: "a short page of a cap candidate's length: one more request",
      state: after(page1, 9),
      page: rows(10, 4),
      known: knowledge({ longestPage: 10, candidate: { length: 4, where: 'x' } }),
      knownLength: 13,
      expected: { kind: 'next' },
    },
    {
      name: 'a page of one row is read again at the same offset',
      state: startFullPass(0, undefined, 10),
      page: rows(1, 1),
      expected: { kind: 'next', page: { nextOffset: 0, tail: ['1'] }, state: { offset: 0, overlap: 1 } },
    },
    {
      name: 'the same page again: ask for a page far past any list first',
      state: after(rows(1, 3), 2),
      page: rows(1, 3),
      expected: { kind: 'probe', offset: FAR_OFFSET },
    },
    {
      name: 'the far page is the same page too: the service ignores offset',
      state: after(rows(1, 3), 2),
      page: rows(1, 3),
      probe: rows(1, 3),
      expected: { kind: 'ignores-offset', offset: 2, farOffset: FAR_OFFSET },
    },
    {
      name: 'the far page is empty: members joined ahead; go on, and never probe again this pass',
      state: after(rows(1, 3), 2),
      page: rows(1, 3),
      probe: [],
      expected: { kind: 'next', page: { offset: 2, rows: [], nextOffset: 4 }, state: { offset: 4, probed: true } },
    },
    {
      name: 'a repeat after the probe was spent is taken as it is',
      state: after(rows(1, 3), 2, { probed: true }),
      page: rows(1, 3),
      expected: { kind: 'next', page: { rows: [] }, state: { offset: 4, probed: true } },
    },
  ];

  it.each(cases)('$name', ({ state, page, probe, known, knownLength, expected }) => {
    const step = fullStep(state, probe === undefined ? { rows: page } : { rows: page, probe }, known ?? knowledge(), {
      ...context,
      knownLength,
    });
    expectStep(step, expected);
  });

  it('never writes into the state or the knowledge it is given', () => {
    const state = after(rows(1, 10), 9, { shortBefore: { length: 10, offset: 0 } });
    const known = knowledge({ cap: null, longestPage: 10, candidate: { length: 10, where: '7/active@0' } });
    const frozenState = structuredClone(state);
    const frozenKnowledge = structuredClone(known);
    const step = fullStep(state, { rows: rows(10, 10) }, known, { ...context, limit: 100, knownLength: 1000 });
    expect(step.knowledge.cap).toBe(10);
    expect(state).toEqual(frozenState);
    expect(known).toEqual(frozenKnowledge);
  });
});

describe('full pass: short pages and cap learning', () => {
  // The pass asks for 100 and the service served 50 at offset 0; the next page (offset 49) has more.
  const short = { length: 50, offset: 0 };
  const state = after(rows(1, 50), 49, { shortBefore: short });
  const next = rows(50, 50);
  // A short page that the count agrees with, or shorter than one served before, ends the pass.
  it.each([
    [
      'first short page inside a long list: a candidate',
      knowledge({ longestPage: 50 }),
      1000,
      { cap: null, candidate: { length: 50, where: '7/active@0' } },
      100,
      'next',
    ],
    [
      'the same length seen twice: the cap',
      knowledge({ longestPage: 50, candidate: { length: 50, where: '7/active@900' } }),
      1000,
      { cap: 50, candidate: null },
      50,
      'next',
    ],
    [
      'a candidate of another length is replaced',
      knowledge({ longestPage: 50, candidate: { length: 40, where: 'x' } }),
      1000,
      { cap: null, candidate: { length: 50 } },
      100,
      'next',
    ],
    ['no count for the pass: nothing learned', knowledge({ longestPage: 50 }), undefined, { cap: null, candidate: null }, 100, 'next'],
    [
      'the count does not hold two such pages beyond it (growth): nothing learned',
      knowledge({ longestPage: 50 }),
      99,
      { cap: null, candidate: null },
      100,
      'end',
    ],
    [
      'the service served longer pages before: nothing learned',
      knowledge({ longestPage: 80 }),
      1000,
      { cap: null, candidate: null },
      100,
      'end',
    ],
  ] as const)('%s', (_name, known, knownLength, learned, limit, kind) => {
    const step = fullStep(state, { rows: next }, known, { limit: 100, list: '7/active', knownLength });
    expect(step).toMatchObject({ kind, knowledge: learned, page: { limit } });
  });

  it('a short page at the end of the list teaches nothing (no rows followed)', () => {
    const step = fullStep(state, { rows: rows(50, 1) }, knowledge({ longestPage: 50, candidate: { length: 50, where: 'x' } }), {
      limit: 100,
      list: '7/active',
      knownLength: 1000,
    });
    expect(step).toMatchObject({ kind: 'end', knowledge: { cap: null } });
  });

  it.each([
    [
      'a page shorter than the page size in force is remembered as short',
      rows(1, 30),
      { length: 30, offset: 0 },
      knowledge({ longestPage: 30 }),
    ],
    ['a page as long as the cap is not short', rows(1, 50), null, knowledge({ cap: 50, longestPage: 50 })],
  ] as const)('%s', (_name, page, shortBefore, known) => {
    const step = fullStep(startFullPass(0, undefined, 100), { rows: [...page] }, known, { limit: 100, list: 'l', knownLength: 1000 });
    expect(step).toMatchObject({ kind: 'next', state: { shortBefore } });
  });

  it('a page shorter than the known cap ends the list at once', () => {
    const step = fullStep(startFullPass(0, undefined, 100), { rows: rows(1, 30) }, knowledge({ cap: 50, longestPage: 50 }), {
      limit: 100,
      list: 'l',
    });
    expect(step).toMatchObject({ kind: 'end', page: { rows: rows(1, 30) } });
  });

  it('a page longer than the known cap drops it', () => {
    const step = fullStep(startFullPass(0, undefined, 100), { rows: rows(1, 80) }, knowledge({ cap: 50, longestPage: 50 }), {
      limit: 100,
      list: 'l',
    });
    expect(step).toMatchObject({ kind: 'next', knowledge: { cap: null, longestPage: 80, candidate: null }, page: { limit: 100 } });
  });
});

describe('fullPassNeedsNoRead', () => {
  it.each([
    ['a list counted empty at the start of a new pass', 0, 0, true],
    ['a list counted empty, resumed past the top: read (the checkpoint says there were rows)', 40, 0, false],
    ['a list with rows', 0, 3, false],
    ['no count', 0, undefined, false],
  ] as const)('%s', (_name, offset, knownLength, expected) => {
    expect(fullPassNeedsNoRead(offset, { ...context, knownLength })).toBe(expected);
  });
});

describe('adaptedOverlap and measuredShift', () => {
  it.each([
    [500, 0, 20],
    [500, 1, 22],
    [500, 4, 28],
    [500, -3, 20],
    [50, 30, 49],
    [1, 5, 1],
  ])('a page of %i rows after a shift of %i re-reads %i', (length, shift, overlap) => {
    expect(adaptedOverlap(length, shift)).toBe(overlap);
  });

  it.each([
    ['nothing moved', rows(6, 5), 5, 0],
    ['two left ahead', rows(8, 5), 5, 2],
    ['one joined ahead', rows(5, 5), 5, -1],
    ['none of the previous rows here', rows(20, 5), 5, null],
  ] as const)('%s', (_name, page, offset, shift) => {
    expect(measuredShift(readAt(rows(1, 10), 0), page, offset)).toBe(shift);
  });
});

describe('incrementalStep', () => {
  it.each([
    ['an empty page ends the pass', 0, knowledge(), { kind: 'end', page: undefined }],
    [
      'a full page: read on',
      10,
      knowledge(),
      { kind: 'next', state: { offset: 30 }, page: { offset: 20, nextOffset: 30, continuous: true } },
    ],
    [
      'shorter than a page served before: the end',
      4,
      knowledge({ longestPage: 10 }),
      { kind: 'end', page: { offset: 20, nextOffset: 24 } },
    ],
    ['shorter than the known cap: the end', 4, knowledge({ cap: 8, longestPage: 4 }), { kind: 'end', page: { limit: 8 } }],
    [
      'as long as any page served, no cap known: one more request settles it',
      4,
      knowledge({ longestPage: 3 }),
      { kind: 'next', state: { offset: 24 } },
    ],
    [
      'as long as the known cap: read on',
      8,
      knowledge({ cap: 8, longestPage: 8 }),
      { kind: 'next', state: { offset: 28 }, page: { limit: 8 } },
    ],
  ] as const)('%s', (_name, length, known, expected) => {
    const step = incrementalStep({ offset: 20 }, { rows: rows(1, length) }, known, context);
    expectStep(step, expected);
  });

  it('starts where it is told', () => {
    expect(startIncrementalPass()).toEqual({ offset: 0 });
    expect(startIncrementalPass(40)).toEqual({ offset: 40 });
  });
});

describe('cap knowledge', () => {
  it.each([
    ['a longer page raises the longest page', knowledge({ longestPage: 10 }), 20, knowledge({ longestPage: 20 })],
    ['a shorter page changes nothing', knowledge({ longestPage: 10 }), 5, knowledge({ longestPage: 10 })],
    [
      'a page longer than the cap drops cap and candidate',
      knowledge({ cap: 10, longestPage: 10, candidate: { length: 5, where: 'x' } }),
      12,
      knowledge({ longestPage: 12 }),
    ],
  ] as const)('noteServedPage: %s', (_name, before, length, after) => {
    expect(noteServedPage(before, length)).toEqual(after);
  });

  it('returns the same object when nothing changed', () => {
    const known = knowledge({ longestPage: 10 });
    expect(noteServedPage(known, 10)).toBe(known);
    expect(observeShortPage(known, { length: 5, offset: 0 }, 100, 'l')).toBe(known);
    expect(withKnownCap(known, undefined)).toBe(known);
  });

  it.each([
    ['sets a cap given for certain', knowledge({ longestPage: 10 }), 50, knowledge({ cap: 50, longestPage: 50 })],
    ['keeps a cap already known', knowledge({ cap: 20, longestPage: 20 }), 50, knowledge({ cap: 20, longestPage: 20 })],
  ] as const)('withKnownCap: %s', (_name, before, cap, after) => {
    expect(withKnownCap(before, cap)).toEqual(after);
  });
});

describe('a full pass driven over a list that members leave after every request', () => {
  /** Runs `fullStep` to its end over `size` rows read at `limit`, `perRequest` members already read leaving after each request. */
  function drive(size: number, limit: number, perRequest: number) {
    let list = rows(1, size);
    const seen = new Set<number>();
    let state = startFullPass(0, undefined, limit);
    let known = knowledge();
    let requests = 0;
    let gaps = 0;
    for (;;) {
      const page = list.slice(state.offset, state.offset + limit);
      requests += 1;
      if (requests > 10 * size) throw new Error('the pass does not end');
      const step = fullStep(state, { rows: page }, known, { limit, list: 'l', knownLength: size });
      // A member the pass already read leaves: the first rows of the list, deterministically spread.
      const readUpTo = Math.min(list.length, state.offset + page.length);
      for (let i = 0; i < perRequest && readUpTo - i > 0; i++)
        list = list.filter((_, at) => at !== Math.floor(((i + 1) * readUpTo) / (perRequest + 1)));
      known = step.knowledge;
      if ((step.kind === 'next' || step.kind === 'end') && step.page) {
        for (const r of step.page.rows) seen.add(r.id);
        if (!step.page.continuous) gaps += 1;
      }
      if (step.kind === 'end') break;
      if (step.kind !== 'next' && step.kind !== 'back') throw new Error(`unexpected ${step.kind}`);
      state = step.state;
    }
    // Rows listed from start to end that the pass never emitted: a skip, allowed only where a gap was reported.
    const skipped = list.filter((r) => !seen.has(r.id)).length;
    return { requests, gaps, skipped };
  }

  const quiet = drive(800, 50, 0).requests;
  it.each([1, 2, 4, 8])('%i per request over 800 rows at page 50: ends within 1.5x the quiet pass, skipping nothing', (perRequest) => {
    const moving = drive(800, 50, perRequest);
    expect(moving).toMatchObject({ gaps: 0, skipped: 0 });
    expect(moving.requests).toBeLessThanOrEqual(1.5 * quiet);
  });

  it.each([20, 40])('%i per request (almost a page): still ends, at a bounded cost; a skip only where a gap is reported', (perRequest) => {
    const moving = drive(800, 50, perRequest);
    expect(moving.requests).toBeLessThanOrEqual(2 * quiet);
    if (moving.skipped > 0) expect(moving.gaps).toBeGreaterThan(0);
  });
});

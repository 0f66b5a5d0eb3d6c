/**
 * The sync worker's decision (src/sync/decide.ts) as a table: the job, the facts gathered so far,
 * and what the worker must do (or which fact it must gather next). The worker itself is run against
 * Redis and Postgres in test/integration/sync-worker.test.ts.
 */
import { describe, expect, it } from 'vitest';
import type { AuthPause } from '../../src/sync/auth-pause.js';
import {
  decide,
  decideAfterPass,
  nextProofStep,
  passesToProve,
  type Action,
  type DecisionJob,
  type DecisionState,
} from '../../src/sync/decide.js';

const DUE = Date.parse('2026-11-26T12:00:00Z');
const pause: AuthPause = { until: DUE + 60_000, failures: 1, message: 'HTTP 401 from the legacy API', since: DUE };
const until = new Date(pause.until).toISOString();

type Trigger = DecisionJob['trigger'];
type Mode = DecisionJob['mode'];
const job = (trigger: Trigger, mode: Mode, canWait = true): DecisionJob => ({ trigger, mode, id: 'job-7', dueAt: DUE, canWait });

/** Facts up to and including the lock, as the worker gathers them for each trigger. */
const free = { paused: null, waiting: null } satisfies DecisionState;
const locked = { ...free, locked: true } satisfies DecisionState;
const busy = { ...free, locked: false } satisfies DecisionState;

const rows: Array<[string, DecisionJob, DecisionState, Action]> = [
  // The auth pause comes first for every job.
  ['nothing known yet: read the auth pause', job('schedule', 'incremental'), {}, { kind: 'need', need: 'paused' }],
  [
    'auth paused, manual backfill: fails (it must not report success)',
    job('backfill', 'full'),
    { paused: pause },
    { kind: 'fail', reason: `polling is paused until ${until}: ${pause.message}` },
  ],
  [
    'auth paused, scheduled tick: skipped',
    job('schedule', 'full'),
    { paused: pause },
    { kind: 'skip', reason: `auth paused until ${until}` },
  ],
  ['auth paused, resume: skipped', job('resume', 'full'), { paused: pause }, { kind: 'skip', reason: `auth paused until ${until}` }],
  // Scheduled ticks give way to a backfill or resume waiting for its turn.
  [
    'scheduled tick: read whether someone waits for this group and type',
    job('schedule', 'incremental'),
    { paused: null },
    { kind: 'need', need: 'waiting' },
  ],
  [
    'scheduled tick while a backfill waits: skipped',
    job('schedule', 'incremental'),
    { paused: null, waiting: 'backfill-1' },
    { kind: 'skip', reason: 'a full pass of this group and type (a backfill, a resume or a scheduled one) is waiting for its turn' },
  ],
  [
    'scheduled full pass finding its own mark: goes on to the lock',
    job('schedule', 'full'),
    { paused: null, waiting: 'job-7' },
    { kind: 'need', need: 'lock' },
  ],
  ['scheduled tick, nobody waiting: take the lock', job('schedule', 'incremental'), free, { kind: 'need', need: 'lock' }],
  ['backfill: never reads the waiting mark, takes the lock', job('backfill', 'full'), { paused: null }, { kind: 'need', need: 'lock' }],
  ['resume: takes the lock', job('resume', 'full'), { paused: null }, { kind: 'need', need: 'lock' }],
  // The lock is held by another pass.
  ['scheduled full meets a running pass: read what runs', job('schedule', 'full'), busy, { kind: 'need', need: 'full-pass-running' }],
  [
    'scheduled full meets a running full pass: served by it',
    job('schedule', 'full'),
    { ...busy, fullPassRunning: true },
    { kind: 'skip', reason: 'a full pass of this group and type is running' },
  ],
  [
    'scheduled full that waited, then meets a running full pass: takes its own mark away first',
    job('schedule', 'full'),
    { paused: null, waiting: 'job-7', locked: false, fullPassRunning: true },
    { kind: 'need', need: 'drop-own-mark' },
  ],
  [
    'scheduled full that waited, its mark dropped: served by the running full pass',
    job('schedule', 'full'),
    { paused: null, waiting: 'job-7', locked: false, fullPassRunning: true, ownMarkDropped: true },
    { kind: 'skip', reason: 'a full pass of this group and type is running' },
  ],
  [
    'scheduled full meets a running incremental pass: waits for its turn',
    job('schedule', 'full'),
    { ...busy, fullPassRunning: false },
    { kind: 'wait' },
  ],
  [
    'scheduled full that cannot be put back: skipped',
    job('schedule', 'full', false),
    { ...busy, fullPassRunning: false },
    { kind: 'skip', reason: 'another pass of this group and type is running' },
  ],
  [
    'scheduled incremental meets a running pass: skipped (the next tick comes soon)',
    job('schedule', 'incremental'),
    busy,
    { kind: 'skip', reason: 'another pass of this group and type is running' },
  ],
  ['backfill meets a running pass: waits for its turn', job('backfill', 'full'), busy, { kind: 'wait' }],
  ['resume meets a running pass: waits for its turn', job('resume', 'full'), busy, { kind: 'wait' }],
  [
    'backfill that cannot be put back: skipped',
    job('backfill', 'full', false),
    busy,
    { kind: 'skip', reason: 'another pass of this group and type is running' },
  ],
  // The lock is ours.
  ['backfill with the lock: clear its waiting mark first', job('backfill', 'full'), locked, { kind: 'need', need: 'clear-wanted' }],
  ['backfill with the lock, mark cleared: runs', job('backfill', 'full'), { ...locked, wantedCleared: true }, { kind: 'run' }],
  ['scheduled incremental with the lock: runs (it never marks)', job('schedule', 'incremental'), locked, { kind: 'run' }],
  ['resume with the lock: clear the mark first', job('resume', 'full'), locked, { kind: 'need', need: 'clear-wanted' }],
  [
    'resume, mark cleared: read whether a full pass is still open',
    job('resume', 'full'),
    { ...locked, wantedCleared: true },
    { kind: 'need', need: 'open-full-pass' },
  ],
  [
    'resume, the pass finished meanwhile: skipped',
    job('resume', 'full'),
    { ...locked, wantedCleared: true, openFullPass: false },
    { kind: 'skip', reason: 'no open full pass to resume' },
  ],
  ['resume, the pass is open: runs', job('resume', 'full'), { ...locked, wantedCleared: true, openFullPass: true }, { kind: 'run' }],
  ['scheduled full with the lock: clear the mark first', job('schedule', 'full'), locked, { kind: 'need', need: 'clear-wanted' }],
  [
    'scheduled full, mark cleared: read when a full pass last completed',
    job('schedule', 'full'),
    { ...locked, wantedCleared: true },
    { kind: 'need', need: 'last-full-completed' },
  ],
  [
    'scheduled full after a full pass completed after it was due: served by it',
    job('schedule', 'full'),
    { ...locked, wantedCleared: true, lastFullCompletedAt: DUE + 1 },
    { kind: 'skip', reason: 'a full pass of this group and type completed after this one was due' },
  ],
  [
    'scheduled full, a full pass completed right when it was due: served',
    job('schedule', 'full'),
    { ...locked, wantedCleared: true, lastFullCompletedAt: DUE },
    { kind: 'skip', reason: 'a full pass of this group and type completed after this one was due' },
  ],
  [
    'scheduled full, the last full pass completed before it was due: runs',
    job('schedule', 'full'),
    { ...locked, wantedCleared: true, lastFullCompletedAt: DUE - 1 },
    { kind: 'run' },
  ],
  [
    'scheduled full, no full pass ever completed: runs',
    job('schedule', 'full'),
    { ...locked, wantedCleared: true, lastFullCompletedAt: null },
    { kind: 'run' },
  ],
];

describe('decide', () => {
  it.each(rows)('%s', (_name, pass, state, expected) => {
    expect(decide(pass, state)).toEqual(expected);
  });

  /** Answers every `need` from `facts` until a final action, recording what was asked. */
  function walk(pass: DecisionJob, facts: Required<DecisionState>): { asked: string[]; action: Action } {
    const state: DecisionState = {};
    const asked: string[] = [];
    const field = {
      paused: 'paused',
      waiting: 'waiting',
      lock: 'locked',
      'clear-wanted': 'wantedCleared',
      'drop-own-mark': 'ownMarkDropped',
      'full-pass-running': 'fullPassRunning',
      'open-full-pass': 'openFullPass',
      'last-full-completed': 'lastFullCompletedAt',
    } as const;
    for (let i = 0; i < 20; i++) {
      const action = decide(pass, state);
      if (action.kind !== 'need') return { asked, action };
      asked.push(action.need);
      const key = field[action.need];
      (state as Record<string, unknown>)[key] = facts[key];
    }
    throw new Error('decide kept asking');
  }

  const quiet: Required<DecisionState> = {
    paused: null,
    waiting: null,
    locked: true,
    wantedCleared: true,
    ownMarkDropped: true,
    fullPassRunning: false,
    openFullPass: true,
    lastFullCompletedAt: null,
  };

  it.each([
    ['schedule', 'incremental', ['paused', 'waiting', 'lock']],
    ['schedule', 'full', ['paused', 'waiting', 'lock', 'clear-wanted', 'last-full-completed']],
    ['backfill', 'full', ['paused', 'lock', 'clear-wanted']],
    ['resume', 'full', ['paused', 'lock', 'clear-wanted', 'open-full-pass']],
  ] as const)('a quiet %s %s pass asks only for %j, then runs', (trigger, mode, asked) => {
    expect(walk(job(trigger, mode), quiet)).toEqual({ asked, action: { kind: 'run' } });
  });

  it('a busy scheduled incremental tick reads no sync state', () => {
    expect(walk(job('schedule', 'incremental'), { ...quiet, locked: false })).toEqual({
      asked: ['paused', 'waiting', 'lock'],
      action: { kind: 'skip', reason: 'another pass of this group and type is running' },
    });
  });
});

describe('decideAfterPass: the confirming pass follows a full pass that missed members at once', () => {
  const facts = { awaitingProof: 3, confirmingPasses: 0, maxConfirmingPasses: 3 };
  it.each([
    ['a full pass that missed members: confirm', 'full', facts, { kind: 'confirm' }],
    ['a full pass that missed nobody: done', 'full', { ...facts, awaitingProof: 0 }, { kind: 'done', reason: 'no member awaits proof' }],
    ['an incremental pass: done', 'incremental', facts, { kind: 'done', reason: 'an incremental pass proves no removal' }],
    [
      'confirming passes spent: done',
      'full',
      { ...facts, confirmingPasses: 3 },
      { kind: 'done', reason: 'confirming passes spent; the next full pass goes on' },
    ],
  ] as const)('%s', (_name, mode, given, expected) => {
    expect(decideAfterPass({ mode }, given)).toEqual(expected);
  });
});

describe('passesToProve: every type needs two gap-free full passes that started after the member was last seen', () => {
  const T0 = 1_000;
  it.each([
    ['both passes after: nothing to do', [{ type: 'active', proofStartedAt: T0 + 20, prevProofStartedAt: T0 + 10 }], T0, []],
    [
      'only the last one after: one pass',
      [{ type: 'active', proofStartedAt: T0 + 20, prevProofStartedAt: T0 - 10 }],
      T0,
      [{ type: 'active', passes: 1 }],
    ],
    [
      'none after: two passes',
      [{ type: 'active', proofStartedAt: T0 - 5, prevProofStartedAt: T0 - 10 }],
      T0,
      [{ type: 'active', passes: 2 }],
    ],
    [
      'a pass that started at the very time the member was seen proves nothing',
      [{ type: 'active', proofStartedAt: T0, prevProofStartedAt: null }],
      T0,
      [{ type: 'active', passes: 2 }],
    ],
    ['never seen by a full pass: any two passes prove it', [{ type: 'active', proofStartedAt: 5, prevProofStartedAt: 1 }], null, []],
    [
      "the job's own type first, then the others in order",
      [
        { type: 'bounced', proofStartedAt: null, prevProofStartedAt: null },
        { type: 'active', proofStartedAt: T0 + 1, prevProofStartedAt: T0 - 1 },
        { type: 'junk', proofStartedAt: T0 + 2, prevProofStartedAt: T0 + 1 },
        { type: 'unsubscribed', proofStartedAt: T0 + 1, prevProofStartedAt: T0 - 1 },
      ],
      T0,
      [
        { type: 'active', passes: 1 },
        { type: 'bounced', passes: 2 },
        { type: 'unsubscribed', passes: 1 },
      ],
    ],
  ] as const)('%s', (_name, proofs, lastSeen, expected) => {
    expect(passesToProve(proofs, lastSeen, 'active')).toEqual(expected);
  });
});

describe('nextProofStep: two rounds of confirming passes, the sweep of what changed between them', () => {
  const sweepable = { swept: false, sweptLast: false, canSweep: true };
  it.each([
    ['nothing left to prove, no sweep since the last pass: the sweep a removal waits for', [], sweepable, { kind: 'sweep' }],
    ['nothing left to prove, swept since the last pass: done', [], { swept: true, sweptLast: true, canSweep: true }, null],
    ['nothing left to prove, a source with no date filter: done', [], { swept: false, sweptLast: false, canSweep: false }, null],
    [
      "round one first: the first type that has no pass since (the job's own type has its own pass)",
      [
        { type: 'active', passes: 1 },
        { type: 'unsubscribed', passes: 2 },
        { type: 'bounced', passes: 2 },
      ],
      sweepable,
      { kind: 'pass', type: 'unsubscribed' },
    ],
    [
      'round one done: the sweep before any second pass',
      [
        { type: 'active', passes: 1 },
        { type: 'unsubscribed', passes: 1 },
      ],
      sweepable,
      { kind: 'sweep' },
    ],
    [
      'swept: round two, in order',
      [
        { type: 'active', passes: 1 },
        { type: 'unsubscribed', passes: 1 },
      ],
      { swept: true, sweptLast: true, canSweep: true },
      { kind: 'pass', type: 'active' },
    ],
    [
      'a source with no date filter: round two straight after round one',
      [{ type: 'unsubscribed', passes: 1 }],
      { swept: false, sweptLast: false, canSweep: false },
      { kind: 'pass', type: 'unsubscribed' },
    ],
    [
      'a second-round pass that had gaps: its type runs again, with no second sweep',
      [{ type: 'bounced', passes: 1 }],
      { swept: true, sweptLast: false, canSweep: true },
      { kind: 'pass', type: 'bounced' },
    ],
    ['one type, its own pass done: the sweep, then its confirming pass', [{ type: 'active', passes: 1 }], sweepable, { kind: 'sweep' }],
  ] as const)('%s', (_name, needs, progress, expected) => {
    expect(nextProofStep(needs, progress)).toEqual(expected);
  });

  it('no second pass of any type starts before every type had its first (the order a whole proof takes)', () => {
    const types = ['active', 'unsubscribed', 'bounced', 'junk'] as const;
    const needs = new Map<string, number>([
      ['active', 1],
      ['unsubscribed', 2],
      ['bounced', 2],
      ['junk', 2],
    ]);
    const order: string[] = [];
    const progress = { swept: false, sweptLast: false, canSweep: true };
    for (let i = 0; i < 20; i++) {
      const left = types.filter((t) => (needs.get(t) ?? 0) > 0).map((t) => ({ type: t, passes: needs.get(t) ?? 0 }));
      const step = nextProofStep(left, progress);
      if (!step) break;
      progress.sweptLast = step.kind === 'sweep';
      if (step.kind === 'sweep') {
        progress.swept = true;
        order.push('sweep');
        continue;
      }
      order.push(`${step.type}${3 - (needs.get(step.type) ?? 0)}`);
      needs.set(step.type, (needs.get(step.type) ?? 0) - 1);
    }
    // "active1" is the job's own pass, before the proof began.
    // Members still awaiting after round two (another job's pass came between the sweep and a
    // second pass): one more sweep, then the job is done.
    expect(order).toEqual(['unsubscribed1', 'bounced1', 'junk1', 'sweep', 'active2', 'unsubscribed2', 'bounced2', 'junk2', 'sweep']);
  });
});

import { describe, expect, it } from 'vitest';
import {
  accuracy,
  checkCount,
  classifyRow,
  confirmExtras,
  extraCandidates,
  nextCursor,
  nextOffset,
  pageRange,
  planTick,
  requestsPerHour,
  startOffset,
  nextAllowance,
  pairCost,
  tickBudget,
  tickCost,
  tickEarning,
  type ListedRow,
  type MirrorRow,
  type RowFinding,
} from '../../src/audit/core.js';

const NOW = Date.parse('2026-03-01T12:00:00Z');
const CLOCK = { now: NOW, settleMs: 120_000 };
const OLD = '2026-02-26T08:00:00.000000Z'; // three days before
const OLD_US = '2026-02-26T08:00:00.431000Z'; // the same second, from a webhook
const OLDER = '2026-02-20T08:00:00.000000Z';
const NEWER = '2026-03-01T10:00:00.000000Z'; // two hours before now
const RECENT = '2026-03-01T11:59:30.000000Z'; // 30 s before now

function listed(version: string, values: ListedRow['values'] = {}): ListedRow {
  const all = { email: 'a@example.com', name: 'Ann', status: 'active', sent: 3, fields: { city: 'Oslo' }, updatedAt: version, ...values };
  return { id: '7', version, values: all, provided: new Set(Object.keys(all)) };
}

function mirror(version: string | null, values: ListedRow['values'] = {}, membership: MirrorRow['membership'] = live()): MirrorRow {
  if (version === null) return { version: null, values: null, membership };
  return {
    version,
    values: {
      email: 'a@example.com',
      name: 'Ann',
      status: 'active',
      sent: 3,
      fields: { city: 'Oslo', extra: 'kept' },
      updatedAt: version,
      ...values,
    },
    membership,
  };
}

function live(type = 'active', factAt: string | null = OLDER): MirrorRow['membership'] {
  return { type, removed: false, factAt };
}

describe('audit core: one listed row against the mirror', () => {
  const cases: Array<[string, ListedRow, MirrorRow, RowFinding['kind'], string[]?]> = [
    ['identical', listed(OLD), mirror(OLD), 'match'],
    ['identical, the mirror has the webhook µs of the same second', listed(OLD), mirror(OLD_US), 'match'],
    ['a key only the mirror has does not count', listed(OLD), mirror(OLD), 'match'],
    ['renamed without a new stamp', listed(OLD, { name: 'Bea' }), mirror(OLD), 'content', ['name']],
    [
      'email changed without a new stamp, mirror row from a webhook',
      listed(OLD, { email: 'b@example.com' }),
      mirror(OLD_US),
      'content',
      ['email'],
    ],
    ['a field changed without a new stamp', listed(OLD, { fields: { city: 'Bergen' } }), mirror(OLD), 'content', ['fields']],
    ['newer stamp upstream: in flight', listed(NEWER, { name: 'Bea' }), mirror(OLD), 'in-flight', ['name', 'updatedAt']],
    ['newer stamp in the mirror: it is ahead', listed(OLD, { name: 'Old name' }), mirror(NEWER), 'match'],
    ['same second within the settle window: in flight', listed(RECENT, { name: 'Bea' }), mirror(RECENT), 'in-flight', ['name']],
    ['unknown subscriber with an old stamp: missing', listed(OLD), mirror(null, {}, null), 'missing'],
    ['unknown subscriber with a recent stamp: in flight', listed(RECENT), mirror(null, {}, null), 'in-flight'],
    ['known subscriber, no membership here, old stamp (joined unstamped)', listed(OLD), mirror(OLD, {}, null), 'missing'],
    ['membership ended by an older fact', listed(OLD), mirror(OLD, {}, { type: 'active', removed: true, factAt: OLDER }), 'missing'],
    [
      'membership ended by a newer fact: the mirror is ahead',
      listed(OLD),
      mirror(OLD, {}, { type: 'active', removed: true, factAt: NEWER }),
      'match',
    ],
    [
      'listed under another type by an older fact, the mirror holds the old status: an unstamped type change',
      listed(OLD),
      mirror(OLD, { status: 'bounced' }, live('bounced', OLDER)),
      'missing',
    ],
    [
      'listed under another type, the mirror already holds the listed status (a status event; the type follows at the next pass)',
      listed(OLD),
      mirror(OLD, {}, live('bounced', OLDER)),
      'in-flight',
      [],
    ],
    [
      'the same, renamed without a new stamp as well',
      listed(OLD, { name: 'Bea' }),
      mirror(OLD, {}, live('bounced', OLDER)),
      'content',
      ['name'],
    ],
    ['listed under another type, newer fact', listed(OLD), mirror(OLD, {}, live('bounced', NEWER)), 'match'],
  ];
  it.each(cases)('%s', (_name, row, held, kind, fields) => {
    const finding = classifyRow(row, held, 'active', CLOCK);
    expect(finding.kind).toBe(kind);
    if (fields) expect('fields' in finding ? finding.fields : []).toEqual(fields);
  });

  it('an in-flight row is overdue only when its stamp is older than the settle window', () => {
    expect(classifyRow(listed(NEWER), mirror(OLD), 'active', CLOCK)).toMatchObject({ kind: 'in-flight', overdue: true });
    expect(classifyRow(listed(RECENT), mirror(OLD), 'active', CLOCK)).toMatchObject({ kind: 'in-flight', overdue: false });
  });
});

describe('audit core: counts', () => {
  const cases: Array<[string, number, { certain: number; uncertain: number }, boolean, number]> = [
    ['equal', 100, { certain: 100, uncertain: 0 }, true, 0],
    ['three removed without a stamp', 97, { certain: 100, uncertain: 0 }, false, -3],
    ['one joined without a stamp', 101, { certain: 100, uncertain: 0 }, false, 1],
    ['recent joins explain a higher count', 103, { certain: 100, uncertain: 4 }, true, 0],
    ['recent changes cannot explain more than their number', 106, { certain: 100, uncertain: 4 }, false, 2],
    ['recent leavers were never counted as certain', 100, { certain: 100, uncertain: 3 }, true, 0],
  ];
  it.each(cases)('%s', (_name, service, held, explained, gap) => {
    expect(checkCount(service, held)).toEqual({ explained, gap });
  });
});

describe('audit core: extras of a cursor page', () => {
  it('the range a page covers', () => {
    expect(pageRange(null, ['3', '5', '9'], false)).toEqual({ after: null, upTo: '9' });
    expect(pageRange('9', ['12', '100'], true)).toEqual({ after: '9', upTo: null });
    expect(pageRange('9', [], true)).toEqual({ after: '9', upTo: null });
    // Not ascending, or not after the previous page: no range, no extras inferred.
    expect(pageRange(null, ['5', '3'], false)).toBeNull();
    expect(pageRange('9', ['4', '12'], false)).toBeNull();
    expect(pageRange(null, [], false)).toBeNull();
    // Numeric order beyond 2^53.
    expect(pageRange(null, ['999', '1261159647788771324'], false)).toEqual({ after: null, upTo: '1261159647788771324' });
  });

  it('candidates are mirror members in the range the page did not list', () => {
    expect(extraCandidates(['3', '5', '9'], ['3', '4', '5', '9'])).toEqual(['4']);
    expect(extraCandidates([], [])).toEqual([]);
  });

  it('a candidate is confirmed only when still live with no newer fact, and not moving to another type', () => {
    const pending = [
      { id: 'a', factAt: OLD },
      { id: 'b', factAt: OLD },
      { id: 'c', factAt: OLD },
      { id: 'd', factAt: OLD },
      { id: 'e', factAt: OLD },
    ];
    const now = new Map([
      ['a', { live: true, factAt: OLD, moving: false }],
      ['b', { live: false, factAt: NEWER, moving: false }],
      ['c', { live: true, factAt: NEWER, moving: false }],
      // Its status changed (a webhook updated the subscriber); its membership's type follows at the type's next pass.
      ['e', { live: true, factAt: OLD, moving: true }],
    ]);
    expect(confirmExtras(pending, now)).toEqual(['a']);
  });
});

describe('audit core: where the sample reads next', () => {
  const offsets: Array<[number, number, number, number, number]> = [
    [0, 100, 100, 450, 100],
    [400, 50, 100, 450, 0],
    [300, 100, 100, 400, 0],
    [100, 0, 100, 450, 0],
  ];
  it.each(offsets)('offset %i, %i rows of limit %i, count %i → %i', (offset, rows, limit, count, next) => {
    expect(nextOffset(offset, rows, limit, count)).toBe(next);
  });

  it('a saved offset past a list that shrank starts over', () => {
    expect(startOffset(500, 450)).toBe(0);
    expect(startOffset(400, 450)).toBe(400);
  });

  it('the cursor walks on and wraps at the end of the list', () => {
    expect(nextCursor({ nextCursor: 'c2', ids: ['1', '2'] })).toEqual({ cursor: 'c2', afterId: '2' });
    expect(nextCursor({ nextCursor: null, ids: ['3'] })).toEqual({ cursor: null, afterId: null });
  });
});

describe('audit core: budget', () => {
  it('5 % of the budget per tick at the defaults', () => {
    expect(tickBudget(60, 15 * 60_000)).toBe(45);
    expect(tickBudget(120, 15 * 60_000)).toBe(90);
    expect(tickBudget(60, 5_000)).toBe(0);
  });

  it('a short period carries its allowance over: a pair every few ticks, never more than the share on average', () => {
    // 60 a minute, a 2 s period: 0.1 request per tick; a legacy pair costs 2.
    const earning = tickEarning(60, 2_000);
    const wholeTick = tickCost(1, 1, 'legacy');
    let allowance = 0;
    let spent = 0;
    const auditedAt: number[] = [];
    for (let tick = 1; tick <= 200; tick++) {
      allowance = nextAllowance(allowance, earning, wholeTick);
      const planned = planTick([{ groupId: 'g' }], 'legacy', allowance, 0);
      const requests = planned.length * pairCost('legacy');
      allowance -= requests;
      spent += requests;
      if (requests > 0) auditedAt.push(tick);
    }
    expect(auditedAt[0]).toBe(20);
    expect(auditedAt).toHaveLength(10);
    expect(spent).toBeLessThanOrEqual(200 * earning + 1e-9);
  });

  it('idle ticks save up at most one whole tick (no burst after a pause)', () => {
    let allowance = 0;
    for (let i = 0; i < 1_000; i++) allowance = nextAllowance(allowance, 45, 11);
    expect(allowance).toBe(45);
    allowance = 0;
    for (let i = 0; i < 1_000; i++) allowance = nextAllowance(allowance, 0.5, 11);
    expect(allowance).toBe(11);
  });

  it('plans as many pairs as fit, rotating so every pair gets its turn', () => {
    const pairs = ['a', 'b', 'c'].flatMap((g) => ['active', 'junk'].map((type) => ({ groupId: g, type })));
    expect(planTick(pairs, 'legacy', 45, 0, 1)).toHaveLength(6);
    expect(planTick(pairs, 'legacy', 5, 0, 1).map((p) => `${p.groupId}/${p.type}`)).toEqual(['a/active', 'a/junk']);
    expect(planTick(pairs, 'legacy', 5, 2, 1).map((p) => `${p.groupId}/${p.type}`)).toEqual(['b/active', 'b/junk']);
    // Current: the group's counts cost one request more.
    expect(planTick(pairs, 'current', 5, 0).map((p) => `${p.groupId}/${p.type}`)).toEqual(['a/active', 'a/junk', 'b/active']);
  });

  it('requests per hour at the defaults stay under 5 % of the budget', () => {
    // One group of five types, every 15 min, with the webhook read.
    expect(requestsPerHour(1, 5, 'legacy', 15 * 60_000)).toBe(44);
    expect(requestsPerHour(1, 5, 'legacy', 15 * 60_000) / 3600).toBeLessThan(0.05);
    expect(requestsPerHour(1, 5, 'current', 15 * 60_000)).toBe(28);
    expect(requestsPerHour(1, 5, 'current', 15 * 60_000) / 7200).toBeLessThan(0.05);
  });

  it('accuracy is the share of checked rows that matched', () => {
    expect(accuracy(0, 0)).toBeNull();
    expect(accuracy(200, 5)).toBeCloseTo(0.975);
  });
});

/**
 * The consumer's pure parts: the per-kind effect table, planning a delivery, membership rounds,
 * merging reference rows, batch waves and error classes. No I/O; the consumer against Postgres is
 * the integration tests consumer.test.ts and consumer.batch.test.ts.
 */
import { describe, expect, test } from 'vitest';
import { NormalizeError } from '../../src/mirror/normalize.js';
import { EFFECTS, membershipRounds, mergeById, planDelivery, type MembershipFact } from '../../src/webhooks/apply.js';
import { isPermanent } from '../../src/webhooks/apply-job.js';
import { mergePlans, wavesOf } from '../../src/webhooks/apply-batch.js';
import { EVENT_KINDS, EVENT_REGISTRY, parseDelivery, PayloadError, type EventKind } from '../../src/webhooks/payloads.js';
import { fixture, loadFixtures } from '../fixtures/webhooks/index.js';
import { webhookSubscriber } from '../fixtures/mirror/rows.js';

describe('EFFECTS', () => {
  test('has exactly one entry per event kind of the registry', () => {
    expect(Object.keys(EFFECTS).sort()).toEqual([...EVENT_KINDS].sort());
  });
});

describe('planDelivery', () => {
  test.each(loadFixtures().map((f) => [f.name, f] as const))('%s', (_name, f) => {
    const events = parseDelivery(JSON.parse(f.body)).events;
    const plan = planDelivery(events, '77');
    const carriesSubscriber = (EVENT_REGISTRY[f.kind].carries as readonly string[]).includes('subscriber');
    const n = events.length;

    // Every event that concerns a subscriber: one subscriber version and one activity row.
    expect(plan.subscribers).toHaveLength(carriesSubscriber ? n : 0);
    expect(plan.subscribers.every((r) => r.via === 'webhook')).toBe(true);
    expect(plan.activity).toHaveLength(carriesSubscriber ? n : 0);
    plan.activity.forEach((a, i) => {
      const row = plan.subscribers[i]!;
      expect(a).toMatchObject({ kind: f.kind, subscriberId: row.values.id, subscriberUpdatedAt: row.values.updatedAt, deliveryId: '77' });
    });

    const expectCount: Record<string, (kind: EventKind) => number> = {
      groups: (k) => (k === 'subscriber.added_to_group' || k === 'subscriber.removed_from_group' ? n : 0),
      memberships: (k) => (k === 'subscriber.added_to_group' || k === 'subscriber.removed_from_group' ? n : 0),
      automations: (k) => (k.startsWith('subscriber.automation_') ? n : 0),
      campaigns: (k) => (k.startsWith('campaign.') ? n : 0),
      tombstones: (k) => (k === 'subscriber.deleted' ? n : 0),
    };
    for (const [part, count] of Object.entries(expectCount)) {
      expect(plan[part as keyof typeof plan], part).toHaveLength(count(f.kind));
    }
    for (const c of plan.campaigns) expect(c.sentAt).toBe(f.kind === 'campaign.sent' ? c.date : null);
    for (const m of plan.memberships) {
      expect(m.op).toBe(f.kind === 'subscriber.added_to_group' ? 'add' : 'remove');
      expect(m.type).toBe(f.kind === 'subscriber.added_to_group' ? 'active' : null);
    }
    plan.activity.forEach((a, i) => {
      const e = events[i]!;
      expect(a.groupId ?? null).toBe('group' in e ? e.group.id : null);
      expect(a.automationId ?? null).toBe('automation' in e ? e.automation.id : null);
      expect(a.campaignId ?? null).toBe('campaign' in e ? e.campaign.id : null);
      expect(a.linkUrl ?? null).toBe('linkUrl' in e ? e.linkUrl : null);
    });
  });

  test('membership facts and tombstones are timed by the subscriber version in the event', () => {
    const events = parseDelivery(JSON.parse(fixture('subscriber.deleted', 'nested').body)).events;
    const plan = planDelivery(events);
    expect(plan.tombstones).toEqual([{ subscriberId: '117300118392080373', at: '2024-06-21T16:40:00.123456Z' }]);
    expect(plan.activity[0]?.deliveryId).toBeNull();
  });

  test('a subscriber without updated_at falls back to created_at for every effect', () => {
    const subscriber = webhookSubscriber({ id: '9', updated_at: null, created_at: '2024-01-02T03:04:05.000000Z' });
    const body = { type: 'subscriber.added_to_group', subscriber, group: { id: '3', name: 'G' } };
    const plan = planDelivery(parseDelivery(body).events);
    expect(plan.memberships[0]?.at).toBe('2024-01-02T03:04:05.000000Z');
    expect(plan.activity[0]?.subscriberUpdatedAt).toBe('2024-01-02T03:04:05.000000Z');
  });

  test('an object that cannot be mirrored fails the delivery as a whole, already at parse time (one validation layer)', () => {
    const subscriber = webhookSubscriber({ id: '9', sent: 2 ** 40 });
    expect(() => parseDelivery({ event: 'subscriber.updated', ...subscriber })).toThrow(PayloadError);
    expect(() => parseDelivery({ event: 'subscriber.updated', ...subscriber })).toThrow(/sent: expected a 32-bit integer/);
  });
});

function fact(op: MembershipFact['op'], subscriberId: string, at: string, index: number, groupId = 'g'): MembershipFact {
  return { op, groupId, subscriberId, type: op === 'add' ? 'active' : null, at, index };
}

describe('membershipRounds', () => {
  test('one fact per member is one round', () => {
    const facts = [fact('add', '1', 't2', 0), fact('remove', '2', 't1', 1), fact('add', '1', 't1', 2, 'h')];
    expect(membershipRounds(facts)).toEqual([facts]);
  });

  test('facts of one member go to successive rounds in upstream order, ties by position', () => {
    const a = fact('add', '1', 't3', 0);
    const b = fact('remove', '1', 't1', 1);
    const c = fact('add', '1', 't1', 2);
    const other = fact('add', '2', 't9', 3);
    expect(membershipRounds([a, b, c, other])).toEqual([[b, other], [c], [a]]);
  });
});

describe('mergeById', () => {
  test('one row per id, later non-null values win, sorted by id', () => {
    const rows = [
      { id: '2', name: 'sent', sentAt: 'T', date: null as string | null },
      { id: '1', name: 'x', sentAt: null, date: null },
      { id: '2', name: 'renamed', sentAt: null, date: 'D' },
    ];
    expect(mergeById(rows)).toEqual([
      { id: '1', name: 'x', sentAt: null, date: null },
      { id: '2', name: 'renamed', sentAt: 'T', date: 'D' },
    ]);
  });
});

describe('batches', () => {
  const d = (id: string, version: string, subscribers: string[]) => ({ id, version, subscribers });

  test("a wave never holds two deliveries of one subscriber; each subscriber's deliveries go in version order", () => {
    const waves = wavesOf([d('1', 'T3', ['a']), d('2', 'T1', ['a']), d('3', 'T2', ['b']), d('4', 'T2', ['a', 'b']), d('5', '', [])]);
    expect(waves.map((w) => w.map((x) => x.id))).toEqual([['5', '2', '3'], ['4'], ['1']]);
  });

  test('equal versions keep the order they were claimed in', () => {
    expect(wavesOf([d('1', 'T', ['a']), d('2', 'T', ['a']), d('3', 'T', ['b'])]).map((w) => w.map((x) => x.id))).toEqual([
      ['1', '3'],
      ['2'],
    ]);
  });

  test('merged plans hold every row of every plan, in plan order', () => {
    const [a, b] = [
      planDelivery(parseDelivery(JSON.parse(fixture('subscriber.created', 'flat').body)).events, '1'),
      planDelivery(parseDelivery(JSON.parse(fixture('campaign.open', 'batched').body)).events, '2'),
    ];
    const merged = mergePlans([a, b]);
    for (const key of Object.keys(merged) as Array<keyof typeof merged>) expect(merged[key]).toEqual([...a[key], ...b[key]]);
  });
});

describe('errors', () => {
  test('only errors a retry cannot fix are permanent', () => {
    expect(isPermanent(new PayloadError('bad'))).toBe(true);
    expect(isPermanent(new NormalizeError('id', 'missing'))).toBe(true);
    expect(isPermanent(Object.assign(new Error('value too long'), { code: '22001' }))).toBe(true);
    expect(isPermanent(Object.assign(new Error('not null'), { code: '23502' }))).toBe(true);
    expect(isPermanent(Object.assign(new Error('deadlock detected'), { code: '40P01' }))).toBe(false);
    expect(isPermanent(Object.assign(new Error('terminating connection'), { code: '57P01' }))).toBe(false);
    expect(isPermanent(new Error('connect ECONNREFUSED'))).toBe(false);
    expect(isPermanent(new TypeError('bug'))).toBe(false);
  });
});

import { describe, expect, it } from 'vitest';
import { Churn } from '../../src/simulator/churn.js';
import { SUBSCRIBER_TYPES } from '../../src/simulator/kinds.js';
import type { EventKind, SubscriberType, WorldEvent } from '../../src/simulator/kinds.js';
import { parseIsoMicros } from '../../src/simulator/time.js';
import { World } from '../../src/simulator/world.js';
import type { SubscriberView } from '../../src/simulator/world.js';
import { waitFor } from '../helpers/wait.js';

const T0 = Date.UTC(2024, 5, 1, 12, 0, 0);
const HOUR = 3_600_000;

function fixedClock(start = T0): { clock: () => number; advance: (ms: number) => void; set: (ms: number) => void } {
  let now = start;
  return { clock: () => now, advance: (ms) => (now += ms), set: (ms) => (now = ms) };
}

describe('simulator world: seeding', () => {
  it('is deterministic for a seed and clock, and differs across seeds', () => {
    const render = (seed: number) => {
      const world = new World({ subscribers: 500, groups: 3, seed, clock: () => T0 });
      return [...world.ids()].map((id) => world.renderLegacyJson(id) + JSON.stringify(world.renderWebhook(id)));
    };
    expect(render(9)).toEqual(render(9));
    expect(render(9)).not.toEqual(render(10));
  });

  it('puts all five types in every group', () => {
    const world = new World({ subscribers: 10_000, groups: 4, seed: 3 });
    for (const groupId of world.groupIds()) {
      for (const type of SUBSCRIBER_TYPES) expect(world.memberCount(groupId, type), `${groupId}/${type}`).toBeGreaterThan(0);
    }
    expect(world.count()).toBe(10_000);
  });

  it('covers every (group, type) pair even in a tiny world', () => {
    const world = new World({ subscribers: 15, groups: 3 });
    for (const groupId of world.groupIds()) {
      expect(new Set(world.members(groupId).map((id) => world.membership(groupId, id)?.type))).toEqual(new Set(SUBSCRIBER_TYPES));
    }
  });

  it('issues ids above 2^53 with largeIds and finds subscribers by them', () => {
    const world = new World({ subscribers: 2_000, largeIds: true });
    const ids = [...world.ids()];
    expect(new Set(ids).size).toBe(ids.length);
    for (const id of ids) {
      expect(BigInt(id) > 2n ** 53n).toBe(true);
      expect(world.subscriber(id)?.id).toBe(id);
    }
    for (const groupId of world.groupIds()) expect(BigInt(groupId) > 2n ** 53n).toBe(true);
    const last = ids.at(-1) ?? '';
    expect(world.subscriber((BigInt(last) + 1n).toString())).toBeUndefined();
    expect(world.subscriber('12')).toBeUndefined();
    expect(world.subscriber('not-a-number')).toBeUndefined();
  });

  it('keeps seeded timestamps consistent', () => {
    const world = new World({ subscribers: 3_000, clock: () => T0 });
    for (const s of world.subscribers()) {
      expect(s.createdAtUs).toBeLessThanOrEqual(s.updatedAtUs);
      expect(s.updatedAtUs).toBeLessThanOrEqual(T0 * 1000);
      if (s.subscribedAtUs !== null) expect(s.subscribedAtUs).toBeLessThanOrEqual(s.updatedAtUs);
      expect(s.unsubscribedAtUs !== null).toBe(s.status === 'unsubscribed');
      expect(s.subscribedAtUs === null).toBe(s.status === 'unconfirmed');
    }
  });

  // How long seeding takes is a benchmark figure (`npm run bench -- memory` reports the seed time of
  // its 100k and 1M worlds), not an assertion that a loaded machine could break.
  it('seeds 10,000 and 1,000,000 subscribers', () => {
    expect(new World({ subscribers: 10_000, groups: 3 }).size).toBe(10_000);
    const big = new World({ subscribers: 1_000_000, groups: 3, largeIds: true });
    expect(big.size).toBe(1_000_000);
  }, 60_000);
});

type Case = {
  name: string;
  status?: SubscriberType;
  act: (world: World, id: string) => WorldEvent[];
  kinds: EventKind[];
  check?: (view: SubscriberView, world: World) => void;
};

const cases: Case[] = [
  {
    name: 'updateFields',
    act: (w, id) => w.updateFields(id, { city: 'Kaunas', email: 'x@example.org' }),
    kinds: ['subscriber.updated'],
    check: (v) => {
      expect(v.fields.city).toBe('Kaunas');
      expect(v.email).toBe('x@example.org');
    },
  },
  {
    name: 'unsubscribe',
    act: (w, id) => w.unsubscribe(id),
    kinds: ['subscriber.unsubscribed'],
    check: (v) => {
      expect(v.status).toBe('unsubscribed');
      expect(v.unsubscribedAtUs).toBe(v.updatedAtUs);
    },
  },
  { name: 'bounce', act: (w, id) => w.bounce(id), kinds: ['subscriber.bounced'], check: (v) => expect(v.status).toBe('bounced') },
  { name: 'markJunk', act: (w, id) => w.markJunk(id), kinds: ['subscriber.spam_reported'], check: (v) => expect(v.status).toBe('junk') },
  {
    name: 'markUnconfirmed',
    act: (w, id) => w.markUnconfirmed(id),
    kinds: ['subscriber.updated'],
    check: (v) => expect(v.status).toBe('unconfirmed'),
  },
  {
    name: 'activate (unsubscribed)',
    status: 'unsubscribed',
    act: (w, id) => w.activate(id),
    kinds: ['subscriber.active'],
    check: (v) => expect(v.status).toBe('active'),
  },
  {
    name: 'activate (unconfirmed = confirm)',
    status: 'unconfirmed',
    act: (w, id) => w.activate(id),
    kinds: ['subscriber.updated', 'subscriber.active'],
    check: (v) => {
      expect(v.status).toBe('active');
      expect(v.optedInAtUs).toBe(v.updatedAtUs);
    },
  },
  {
    name: 'addToGroup',
    act: (w, id) => w.addToGroup(id, w.groupIds()[1] ?? ''),
    kinds: ['subscriber.added_to_group'],
    check: (v, w) => expect(v.groups).toEqual(w.groupIds().slice(0, 2)),
  },
  {
    name: 'removeFromGroup',
    act: (w, id) => w.removeFromGroup(id, w.groupIds()[0] ?? ''),
    kinds: ['subscriber.removed_from_group'],
    check: (v) => expect(v.groups).toEqual([]),
  },
  {
    name: 'deleteSubscriber',
    act: (w, id) => w.deleteSubscriber(id),
    kinds: ['subscriber.deleted'],
    check: (v) => {
      expect(v.deleted).toBe(true);
      expect(v.deletedAtUs).toBe(v.updatedAtUs);
    },
  },
  {
    name: 'forget',
    act: (w, id) => w.forget(id),
    kinds: ['subscriber.deleted'],
    check: (v) => {
      expect(v.forgotten).toBe(true);
      expect(v.forgetAtUs).toBe(v.updatedAtUs);
      expect(v.email).toBe('');
    },
  },
  { name: 'triggerAutomation', act: (w, id) => w.triggerAutomation(id), kinds: ['subscriber.automation_triggered'] },
  { name: 'completeAutomation', act: (w, id) => w.completeAutomation(id), kinds: ['subscriber.automation_completed'] },
  { name: 'open', act: (w, id) => w.open(id), kinds: ['campaign.open'], check: (v) => expect(v.opensCount).toBe(1) },
  {
    name: 'click',
    act: (w, id) => w.click(id, { url: 'https://example.com/x' }),
    kinds: ['campaign.click'],
    check: (v) => expect(v.clicksCount).toBe(1),
  },
];

describe('simulator world: mutations', () => {
  it.each(cases)('$name bumps updated_at and emits $kinds with the changed subscriber', ({ status, act, kinds, check }) => {
    const time = fixedClock();
    const world = new World({ subscribers: 10, groups: 2, clock: time.clock });
    const id = world.createSubscriber({ groups: [world.groupIds()[0] ?? ''], status: status ?? 'active' });
    const before = world.subscriber(id)?.updatedAtUs ?? 0;
    time.advance(HOUR);
    const events = act(world, id);
    const after = world.subscriber(id);
    if (!after) throw new Error('subscriber vanished');
    expect(after.updatedAtUs).toBe((T0 + HOUR) * 1000);
    expect(after.updatedAtUs).toBeGreaterThan(before);
    expect(events.map((e) => e.kind)).toEqual(kinds);
    for (const event of events) {
      expect(event.subscriber).toEqual(world.renderWebhook(id));
      expect(event.atUs).toBe(after.updatedAtUs);
      expect(parseIsoMicros(event.subscriber?.updated_at ?? '')).toBe(after.updatedAtUs);
    }
    expect(world.events.slice(-kinds.length)).toEqual(events);
    check?.(after, world);
  });

  it('creates with subscriber.created then one added_to_group per group', () => {
    const world = new World({ subscribers: 0, groups: 2 });
    const id = world.createSubscriber({ groups: world.groupIds(), fields: { name: 'Zed' } });
    expect(world.events.map((e) => [e.kind, e.group?.id])).toEqual([
      ['subscriber.created', undefined],
      ['subscriber.added_to_group', world.groupIds()[0]],
      ['subscriber.added_to_group', world.groupIds()[1]],
    ]);
    expect(world.subscriber(id)?.fields.name).toBe('Zed');
    expect(world.members(world.groupIds()[1] ?? '')).toEqual([id]);
  });

  it('ignores no-op changes without stamping or emitting', () => {
    const world = new World({ subscribers: 0, groups: 1 });
    const id = world.createSubscriber({ status: 'unsubscribed', groups: world.groupIds() });
    const stamp = world.subscriber(id)?.updatedAtUs;
    expect(world.unsubscribe(id)).toEqual([]);
    expect(world.addToGroup(id, world.groupIds()[0] ?? '')).toEqual([]);
    expect(world.subscriber(id)?.updatedAtUs).toBe(stamp);
  });

  it('never repeats or reverses a stamp when the clock stands still', () => {
    const world = new World({ subscribers: 0, groups: 1, clock: () => T0 });
    const id = world.createSubscriber();
    const stamps = [world.subscriber(id)?.updatedAtUs ?? 0];
    for (let i = 0; i < 5; i++) {
      world.updateFields(id, { zip: String(i) });
      stamps.push(world.subscriber(id)?.updatedAtUs ?? 0);
    }
    for (let i = 1; i < stamps.length; i++) expect(stamps[i]).toBeGreaterThan(stamps[i - 1] ?? Infinity);
  });

  it('follows a test clock across days', () => {
    const time = fixedClock();
    const world = new World({ subscribers: 0, groups: 1, clock: time.clock, timezone: '+14:00' });
    const id = world.createSubscriber();
    time.advance(2 * 24 * HOUR + 1_500);
    world.updateFields(id, { city: 'Tarawa' });
    expect(world.subscriber(id)?.updatedAtUs).toBe((T0 + 2 * 24 * HOUR + 1_500) * 1000);
    // 2024-06-03 12:00:01.5 UTC is 2024-06-04 02:00:01 at +14:00, whole seconds.
    expect(world.renderLegacy(id).date_updated).toBe('2024-06-04 02:00:01');
    expect(world.renderWebhook(id).updated_at).toBe('2024-06-03T12:00:01.500000Z');
  });

  it('sends a campaign to active members only and reports it as campaign.sent', () => {
    const time = fixedClock();
    const world = new World({ subscribers: 0, groups: 2, clock: time.clock });
    const [g1, g2] = world.groupIds();
    const active = world.createSubscriber({ groups: [g1 ?? ''] });
    const unsubscribed = world.createSubscriber({ groups: [g1 ?? ''], status: 'unsubscribed' });
    const elsewhere = world.createSubscriber({ groups: [g2 ?? ''] });
    time.advance(HOUR);
    const campaign = world.sendCampaign({ groupIds: [g1 ?? ''], name: 'June' });
    expect(campaign.total_recipients).toBe(1);
    expect(world.subscriber(active)?.sent).toBe(1);
    expect(world.subscriber(active)?.updatedAtUs).toBe((T0 + HOUR) * 1000);
    expect(world.subscriber(unsubscribed)?.sent).toBe(0);
    expect(world.subscriber(elsewhere)?.sent).toBe(0);
    const event = world.events.at(-1);
    expect(event?.kind).toBe('campaign.sent');
    expect(event?.campaign).toEqual(campaign);
    expect(event?.subscriber).toBeNull();
    expect(world.open(active).at(0)?.campaign?.id).toBe(campaign.id);
  });

  it('refuses to mutate deleted or unknown subscribers', () => {
    const world = new World({ subscribers: 0, groups: 1 });
    const id = world.createSubscriber();
    world.deleteSubscriber(id);
    expect(() => world.updateFields(id, { city: 'x' })).toThrow(/deleted/);
    expect(() => world.unsubscribe('999')).toThrow(/unknown subscriber/);
    expect(() => world.addToGroup(id, 'nope')).toThrow();
  });
});

describe('simulator world: reading', () => {
  it('drops deleted subscribers from lists and erases forgotten ones', () => {
    const world = new World({ subscribers: 50, groups: 1 });
    const groupId = world.groupIds()[0] ?? '';
    const [deleted, forgotten] = world.members(groupId);
    world.deleteSubscriber(deleted ?? '');
    world.forget(forgotten ?? '');
    const listed = world.members(groupId);
    expect(listed).not.toContain(deleted);
    expect(listed).not.toContain(forgotten);
    expect(world.membership(groupId, deleted ?? '')).toBeUndefined();
    expect(world.count()).toBe(48);
    const erased = world.renderWebhook(forgotten ?? '');
    expect(erased.email).toBe('');
    expect(Object.values(erased.fields).every((v) => v === '')).toBe(true);
    expect(erased.ip_address).toBeNull();
    expect(erased.forget_at).not.toBeNull();
    expect(erased.deleted_at).not.toBeNull();
    expect(world.renderLegacy(forgotten ?? '').fields.every((f) => f.value === '')).toBe(true);
    expect(world.subscriber(deleted ?? '')?.email).not.toBe('');
  });

  it('lists members in a stable order that is not sorted by id', () => {
    const world = new World({ subscribers: 500, groups: 1 });
    const groupId = world.groupIds()[0] ?? '';
    const order = world.members(groupId);
    expect(world.members(groupId)).toEqual(order);
    const sorted = [...order].sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : 1));
    expect(order).not.toEqual(sorted);
    const added = world.createSubscriber({ groups: [groupId] });
    const next = world.members(groupId);
    expect(next.filter((id) => id !== added)).toEqual(order);
  });

  it('renders both shapes from the same state', () => {
    const world = new World({ subscribers: 20, groups: 1, timezone: 'UTC' });
    for (const id of world.ids()) {
      const legacy = world.renderLegacy(id);
      const hook = world.renderWebhook(id);
      expect(legacy.id).toBe(hook.id);
      expect(legacy.email).toBe(hook.email);
      expect(legacy.type).toBe(hook.status);
      expect(legacy.sent).toBe(hook.sent);
      expect(legacy.name).toBe(hook.fields.name);
      expect(legacy.date_updated).toBe(hook.updated_at.slice(0, 19).replace('T', ' '));
      expect(legacy.date_created).toBe(hook.created_at.slice(0, 19).replace('T', ' '));
      expect(legacy.fields.map((f) => f.key)).toEqual([
        'email',
        'name',
        'last_name',
        'company',
        'country',
        'city',
        'phone',
        'state',
        'zip',
      ]);
      expect(world.renderLegacyJson(id)).toMatch(new RegExp(`^\\{"id":${id},"name":`));
    }
  });

  it('keeps only the most recent events when a log limit is set', () => {
    const world = new World({ subscribers: 0, groups: 1, eventLogLimit: 10 });
    for (let i = 0; i < 50; i++) world.createSubscriber();
    expect(world.events.length).toBeLessThanOrEqual(11);
    expect(world.events.at(-1)?.seq).toBe(50);
  });
});

describe('simulator churn', () => {
  it('applies the same random mutations for the same seed', () => {
    const run = () => {
      const world = new World({ subscribers: 200, groups: 3, seed: 5, clock: () => T0 });
      const names = new Churn(world, 5).step(300);
      return { names, state: [...world.ids({ includeDeleted: true })].map((id) => world.renderLegacyJson(id)) };
    };
    const a = run();
    expect(run()).toEqual(a);
    expect(new Set(a.names).size).toBeGreaterThan(10);
  });

  it('applies mutations at a rate over wall time', async () => {
    const world = new World({ subscribers: 100, groups: 2 });
    const churn = new Churn(world, 1);
    churn.setRate(200);
    await waitFor('20 mutations applied', () => churn.applied > 20, 10_000);
    churn.stop();
    expect(world.events.length).toBeGreaterThan(0);
  });
});

describe('simulator world: recorded changes (history oracle)', () => {
  it('records every change with its time, and asOf answers for any instant', () => {
    const { clock, advance } = fixedClock();
    const world = new World({ subscribers: 5, groups: 2, seed: 4, clock, recordChanges: true });
    const seeded = world.changes.length;
    expect(seeded).toBe(5);
    const [g1, g2] = world.groupIds() as [string, string];
    advance(HOUR);
    const id = world.createSubscriber({ email: 'a@example.com', groups: [g1] });
    const created = world.subscriber(id)?.updatedAtUs ?? 0;
    advance(HOUR);
    world.updateFields(id, { email: 'b@example.com', city: 'Oslo' });
    const renamed = world.subscriber(id)?.updatedAtUs ?? 0;
    advance(HOUR);
    world.unsubscribe(id);
    advance(HOUR);
    world.activate(id);
    advance(HOUR);
    world.removeFromGroup(id, g1);
    const left = world.subscriber(id)?.updatedAtUs ?? 0;
    advance(HOUR);
    world.addToGroup(id, g1);
    world.addToGroup(id, g2);
    advance(HOUR);
    world.sendCampaign({ groupIds: [g2] });
    advance(HOUR);
    world.deleteSubscriber(id);
    const deleted = world.subscriber(id)?.updatedAtUs ?? 0;

    const mine = world.changes.slice(seeded).filter((c) => c.subscriber.id === id);
    // created, renamed, unsubscribed, activated, left, re-joined twice, campaign sent, deleted
    expect(mine).toHaveLength(9);
    expect(mine.map((c) => c.atUs)).toEqual([...mine.map((c) => c.atUs)].sort((a, b) => a - b));
    for (const c of mine) expect(c.subscriber.updatedAtUs).toBe(c.atUs);
    expect(world.changes.map((c) => c.atUs)).toEqual([...world.changes.map((c) => c.atUs)].sort((a, b) => a - b));

    expect(world.asOf(created - 1).has(id)).toBe(false);
    expect(world.asOf(created).get(id)?.email).toBe('a@example.com');
    expect(world.asOf(renamed - 1).get(id)?.email).toBe('a@example.com');
    expect(world.asOf(renamed).get(id)?.fields.city).toBe('Oslo');
    expect(world.asOf(left).get(id)?.groups).toEqual([]);
    expect(world.asOf(deleted - 1).get(id)?.sent).toBe(1);
    expect(world.asOf(deleted).get(id)?.deleted).toBe(true);
    expect(world.membershipsAsOf(left - 1).filter((m) => m.subscriberId === id)).toEqual([
      { groupId: g1, subscriberId: id, type: 'active' },
    ]);
    expect(world.membershipsAsOf(deleted).filter((m) => m.subscriberId === id)).toEqual([]);
    // The present equals the last recorded state.
    const now = world.asOf(Number.MAX_SAFE_INTEGER);
    for (const view of world.subscribers({ includeDeleted: true })) expect(now.get(view.id)).toEqual(view);
  });

  it('records nothing unless asked', () => {
    const world = new World({ subscribers: 3, groups: 1 });
    world.unsubscribe([...world.ids()][0] as string);
    expect(world.changes).toEqual([]);
    expect(() => world.asOf(0)).toThrow(/recordChanges/);
  });
});

describe('simulator world: blind spots (unstamped, unannounced changes)', () => {
  function quietWorld() {
    const time = fixedClock();
    const world = new World({ subscribers: 30, groups: 2, clock: time.clock });
    const events: WorldEvent[] = [];
    world.onEvent((e) => events.push(e));
    return { world, events, time };
  }

  it('updateFieldsSilently changes the name and email but neither updated_at nor the event log', () => {
    const { world, events, time } = quietWorld();
    const id = world.members(world.groupIds()[0] as string)[0] as string;
    const before = world.subscriber(id) as SubscriberView;
    time.advance(HOUR);
    world.updateFieldsSilently(id, { name: 'Renamed', email: 'renamed@example.com' });
    const after = world.subscriber(id) as SubscriberView;
    expect(after.fields.name).toBe('Renamed');
    expect(after.email).toBe('renamed@example.com');
    expect(after.updatedAtUs).toBe(before.updatedAtUs);
    expect(events).toEqual([]);
  });

  it('addToGroupSilently lists the member under its type with its old stamp; removeFromGroupSilently unlists it; neither emits', () => {
    const { world, events, time } = quietWorld();
    const [g1, g2] = world.groupIds() as [string, string];
    const id = world.members(g1).find((m) => !world.membership(g2, m)) as string;
    const stampedAt = Date.parse('2024-05-29T12:00:00Z');
    world.restamp(id, stampedAt);
    time.advance(HOUR);
    const type = (world.membership(g1, id) as { type: SubscriberType }).type;
    world.addToGroupSilently(id, g2);
    expect(world.members(g2, type)).toContain(id);
    expect(world.renderLegacy(id).date_updated).toBe('2024-05-29 12:00:00');
    world.removeFromGroupSilently(id, g1);
    expect(world.members(g1)).not.toContain(id);
    expect(world.subscriber(id)?.updatedAtUs).toBe(stampedAt * 1000);
    expect(events).toEqual([]);
  });
});

/**
 * Memberships, reference rows (groups, campaigns, automations) and activity against real Postgres.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import {
  recordActivity,
  removeMembersNotSeenSince,
  removeMembership,
  upsertAutomations,
  upsertCampaigns,
  upsertGroups,
  upsertMemberships,
} from '../../src/mirror/store/index.js';
import { normalizeCampaign } from '../../src/mirror/normalize.js';
import { readMember, ts } from '../fixtures/mirror/rows.js';

let tdb: TestDatabase;
let seq = 0;
const newGroup = () => `g${++seq}`;

beforeAll(async () => {
  tdb = await createTestDatabase();
});
afterAll(async () => {
  await tdb?.drop();
});

describe('upsertMemberships', () => {
  test('adds current members; re-applying the listing writes nothing', async () => {
    const g = newGroup();
    const members = [
      { subscriberId: '1', type: 'active', at: ts(10) },
      { subscriberId: '2', type: 'active', at: ts(11, 5) },
    ];
    expect(await upsertMemberships(tdb.pool, g, members, { via: 'poll' })).toEqual({ inserted: 2, updated: 0, unchanged: 0, skipped: 0 });
    const before = await readMember(tdb.pool, g, '2');
    expect(before).toMatchObject({
      type: 'active',
      added_at: ts(11, 5),
      removed_at: null,
      source_updated_at: ts(11, 5),
      mirrored_via: 'poll',
    });
    expect(await upsertMemberships(tdb.pool, g, members, { via: 'webhook' })).toEqual({
      inserted: 0,
      updated: 0,
      unchanged: 2,
      skipped: 0,
    });
    expect((await readMember(tdb.pool, g, '2'))?.xmin).toBe(before?.xmin);
  });

  test('a newer fact updates type; an older one is skipped; added_at is kept while a member', async () => {
    const g = newGroup();
    await upsertMemberships(tdb.pool, g, [{ subscriberId: '1', type: 'active', at: ts(10) }], { via: 'poll' });
    expect(
      await upsertMemberships(tdb.pool, g, [{ subscriberId: '1', type: 'unsubscribed', at: ts(20) }], { via: 'webhook' }),
    ).toMatchObject({
      updated: 1,
    });
    expect(await upsertMemberships(tdb.pool, g, [{ subscriberId: '1', type: 'bounced', at: ts(15) }], { via: 'poll' })).toMatchObject({
      skipped: 1,
    });
    expect(await readMember(tdb.pool, g, '1')).toMatchObject({ type: 'unsubscribed', added_at: ts(10), source_updated_at: ts(20) });
  });

  test('an older add arriving after a newer removal leaves it removed; a newer add re-adds', async () => {
    const g = newGroup();
    await upsertMemberships(tdb.pool, g, [{ subscriberId: '1', type: 'active', at: ts(10) }], { via: 'poll' });
    expect(await removeMembership(tdb.pool, g, '1', ts(30), 'webhook')).toBe(true);
    expect(await upsertMemberships(tdb.pool, g, [{ subscriberId: '1', type: 'active', at: ts(20) }], { via: 'poll' })).toMatchObject({
      skipped: 1,
    });
    expect(await readMember(tdb.pool, g, '1')).toMatchObject({ removed_at: ts(30), source_updated_at: ts(30) });
    expect(await upsertMemberships(tdb.pool, g, [{ subscriberId: '1', type: 'active', at: ts(40) }], { via: 'webhook' })).toMatchObject({
      updated: 1,
    });
    expect(await readMember(tdb.pool, g, '1')).toMatchObject({ removed_at: null, added_at: ts(40), source_updated_at: ts(40) });
  });

  test('a removal that arrives before its add leaves a tombstone the older add cannot undo', async () => {
    const g = newGroup();
    expect(await removeMembership(tdb.pool, g, '7', ts(50), 'webhook')).toBe(true);
    await upsertMemberships(tdb.pool, g, [{ subscriberId: '7', type: 'active', at: ts(40) }], { via: 'webhook' });
    expect(await readMember(tdb.pool, g, '7')).toMatchObject({ removed_at: ts(50) });
  });

  test('removals are guarded and idempotent', async () => {
    const g = newGroup();
    await upsertMemberships(tdb.pool, g, [{ subscriberId: '1', type: 'active', at: ts(20) }], { via: 'poll' });
    expect(await removeMembership(tdb.pool, g, '1', ts(10), 'webhook')).toBe(false); // older than the add
    expect((await readMember(tdb.pool, g, '1'))?.removed_at).toBeNull();
    expect(await removeMembership(tdb.pool, g, '1', ts(30), 'webhook')).toBe(true);
    const before = await readMember(tdb.pool, g, '1');
    expect(await removeMembership(tdb.pool, g, '1', ts(30), 'webhook')).toBe(false); // redelivery
    expect((await readMember(tdb.pool, g, '1'))?.xmin).toBe(before?.xmin);
  });

  test('a null type is unknown: the stored type stays', async () => {
    const g = newGroup();
    await upsertMemberships(tdb.pool, g, [{ subscriberId: '1', type: 'bounced', at: ts(10) }], { via: 'poll' });
    await upsertMemberships(tdb.pool, g, [{ subscriberId: '1', type: null, at: ts(20) }], { via: 'webhook' });
    expect(await readMember(tdb.pool, g, '1')).toMatchObject({ type: 'bounced', source_updated_at: ts(20) });
  });

  test('duplicates in one listing reduce to the newest', async () => {
    const g = newGroup();
    const res = await upsertMemberships(
      tdb.pool,
      g,
      [
        { subscriberId: '1', type: 'unsubscribed', at: ts(20) },
        { subscriberId: '1', type: 'active', at: ts(10) },
      ],
      { via: 'poll' },
    );
    expect(res).toEqual({ inserted: 1, updated: 0, unchanged: 0, skipped: 1 });
    expect((await readMember(tdb.pool, g, '1'))?.type).toBe('unsubscribed');
  });

  test('seenAt stamps last_seen_at even when the guard skips the rest', async () => {
    const g = newGroup();
    await removeMembership(tdb.pool, g, '1', ts(100), 'webhook');
    await upsertMemberships(tdb.pool, g, [{ subscriberId: '1', type: 'active', at: ts(50) }], { via: 'poll', seenAt: ts(1000) });
    expect(await readMember(tdb.pool, g, '1')).toMatchObject({ removed_at: ts(100), last_seen_at: ts(1000) });
    // A later pass moves it forward; an earlier marker never moves it back.
    await upsertMemberships(tdb.pool, g, [{ subscriberId: '1', type: 'active', at: ts(50) }], { via: 'poll', seenAt: ts(2000) });
    // A newer fact carried by an older pass marker is applied, but the marker does not go back.
    await upsertMemberships(tdb.pool, g, [{ subscriberId: '1', type: 'active', at: ts(200) }], { via: 'poll', seenAt: ts(1500) });
    expect(await readMember(tdb.pool, g, '1')).toMatchObject({ removed_at: null, last_seen_at: ts(2000) });
  });
});

describe('removeMembersNotSeenSince', () => {
  test('ends only current members the full pass did not list and that no newer fact keeps', async () => {
    const g = newGroup();
    const passStart = ts(1000);
    // Before the pass: four members known.
    await upsertMemberships(
      tdb.pool,
      g,
      [
        { subscriberId: 'seen', type: 'active', at: ts(10) },
        { subscriberId: 'gone', type: 'active', at: ts(10) },
        { subscriberId: 'other-type', type: 'unsubscribed', at: ts(10) },
      ],
      { via: 'poll', seenAt: ts(500) },
    );
    // During the pass: the pass lists `seen`; a webhook adds `added-during` after the pass started.
    await upsertMemberships(tdb.pool, g, [{ subscriberId: 'seen', type: 'active', at: ts(10) }], { via: 'poll', seenAt: passStart });
    await upsertMemberships(tdb.pool, g, [{ subscriberId: 'added-during', type: 'active', at: ts(1001) }], { via: 'webhook' });
    // Already removed members are left alone.
    await removeMembership(tdb.pool, g, 'removed', ts(20), 'webhook');

    expect(await removeMembersNotSeenSince(tdb.pool, g, passStart, ts(1100), { type: 'active' })).toBe(1);
    expect(await readMember(tdb.pool, g, 'gone')).toMatchObject({ removed_at: ts(1100), source_updated_at: ts(10), mirrored_via: 'poll' });
    expect((await readMember(tdb.pool, g, 'seen'))?.removed_at).toBeNull();
    expect((await readMember(tdb.pool, g, 'added-during'))?.removed_at).toBeNull();
    expect((await readMember(tdb.pool, g, 'other-type'))?.removed_at).toBeNull();
    expect((await readMember(tdb.pool, g, 'removed'))?.removed_at).toBe(ts(20));
    // Without a type every unlisted member of the group is considered; re-running changes nothing more.
    expect(await removeMembersNotSeenSince(tdb.pool, g, passStart, ts(1100))).toBe(1);
    expect((await readMember(tdb.pool, g, 'other-type'))?.removed_at).toBe(ts(1100));
    expect(await removeMembersNotSeenSince(tdb.pool, g, passStart, ts(1100))).toBe(0);
  });

  test('a member ended by inference comes back when a later listing shows it', async () => {
    const g = newGroup();
    await upsertMemberships(tdb.pool, g, [{ subscriberId: '1', type: 'active', at: ts(10) }], { via: 'poll' });
    await removeMembersNotSeenSince(tdb.pool, g, ts(1000), ts(1100));
    await upsertMemberships(tdb.pool, g, [{ subscriberId: '1', type: 'unsubscribed', at: ts(10) }], { via: 'poll', seenAt: ts(2000) });
    expect(await readMember(tdb.pool, g, '1')).toMatchObject({ removed_at: null, type: 'unsubscribed' });
  });

  test('only the given group is touched', async () => {
    const [g1, g2] = [newGroup(), newGroup()];
    await upsertMemberships(tdb.pool, g1, [{ subscriberId: '1', type: 'active', at: ts(10) }], { via: 'poll' });
    await upsertMemberships(tdb.pool, g2, [{ subscriberId: '1', type: 'active', at: ts(10) }], { via: 'poll' });
    expect(await removeMembersNotSeenSince(tdb.pool, g1, ts(1000), ts(1100))).toBe(1);
    expect((await readMember(tdb.pool, g2, '1'))?.removed_at).toBeNull();
  });
});

describe('groups, automations, campaigns', () => {
  async function groupName(id: string): Promise<string | null | undefined> {
    const { rows } = await tdb.pool.query<{ name: string | null }>('select name from groups where id = $1', [id]);
    return rows[0]?.name;
  }

  test('groups: insert, rename, identical, null keeps the known name, duplicates', async () => {
    expect(
      await upsertGroups(tdb.pool, [
        { id: '501', name: 'VIP' },
        { id: '502', name: 'Beta' },
      ]),
    ).toEqual({
      inserted: 2,
      updated: 0,
      unchanged: 0,
      skipped: 0,
    });
    expect(
      await upsertGroups(tdb.pool, [
        { id: '501', name: 'VIP+' },
        { id: '502', name: 'Beta' },
      ]),
    ).toEqual({
      inserted: 0,
      updated: 1,
      unchanged: 1,
      skipped: 0,
    });
    expect(await upsertGroups(tdb.pool, [{ id: '501', name: null }])).toMatchObject({ unchanged: 1 });
    expect(await groupName('501')).toBe('VIP+');
    expect(
      await upsertGroups(tdb.pool, [
        { id: '503', name: 'first' },
        { id: '503', name: 'second' },
      ]),
    ).toMatchObject({ inserted: 1, skipped: 1 });
    expect(await groupName('503')).toBe('second');
  });

  test('automations', async () => {
    expect(await upsertAutomations(tdb.pool, [{ id: '601', name: 'Welcome' }])).toMatchObject({ inserted: 1 });
    expect(await upsertAutomations(tdb.pool, [{ id: '601', name: 'Welcome' }])).toMatchObject({ unchanged: 1 });
    expect(await upsertAutomations(tdb.pool, [])).toEqual({ inserted: 0, updated: 0, unchanged: 0, skipped: 0 });
  });

  test('campaigns: sent_at from campaign.sent survives later payloads that lack it', async () => {
    const raw = { id: '701', name: 'Spring', total_recipients: 100, preview_url: 'https://p', date: '2024-05-28T07:11:08.123456Z' };
    await upsertCampaigns(tdb.pool, [normalizeCampaign(raw, { sent: true })]);
    expect(await upsertCampaigns(tdb.pool, [normalizeCampaign({ ...raw, total_recipients: 120 })])).toMatchObject({ updated: 1 });
    const { rows } = await tdb.pool.query(
      `select name, total_recipients, to_char(sent_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as sent_at from campaigns where id = '701'`,
    );
    expect(rows[0]).toEqual({ name: 'Spring', total_recipients: 120, sent_at: '2024-05-28T07:11:08.123456Z' });
  });
});

describe('recordActivity', () => {
  test('opens and clicks: one row per item of each delivery; the same delivery again collapses', async () => {
    const open = {
      kind: 'campaign.open',
      subscriberId: '1',
      campaignId: '701',
      occurredAt: ts(10, 123456),
      subscriberUpdatedAt: ts(9),
      deliveryId: 1n,
      itemIndex: 0,
    };
    const click = {
      kind: 'campaign.click',
      subscriberId: '1',
      campaignId: '701',
      linkUrl: 'https://x',
      occurredAt: ts(10),
      deliveryId: '2',
      itemIndex: 0,
    };
    // Two identical open items of one batch are two opens.
    expect(await recordActivity(tdb.pool, [open, { ...open, itemIndex: 1 }, click])).toBe(3);
    // The same deliveries applied again write nothing.
    expect(await recordActivity(tdb.pool, [open, { ...open, itemIndex: 1 }, click])).toBe(0);
    // The same open in another delivery is another open.
    expect(await recordActivity(tdb.pool, [{ ...open, deliveryId: 99n }])).toBe(1);
    expect(await recordActivity(tdb.pool, [])).toBe(0);
    const { rows } = await tdb.pool.query<{ n: number }>(`select count(*)::int as n from subscriber_activity where subscriber_id = '1'`);
    expect(rows[0]?.n).toBe(4);
    const { rows: d } = await tdb.pool.query<{
      delivery_id: string;
      item_index: number;
      occurred_at: string;
      subscriber_updated_at: string;
    }>(
      `select delivery_id::text, item_index,
              to_char(occurred_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as occurred_at,
              to_char(subscriber_updated_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as subscriber_updated_at
         from subscriber_activity where kind = 'campaign.open' order by id limit 1`,
    );
    expect(d[0]).toEqual({ delivery_id: '1', item_index: 0, occurred_at: ts(10, 123456), subscriber_updated_at: ts(9) });
  });

  test('subscriber facts collapse on their natural key across deliveries; nulls compare equal', async () => {
    const added = {
      kind: 'subscriber.added_to_group',
      subscriberId: '2',
      groupId: 'g1',
      occurredAt: ts(11),
      subscriberUpdatedAt: ts(11),
      deliveryId: '3',
      itemIndex: 0,
    };
    expect(await recordActivity(tdb.pool, [added])).toBe(1);
    // The same fact from another webhook's delivery, or with no delivery at all: already recorded.
    expect(
      await recordActivity(tdb.pool, [
        { ...added, deliveryId: '4', occurredAt: ts(12) },
        { ...added, deliveryId: null, itemIndex: null },
      ]),
    ).toBe(0);
    // A different version of the subscriber is a different fact.
    expect(await recordActivity(tdb.pool, [{ ...added, deliveryId: '5', subscriberUpdatedAt: ts(11, 1) }])).toBe(1);
  });

  test('a bad item index is refused and nothing is written', async () => {
    const row = { kind: 'campaign.open', subscriberId: '6', occurredAt: null, deliveryId: '5', itemIndex: -1 };
    await expect(recordActivity(tdb.pool, [row])).rejects.toThrow(/itemIndex/);
  });
});

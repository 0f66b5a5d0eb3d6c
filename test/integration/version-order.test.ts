/**
 * Issue 12 against real Postgres: the version order of both paths (version time = the latest time a
 * version asserts), a listed subscriber is alive, and every open and click is a row.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { iso } from '../helpers/mirror.js';
import { legacySubscriber, readMember, readSubscriber, webhookSubscriber } from '../fixtures/mirror/rows.js';
import { normalizeLegacySubscriber, normalizeWebhookSubscriber } from '../../src/mirror/normalize.js';
import { upsertSubscribers, withTransaction } from '../../src/mirror/store/index.js';
import { applyPlan, planDelivery } from '../../src/webhooks/apply.js';
import { applyDelivery } from '../../src/webhooks/apply-job.js';
import { storeDelivery } from '../../src/webhooks/inbox/write.js';
import { deliveryKinds, parseDelivery } from '../../src/webhooks/payloads.js';
import { runPass, type PassDeps } from '../../src/sync/legacy-pass.js';
import type { LegacyClient, LegacyPage } from '../../src/upstream/legacy/client.js';
import { createLogger } from '../../src/ground/log.js';

let tdb: TestDatabase;
const { logger } = createLogger({ level: 'silent' });

beforeAll(async () => {
  tdb = await createTestDatabase();
});
afterAll(async () => {
  await tdb?.drop();
});
beforeEach(async () => {
  await tdb.pool.query(
    'truncate subscribers, groups, group_members, campaigns, subscriber_activity, webhook_deliveries, sync_state, sync_passes',
  );
});

/** Applies one delivery body the way the consumer does (parse, plan, apply in one transaction). */
async function deliver(body: unknown): Promise<void> {
  const parsed = parseDelivery(body);
  await withTransaction(tdb.pool, (client) => applyPlan(client, planDelivery(parsed.events)));
}

const ID = '131020407040917504'; // > 2^53, as the service's ids are
const GROUP = { id: '131020396617876484', name: 'Newsletter' };

/*
 * The three payloads of one subscriber as the real service sent them (2025 captures, shapes kept,
 * personal data replaced): the unsubscribe did not move updated_at.
 */
const created = {
  event: 'subscriber.created',
  account_id: 1185731,
  ...webhookSubscriber({
    id: ID,
    status: 'active',
    updated_at: '2025-03-11T15:06:41.000000Z',
    created_at: '2025-03-11T15:06:41.000000Z',
    unsubscribed_at: null,
  }),
};
const unsubscribed = {
  event: 'subscriber.unsubscribed',
  account_id: 1185731,
  ...webhookSubscriber({
    id: ID,
    status: 'unsubscribed',
    updated_at: '2025-03-11T15:06:41.000000Z',
    created_at: '2025-03-11T15:06:41.000000Z',
    unsubscribed_at: '2025-03-11T15:10:00.000000Z',
  }),
};
const addedToGroup = {
  type: 'subscriber.added_to_group',
  subscriber: webhookSubscriber({
    id: ID,
    status: 'active',
    updated_at: '2025-03-11T15:06:46.000000Z',
    created_at: '2025-03-11T15:06:41.000000Z',
    unsubscribed_at: null,
  }),
  group: GROUP,
};

function permutations<T>(items: T[]): T[][] {
  if (items.length <= 1) return [items];
  return items.flatMap((item, i) => permutations([...items.slice(0, i), ...items.slice(i + 1)]).map((rest) => [item, ...rest]));
}

describe('version time: the latest time a version asserts', () => {
  test('the three real-shaped payloads in all 6 arrival orders end unsubscribed at 15:10:00', async () => {
    const payloads = { created, unsubscribed, addedToGroup };
    for (const order of permutations(Object.keys(payloads) as Array<keyof typeof payloads>)) {
      await tdb.pool.query('truncate subscribers, groups, group_members, subscriber_activity');
      for (const name of order) await deliver(payloads[name]);
      const row = await readSubscriber(tdb.pool, ID);
      expect({ order, status: row?.status, unsubscribed_at: row?.unsubscribed_at, updated_at: row?.updated_at }).toEqual({
        order,
        status: 'unsubscribed',
        unsubscribed_at: '2025-03-11T15:10:00.000000Z',
        // The winning version's own updated_at: the service did not move it for the unsubscribe.
        updated_at: '2025-03-11T15:06:41.000000Z',
      });
      // The add still made it a member (its own fact time orders the membership).
      expect((await readMember(tdb.pool, GROUP.id, ID))?.removed_at).toBeNull();
    }
  });

  test('a later subscriber.updated (newer updated_at) still wins over the unsubscribe', async () => {
    const resubscribed = {
      event: 'subscriber.updated',
      ...webhookSubscriber({ id: ID, status: 'active', updated_at: '2025-03-11T15:12:00.000000Z', unsubscribed_at: null }),
    };
    for (const order of [
      [unsubscribed, resubscribed],
      [resubscribed, unsubscribed],
    ]) {
      await tdb.pool.query('truncate subscribers');
      for (const body of order) await deliver(body);
      expect(await readSubscriber(tdb.pool, ID)).toMatchObject({
        status: 'active',
        unsubscribed_at: null,
        updated_at: '2025-03-11T15:12:00.000000Z',
      });
    }
  });

  test('a poll row whose date_unsubscribe is newer than a webhook version’s updated_at wins, in both orders', async () => {
    const web = normalizeWebhookSubscriber(
      webhookSubscriber({ id: ID, status: 'active', updated_at: '2025-03-11T15:06:46.000000Z', unsubscribed_at: null }),
    );
    const poll = normalizeLegacySubscriber(
      legacySubscriber({ id: ID, type: 'unsubscribed', date_updated: '2025-03-11 15:06:41', date_unsubscribe: '2025-03-11 15:10:00' }),
      { sourceTimezone: 'UTC' },
    );
    for (const order of [
      [web, poll],
      [poll, web],
    ]) {
      await tdb.pool.query('truncate subscribers');
      for (const row of order) await upsertSubscribers(tdb.pool, [row]);
      expect(await readSubscriber(tdb.pool, ID)).toMatchObject({
        status: 'unsubscribed',
        unsubscribed_at: '2025-03-11T15:10:00.000000Z',
        mirrored_via: 'poll',
      });
    }
  });

  test('an unsubscribed_at left on a version that says active does not count', async () => {
    const stale = normalizeWebhookSubscriber(
      webhookSubscriber({
        id: ID,
        status: 'active',
        updated_at: '2025-03-11T15:00:00.000000Z',
        unsubscribed_at: '2025-03-11T16:00:00.000000Z',
      }),
    );
    const newer = normalizeWebhookSubscriber(webhookSubscriber({ id: ID, status: 'bounced', updated_at: '2025-03-11T15:30:00.000000Z' }));
    await upsertSubscribers(tdb.pool, [stale]);
    expect(await upsertSubscribers(tdb.pool, [newer])).toMatchObject({ updated: 1 });
    expect((await readSubscriber(tdb.pool, ID))?.status).toBe('bounced');
  });
});

// ---------------------------------------------------------------------------------------------
// A listed subscriber is alive

/** A legacy client that lists `rows` for one group and type, in one page. */
function listing(rows: Record<string, unknown>[]): LegacyClient {
  return {
    listGroupSubscribers: async () => rows as never,
    count: async () => rows.length,
    fields: async () => [],
    async *pages(): AsyncGenerator<LegacyPage, void, undefined> {
      yield { offset: 0, rows: rows as never, limit: 1000, nextOffset: rows.length, tail: [], continuous: true, serviceTime: null };
    },
    effectiveLimit: () => undefined,
    stats: () => ({ requests: 0 }) as never,
  };
}

function pollDeps(rows: Record<string, unknown>[]): PassDeps {
  return {
    pool: tdb.pool,
    legacy: listing(rows),
    logger,
    sourceTimezone: 'UTC',
    lookbackMs: 86_400_000,
    pageSize: 1000,
    groupTypes: ['active'],
  };
}

async function currentMember(subscriberId: string): Promise<boolean> {
  const { rows } = await tdb.pool.query(`select 1 from current_group_members where group_id = $1 and subscriber_id = $2`, [
    GROUP.id,
    subscriberId,
  ]);
  return rows.length > 0;
}

describe('deleted by a webhook, then listed by the poll', () => {
  const deleted = {
    type: 'subscriber.deleted',
    subscriber: webhookSubscriber({
      id: ID,
      updated_at: '2025-03-12T09:00:00.000000Z',
      deleted_at: '2025-03-12T09:00:00.000000Z',
      forget_at: null,
    }),
  };

  async function memberThenDeleted(): Promise<void> {
    await deliver({ ...addedToGroup, subscriber: { ...addedToGroup.subscriber, updated_at: '2025-03-12T08:00:00.000000Z' } });
    expect(await currentMember(ID)).toBe(true);
    await deliver(deleted);
    expect(await currentMember(ID)).toBe(false);
  }

  test('a listing with a newer date_updated clears deleted_at and the subscriber is a current member again', async () => {
    await memberThenDeleted();
    await runPass(
      pollDeps([legacySubscriber({ id: ID, type: 'active', date_updated: '2025-03-12 10:00:00', name: 'Restored' })]),
      GROUP.id,
      'active',
      'full',
    );
    const row = await readSubscriber(tdb.pool, ID);
    expect(row).toMatchObject({ deleted_at: null, name: 'Restored', mirrored_via: 'poll' });
    expect(await currentMember(ID)).toBe(true);
  });

  test('a listing with an older date_updated leaves the subscriber deleted', async () => {
    await memberThenDeleted();
    await runPass(
      pollDeps([legacySubscriber({ id: ID, type: 'active', date_updated: '2025-03-12 08:30:00', name: 'Stale' })]),
      GROUP.id,
      'active',
      'full',
    );
    const row = await readSubscriber(tdb.pool, ID);
    expect(row?.deleted_at).toBe('2025-03-12T09:00:00.000000Z');
    expect(row?.name).not.toBe('Stale');
    expect(await currentMember(ID)).toBe(false);
  });
});

// ---------------------------------------------------------------------------------------------
// Every engagement event is a row

const CAMPAIGN = {
  id: '131020452716463123',
  name: 'March news',
  total_recipients: 3,
  preview_url: null,
  date: '2025-03-13T07:11:00.000000Z',
};
/** The service's documented batch shape: opens do not move updated_at, opens_count stays 0. */
const openItem = (id = ID) => ({
  type: 'campaign.open',
  subscriber: webhookSubscriber({ id, updated_at: '2025-03-13T10:30:00.000000Z', opens_count: 0 }),
  campaign: CAMPAIGN,
});

/** Stores the exact bytes in the inbox (deduped by body hash) and applies the stored delivery. */
async function receive(body: unknown, bytes = JSON.stringify(body)): Promise<string> {
  const parsed = parseDelivery(JSON.parse(bytes));
  const stored = await storeDelivery(tdb.pool, {
    raw: Buffer.from(bytes),
    body: JSON.parse(bytes),
    kinds: deliveryKinds(parsed),
    eventCount: parsed.events.length,
    endpointId: null,
    status: 'pending',
  });
  await applyDelivery(tdb.pool, stored.id);
  return stored.id;
}

async function engagement(): Promise<{ open_events: number; unique_openers: number } | undefined> {
  const { rows } = await tdb.pool.query<{ open_events: number; unique_openers: number }>(
    `select open_events, unique_openers from campaign_engagement where campaign_id = $1`,
    [CAMPAIGN.id],
  );
  return rows[0];
}

async function openRows(): Promise<Array<{ delivery_id: string; item_index: number; occurred_at: string; subscriber_updated_at: string }>> {
  const { rows } = await tdb.pool.query(
    `select a.delivery_id::text, a.item_index, ${iso('a.occurred_at')} as occurred_at, ${iso('a.subscriber_updated_at')} as subscriber_updated_at
       from subscriber_activity a where a.kind = 'campaign.open' order by a.delivery_id, a.item_index`,
  );
  return rows as Array<{ delivery_id: string; item_index: number; occurred_at: string; subscriber_updated_at: string }>;
}

describe('every engagement event is a row', () => {
  test('one open in two distinct deliveries is 2 rows, timed by each delivery’s receipt', async () => {
    const first = await receive({ events: [openItem()], total: 1 });
    const second = await receive({ events: [openItem()], total: 1 }, `${JSON.stringify({ events: [openItem()], total: 1 })}\n`);
    expect(first).not.toBe(second);
    const rows = await openRows();
    expect(rows).toHaveLength(2);
    const { rows: received } = await tdb.pool.query<{ id: string; at: string }>(
      `select id::text, ${iso('received_at')} as at from webhook_deliveries order by id`,
    );
    expect(rows.map((r) => r.occurred_at)).toEqual(received.map((r) => r.at));
    expect(rows.every((r) => r.subscriber_updated_at === '2025-03-13T10:30:00.000000Z')).toBe(true);
    expect(await engagement()).toMatchObject({ open_events: 2, unique_openers: 1 });
  });

  test('the same delivery bytes received 3 times are 1 row', async () => {
    const body = { events: [openItem()], total: 1 };
    const ids = new Set([await receive(body), await receive(body), await receive(body)]);
    expect(ids.size).toBe(1);
    expect(await openRows()).toHaveLength(1);
    expect(await engagement()).toMatchObject({ open_events: 1 });
  });

  test('a batch with two identical open items is 2 rows; open_events matches the items delivered', async () => {
    const other = '131020407040917999';
    await receive({ events: [openItem(), openItem(), openItem(other)], total: 3 });
    await receive({ events: [openItem(other)], total: 1 });
    expect((await openRows()).map((r) => r.item_index)).toEqual([0, 1, 2, 0]);
    expect(await engagement()).toMatchObject({ open_events: 4, unique_openers: 2 });
  });
});

/**
 * The consumer against real Postgres: every fixture (each kind in each shape), signed with a real
 * HMAC and posted to a running receiver, lands as the rows its kind writes once the consumer claims
 * it (docs/architecture.md, "Conventions": fixtures per event). Then exactly-once (invariant 5),
 * never-regress across both paths (invariant 2), retries, replay, and how the consumer learns of
 * deliveries (NOTIFY, the safety-net poll). Batches: consumer.batch.test.ts.
 *
 * This file's main consumer does not listen: tests that apply a stored row by hand must not race it.
 * `settled` wakes it, as a notification would.
 */
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import { buildServer } from '../../src/http/server.js';
import { createLogger, type Logger } from '../../src/ground/log.js';
import { normalizeLegacySubscriber } from '../../src/mirror/normalize.js';
import { upsertMemberships, upsertSubscribers } from '../../src/mirror/store/index.js';
import type { EventKind } from '../../src/webhooks/payloads.js';
import { storeDelivery, type DeliveryRecord } from '../../src/webhooks/inbox/write.js';
import { registerWebhookRoute } from '../../src/webhooks/receiver.js';
import { signBody } from '../../src/webhooks/signature.js';
import { applyDelivery } from '../../src/webhooks/apply-job.js';
import { createDeliveryConsumer, type DeliveryConsumer, type DeliveryConsumerDeps } from '../../src/webhooks/consumer.js';
import { replayDeliveries } from '../../src/webhooks/replay.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { iso, readActivityKeys } from '../helpers/mirror.js';
import { waitFor } from '../helpers/wait.js';
import { loadFixtures, type WebhookFixture } from '../fixtures/webhooks/index.js';
import { legacySubscriber, readMember, readSubscriber, webhookSubscriber } from '../fixtures/mirror/rows.js';

const SECRET = 'consumer-test-secret-42';

let db: TestDatabase;
let logger: Logger;
let app: FastifyInstance;
let url: string;
let consumer: DeliveryConsumer;
const extraConsumers: DeliveryConsumer[] = [];

function consumerDeps(overrides: Partial<DeliveryConsumerDeps> = {}): DeliveryConsumerDeps {
  return {
    pool: db.pool,
    logger,
    listen: false,
    pollEveryMs: 0,
    retry: { attempts: 4, backoffMs: 50 },
    ...overrides,
  };
}

beforeAll(async () => {
  db = await createTestDatabase();
  logger = createLogger({ level: 'silent' }).logger;
  consumer = createDeliveryConsumer(consumerDeps());
  app = buildServer({ logger, readiness: [] });
  registerWebhookRoute(app, {
    path: '/webhooks',
    maxBodyBytes: 1024 * 1024,
    secrets: () => [SECRET],
    pool: db.pool,
    logger,
    inbox: { maxWaitMs: 1 },
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/webhooks`;
});

afterAll(async () => {
  await app?.close();
  for (const c of [consumer, ...extraConsumers]) await c?.close(5_000);
  await db?.drop();
});

beforeEach(async () => {
  await db.pool.query('truncate subscribers, groups, group_members, campaigns, automations, subscriber_activity, webhook_deliveries');
});

// ---------------------------------------------------------------------------------------------
// Helpers

async function post(body: string): Promise<{ status: number; id: string; outcome: string }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', signature: signBody(body, SECRET) },
    body,
  });
  const json = (await res.json()) as { id: string; status: string };
  return { status: res.status, id: json.id, outcome: json.status };
}

interface DeliveryRow {
  status: string;
  attempts: number;
  error: string | null;
  event_count: number;
  applied_at: string | null;
}

async function delivery(id: string): Promise<DeliveryRow | undefined> {
  const { rows } = await db.pool.query<DeliveryRow>(
    `select status, attempts, error, event_count, ${iso('applied_at')} as applied_at from webhook_deliveries where id = $1`,
    [id],
  );
  return rows[0];
}

/** Wakes the consumer (each poll, as its safety net would) until the delivery is no longer pending; returns its row. */
function settled(id: string): Promise<DeliveryRow> {
  return waitFor(
    `delivery ${id} to settle`,
    async () => {
      consumer.wake();
      const row = await delivery(id);
      return row && row.status !== 'pending' ? row : undefined;
    },
    10_000,
    15,
  );
}

async function postAndApply(body: string): Promise<{ id: string; row: DeliveryRow }> {
  const res = await post(body);
  expect(res.status).toBe(200);
  return { id: res.id, row: await settled(res.id) };
}

function storeRaw(body: unknown, status: DeliveryRecord['status'] = 'pending', kinds: string[] = []): Promise<string> {
  const raw = Buffer.from(JSON.stringify(body));
  return storeDelivery(db.pool, { raw, body, kinds, eventCount: status === 'pending' ? 1 : 0, endpointId: null, status }).then((r) => r.id);
}

// ---------------------------------------------------------------------------------------------
// Fixtures: what each kind writes

type Raw = Record<string, unknown>;

interface Item {
  kind: EventKind;
  subscriber: Raw | null;
  group: Raw | null;
  automation: Raw | null;
  campaign: Raw | null;
  linkUrl: string | null;
}

/** The events of a fixture read straight from its JSON, independently of parseDelivery. */
function items(f: WebhookFixture): Item[] {
  const body = JSON.parse(f.body) as Raw;
  const list = (Array.isArray(body.events) ? body.events : [body]) as Raw[];
  return list.map((item) => {
    const kind = (item.event ?? item.type) as EventKind;
    const { event: _e, type: _t, account_id: _a, ...rest } = item;
    const nested = 'subscriber' in item;
    return {
      kind,
      subscriber: nested ? (item.subscriber as Raw) : kind === 'campaign.sent' ? null : rest,
      group: (item.group as Raw | undefined) ?? null,
      automation: (item.automation as Raw | undefined) ?? null,
      campaign: kind === 'campaign.sent' && !nested ? rest : ((item.campaign as Raw | undefined) ?? null),
      linkUrl: (item.link_url as string | undefined) ?? null,
    };
  });
}

/** The newest version of each subscriber in the fixture (later wins on a tie). */
function newestSubscribers(list: Item[]): Map<string, Raw> {
  const out = new Map<string, Raw>();
  for (const { subscriber } of list) {
    if (!subscriber) continue;
    const id = String(subscriber.id);
    const known = out.get(id);
    if (!known || String(subscriber.updated_at) >= String(known.updated_at)) out.set(id, subscriber);
  }
  return out;
}

/** Per-kind state before the delivery (what a mirror already holds) and what must hold after. */
interface KindCase {
  before?: (list: Item[]) => Promise<void>;
  after: (list: Item[]) => Promise<void>;
}

const OLD = '2020-01-01T00:00:00.000000Z';

async function expectGroups(list: Item[]): Promise<void> {
  for (const { group } of list) {
    const { rows } = await db.pool.query('select name from groups where id = $1', [group?.id]);
    expect(rows).toEqual([{ name: group?.name }]);
  }
}

const CASES: Record<EventKind, KindCase> = {
  'subscriber.created': { after: async () => {} },
  'subscriber.updated': { after: async () => {} },
  'subscriber.unsubscribed': {
    after: async (list) => {
      for (const s of newestSubscribers(list).values()) {
        expect((await readSubscriber(db.pool, String(s.id)))?.unsubscribed_at).toBe(s.unsubscribed_at);
        expect(s.status).toBe('unsubscribed');
      }
    },
  },
  'subscriber.bounced': { after: async () => {} },
  'subscriber.spam_reported': { after: async () => {} },
  'subscriber.active': { after: async () => {} },
  'subscriber.added_to_group': {
    after: async (list) => {
      for (const { subscriber, group } of list) {
        expect(await readMember(db.pool, String(group?.id), String(subscriber?.id))).toMatchObject({
          type: subscriber?.status,
          added_at: subscriber?.updated_at,
          removed_at: null,
          source_updated_at: subscriber?.updated_at,
          mirrored_via: 'webhook',
        });
      }
      await expectGroups(list);
    },
  },
  'subscriber.removed_from_group': {
    // A member the mirror knew from an older listing.
    before: async (list) => {
      for (const { subscriber, group } of list) {
        await upsertMemberships(db.pool, String(group?.id), [{ subscriberId: String(subscriber?.id), type: 'active', at: OLD }], {
          via: 'poll',
        });
      }
    },
    after: async (list) => {
      for (const { subscriber, group } of list) {
        expect(await readMember(db.pool, String(group?.id), String(subscriber?.id))).toMatchObject({
          added_at: OLD,
          removed_at: subscriber?.updated_at,
          source_updated_at: subscriber?.updated_at,
          mirrored_via: 'webhook',
        });
      }
      await expectGroups(list);
    },
  },
  'subscriber.automation_triggered': { after: (list) => expectAutomations(list) },
  'subscriber.automation_completed': { after: (list) => expectAutomations(list) },
  'subscriber.deleted': {
    before: async (list) => {
      for (const { subscriber } of list) {
        await upsertMemberships(db.pool, '900', [{ subscriberId: String(subscriber?.id), type: 'active', at: OLD }], { via: 'poll' });
      }
    },
    after: async (list) => {
      for (const s of newestSubscribers(list).values()) {
        const row = await readSubscriber(db.pool, String(s.id));
        expect(row).toMatchObject({ deleted_at: s.deleted_at, forget_at: s.forget_at });
        if (s.forget_at) {
          // Forgotten: personal data erased, id and timestamps kept.
          expect(row).toMatchObject({ email: null, name: null, ip_address: null, optin_ip: null, fields: {}, extra: {} });
          expect(row?.created_at).toBe(s.created_at);
        } else {
          expect(row?.email).toBe(s.email);
        }
        expect(await readMember(db.pool, '900', String(s.id))).toMatchObject({ removed_at: s.updated_at });
      }
    },
  },
  'campaign.sent': {
    after: async (list) => {
      for (const { campaign } of list) {
        const { rows } = await db.pool.query(
          `select name, total_recipients, preview_url, ${iso('date')} as date, ${iso('sent_at')} as sent_at from campaigns where id = $1`,
          [campaign?.id],
        );
        expect(rows).toEqual([
          {
            name: campaign?.name,
            total_recipients: campaign?.total_recipients,
            preview_url: campaign?.preview_url,
            date: campaign?.date,
            sent_at: campaign?.date,
          },
        ]);
      }
      // A campaign only: no subscriber, no activity.
      expect((await db.pool.query('select count(*)::int as n from subscribers')).rows[0]).toEqual({ n: 0 });
    },
  },
  'campaign.open': { after: (list) => expectCampaigns(list) },
  'campaign.click': { after: (list) => expectCampaigns(list) },
};

async function expectAutomations(list: Item[]): Promise<void> {
  for (const { automation } of list) {
    const { rows } = await db.pool.query('select name from automations where id = $1', [automation?.id]);
    expect(rows).toEqual([{ name: automation?.name }]);
  }
}

async function expectCampaigns(list: Item[]): Promise<void> {
  for (const { campaign } of list) {
    const { rows } = await db.pool.query(`select name, preview_url, ${iso('date')} as date, sent_at from campaigns where id = $1`, [
      campaign?.id,
    ]);
    // Embedded campaigns do not say when they were sent.
    expect(rows).toEqual([{ name: campaign?.name, preview_url: campaign?.preview_url, date: campaign?.date, sent_at: null }]);
  }
}

describe('every fixture lands as the rows of its kind', () => {
  test.each(loadFixtures().map((f) => [f.name, f] as const))('%s', async (_name, f) => {
    const list = items(f);
    const kase = CASES[f.kind];
    await kase.before?.(list);

    const { row } = await postAndApply(f.body);
    expect(row).toMatchObject({ status: 'applied', attempts: 1, error: null, event_count: list.length });
    expect(row.applied_at).not.toBeNull();

    // The subscriber row is the newest version carried (invariant 2), whatever the order inside a batch.
    for (const [id, s] of newestSubscribers(list)) {
      const stored = await readSubscriber(db.pool, id);
      expect(stored).toMatchObject({
        status: s.status,
        source: s.source,
        sent: s.sent,
        updated_at: s.updated_at,
        created_at: s.created_at,
        deleted_at: s.deleted_at,
        mirrored_via: 'webhook',
      });
      if (!s.forget_at) expect(stored).toMatchObject({ email: s.email, fields: s.fields });
    }

    // One activity row per event that concerns a subscriber; identical events collapse.
    const expected = [
      ...new Set(
        list
          .filter((i) => i.subscriber)
          .map((i) =>
            [i.kind, i.subscriber?.id, i.group?.id, i.automation?.id, i.campaign?.id, i.linkUrl, i.subscriber?.updated_at]
              .filter((v) => v !== null && v !== undefined)
              .join('|'),
          ),
      ),
    ].sort();
    expect(await readActivityKeys(db.pool)).toEqual(expected);

    await kase.after(list);
  });

  test('a mixed batch applies its known events and keeps the note about the unknown kind', async () => {
    const body = JSON.stringify({
      events: [
        { type: 'subscriber.teleported', subscriber: webhookSubscriber({ id: '5' }) },
        { type: 'subscriber.updated', subscriber: webhookSubscriber({ id: '6' }) },
      ],
      total: 2,
    });
    const { row } = await postAndApply(body);
    expect(row).toMatchObject({ status: 'applied', event_count: 1, error: 'unknown event kind(s): subscriber.teleported' });
    expect(await readSubscriber(db.pool, '6')).toBeDefined();
    expect(await readSubscriber(db.pool, '5')).toBeUndefined();
    expect(await readActivityKeys(db.pool)).toHaveLength(1);
  });
});

// ---------------------------------------------------------------------------------------------
// Exactly once, never regress

function updated(overrides: Record<string, unknown>): string {
  return JSON.stringify({ event: 'subscriber.updated', account_id: 1, ...webhookSubscriber(overrides) });
}

describe('exactly-once effects (invariant 5)', () => {
  test('the same delivery three times is stored once and applied once', async () => {
    const body = updated({ id: '11' });
    const answers = [await post(body), await post(body), await post(body)];
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
    expect(new Set(answers.map((a) => a.id)).size).toBe(1);
    const id = answers[0]!.id;
    const row = await settled(id);
    // Later claims and applies of the same id find no pending row: one apply, one activity row.
    expect(await consumer.drain()).toBe(0);
    await applyDelivery(db.pool, id);
    expect(await applyDelivery(db.pool, id)).toEqual({ outcome: 'skipped', status: 'applied' });
    expect(await delivery(id)).toEqual(row);
    expect(row).toMatchObject({ status: 'applied', attempts: 1 });
    expect(await readActivityKeys(db.pool)).toHaveLength(1);
    expect((await db.pool.query('select count(*)::int as n from webhook_deliveries')).rows[0]).toEqual({ n: 1 });
  });

  test('concurrent applies of one delivery: one applies, the others skip', async () => {
    const id = await storeRaw(JSON.parse(updated({ id: '12' })) as unknown);
    const results = await Promise.all(Array.from({ length: 6 }, () => applyDelivery(db.pool, id)));
    expect(results.filter((r) => r.outcome === 'applied')).toHaveLength(1);
    expect(results.filter((r) => r.outcome === 'skipped')).toHaveLength(5);
    expect(await delivery(id)).toMatchObject({ status: 'applied', attempts: 1 });
    expect(await readActivityKeys(db.pool)).toHaveLength(1);
  });
});

describe('never regress (invariant 2)', () => {
  const T1 = '2024-06-01T10:00:00.000001Z';
  const T2 = '2024-06-01T10:00:00.000002Z';

  test('an older subscriber.updated applied after a newer one changes nothing but its activity row', async () => {
    await postAndApply(updated({ id: '21', email: 'new@example.com', updated_at: T2 }));
    const before = await readSubscriber(db.pool, '21');
    await postAndApply(updated({ id: '21', email: 'old@example.com', updated_at: T1 }));
    const after = await readSubscriber(db.pool, '21');
    expect(after).toMatchObject({ email: 'new@example.com', updated_at: T2 });
    expect(after?.xmin).toBe(before?.xmin);
    expect(await readActivityKeys(db.pool)).toHaveLength(2);
  });

  test('a poll write older than the webhook does not regress it', async () => {
    await postAndApply(updated({ id: '22', email: 'webhook@example.com', updated_at: '2024-06-01T10:00:05.500000Z' }));
    const poll = normalizeLegacySubscriber(legacySubscriber({ id: '22', email: 'poll@example.com', date_updated: '2024-06-01 10:00:05' }), {
      sourceTimezone: 'UTC',
    });
    expect(await upsertSubscribers(db.pool, [poll])).toMatchObject({ skipped: 1 });
    expect(await readSubscriber(db.pool, '22')).toMatchObject({ email: 'webhook@example.com', mirrored_via: 'webhook' });
  });

  test('a webhook older than a poll write does not regress it', async () => {
    const poll = normalizeLegacySubscriber(legacySubscriber({ id: '23', email: 'poll@example.com', date_updated: '2024-06-01 10:00:06' }), {
      sourceTimezone: 'UTC',
    });
    await upsertSubscribers(db.pool, [poll]);
    const { row } = await postAndApply(updated({ id: '23', email: 'webhook@example.com', updated_at: '2024-06-01T10:00:05.999999Z' }));
    expect(row.status).toBe('applied');
    expect(await readSubscriber(db.pool, '23')).toMatchObject({
      email: 'poll@example.com',
      updated_at: '2024-06-01T10:00:06.000000Z',
      mirrored_via: 'poll',
    });
  });
});

// ---------------------------------------------------------------------------------------------
// Memberships across deliveries and inside batches

function groupEvent(type: 'subscriber.added_to_group' | 'subscriber.removed_from_group', id: string, at: string, group = '700') {
  return { type, subscriber: webhookSubscriber({ id, updated_at: at }), group: { id: group, name: 'Group 700' } };
}

function deletedEvent(id: string, at: string) {
  return { type: 'subscriber.deleted', subscriber: webhookSubscriber({ id, updated_at: at, deleted_at: at }) };
}

describe('memberships', () => {
  const T0 = '2024-06-02T00:00:00.000000Z';
  const T1 = '2024-06-02T00:00:01.000000Z';
  const T2 = '2024-06-02T00:00:02.000000Z';

  test('a deletion ends the memberships it finds; an older add arriving after it stays ended', async () => {
    await postAndApply(JSON.stringify(groupEvent('subscriber.added_to_group', '31', T0, '701')));
    await postAndApply(JSON.stringify(deletedEvent('31', T1)));
    expect(await readMember(db.pool, '701', '31')).toMatchObject({ removed_at: T1 });
    // The add to group 700 happened before the deletion, but is delivered after it.
    await postAndApply(JSON.stringify(groupEvent('subscriber.added_to_group', '31', T0, '700')));
    expect(await readMember(db.pool, '700', '31')).toMatchObject({ added_at: T0, removed_at: T1 });
    expect(await readSubscriber(db.pool, '31')).toMatchObject({ deleted_at: T1, updated_at: T1 });
  });

  test('an add newer than the deletion (restored subscriber) stays current', async () => {
    await postAndApply(JSON.stringify(deletedEvent('32', T1)));
    await postAndApply(JSON.stringify(groupEvent('subscriber.added_to_group', '32', T2)));
    expect(await readMember(db.pool, '700', '32')).toMatchObject({ added_at: T2, removed_at: null });
  });

  test('a late removal older than an add does not undo it', async () => {
    await postAndApply(JSON.stringify(groupEvent('subscriber.added_to_group', '33', T2)));
    await postAndApply(JSON.stringify(groupEvent('subscriber.removed_from_group', '33', T1)));
    expect(await readMember(db.pool, '700', '33')).toMatchObject({ added_at: T2, removed_at: null, source_updated_at: T2 });
  });

  test('remove and re-add of one member inside one batch apply in upstream order, whatever the batch order', async () => {
    await upsertMemberships(db.pool, '700', [{ subscriberId: '34', type: 'active', at: OLD }], { via: 'poll' });
    const events = [
      groupEvent('subscriber.added_to_group', '34', T2),
      groupEvent('subscriber.removed_from_group', '34', T1),
      groupEvent('subscriber.added_to_group', '34', T0),
    ];
    await postAndApply(JSON.stringify({ events, total: 3 }));
    // The membership restarted at T2 (it ended at T1), not the one listed at OLD.
    expect(await readMember(db.pool, '700', '34')).toMatchObject({ added_at: T2, removed_at: null, source_updated_at: T2 });
    expect(await readActivityKeys(db.pool)).toHaveLength(3);
  });

  test('a batched campaign.sent wrapped in a campaign object (docs/upstream.md, "Batched payloads": nested items, as the simulator sends it)', async () => {
    const campaign = { id: '801', name: 'July', total_recipients: 2, preview_url: 'https://p.example/801', date: T2 };
    const { row } = await postAndApply(JSON.stringify({ events: [{ type: 'campaign.sent', campaign }], total: 1 }));
    expect(row).toMatchObject({ status: 'applied', event_count: 1 });
    const { rows } = await db.pool.query(`select id, name, ${iso('sent_at')} as sent_at from campaigns`);
    expect(rows).toEqual([{ id: '801', name: 'July', sent_at: T2 }]);
  });

  test('campaign.sent then campaign.open of the same campaign in one batch keeps sent_at', async () => {
    const campaign = { id: '800', name: 'June', total_recipients: 3, preview_url: 'https://p.example/800', date: T1 };
    const events = [
      { type: 'campaign.sent', ...campaign },
      { type: 'campaign.open', subscriber: webhookSubscriber({ id: '35' }), campaign: { id: '800', name: 'June (renamed)' } },
    ];
    await postAndApply(JSON.stringify({ events, total: 2 }));
    const { rows } = await db.pool.query(`select name, total_recipients, ${iso('sent_at')} as sent_at from campaigns`);
    expect(rows).toEqual([{ name: 'June (renamed)', total_recipients: 3, sent_at: T1 }]);
  });
});

// ---------------------------------------------------------------------------------------------
// Failures, retries, replay

/** Makes the next `n` activity inserts fail (a sequence: its values survive the rollback). */
async function injectFailures(n: number): Promise<void> {
  await db.pool.query(`
    drop trigger if exists fail_activity on subscriber_activity;
    drop sequence if exists fail_seq;
    create sequence fail_seq;
    create or replace function fail_activity() returns trigger language plpgsql as $$
    begin
      if nextval('fail_seq') <= ${n} then raise exception 'injected failure'; end if;
      return null;
    end $$;
    create trigger fail_activity before insert on subscriber_activity for each statement execute function fail_activity();`);
}

async function removeFailures(): Promise<void> {
  await db.pool.query('drop trigger if exists fail_activity on subscriber_activity');
}

describe('failures', () => {
  test('a failed attempt rolls back everything, stays pending, and is retried until applied', async () => {
    await injectFailures(2);
    try {
      const id = await storeRaw(JSON.parse(updated({ id: '41' })) as unknown);
      const first = await applyDelivery(db.pool, id, { retry: { attempts: 4, backoffMs: 50 } });
      expect(first).toMatchObject({ outcome: 'retry', attempts: 1 });
      expect(await readSubscriber(db.pool, '41')).toBeUndefined();
      expect(await delivery(id)).toMatchObject({ status: 'pending', attempts: 1, applied_at: null });
      expect((await delivery(id))?.error).toContain('injected failure');

      const row = await settled(id);
      expect(row).toMatchObject({ status: 'applied', attempts: 3, error: null });
      expect(await readSubscriber(db.pool, '41')).toBeDefined();
      expect(await readActivityKeys(db.pool)).toHaveLength(1);
    } finally {
      await removeFailures();
    }
  });

  test('a failed try waits for its backoff before it is claimed again', async () => {
    await injectFailures(1);
    try {
      const id = await storeRaw(JSON.parse(updated({ id: '48' })) as unknown);
      const slow = createDeliveryConsumer(consumerDeps({ retry: { attempts: 4, backoffMs: 60_000 } }));
      extraConsumers.push(slow);
      expect(await slow.drain()).toBe(1);
      const { rows } = await db.pool.query<{ tries: number; waits: boolean }>(
        `select tries, next_attempt_at > now() + interval '50 seconds' as waits from webhook_deliveries where id = $1`,
        [id],
      );
      expect(rows[0]).toEqual({ tries: 1, waits: true });
      // Not due: no claim takes it before its time.
      expect(await slow.drain()).toBe(0);
      expect(await delivery(id)).toMatchObject({ status: 'pending', attempts: 1 });
      await db.pool.query(`update webhook_deliveries set next_attempt_at = now() where id = $1`, [id]);
      expect(await slow.drain()).toBe(1);
      expect(await delivery(id)).toMatchObject({ status: 'applied', attempts: 2 });
      await slow.close(1_000);
    } finally {
      await removeFailures();
    }
  });

  test('after the last attempt it is failed, no claim takes it, and replay applies it', async () => {
    await injectFailures(1_000);
    let id: string;
    try {
      ({ id } = await post(updated({ id: '42' })));
      const row = await settled(id);
      expect(row).toMatchObject({ status: 'failed', attempts: 4 });
      expect(row.error).toContain('injected failure');
      await db.pool.query(`update webhook_deliveries set received_at = now() - interval '1 hour'`);
      expect(await consumer.drain()).toBe(0);
    } finally {
      await removeFailures();
    }
    expect(await delivery(id)).toMatchObject({ status: 'failed' });
    expect(await replayDeliveries(db.pool, { since: '2000-01-01T00:00:00Z' })).toEqual([id]);
    expect(await settled(id)).toMatchObject({ status: 'applied', attempts: 5, error: null });
    expect(await replayDeliveries(db.pool)).toEqual([]);
  });

  test('a body that cannot be mirrored fails at once, without retries', async () => {
    const id = await storeRaw({ event: 'subscriber.updated', email: 'no-id@example.com', updated_at: '2024-06-01T00:00:00Z' });
    const row = await settled(id);
    expect(row).toMatchObject({ status: 'failed', attempts: 1 });
    expect(row.error).toMatch(/^PayloadError: invalid subscriber.updated payload: id: id is missing/);
  });

  test('rows that are failed or ignored are not applied', async () => {
    const failed = await storeRaw(JSON.parse(updated({ id: '43' })) as unknown, 'failed');
    const ignored = await storeRaw(JSON.parse(updated({ id: '44' })) as unknown, 'ignored');
    expect(await applyDelivery(db.pool, failed)).toEqual({ outcome: 'skipped', status: 'failed' });
    expect(await applyDelivery(db.pool, ignored)).toEqual({ outcome: 'skipped', status: 'ignored' });
    expect(await applyDelivery(db.pool, '999999')).toEqual({ outcome: 'skipped', status: 'missing' });
    expect(await readSubscriber(db.pool, '43')).toBeUndefined();
  });

  test('a pending row with no known kind is marked ignored, its unknown kinds noted verbatim', async () => {
    const kind = "subscriber.it's\\odd";
    const id = await storeRaw({ events: [{ type: kind, subscriber: webhookSubscriber({ id: '47' }) }], total: 1 });
    expect(await applyDelivery(db.pool, id)).toEqual({ outcome: 'ignored' });
    expect(await delivery(id)).toMatchObject({
      status: 'ignored',
      attempts: 1,
      event_count: 0,
      applied_at: null,
      error: `unknown event kind(s): ${kind}`,
    });
    const { rows } = await db.pool.query('select kinds from webhook_deliveries where id = $1', [id]);
    expect(rows).toEqual([{ kinds: [kind] }]);
  });

  test('replaying ignored rows brings back only those whose kind is now known', async () => {
    const unknown = await storeRaw({ type: 'subscriber.teleported', subscriber: webhookSubscriber({ id: '45' }) }, 'ignored');
    // Stored as ignored by an older release that did not know subscriber.updated.
    const nowKnown = await storeRaw(JSON.parse(updated({ id: '46' })) as unknown, 'ignored');
    expect(await replayDeliveries(db.pool, { status: 'ignored' })).toEqual([nowKnown]);
    expect(await delivery(unknown)).toMatchObject({ status: 'ignored' });
    expect(await settled(nowKnown)).toMatchObject({ status: 'applied', event_count: 1 });
    expect(await readSubscriber(db.pool, '46')).toBeDefined();
  });
});

describe('how the consumer learns of deliveries', () => {
  test('a listening consumer applies a stored delivery when the insert notifies it, and a replayed one when the update does', async () => {
    const listening = createDeliveryConsumer(consumerDeps({ listen: true }));
    extraConsumers.push(listening);
    await listening.listening;
    // Nothing wakes the main consumer here: only the notification can.
    const id = await storeRaw(JSON.parse(updated({ id: '51' })) as unknown);
    await waitFor(
      'the notified consumer to apply it',
      async () => ((await delivery(id))?.status === 'applied' ? true : undefined),
      10_000,
      15,
    );
    expect(await delivery(id)).toMatchObject({ status: 'applied', attempts: 1 });

    const failed = await storeRaw(JSON.parse(updated({ id: '55' })) as unknown, 'failed');
    expect(await replayDeliveries(db.pool, { ids: [failed] })).toEqual([failed]);
    await waitFor(
      'the replayed delivery to be applied',
      async () => ((await delivery(failed))?.status === 'applied' ? true : undefined),
      10_000,
      15,
    );
    await listening.close(5_000);
  });

  test('without notifications the safety-net poll claims what is due', async () => {
    const id = await storeRaw(JSON.parse(updated({ id: '52' })) as unknown);
    const polling = createDeliveryConsumer(consumerDeps({ pollEveryMs: 100 }));
    extraConsumers.push(polling);
    await waitFor('the poll to apply it', async () => ((await delivery(id))?.status === 'applied' ? true : undefined), 10_000, 15);
    await polling.close(5_000);
  });

  test('a pending row stored before the consumer started (a crash, an upgrade) is applied at start', async () => {
    const id = await storeRaw(JSON.parse(updated({ id: '53' })) as unknown);
    const starting = createDeliveryConsumer(consumerDeps({ listen: true }));
    extraConsumers.push(starting);
    await waitFor(
      'the starting consumer to apply it',
      async () => ((await delivery(id))?.status === 'applied' ? true : undefined),
      10_000,
      15,
    );
    await starting.close(5_000);
  });

  test('a worker purges applied deliveries past WEBHOOK_RETENTION on its interval; the mirror keeps their effects', async () => {
    const id = await storeRaw(JSON.parse(updated({ id: '80' })) as unknown);
    expect(await settled(id)).toMatchObject({ status: 'applied' });
    const recent = await storeRaw(JSON.parse(updated({ id: '81' })) as unknown);
    expect(await settled(recent)).toMatchObject({ status: 'applied' });
    await db.pool.query(`update webhook_deliveries set received_at = now() - interval '2 hours' where id = $1`, [id]);

    const purging = createDeliveryConsumer(consumerDeps({ retentionMs: 3_600_000, purgeEveryMs: 100 }));
    extraConsumers.push(purging);
    await waitFor('the old delivery to be purged', async () => (await delivery(id)) === undefined || undefined, 10_000, 15);
    expect(await delivery(recent)).toMatchObject({ status: 'applied' });
    expect(await readSubscriber(db.pool, '80')).toBeDefined();
    expect(await consumer.purge()).toBe(0); // no retention configured: keeps everything
    await purging.close(1_000);
  });
});

/**
 * Erasure that does not depend on one delivery (docs/security.md, "Personal data and erasure"): forgetting redacts stored
 * bodies, failed and pending bodies age out, and a subscriber out of every configured group past the
 * period has its personal data erased.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runErasure } from '../../src/webhooks/erasure-run.js';
import { applyPlan, planDelivery } from '../../src/webhooks/apply.js';
import { purgeDeliveries } from '../../src/webhooks/inbox/lifecycle.js';
import { bodySha256, storeDelivery, type DeliveryRecord } from '../../src/webhooks/inbox/write.js';
import { parseDelivery } from '../../src/webhooks/payloads.js';
import { redactBody } from '../../src/webhooks/redact.js';
import { loadFixtures } from '../fixtures/webhooks/index.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

const DAY = 86_400_000;
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db.drop();
});

function recordOf(text: string, status: DeliveryRecord['status'] = 'pending'): DeliveryRecord {
  const body = JSON.parse(text) as object;
  return { raw: Buffer.from(text), body, kinds: [], eventCount: 1, endpointId: null, status };
}

async function applyText(text: string): Promise<void> {
  const plan = planDelivery(parseDelivery(JSON.parse(text)).events);
  const client = await db.pool.connect();
  try {
    await client.query('begin');
    await applyPlan(client, plan);
    await client.query('commit');
  } finally {
    client.release();
  }
}

async function bodyText(id: string): Promise<string> {
  const { rows } = await db.pool.query<{ body: string }>('select body::text as body from webhook_deliveries where id = $1', [id]);
  return rows[0]?.body ?? '';
}

const fixture = (name: string) => {
  const found = loadFixtures().find((f) => f.name === name);
  if (!found) throw new Error(`no fixture ${name}`);
  return found.body;
};

describe('forget redacts stored deliveries', () => {
  it('erases the subscriber in every stored body that carries it, keeps the hash, the others and the big ids exact', async () => {
    const forget = fixture('subscriber.deleted.nested');
    const forgottenId = '117300118392080373';
    // An earlier delivery about the same person, with a large id written as a JSON number, next to another subscriber.
    const earlier = JSON.stringify({
      events: [
        {
          type: 'subscriber.updated',
          subscriber: {
            id: 'ID',
            email: 'former.customer@example.com',
            name: 'Olga',
            ip_address: '203.0.113.24',
            fields: { last_name: 'Petrova' },
            phone_hash: 'x1',
            status: 'active',
            updated_at: '2024-06-01T00:00:00.000000Z',
          },
        },
        { type: 'subscriber.updated', subscriber: { id: 'OTHER', email: 'stays@example.com', status: 'active' } },
      ],
    })
      .replace('"ID"', forgottenId)
      .replace('"OTHER"', '1261159647788771324');
    const before = await storeDelivery(db.pool, recordOf(earlier, 'ignored'));
    const forgetRow = await storeDelivery(db.pool, recordOf(forget));
    await applyText(forget);

    const subscriber = await db.pool.query('select email, forget_at from subscribers where id = $1', [forgottenId]);
    expect(subscriber.rows[0]).toMatchObject({ email: null });

    const result = await runErasure(db.pool, { groups: [], types: [], outOfGroupsAfterMs: 0 });
    expect(result).toMatchObject({ forgotten: 1, redactedDeliveries: 2 });

    for (const id of [before.id, forgetRow.id]) {
      const text = await bodyText(id);
      expect(text).not.toContain('former.customer@example.com');
      expect(text).not.toContain('Petrova');
      expect(text).not.toContain('203.0.113.24');
      expect(text).toContain(forgottenId);
    }
    const earlierText = await bodyText(before.id);
    expect(earlierText).not.toContain('phone_hash');
    expect(earlierText).toContain('stays@example.com');
    expect(earlierText).toContain('1261159647788771324'); // a JSON number beyond 2^53, unchanged
    expect(earlierText).toContain('"updated_at": "2024-06-01T00:00:00.000000Z"');

    // The dedupe key is the hash of the bytes received: a redelivery is still a duplicate.
    const { rows } = await db.pool.query<{ body_sha256: string }>('select body_sha256 from webhook_deliveries where id = $1', [
      forgetRow.id,
    ]);
    expect(rows[0]?.body_sha256).toBe(bodySha256(Buffer.from(forget)));
    expect((await storeDelivery(db.pool, recordOf(forget))).duplicate).toBe(true);

    // Done once: the next run finds nothing to redact.
    expect(await runErasure(db.pool, { groups: [], types: [], outOfGroupsAfterMs: 0 })).toMatchObject({
      forgotten: 0,
      redactedDeliveries: 0,
    });
  });

  it('leaves bodies that mention the id only as a group or campaign id', () => {
    const text = JSON.stringify({
      type: 'campaign.open',
      campaign: { id: '42', name: 'Spring' },
      subscriber: { id: '7', email: 'x@example.com' },
    });
    expect(redactBody(text, new Set(['42']))).toBeNull();
    expect(redactBody(text, new Set(['7']))).not.toContain('x@example.com');
  });
});

describe('failed and pending bodies age out', () => {
  it('deletes failed and pending rows past their own, longer retention', async () => {
    const aged = async (tag: string, status: string, ageDays: number) => {
      const { id } = await storeDelivery(db.pool, recordOf(JSON.stringify({ tag }), 'pending'));
      await db.pool.query(`update webhook_deliveries set status = $2, received_at = now() - make_interval(days => $3) where id = $1`, [
        id,
        status,
        ageDays,
      ]);
    };
    await db.pool.query('delete from webhook_deliveries');
    await aged('old-failed', 'failed', 100);
    await aged('old-pending', 'pending', 95);
    await aged('mid-failed', 'failed', 40);
    await aged('old-applied', 'applied', 40);
    await aged('new-failed', 'failed', 1);
    expect(await purgeDeliveries(db.pool, 30 * DAY, { failedOlderThanMs: 90 * DAY })).toBe(3);
    const { rows } = await db.pool.query<{ tag: string }>(`select body->>'tag' as tag from webhook_deliveries order by 1`);
    expect(rows.map((r) => r.tag)).toEqual(['mid-failed', 'new-failed']);
  });
});

describe('dedupe hashes outlive the bodies', () => {
  it('a delivery replayed after its retention is recognised and not stored again', async () => {
    const text = JSON.stringify({ type: 'subscriber.updated', subscriber: { id: '77', email: 'captured@example.com' } });
    const first = await storeDelivery(db.pool, recordOf(text, 'pending'));
    await db.pool.query(`update webhook_deliveries set status = 'applied', received_at = now() - interval '40 days' where id = $1`, [
      first.id,
    ]);
    expect(await purgeDeliveries(db.pool, 30 * DAY)).toBeGreaterThanOrEqual(1);
    const sha = bodySha256(Buffer.from(text));
    const gone = await db.pool.query('select count(*)::int as n from webhook_deliveries where body_sha256 = $1', [sha]);
    expect(gone.rows[0].n).toBe(0);

    const replay = await storeDelivery(db.pool, recordOf(text, 'pending'));
    expect(replay).toEqual({ id: first.id, duplicate: true, status: 'applied' });
    const after = await db.pool.query(`select count(*)::int as n from webhook_deliveries where body::text like '%captured@example.com%'`);
    expect(after.rows[0].n).toBe(0);
  });
});

describe('subscribers out of every configured group', () => {
  const GROUPS = ['100', '200'];
  const TYPES = ['active', 'unsubscribed'];

  async function subscriber(id: string, memberships: Array<{ group: string; removedDaysAgo: number | null }>): Promise<void> {
    await db.pool.query(
      `insert into subscribers (id, email, name, ip_address, optin_ip, fields, extra, status, created_at, updated_at, version_at, mirrored_via, mirrored_at)
       values ($1, $1 || '@example.com', 'Name ' || $1, '203.0.113.9', '192.0.2.1', '{"city":"Vilnius"}', '{"x":1}', 'active',
               '2024-01-01T00:00:00Z', '2024-02-01T00:00:00.123456Z', '2024-02-01T00:00:00.123456Z', 'poll', now() - interval '60 days')`,
      [id],
    );
    for (const m of memberships) {
      await db.pool.query(
        `insert into group_members (group_id, subscriber_id, type, added_at, removed_at, mirrored_via)
         values ($1, $2, 'active', now() - interval '100 days', case when $3::int is null then null else now() - make_interval(days => $3::int) end, 'poll')`,
        [m.group, id, m.removedDaysAgo],
      );
    }
  }

  async function completeFullPasses(daysAgo: number, except?: { group: string; type: string }): Promise<void> {
    await db.pool.query('delete from sync_state');
    await db.pool.query('delete from sync_passes');
    for (const group of GROUPS) {
      for (const type of TYPES) {
        const complete = !(except && except.group === group && except.type === type);
        await db.pool.query(`insert into sync_state (group_id, type) values ($1, $2)`, [group, type]);
        if (!complete) continue;
        await db.pool.query(
          `insert into sync_passes (group_id, type, kind, source, started_at, listed_from, ended_at, status, complete, gap_free)
           select $1, $2, 'full', 'legacy', t, t, t, 'succeeded', true, true from (select now() - make_interval(days => $3) as t) x`,
          [group, type, daysAgo],
        );
      }
    }
  }

  async function personal(id: string) {
    const { rows } = await db.pool.query(
      `select email, name, ip_address, optin_ip, fields, extra, status, created_at::text, updated_at::text from subscribers where id = $1`,
      [id],
    );
    return rows[0] as Record<string, unknown>;
  }

  const options = { groups: GROUPS, types: TYPES, outOfGroupsAfterMs: 30 * DAY };

  beforeAll(async () => {
    await db.pool.query('delete from webhook_deliveries');
    await subscriber('s-member', [
      { group: '100', removedDaysAgo: null },
      { group: '200', removedDaysAgo: 50 },
    ]);
    await subscriber('s-gone', [{ group: '100', removedDaysAgo: 40 }]);
    await subscriber('s-elsewhere', [
      { group: '100', removedDaysAgo: 45 },
      { group: '999', removedDaysAgo: null },
    ]);
    await subscriber('s-recent', [{ group: '200', removedDaysAgo: 10 }]);
    await subscriber('s-never', []);
    await storeDelivery(
      db.pool,
      recordOf(JSON.stringify({ type: 'subscriber.updated', subscriber: { id: 's-gone', email: 's-gone@example.com' } }), 'ignored'),
    );
    // History (issue #13): an earlier version of each, with personal data.
    await db.pool.query(
      `insert into subscriber_versions_past (subscriber_id, valid_from, via, email, name, status, fields)
       select id, '2024-01-15T00:00:00Z', 'poll', 'old.' || id || '@example.com', 'Old name', 'active', '{"city":"Riga"}'
         from unnest(array['s-gone', 's-member']) as id`,
    );
  });

  it('erases nobody until every configured group × type has completed a reconciliation', async () => {
    await completeFullPasses(1, { group: '200', type: 'unsubscribed' });
    expect(await runErasure(db.pool, options)).toMatchObject({ erased: 0 });
    expect(await personal('s-gone')).toMatchObject({ email: 's-gone@example.com' });
  });

  it('erases those out of every configured group for longer than the period, keeping id, status and timestamps', async () => {
    await completeFullPasses(1);
    const result = await runErasure(db.pool, options);
    expect(result).toMatchObject({ erased: 3, redactedDeliveries: 1 });
    for (const id of ['s-gone', 's-elsewhere', 's-never']) {
      expect(await personal(id), id).toEqual({
        email: null,
        name: null,
        ip_address: null,
        optin_ip: null,
        fields: {},
        extra: {},
        status: 'active',
        created_at: '2024-01-01 00:00:00+00',
        updated_at: '2024-02-01 00:00:00.123456+00',
      });
    }
    // Still a member somewhere configured, or out for less than the period: untouched.
    expect(await personal('s-member')).toMatchObject({ email: 's-member@example.com', fields: { city: 'Vilnius' } });
    expect(await personal('s-recent')).toMatchObject({ email: 's-recent@example.com' });
    const { rows } = await db.pool.query<{ body: string }>(`select body::text as body from webhook_deliveries`);
    expect(rows[0]?.body).not.toContain('s-gone@example.com');
    const log = await db.pool.query(`select subscriber_id, reason from erasures where reason = 'out_of_groups' order by 1`);
    expect(log.rows.map((r: { subscriber_id: string }) => r.subscriber_id)).toEqual(['s-elsewhere', 's-gone', 's-never']);
    // Every version in history too; the member's history is untouched.
    const history = await db.pool.query(
      `select subscriber_id, email, name, fields from subscriber_versions where subscriber_id in ('s-gone', 's-member') order by 1, valid_from`,
    );
    expect(history.rows).toEqual([
      { subscriber_id: 's-gone', email: null, name: null, fields: {} },
      { subscriber_id: 's-gone', email: null, name: null, fields: {} },
      { subscriber_id: 's-member', email: 'old.s-member@example.com', name: 'Old name', fields: { city: 'Riga' } },
      { subscriber_id: 's-member', email: 's-member@example.com', name: 'Name s-member', fields: { city: 'Vilnius' } },
    ]);
  });

  it('a reconciliation older than the departure confirms nothing', async () => {
    await subscriber('s-after-pass', [{ group: '100', removedDaysAgo: 35 }]);
    await completeFullPasses(36);
    expect(await runErasure(db.pool, options)).toMatchObject({ erased: 0 });
    expect(await personal('s-after-pass')).toMatchObject({ email: 's-after-pass@example.com' });
  });

  it('0 disables the path', async () => {
    await completeFullPasses(1);
    expect(await runErasure(db.pool, { ...options, outOfGroupsAfterMs: 0 })).toMatchObject({ erased: 0 });
  });
});

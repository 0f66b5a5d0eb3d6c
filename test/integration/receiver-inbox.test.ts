/**
 * The inbox (src/webhooks/inbox/) against real Postgres: the statements, dedupe by body hash (invariant 5), and concurrent
 * batches. The route itself is covered in receiver.test.ts.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import { purgeDeliveries } from '../../src/webhooks/inbox/lifecycle.js';
import {
  AccountNotDeclaredError,
  bodySha256,
  createInboxWriter,
  loadSecrets,
  storeDelivery,
  type DeliveryRecord,
} from '../../src/webhooks/inbox/write.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

beforeEach(async () => {
  await db.pool.query('truncate webhook_deliveries, webhook_endpoints');
});

function record(tag: string, overrides: Partial<DeliveryRecord> = {}, padding = 0): DeliveryRecord {
  const body = { event: 'subscriber.updated', id: tag, padding: 'x'.repeat(padding) };
  return {
    raw: Buffer.from(JSON.stringify(body)),
    body,
    kinds: ['subscriber.updated'],
    eventCount: 1,
    endpointId: null,
    status: 'pending',
    ...overrides,
  };
}

async function count(): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>('select count(*)::int as n from webhook_deliveries');
  return rows[0]!.n;
}

describe('storeDelivery', () => {
  test('writes every column; a second identical body is a no-op reporting the same id', async () => {
    const r = record('1', { kinds: ['subscriber.updated', 'x.y'], endpointId: '68074372004316503', status: 'failed', error: 'why' });
    const first = await storeDelivery(db.pool, r);
    expect(first).toMatchObject({ duplicate: false, status: 'failed' });
    const { rows } = await db.pool.query(
      'select id::text as id, body_sha256, body, kinds, event_count, endpoint_id, status, error, attempts from webhook_deliveries',
    );
    expect(rows).toEqual([
      {
        id: first.id,
        body_sha256: bodySha256(r.raw),
        body: r.body,
        kinds: ['subscriber.updated', 'x.y'],
        event_count: 1,
        endpoint_id: '68074372004316503',
        status: 'failed',
        error: 'why',
        attempts: 0,
      },
    ]);
    const again = await storeDelivery(db.pool, { ...r, status: 'pending', error: null });
    expect(again).toEqual({ id: first.id, duplicate: true, status: 'failed' });
    expect(await count()).toBe(1);
  });

  test('an empty kinds list is stored as an empty array', async () => {
    await storeDelivery(db.pool, record('2', { kinds: [], eventCount: 0, status: 'ignored' }));
    const { rows } = await db.pool.query('select kinds from webhook_deliveries');
    expect(rows[0]).toEqual({ kinds: [] });
  });
});

describe('createInboxWriter', () => {
  test('results map to their own rows whatever the order inside the statement', async () => {
    const writer = createInboxWriter(db.pool, { maxWaitMs: 5 });
    const records = Array.from({ length: 50 }, (_, i) => record(`r${i}`));
    const results = await Promise.all(records.map((r) => writer.store(r)));
    const { rows } = await db.pool.query<{ id: string; sha: string }>('select id::text as id, body_sha256 as sha from webhook_deliveries');
    const idBySha = new Map(rows.map((r) => [r.sha, r.id]));
    records.forEach((r, i) => expect(results[i]?.id).toBe(idBySha.get(bodySha256(r.raw))));
    expect(writer.stats().batches).toBeLessThan(50);
    await writer.close();
  });

  test("a batch holding a row of an account not declared yet stores the other accounts' rows and refuses only that one", async () => {
    await db.pool.query(`insert into accounts (name) values ('shop') on conflict do nothing`);
    const writer = createInboxWriter(db.pool, { maxWaitMs: 20 });
    const results = await Promise.allSettled([
      writer.store(record('declared-1'), 'default'),
      writer.store(record('undeclared'), 'brand_new'),
      writer.store(record('declared-2'), 'shop'),
    ]);
    expect(writer.stats().batches, 'one statement was sent for the three').toBe(1);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    const refused = (results[1] as PromiseRejectedResult).reason as Error;
    expect(refused).toBeInstanceOf(AccountNotDeclaredError);
    expect(refused.message).toMatch(/^account brand_new is not declared/);
    const { rows } = await db.pool.query<{ account: string }>('select account from webhook_deliveries order by account');
    expect(rows.map((r) => r.account)).toEqual(['default', 'shop']);
    await writer.close();
  });

  test('concurrent batches holding the same bodies in opposite orders do not deadlock', async () => {
    // Two writers = two statements in flight on two connections, like two busy moments of the route.
    const a = createInboxWriter(db.pool, { maxWaitMs: 5 });
    const b = createInboxWriter(db.pool, { maxWaitMs: 5 });
    for (let round = 0; round < 4; round++) {
      const records = Array.from({ length: 25 }, (_, i) => record(`${round}-${i}`, {}, 100_000));
      const results = await Promise.allSettled([...records.map((r) => a.store(r)), ...[...records].reverse().map((r) => b.store(r))]);
      const failed = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
      expect(failed.map((f) => (f.reason as { code?: string }).code)).toEqual([]);
      const fulfilled = results.map((r) => (r as PromiseFulfilledResult<{ duplicate: boolean }>).value);
      expect(fulfilled.filter((r) => !r.duplicate)).toHaveLength(25);
    }
    expect(await count()).toBe(100);
    await Promise.all([a.close(), b.close()]);
  });
});

describe('loadSecrets', () => {
  test('returns every endpoint with a secret, enabled or not (the service delivers the moment it enables one)', async () => {
    await db.pool.query(
      `insert into webhook_endpoints (id, url, events, secret, enabled) values
         ('1', 'https://example.com/a', '{subscriber.created}', 'secret-one', true),
         ('2', 'https://example.com/b', '{subscriber.created}', 'secret-two', false),
         ('3', 'https://example.com/c', '{campaign.open}', 'secret-three', true),
         ('4', 'https://example.com/d', '{campaign.open}', '', true)`,
    );
    expect(await loadSecrets(db.pool)).toEqual([
      { endpointId: '1', secret: 'secret-one' },
      { endpointId: '2', secret: 'secret-two' },
      { endpointId: '3', secret: 'secret-three' },
    ]);
  });
});

describe('purgeDeliveries (WEBHOOK_RETENTION)', () => {
  const DAY = 86_400_000;

  async function stored(tag: string, status: string, ageDays: number): Promise<string> {
    const { id } = await storeDelivery(db.pool, record(tag));
    await db.pool.query(`update webhook_deliveries set status = $2, received_at = now() - make_interval(days => $3) where id = $1`, [
      id,
      status,
      ageDays,
    ]);
    return id;
  }

  async function remaining(): Promise<string[]> {
    const { rows } = await db.pool.query<{ tag: string }>(`select body->>'id' as tag from webhook_deliveries order by 1`);
    return rows.map((r) => r.tag);
  }

  test('deletes applied and ignored deliveries past the retention, in batches, and keeps pending, failed and recent ones', async () => {
    for (let i = 0; i < 7; i++) await stored(`old-applied-${i}`, 'applied', 40);
    await stored('old-ignored', 'ignored', 31);
    await stored('old-failed', 'failed', 40);
    await stored('old-pending', 'pending', 40);
    await stored('new-applied', 'applied', 29);
    await stored('new-ignored', 'ignored', 1);

    expect(await purgeDeliveries(db.pool, 30 * DAY, { batch: 3 })).toBe(8); // 3 + 3 + 2: batches until a short one
    expect(await remaining()).toEqual(['new-applied', 'new-ignored', 'old-failed', 'old-pending']);
    expect(await purgeDeliveries(db.pool, 30 * DAY, { batch: 3 })).toBe(0);
  });

  test('a purged delivery delivered again is a duplicate of the purged one: its hash outlives its body, nothing is stored again', async () => {
    const id = await stored('again', 'applied', 40);
    await purgeDeliveries(db.pool, 30 * DAY);
    const second = await storeDelivery(db.pool, record('again'));
    expect(second).toEqual({ id, duplicate: true, status: 'applied' });
    const { rows } = await db.pool.query('select count(*)::int as n from webhook_deliveries where id = $1', [id]);
    expect(rows[0]).toEqual({ n: 0 });
  });
});

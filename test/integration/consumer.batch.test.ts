/**
 * Batches (src/webhooks/apply-batch.ts) against real Postgres: a delivery that fails alone is retried
 * alone while the rest of its batch is applied; a batch whose transaction fails as a whole falls back
 * to one apply per delivery; replicas claiming at once apply every delivery exactly once; deliveries
 * of one subscriber in one batch are applied in version order; deliveries left pending by the
 * release before batches (queued in Redis, which the new worker never reads) are applied after the upgrade.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import { MIGRATIONS_FOLDER, runMigrations } from '../../src/db/migrate.js';
import { createLogger } from '../../src/ground/log.js';
import { applyBatch } from '../../src/webhooks/apply-batch.js';
import { createDeliveryConsumer } from '../../src/webhooks/consumer.js';
import { storeDelivery } from '../../src/webhooks/inbox/write.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { readActivityKeys } from '../helpers/mirror.js';
import { readSubscriber, webhookSubscriber } from '../fixtures/mirror/rows.js';

let db: TestDatabase;
const RETRY = { attempts: 4, backoffMs: 50 };

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

beforeEach(async () => {
  await db.pool.query('drop trigger if exists fail_one on subscriber_activity');
  await db.pool.query('truncate subscribers, group_members, subscriber_activity, webhook_deliveries');
});

function updated(overrides: Record<string, unknown>): Record<string, unknown> {
  return { event: 'subscriber.updated', account_id: 1, ...webhookSubscriber(overrides) };
}

async function store(body: Record<string, unknown>): Promise<string> {
  const raw = Buffer.from(JSON.stringify(body));
  return (await storeDelivery(db.pool, { raw, body, kinds: [], eventCount: 1, endpointId: null, status: 'pending' })).id;
}

async function rows(): Promise<Array<{ id: string; status: string; attempts: number; tries: number }>> {
  const { rows: found } = await db.pool.query<{ id: string; status: string; attempts: number; tries: number }>(
    'select id::text as id, status, attempts, tries from webhook_deliveries order by id',
  );
  return found;
}

/** Activity rows of subscriber `id` fail: as a row trigger at once, or as a deferred one at commit. */
async function failActivityOf(id: string, when: 'at once' | 'at commit'): Promise<void> {
  await db.pool.query(`
    create or replace function fail_one() returns trigger language plpgsql as $$
    begin raise exception 'injected failure'; end $$;
    drop trigger if exists fail_one on subscriber_activity;
    create ${when === 'at commit' ? 'constraint' : ''} trigger fail_one after insert on subscriber_activity
      ${when === 'at commit' ? 'deferrable initially deferred' : ''}
      for each row when (new.subscriber_id = '${id}') execute function fail_one();`);
}

describe('a batch', () => {
  test('applies every delivery it claims in one transaction', async () => {
    for (let i = 1; i <= 20; i++) await store(updated({ id: String(i), email: `s${i}@example.com` }));
    const batch = await applyBatch(db.pool, { limit: 50, retry: RETRY });
    expect(batch).toMatchObject({ claimed: 20, fellBack: false });
    expect(batch.results.every((r) => r.result.outcome === 'applied')).toBe(true);
    const { rows: xmins } = await db.pool.query<{ n: number }>(`select count(distinct xmin::text)::int as n from webhook_deliveries`);
    expect(xmins[0]?.n).toBe(1);
    expect((await rows()).every((r) => r.status === 'applied' && r.attempts === 1)).toBe(true);
    expect(await readActivityKeys(db.pool)).toHaveLength(20);
  });

  test('claims at most its limit, oldest first', async () => {
    const ids: string[] = [];
    for (let i = 1; i <= 5; i++) ids.push(await store(updated({ id: String(i) })));
    expect((await applyBatch(db.pool, { limit: 3, retry: RETRY })).results.map((r) => r.id)).toEqual(ids.slice(0, 3));
    expect((await rows()).map((r) => r.status)).toEqual(['applied', 'applied', 'applied', 'pending', 'pending']);
  });

  test('holds at most maxBytes of bodies (the first whatever its size); the rows it claimed beyond wait for the next', async () => {
    for (let i = 1; i <= 3; i++) await store(updated({ id: String(i) }));
    const first = await applyBatch(db.pool, { limit: 50, maxBytes: 1, retry: RETRY });
    expect(first).toMatchObject({ claimed: 3, full: true });
    expect(first.results).toHaveLength(1);
    expect((await rows()).map((r) => r.status)).toEqual(['applied', 'pending', 'pending']);
    expect((await applyBatch(db.pool, { limit: 50, retry: RETRY })).results).toHaveLength(2);
    expect((await rows()).map((r) => r.status)).toEqual(['applied', 'applied', 'applied']);
  });

  test('a delivery that fails alone is retried alone; the others of its batch are applied', async () => {
    await failActivityOf('3', 'at once');
    for (let i = 1; i <= 5; i++) await store(updated({ id: String(i) }));
    const batch = await applyBatch(db.pool, { limit: 50, retry: RETRY });
    expect(batch.fellBack).toBe(false);
    expect((await rows()).map((r) => [r.status, r.attempts, r.tries])).toEqual([
      ['applied', 1, 0],
      ['applied', 1, 0],
      ['pending', 1, 1],
      ['applied', 1, 0],
      ['applied', 1, 0],
    ]);
    expect(await readSubscriber(db.pool, '3')).toBeUndefined();
    expect(await readActivityKeys(db.pool)).toHaveLength(4);

    await db.pool.query('drop trigger fail_one on subscriber_activity');
    await db.pool.query('update webhook_deliveries set next_attempt_at = now()');
    expect((await applyBatch(db.pool, { limit: 50, retry: RETRY })).claimed).toBe(1);
    expect((await rows()).map((r) => [r.status, r.attempts])).toEqual([
      ['applied', 1],
      ['applied', 1],
      ['applied', 2],
      ['applied', 1],
      ['applied', 1],
    ]);
    expect(await readActivityKeys(db.pool)).toHaveLength(5);
  });

  test('a batch whose transaction fails as a whole falls back to one apply per delivery', async () => {
    await failActivityOf('2', 'at commit');
    for (let i = 1; i <= 3; i++) await store(updated({ id: String(i) }));
    const batch = await applyBatch(db.pool, { limit: 50, retry: RETRY });
    expect(batch).toMatchObject({ claimed: 3, fellBack: true });
    expect((await rows()).map((r) => [r.status, r.attempts])).toEqual([
      ['applied', 1],
      ['pending', 1],
      ['applied', 1],
    ]);
    expect(await readActivityKeys(db.pool)).toHaveLength(2);
  });

  test('a permanent failure in a batch marks that delivery failed at once', async () => {
    await store(updated({ id: '1' }));
    await store({ event: 'subscriber.updated', email: 'no-id@example.com', updated_at: '2024-06-01T00:00:00Z' });
    await applyBatch(db.pool, { limit: 50, retry: RETRY });
    expect((await rows()).map((r) => [r.status, r.attempts])).toEqual([
      ['applied', 1],
      ['failed', 1],
    ]);
  });

  test('deliveries of one subscriber are applied in version order whatever order they were received in', async () => {
    const newer = updated({ id: '7', email: 'newer@example.com', updated_at: '2024-06-02T00:00:00.000000Z' });
    const older = updated({ id: '7', email: 'older@example.com', updated_at: '2024-06-01T00:00:00.000000Z' });
    await store(newer);
    await store(older);
    await store(updated({ id: '8' }));
    const batch = await applyBatch(db.pool, { limit: 50, retry: RETRY });
    expect(batch.results.every((r) => r.result.outcome === 'applied')).toBe(true);
    expect(await readSubscriber(db.pool, '7')).toMatchObject({ email: 'newer@example.com' });
    // Both versions reached the history, the older one first.
    const { rows: versions } = await db.pool.query<{ email: string }>(
      `select email from subscriber_versions where subscriber_id = '7' order by valid_from`,
    );
    expect(versions.map((v) => v.email)).toEqual(['older@example.com', 'newer@example.com']);
  });
});

describe('erasure in a batch', () => {
  test('a forget and an earlier delivery of the same subscriber in one batch: both bodies redacted once it commits', async () => {
    const id = '117300118392080373';
    const earlier = await store(updated({ id, email: 'former.customer@example.com', updated_at: '2024-06-01T00:00:00.000000Z' }));
    const forget = await store({
      type: 'subscriber.deleted',
      subscriber: {
        ...webhookSubscriber({ id, email: 'former.customer@example.com' }),
        updated_at: '2024-06-21T16:40:00.123456Z',
        deleted_at: '2024-06-21T16:40:00.123456Z',
        forget_at: '2024-07-21T16:40:00.123456Z',
      },
    });
    const other = await store(updated({ id: '9', email: 'stays@example.com' }));
    const batch = await applyBatch(db.pool, { limit: 50, retry: RETRY });
    expect(batch.results.map((r) => r.result.outcome)).toEqual(['applied', 'applied', 'applied']);
    const { rows: bodies } = await db.pool.query<{ id: string; body: string }>(
      'select id::text as id, body::text as body from webhook_deliveries order by id',
    );
    const text = new Map(bodies.map((r) => [r.id, r.body]));
    for (const redacted of [earlier, forget]) expect(text.get(redacted)).not.toContain('former.customer@example.com');
    expect(text.get(other)).toContain('stays@example.com');
    const { rows: subscribers } = await db.pool.query('select email from subscribers where id = $1', [id]);
    expect(subscribers).toEqual([{ email: null }]);
  });
});

describe('replicas', () => {
  test('two consumers claiming at once apply each of 300 deliveries exactly once', async () => {
    for (let i = 1; i <= 300; i++) await store(updated({ id: String(1000 + i), email: `r${i}@example.com` }));
    const logger = createLogger({ level: 'silent' }).logger;
    const replicas = [1, 2].map(() => createDeliveryConsumer({ pool: db.pool, logger, listen: false, pollEveryMs: 0, batchSize: 25 }));
    // Two idle connections first, so that both drains claim at once: on a loaded machine, one
    // drain opening a connection could otherwise find the other already done (a CI run saw 300 and 0).
    await Promise.all([db.pool.query('select pg_sleep(0.01)'), db.pool.query('select pg_sleep(0.01)')]);
    try {
      const taken = await Promise.all(replicas.map((r) => r.drain()));
      expect(taken[0]! + taken[1]!).toBe(300);
      expect(taken.every((n) => n > 0)).toBe(true);
    } finally {
      for (const r of replicas) await r.close(5_000);
    }
    const all = await rows();
    expect(all.every((r) => r.status === 'applied' && r.attempts === 1)).toBe(true);
    expect(await readActivityKeys(db.pool)).toHaveLength(300);
  });
});

describe('upgrade in place', () => {
  test('deliveries pending under the queue-based release are applied by the new worker after migrating', async () => {
    // The migrations of the release before issue 37, as an install that has them.
    const before = mkdtempSync(path.join(tmpdir(), 'sm-migrations-'));
    const old = await createTestDatabase({ migrated: false });
    try {
      cpSync(MIGRATIONS_FOLDER, before, { recursive: true });
      const journalPath = path.join(before, 'meta', '_journal.json');
      const journal = JSON.parse(readFileSync(journalPath, 'utf8')) as { entries: Array<{ tag: string }> };
      const claimsAt = journal.entries.findIndex((e) => e.tag.endsWith('_inbox_claims'));
      expect(claimsAt).toBeGreaterThan(0);
      journal.entries = journal.entries.slice(0, claimsAt);
      writeFileSync(journalPath, JSON.stringify(journal));
      await runMigrations(old.url, before);
      // What the old receiver wrote: pending rows (their jobs waited in Redis), one of them retried twice already.
      for (const [i, attempts] of [0, 0, 2].entries()) {
        const body = JSON.stringify(updated({ id: String(500 + i) }));
        await old.pool.query(
          `insert into webhook_deliveries (body_sha256, body, kinds, event_count, status, attempts)
           values (md5($1), $1::jsonb, '{subscriber.updated}', 1, 'pending', $2)`,
          [body, attempts],
        );
      }

      await runMigrations(old.url);
      const logger = createLogger({ level: 'silent' }).logger;
      const worker = createDeliveryConsumer({ pool: old.pool, logger, pollEveryMs: 0 });
      try {
        await worker.listening;
        await expect
          .poll(async () => (await old.pool.query(`select status, attempts from webhook_deliveries order by id`)).rows, { timeout: 10_000 })
          .toEqual([
            { status: 'applied', attempts: 1 },
            { status: 'applied', attempts: 1 },
            { status: 'applied', attempts: 3 },
          ]);
      } finally {
        await worker.close(5_000);
      }
      const { rows: subscribers } = await old.pool.query('select id from subscribers order by id');
      expect(subscribers).toEqual([{ id: '500' }, { id: '501' }, { id: '502' }]);
    } finally {
      rmSync(before, { recursive: true, force: true });
      await old.drop();
    }
  });
});

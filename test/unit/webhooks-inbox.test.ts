/**
 * The batching inbox writer and the secret cache against in-memory fakes (no I/O). The real
 * statements run against Postgres in test/integration/receiver.test.ts.
 */
import { describe, expect, test } from 'vitest';
import type { Queryable, QueryConfig } from '../../src/ground/queryable.js';
import { bodySha256, createInboxWriter, type DeliveryRecord } from '../../src/webhooks/inbox/write.js';
import { createSecretCache } from '../../src/webhooks/receiver.js';

interface Call {
  sql: string;
  values: unknown[];
  settle: { resolve(): void; reject(error: unknown): void };
}

/**
 * A fake pool with an in-memory `webhook_deliveries`: each INSERT stays open until the test settles
 * it, like a statement waiting for its COMMIT.
 */
function fakePool(options: { autoSettle?: boolean; refuse?: (bodyText: string) => boolean } = {}) {
  // Keyed by account and hash, as the inbox's unique index is.
  const table = new Map<string, { id: string; status: string; body: string }>();
  const calls: Call[] = [];
  let nextId = 1;
  let sessionAsks = 0;
  const key = (account: string, sha: string) => `${account} ${sha}`;
  const pool: Queryable = {
    query(query: string | QueryConfig, given: unknown[] = []) {
      // A named statement comes as a config (the inbox's insert is prepared once per connection).
      const sql = typeof query === 'string' ? query : query.text;
      const values = typeof query === 'string' ? given : (query.values ?? []);
      // The session's account is asked before the first statement of rows that name none.
      if (sql.includes('select mirror_account()')) {
        sessionAsks++;
        return Promise.resolve({ rows: [{ account: 'default' }] as never[], rowCount: 1 });
      }
      // Typed rows are never read back by name: `never[]` fits every row type the inbox asks for.
      return new Promise<{ rows: never[]; rowCount: null }>((resolve, reject) => {
        const run = () => {
          if (sql.includes('insert into webhook_deliveries')) {
            const [shas, bodies, , , , statuses, , accounts] = values as string[][];
            if (bodies!.some((b) => options.refuse?.(b))) {
              reject(Object.assign(new Error('unsupported Unicode escape sequence'), { code: '22P05' }));
              return;
            }
            const rows = [];
            for (const [i, sha] of shas!.entries()) {
              const account = accounts![i]!;
              if (table.has(key(account, sha))) continue;
              const row = { id: String(nextId++), status: statuses![i]!, body: bodies![i]! };
              table.set(key(account, sha), row);
              rows.push({ id: row.id, account, sha, status: row.status });
            }
            resolve({ rows: rows as never[], rowCount: null });
          } else if (sql.includes('join webhook_deliveries d on d.account = k.account')) {
            const [shas, accounts] = values as string[][];
            const found = shas!.flatMap((sha, i) => {
              const row = table.get(key(accounts![i]!, sha));
              return row ? [{ account: accounts![i]!, sha, ...row }] : [];
            });
            resolve({ rows: found as never[], rowCount: null });
          } else {
            reject(new Error(`unexpected SQL ${sql}`));
          }
        };
        const call: Call = { sql, values, settle: { resolve: run, reject } };
        calls.push(call);
        if (options.autoSettle) run();
      });
    },
  };
  const inserts = () => calls.filter((c) => c.sql.includes('insert into'));
  return { pool, table, calls, inserts, sessionAsks: () => sessionAsks };
}

function delivery(n: number, overrides: Partial<DeliveryRecord> = {}): DeliveryRecord {
  const body = { event: 'subscriber.created', id: String(n) };
  return {
    raw: Buffer.from(JSON.stringify(body)),
    body,
    kinds: ['subscriber.created'],
    eventCount: 1,
    endpointId: null,
    status: 'pending',
    ...overrides,
  };
}

const tick = (ms = 0) => new Promise((r) => setTimeout(r, ms));

describe('createInboxWriter', () => {
  test('concurrent stores share one statement, and none resolves before it commits', async () => {
    const { pool, inserts } = fakePool();
    const writer = createInboxWriter(pool, { maxBatch: 100, maxWaitMs: 5, maxConcurrent: 2 });
    const settled: string[] = [];
    const promises = [1, 2, 3].map((n) => writer.store(delivery(n)).then((r) => settled.push(r.id)));
    await tick(20);
    expect(inserts()).toHaveLength(1);
    expect((inserts()[0]!.values[0] as string[]).length).toBe(3);
    expect(settled).toEqual([]); // the statement has not committed yet
    inserts()[0]!.settle.resolve();
    await Promise.all(promises);
    expect(settled.sort()).toEqual(['1', '2', '3']);
  });

  test('a failed statement rejects every request in it (durability first)', async () => {
    const { pool, inserts } = fakePool();
    const writer = createInboxWriter(pool, { maxBatch: 100, maxWaitMs: 1 });
    const results = Promise.allSettled([1, 2, 3].map((n) => writer.store(delivery(n))));
    await tick(10);
    inserts()[0]!.settle.reject(Object.assign(new Error('connection terminated'), { code: '57P01' }));
    const outcome = await results;
    expect(outcome.map((o) => o.status)).toEqual(['rejected', 'rejected', 'rejected']);
    expect(writer.stats().failedBatches).toBe(1);
  });

  test('batches hold at most maxBatch rows; rows queue while all statements are busy', async () => {
    const { pool, inserts } = fakePool();
    const writer = createInboxWriter(pool, { maxBatch: 4, maxWaitMs: 1, maxConcurrent: 1 });
    const all = Promise.all(Array.from({ length: 10 }, (_, i) => writer.store(delivery(i))));
    await tick(10);
    expect(inserts()).toHaveLength(1); // one in flight, the rest waits
    for (let i = 0; i < 3; i++) {
      inserts()[i]!.settle.resolve();
      await tick(5);
    }
    await all;
    expect(inserts().map((c) => (c.values[0] as string[]).length)).toEqual([4, 4, 2]);
  });

  test('the same body twice: one row, the second is a duplicate with the same id', async () => {
    const { pool, table, inserts } = fakePool({ autoSettle: true });
    const writer = createInboxWriter(pool, { maxWaitMs: 1 });
    const [a, b] = await Promise.all([writer.store(delivery(1)), writer.store(delivery(1))]);
    expect(inserts()).toHaveLength(1);
    expect((inserts()[0]!.values[0] as string[]).length).toBe(1); // merged before sending
    expect(a).toEqual({ id: '1', duplicate: false, status: 'pending' });
    expect(b).toEqual({ id: '1', duplicate: true, status: 'pending' });
    const c = await writer.store(delivery(1));
    expect(c).toEqual({ id: '1', duplicate: true, status: 'pending' });
    expect(table.size).toBe(1);
  });

  test('rows of several accounts share one statement, each a duplicate only within its own account', async () => {
    const { pool, table, inserts } = fakePool({ autoSettle: true });
    const writer = createInboxWriter(pool, { maxWaitMs: 5 }, 'a');
    const [a, b, again] = await Promise.all([writer.store(delivery(1)), writer.store(delivery(1), 'b'), writer.store(delivery(1), 'b')]);
    expect(inserts()).toHaveLength(1);
    expect(inserts()[0]!.values[7]).toEqual(['a', 'b']); // sorted by account, then hash
    expect([a.duplicate, b.duplicate, again.duplicate]).toEqual([false, false, true]);
    expect(b.id).not.toBe(a.id);
    expect(again.id).toBe(b.id);
    expect([...table.keys()].map((k) => k.split(' ')[0])).toEqual(['a', 'b']);
  });

  test("rows that name no account take the session's, asked once per writer", async () => {
    const { pool, inserts, sessionAsks } = fakePool({ autoSettle: true });
    const writer = createInboxWriter(pool, { maxWaitMs: 0 });
    await writer.store(delivery(1));
    await writer.store(delivery(2));
    await writer.store(delivery(3), 'b');
    expect(inserts().map((c) => c.values[7])).toEqual([['default'], ['default'], ['b']]);
    expect(sessionAsks()).toBe(1);
  });

  test('a row Postgres refuses as jsonb is retried alone, sanitized; the others are unaffected', async () => {
    const { pool, table } = fakePool({ autoSettle: true, refuse: (text) => text.includes('\\u0000') });
    const writer = createInboxWriter(pool, { maxWaitMs: 2 });
    const badBody = { event: 'subscriber.created', id: '9', email: 'a\u0000b' };
    const bad = delivery(9, { raw: Buffer.from(JSON.stringify(badBody)), body: badBody });
    const results = await Promise.all([writer.store(delivery(1)), writer.store(bad), writer.store(delivery(2))]);
    expect(results.map((r) => r.duplicate)).toEqual([false, false, false]);
    expect(table.size).toBe(3);
    const stored = table.get(`default ${bodySha256(bad.raw)}`)!;
    expect(JSON.parse(stored.body)).toEqual({ ...badBody, email: 'a\ufffdb' });
  });

  test('beyond maxQueued waiting rows, store fails at once instead of growing', async () => {
    const { pool, inserts } = fakePool();
    const writer = createInboxWriter(pool, { maxBatch: 2, maxWaitMs: 0, maxConcurrent: 1, maxQueued: 3 });
    const first = writer.store(delivery(1)); // in flight, never settles in this test
    const queued = [2, 3, 4].map((n) => writer.store(delivery(n)));
    await expect(writer.store(delivery(5))).rejects.toThrow(/3 deliveries are already waiting/);
    expect(inserts()).toHaveLength(1);
    void first;
    void queued;
  });

  test('close() writes what is queued; later stores reject', async () => {
    const { pool, table } = fakePool({ autoSettle: true });
    const writer = createInboxWriter(pool, { maxWaitMs: 1_000 });
    const pending = writer.store(delivery(1));
    await writer.close();
    await expect(pending).resolves.toMatchObject({ duplicate: false });
    expect(table.size).toBe(1);
    await expect(writer.store(delivery(2))).rejects.toThrow(/closed/);
  });
});

describe('createSecretCache', () => {
  function setup(loads: Array<() => Promise<Array<{ endpointId: string; secret: string }>>>) {
    let clock = 0;
    let count = 0;
    const cache = createSecretCache({
      load: () => {
        const next = loads[Math.min(count, loads.length - 1)]!;
        count++;
        return next();
      },
      ttlMs: 5_000,
      missRefreshMs: 1_000,
      now: () => clock,
    });
    return { cache, advance: (ms: number) => (clock += ms), loads: () => count };
  }
  const v1 = [{ endpointId: 'a', secret: 's1' }];
  const v2 = [...v1, { endpointId: 'b', secret: 's2' }];

  test('loads once, then serves from memory until the TTL, then reloads in the background', async () => {
    const { cache, advance, loads } = setup([async () => v1, async () => v2]);
    expect(await cache.current()).toEqual(v1);
    expect(await cache.current()).toEqual(v1);
    expect(loads()).toBe(1);
    advance(5_000);
    expect(await cache.current()).toEqual(v1); // stale answer, reload started
    await tick();
    expect(await cache.current()).toEqual(v2);
    expect(loads()).toBe(2);
  });

  test('a miss reloads at once, but at most once per missRefreshMs once a load found nothing new', async () => {
    const { cache, advance, loads } = setup([async () => v1]);
    await cache.current();
    advance(1_000);
    expect(await cache.refreshAfterMiss()).toBe('reloaded');
    expect(await cache.refreshAfterMiss()).toBe('skipped');
    expect(await cache.refreshAfterMiss()).toBe('skipped');
    expect(loads()).toBe(2);
    advance(1_000);
    expect(await cache.refreshAfterMiss()).toBe('reloaded');
    expect(loads()).toBe(3);
  });

  test('after a load that found a new secret, the next miss reloads at once (webhooks registered one after another)', async () => {
    const v3 = [...v2, { endpointId: 'c', secret: 's3' }];
    const { cache, advance, loads } = setup([async () => v1, async () => v2, async () => v3, async () => v3]);
    await cache.current();
    advance(1_000);
    expect(await cache.refreshAfterMiss()).toBe('reloaded'); // the first webhook's first delivery: v2
    advance(100);
    expect(await cache.refreshAfterMiss()).toBe('reloaded'); // the second's, 100 ms later: v3
    expect(await cache.current()).toEqual(v3);
    expect(await cache.refreshAfterMiss()).toBe('reloaded'); // found c: one more load is allowed, and finds nothing
    expect(await cache.refreshAfterMiss()).toBe('skipped'); // forged: held back again
    expect(loads()).toBe(4);
  });

  test('a load that lost a secret does not lift the limit', async () => {
    const { cache, advance, loads } = setup([async () => v2, async () => v1]);
    await cache.current();
    advance(1_000);
    expect(await cache.refreshAfterMiss()).toBe('reloaded');
    expect(await cache.refreshAfterMiss()).toBe('skipped');
    expect(loads()).toBe(2);
  });

  test('a load at start or on TTL does not hold back the reload of the first miss after it', async () => {
    const { cache, advance, loads } = setup([async () => v1, async () => v2]);
    await cache.current();
    advance(100); // a webhook registered 100 ms after the receiver loaded its secrets
    expect(await cache.refreshAfterMiss()).toBe('reloaded');
    expect(await cache.current()).toEqual(v2);
    expect(loads()).toBe(2);
  });

  test('a miss during a background load that may predate the secret loads once more after it', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const { cache, advance, loads } = setup([async () => v1, async () => (await gate, v1), async () => v2]);
    await cache.current();
    advance(5_000);
    await cache.current(); // TTL: background load started (it will answer v1)
    const miss = cache.refreshAfterMiss();
    release();
    expect(await miss).toBe('reloaded');
    expect(await cache.current()).toEqual(v2);
    expect(loads()).toBe(3);
  });

  test('concurrent misses during a background load all wait for one load after it', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const { cache, advance, loads } = setup([async () => v1, async () => (await gate, v1), async () => v2]);
    await cache.current();
    advance(5_000);
    await cache.current(); // TTL: background load started (it will answer v1)
    const misses = Promise.all([cache.refreshAfterMiss(), cache.refreshAfterMiss(), cache.refreshAfterMiss()]);
    release();
    expect(await misses).toEqual(['reloaded', 'reloaded', 'reloaded']);
    expect(await cache.current()).toEqual(v2);
    expect(loads()).toBe(3);
  });

  test('a failed load keeps the last list and reports unhealthy until a load succeeds', async () => {
    const { cache, advance } = setup([async () => v1, async () => Promise.reject(new Error('down')), async () => v2]);
    await cache.current();
    expect(cache.healthy()).toBe(true);
    advance(1_000);
    expect(await cache.refreshAfterMiss()).toBe('failed');
    expect(cache.healthy()).toBe(false);
    expect(await cache.current()).toEqual(v1);
    expect(await cache.refreshAfterMiss()).toBe('failed'); // rate-limited, still unhealthy
    advance(1_000);
    expect(await cache.refreshAfterMiss()).toBe('reloaded');
    expect(cache.healthy()).toBe(true);
  });

  test('concurrent misses share one load', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const { cache, advance, loads } = setup([async () => v1, async () => (await gate, v2)]);
    await cache.current();
    advance(1_000);
    const misses = Promise.all([cache.refreshAfterMiss(), cache.refreshAfterMiss(), cache.refreshAfterMiss()]);
    release();
    expect(await misses).toEqual(['reloaded', 'reloaded', 'reloaded']);
    expect(loads()).toBe(2);
  });
});

/**
 * The guarded subscriber upsert against real Postgres (docs/architecture.md, invariants 2, 5, 6).
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { LosslessNumber, parse as losslessParse } from 'lossless-json';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { normalizeLegacySubscriber, normalizeWebhookSubscriber, type SubscriberRow } from '../../src/mirror/normalize.js';
import { upsertSubscribers, withTransaction } from '../../src/mirror/store/index.js';
import { fixtureText, legacySubscriber, readSubscriber, ts, webhookSubscriber } from '../fixtures/mirror/rows.js';

let tdb: TestDatabase;
let seq = 0;
/** A fresh id per test so tests share one database without interfering. */
const newId = () => String(9_000_000_000_000_000_000n + BigInt(++seq));

const UTC = { sourceTimezone: 'UTC' };
const web = (o: Record<string, unknown>) => normalizeWebhookSubscriber(webhookSubscriber(o));
const poll = (o: Record<string, unknown>) => normalizeLegacySubscriber(legacySubscriber(o), UTC);

beforeAll(async () => {
  tdb = await createTestDatabase();
});
afterAll(async () => {
  await tdb?.drop();
});

test('empty input writes nothing and returns zeros', async () => {
  expect(await upsertSubscribers(tdb.pool, [])).toEqual({ inserted: 0, updated: 0, unchanged: 0, skipped: 0 });
});

describe('counts and idempotence', () => {
  test('insert / update / unchanged / skipped', async () => {
    const [a, b, c] = [newId(), newId(), newId()];
    const v1 = [a, b, c].map((id) => web({ id, updated_at: ts(100) }));
    expect(await upsertSubscribers(tdb.pool, v1)).toEqual({ inserted: 3, updated: 0, unchanged: 0, skipped: 0 });
    expect(await upsertSubscribers(tdb.pool, v1)).toEqual({ inserted: 0, updated: 0, unchanged: 3, skipped: 0 });
    const mixed = [
      web({ id: a, updated_at: ts(200), email: 'new@example.com' }), // newer → updated
      web({ id: b, updated_at: ts(100) }), // same → unchanged
      web({ id: c, updated_at: ts(50), email: 'old@example.com' }), // older → skipped
      web({ id: newId(), updated_at: ts(1) }), // new
    ];
    expect(await upsertSubscribers(tdb.pool, mixed)).toEqual({ inserted: 1, updated: 1, unchanged: 1, skipped: 1 });
    expect((await readSubscriber(tdb.pool, a))?.email).toBe('new@example.com');
    expect((await readSubscriber(tdb.pool, c))?.email).toBe('john.doe@example.com');
  });

  test('an identical re-upsert writes nothing: same tuple, same mirrored_at', async () => {
    const id = newId();
    await upsertSubscribers(tdb.pool, [web({ id })]);
    const before = await readSubscriber(tdb.pool, id);
    await new Promise((r) => setTimeout(r, 20)); // so a rewrite would show a later mirrored_at
    expect(await upsertSubscribers(tdb.pool, [web({ id })])).toMatchObject({ unchanged: 1 });
    const after = await readSubscriber(tdb.pool, id);
    expect(after?.xmin).toBe(before?.xmin);
    expect(after?.mirrored_at).toBe(before?.mirrored_at);
  });

  test('mirrored_via and mirrored_at follow the last real write', async () => {
    const id = newId();
    await upsertSubscribers(tdb.pool, [poll({ id, date_updated: '2024-05-28 10:30:29' })]);
    const first = await readSubscriber(tdb.pool, id);
    expect(first?.mirrored_via).toBe('poll');
    await new Promise((r) => setTimeout(r, 20));
    await upsertSubscribers(tdb.pool, [web({ id, updated_at: '2024-05-28T10:30:30.000001Z' })]);
    const second = await readSubscriber(tdb.pool, id);
    expect(second?.mirrored_via).toBe('webhook');
    expect(second!.mirrored_at > first!.mirrored_at).toBe(true);
  });
});

describe('invariant 2: never regress, whichever path and order', () => {
  test('poll then older webhook, and webhook then older poll', async () => {
    const a = newId();
    await upsertSubscribers(tdb.pool, [poll({ id: a, date_updated: '2024-06-01 00:00:00', email: 'poll-new@example.com' })]);
    expect(
      await upsertSubscribers(tdb.pool, [web({ id: a, updated_at: '2024-05-31T23:59:59.999999Z', email: 'web-old@example.com' })]),
    ).toMatchObject({
      skipped: 1,
    });
    expect(await readSubscriber(tdb.pool, a)).toMatchObject({ email: 'poll-new@example.com', updated_at: '2024-06-01T00:00:00.000000Z' });

    const b = newId();
    await upsertSubscribers(tdb.pool, [web({ id: b, updated_at: '2024-06-01T00:00:00.000001Z', email: 'web-new@example.com' })]);
    expect(
      await upsertSubscribers(tdb.pool, [poll({ id: b, date_updated: '2024-06-01 00:00:00', email: 'poll-old@example.com' })]),
    ).toMatchObject({
      skipped: 1,
    });
    expect(await readSubscriber(tdb.pool, b)).toMatchObject({ email: 'web-new@example.com', updated_at: '2024-06-01T00:00:00.000001Z' });
  });

  test('every arrival order of four versions from both paths ends at the newest', async () => {
    const versions = (id: string): SubscriberRow[] => [
      poll({ id, date_updated: '2024-06-01 10:00:00', email: 'v1@example.com', sent: 1 }),
      web({ id, updated_at: '2024-06-01T10:00:00.500000Z', email: 'v2@example.com', sent: 2 }),
      poll({ id, date_updated: '2024-06-01 10:00:01', email: 'v3@example.com', sent: 3 }),
      web({ id, updated_at: '2024-06-01T10:00:01.000001Z', email: 'v4@example.com', sent: 4 }),
    ];
    for (const order of permutations([0, 1, 2, 3])) {
      const id = newId();
      const v = versions(id);
      for (const i of order) await upsertSubscribers(tdb.pool, [v[i]!]);
      const row = await readSubscriber(tdb.pool, id);
      expect({ order, email: row?.email, sent: row?.sent, updated_at: row?.updated_at }).toEqual({
        order,
        email: 'v4@example.com',
        sent: 4,
        updated_at: '2024-06-01T10:00:01.000001Z',
      });
    }
  });

  test('tie with different content: the later arrival wins (both directions)', async () => {
    const id = newId();
    await upsertSubscribers(tdb.pool, [web({ id, updated_at: ts(500), status: 'active' })]);
    expect(await upsertSubscribers(tdb.pool, [web({ id, updated_at: ts(500), status: 'unsubscribed' })])).toMatchObject({ updated: 1 });
    expect((await readSubscriber(tdb.pool, id))?.status).toBe('unsubscribed');
    expect(await upsertSubscribers(tdb.pool, [web({ id, updated_at: ts(500), status: 'active' })])).toMatchObject({ updated: 1 });
    expect((await readSubscriber(tdb.pool, id))?.status).toBe('active');
  });

  test('tie across paths: whole-second legacy time equals a .000000 webhook time', async () => {
    const id = newId();
    await upsertSubscribers(tdb.pool, [web({ id, updated_at: '2024-05-28T10:30:29.000000Z', sent: 5 })]);
    expect(await upsertSubscribers(tdb.pool, [poll({ id, date_updated: '2024-05-28 10:30:29', sent: 6 })])).toMatchObject({ updated: 1 });
    expect((await readSubscriber(tdb.pool, id))?.sent).toBe(6);
  });

  test('tie with the same content writes nothing', async () => {
    const id = newId();
    await upsertSubscribers(tdb.pool, [web({ id, updated_at: ts(600) })]);
    const before = await readSubscriber(tdb.pool, id);
    // A different `via` is not different content.
    const again = { ...web({ id, updated_at: ts(600) }) };
    expect(await upsertSubscribers(tdb.pool, [again])).toEqual({ inserted: 0, updated: 0, unchanged: 1, skipped: 0 });
    expect((await readSubscriber(tdb.pool, id))?.xmin).toBe(before?.xmin);
  });

  test('a concurrent older write waiting on a newer uncommitted one does not regress it', async () => {
    for (const existing of [false, true]) {
      const id = newId();
      if (existing) await upsertSubscribers(tdb.pool, [web({ id, updated_at: ts(1), email: 'v0@example.com' })]);
      const a = await tdb.pool.connect();
      const b = await tdb.pool.connect();
      try {
        await a.query('begin');
        await upsertSubscribers(a, [web({ id, updated_at: ts(20), email: 'newer@example.com' })]);
        await b.query('begin');
        const pid = (await b.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]?.pid;
        const pending = upsertSubscribers(b, [web({ id, updated_at: ts(10), email: 'older@example.com' })]);
        await waitUntilBlocked(pid);
        await a.query('commit');
        expect(await pending).toMatchObject({ inserted: 0, updated: 0 });
        await b.query('commit');
      } finally {
        a.release();
        b.release();
      }
      expect((await readSubscriber(tdb.pool, id))?.email).toBe('newer@example.com');
    }
  });
});

describe('batches', () => {
  test('duplicates in one batch: the newest wins, a tie goes to the later row', async () => {
    const [a, b] = [newId(), newId()];
    const res = await upsertSubscribers(tdb.pool, [
      web({ id: a, updated_at: ts(30), email: 'a-newest@example.com' }),
      web({ id: a, updated_at: ts(10), email: 'a-old@example.com' }),
      web({ id: b, updated_at: ts(10), email: 'b-first@example.com' }),
      web({ id: b, updated_at: ts(10), email: 'b-second@example.com' }),
    ]);
    expect(res).toEqual({ inserted: 2, updated: 0, unchanged: 0, skipped: 2 });
    expect((await readSubscriber(tdb.pool, a))?.email).toBe('a-newest@example.com');
    expect((await readSubscriber(tdb.pool, b))?.email).toBe('b-second@example.com');
  });

  test('a 10,000-row batch in one call', async () => {
    const base = 8_000_000_000_000_000_000n + BigInt(++seq) * 100_000n;
    const rows = Array.from({ length: 10_000 }, (_, i) =>
      web({ id: String(base + BigInt(i)), email: `u${i}@example.com`, updated_at: ts(i, i % 1_000_000) }),
    );
    expect(await upsertSubscribers(tdb.pool, rows)).toEqual({ inserted: 10_000, updated: 0, unchanged: 0, skipped: 0 });
    // What autovacuum does in production once a table grows this much; the test server runs without it.
    // Plans cached while the table held a few rows would otherwise look each id up by a scan of the
    // whole account: on a near-empty table every index leading with the account looks as cheap as
    // the primary key.
    await tdb.pool.query('analyze subscribers');
    const { rows: n } = await tdb.pool.query<{ n: number }>(
      `select count(*)::int as n from subscribers where id::numeric between $1::numeric and $2::numeric`,
      [String(base), String(base + 9_999n)],
    );
    expect(n[0]?.n).toBe(10_000);
    expect(await readSubscriber(tdb.pool, String(base + 9_999n))).toMatchObject({
      email: 'u9999@example.com',
      updated_at: ts(9_999, 9_999),
    });
    expect(await upsertSubscribers(tdb.pool, rows)).toEqual({ inserted: 0, updated: 0, unchanged: 10_000, skipped: 0 });
  });

  test('mixed payload shapes in one call are all applied, atomically on a pool', async () => {
    const [a, b] = [newId(), newId()];
    const res = await upsertSubscribers(tdb.pool, [poll({ id: a }), web({ id: b })]);
    expect(res).toEqual({ inserted: 2, updated: 0, unchanged: 0, skipped: 0 });
    expect((await readSubscriber(tdb.pool, a))?.mirrored_via).toBe('poll');
    expect((await readSubscriber(tdb.pool, b))?.mirrored_via).toBe('webhook');
  });

  test('a malformed row rejects the whole call before anything is written', async () => {
    const id = newId();
    const bad = web({ id: newId() });
    bad.values.updatedAt = '2024-05-28 10:30:29';
    await expect(upsertSubscribers(tdb.pool, [web({ id }), bad])).rejects.toThrow(TypeError);
    expect(await readSubscriber(tdb.pool, id)).toBeUndefined();
  });
});

describe('encoding', () => {
  test('awkward strings round-trip exactly through every kind of column', async () => {
    const nasty = [
      '',
      'NULL',
      'null',
      '"quoted"',
      'back\\slash\\',
      '{braces,commas}',
      ' spaced ',
      'line\nbreak\ttab',
      'ünïcödé ✓ 😀',
      "it's",
    ];
    const ids = nasty.map(() => newId());
    const rows = nasty.map((text, i) =>
      web({ id: ids[i], email: text, status: text, fields: { name: text, [text || 'empty']: text }, opaque: { text, list: [text] } }),
    );
    expect(await upsertSubscribers(tdb.pool, rows)).toMatchObject({ inserted: nasty.length });
    for (const [i, text] of nasty.entries()) {
      const row = await readSubscriber(tdb.pool, ids[i]!);
      expect(row).toMatchObject({ email: text, status: text, name: text });
      expect(row?.fields).toEqual({ name: text, [text || 'empty']: text });
      expect(row?.extra).toEqual({ opaque: { text, list: [text] } });
    }
    // And identical content is recognised as identical (no spurious writes from encoding).
    expect(await upsertSubscribers(tdb.pool, rows)).toMatchObject({ unchanged: nasty.length });
  });
});

describe('invariant 6: lossless ids', () => {
  test('ids above 2^53 round-trip exactly', async () => {
    const legacy = normalizeLegacySubscriber(losslessParse(fixtureText('legacy-single-subscriber.json')) as Record<string, unknown>, UTC);
    const max = web({ id: '18446744073709551615' });
    const next = web({ id: '9007199254740993' }); // 2^53 + 1: JSON.parse would make it ...992
    await upsertSubscribers(tdb.pool, [legacy, max, next]);
    const { rows } = await tdb.pool.query<{ id: string }>(`select id from subscribers where id = any($1) order by id`, [
      ['1261159647788771324', '18446744073709551615', '9007199254740993', '9007199254740992'],
    ]);
    expect(rows.map((r) => r.id)).toEqual(['1261159647788771324', '18446744073709551615', '9007199254740993']);
  });

  test('big numbers inside extra keep their digits in jsonb', async () => {
    const id = newId();
    await upsertSubscribers(tdb.pool, [poll({ id, big_ref: new LosslessNumber('1261159647788771324'), other: 12345678901234567890n })]);
    const { rows } = await tdb.pool.query<{ big: string; other: string }>(
      `select extra->>'big_ref' as big, extra->>'other' as other from subscribers where id = $1`,
      [id],
    );
    expect(rows[0]).toEqual({ big: '1261159647788771324', other: '12345678901234567890' });
  });
});

describe('provided columns: one path never nulls what only the other knows', () => {
  test('a webhook write keeps the legacy name and legacy extra keys', async () => {
    const id = newId();
    await upsertSubscribers(tdb.pool, [poll({ id, name: 'Legacy Name', date_updated: '2024-06-01 00:00:00' })]);
    // A webhook whose fields carry no name: it does not provide `name`.
    await upsertSubscribers(tdb.pool, [
      web({ id, updated_at: '2024-06-02T00:00:00.000000Z', fields: { city: 'Vilnius' }, status: 'unsubscribed' }),
    ]);
    const row = await readSubscriber(tdb.pool, id);
    expect(row).toMatchObject({ name: 'Legacy Name', status: 'unsubscribed', source: 'ecommerce' });
    expect(row?.extra).toMatchObject({ country_id: 49, user_agent: 'Mozilla/5.0' });
    expect(row?.fields).toEqual({ name: 'John', last_name: 'Doe', city: 'Vilnius' });
  });

  test('a poll write keeps source, deleted_at and forget_at from webhooks', async () => {
    const id = newId();
    await upsertSubscribers(tdb.pool, [
      web({ id, updated_at: '2024-06-01T00:00:00.000000Z', source: 'api', deleted_at: '2024-06-01T00:00:00.000000Z' }),
    ]);
    await upsertSubscribers(tdb.pool, [poll({ id, date_updated: '2024-06-02 00:00:00', sent: 42 })]);
    const row = await readSubscriber(tdb.pool, id);
    expect(row).toMatchObject({ source: 'api', deleted_at: '2024-06-01T00:00:00.000000Z', sent: 42, mirrored_via: 'poll' });
  });

  test('a key absent from a payload keeps the stored value; a key present as null clears it', async () => {
    const id = newId();
    await upsertSubscribers(tdb.pool, [web({ id, updated_at: ts(1), ip_address: '198.51.100.1', optin_ip: '198.51.100.2' })]);
    const raw = webhookSubscriber({ id, updated_at: ts(2), optin_ip: null });
    delete raw.ip_address;
    await upsertSubscribers(tdb.pool, [normalizeWebhookSubscriber(raw)]);
    expect(await readSubscriber(tdb.pool, id)).toMatchObject({ ip_address: '198.51.100.1', optin_ip: null });
  });
});

describe('forget', () => {
  test('forget_at erases personal data and keeps id, status and timestamps', async () => {
    const id = newId();
    await upsertSubscribers(tdb.pool, [poll({ id, date_updated: '2024-06-01 00:00:00' })]);
    await upsertSubscribers(tdb.pool, [
      web({
        id,
        updated_at: '2024-06-02T00:00:00.123456Z',
        deleted_at: '2024-06-02T00:00:00.123456Z',
        forget_at: '2024-07-02T00:00:00.000000Z',
        tags: ['vip'],
      }),
    ]);
    const row = await readSubscriber(tdb.pool, id);
    expect(row).toMatchObject({
      id,
      email: null,
      name: null,
      ip_address: null,
      optin_ip: null,
      fields: {},
      extra: {},
      status: 'active',
      created_at: '2024-05-08T08:26:04.000000Z',
      updated_at: '2024-06-02T00:00:00.123456Z',
      deleted_at: '2024-06-02T00:00:00.123456Z',
      forget_at: '2024-07-02T00:00:00.000000Z',
    });
  });

  test('neither an older nor a newer poll row brings the data back', async () => {
    const id = newId();
    await upsertSubscribers(tdb.pool, [web({ id, updated_at: '2024-06-02T00:00:00.000000Z', forget_at: '2024-07-02T00:00:00.000000Z' })]);
    expect(await upsertSubscribers(tdb.pool, [poll({ id, date_updated: '2024-06-01 00:00:00' })])).toMatchObject({ skipped: 1 });
    await upsertSubscribers(tdb.pool, [poll({ id, date_updated: '2024-06-03 00:00:00', sent: 9 })]);
    const row = await readSubscriber(tdb.pool, id);
    expect(row).toMatchObject({ email: null, name: null, ip_address: null, optin_ip: null, fields: {}, extra: {}, sent: 9 });
    expect(row?.forget_at).toBe('2024-07-02T00:00:00.000000Z');
  });

  test('a forgotten subscriber seen first is stored erased', async () => {
    const id = newId();
    await upsertSubscribers(tdb.pool, [web({ id, forget_at: '2024-07-02T00:00:00.000000Z', tags: ['x'] })]);
    expect(await readSubscriber(tdb.pool, id)).toMatchObject({ email: null, fields: {}, extra: {}, ip_address: null });
  });
});

describe('executors and transactions', () => {
  test('withTransaction: store calls and the caller’s own statements commit or roll back together', async () => {
    const [a, b] = [newId(), newId()];
    await expect(
      withTransaction(tdb.pool, async (client) => {
        await upsertSubscribers(client, [web({ id: a })]);
        await client.query(`insert into sync_state (group_id, type, cursor) values ('g-tx', 'active', now())`);
        throw new Error('crash before commit');
      }),
    ).rejects.toThrow('crash before commit');
    expect(await readSubscriber(tdb.pool, a)).toBeUndefined();

    await withTransaction(tdb.pool, async (client) => {
      await upsertSubscribers(client, [web({ id: b })]);
      await client.query(`insert into sync_state (group_id, type, cursor) values ('g-tx', 'active', now())`);
    });
    expect(await readSubscriber(tdb.pool, b)).toBeDefined();
    const { rows } = await tdb.pool.query(`select 1 from sync_state where group_id = 'g-tx'`);
    expect(rows).toHaveLength(1);
  });
});

function permutations<T>(items: T[]): T[][] {
  if (items.length <= 1) return [items];
  return items.flatMap((item, i) => permutations([...items.slice(0, i), ...items.slice(i + 1)]).map((rest) => [item, ...rest]));
}

/** Waits until the backend of `client` is waiting on a lock (deterministic ordering, no sleeps). */
async function waitUntilBlocked(pid: number | undefined): Promise<void> {
  for (let i = 0; i < 500; i++) {
    const { rows } = await tdb.pool.query<{ waiting: boolean }>(
      `select wait_event_type = 'Lock' as waiting from pg_stat_activity where pid = $1`,
      [pid],
    );
    if (rows[0]?.waiting) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('the second writer never blocked');
}

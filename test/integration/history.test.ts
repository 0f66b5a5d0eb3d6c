/**
 * History (issue #13) against real Postgres: subscriber versions placed in time order whatever the
 * arrival order, late versions, forget, HISTORY off, membership periods, retention, as-of functions.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { normalizeLegacySubscriber, normalizeWebhookSubscriber, type SubscriberRow } from '../../src/mirror/normalize.js';
import {
  endMemberships,
  removeMembersNotSeenSince,
  removeMembership,
  upsertMemberships,
  upsertSubscribers,
} from '../../src/mirror/store/index.js';
import { configureHistory, purgeHistory } from '../../src/mirror/history.js';
import { legacySubscriber, readSubscriber, webhookSubscriber } from '../fixtures/mirror/rows.js';
import { iso } from '../helpers/mirror.js';

let tdb: TestDatabase;
let seq = 0;
const newId = () => String(9_100_000_000_000_000_000n + BigInt(++seq));
const GROUP = '1000001';

const web = (o: Record<string, unknown>) => normalizeWebhookSubscriber(webhookSubscriber(o));
const poll = (o: Record<string, unknown>) => normalizeLegacySubscriber(legacySubscriber(o), { sourceTimezone: 'UTC' });

beforeAll(async () => {
  tdb = await createTestDatabase();
});
afterAll(async () => {
  await tdb?.drop();
});
afterEach(async () => {
  await configureHistory(tdb.pool, { enabled: true });
});

interface VersionRow {
  valid_from: string;
  valid_to: string | null;
  via: string;
  email: string | null;
  name: string | null;
  status: string | null;
  sent: number | null;
  unsubscribed_at: string | null;
  fields: Record<string, string | null>;
}

async function timeline(id: string): Promise<VersionRow[]> {
  const { rows } = await tdb.pool.query<VersionRow>(
    `select ${iso('valid_from')} as valid_from, ${iso('valid_to')} as valid_to, via, email, name, status, sent,
            ${iso('unsubscribed_at')} as unsubscribed_at, fields
       from subscriber_versions where subscriber_id = $1 order by valid_from`,
    [id],
  );
  return rows;
}

function permutations<T>(items: readonly T[]): T[][] {
  if (items.length <= 1) return [items.slice()];
  return items.flatMap((item, i) => permutations([...items.slice(0, i), ...items.slice(i + 1)]).map((rest) => [item, ...rest]));
}

/** Four versions: a rename, an unsubscribe, a field change back to the first content's shape. */
function fourWebhookVersions(id: string): SubscriberRow[] {
  return [
    web({ id, email: 'a@example.com', updated_at: '2024-06-01T10:00:00.100000Z', sent: 1 }),
    web({ id, email: 'b@example.com', updated_at: '2024-06-02T10:00:00.200000Z', sent: 1 }),
    web({
      id,
      email: 'b@example.com',
      status: 'unsubscribed',
      unsubscribed_at: '2024-06-03T10:00:00.300000Z',
      updated_at: '2024-06-03T10:00:00.300000Z',
      sent: 1,
    }),
    web({
      id,
      email: 'b@example.com',
      status: 'unsubscribed',
      unsubscribed_at: '2024-06-03T10:00:00.300000Z',
      updated_at: '2024-06-04T10:00:00.400000Z',
      sent: 2,
      fields: { name: 'John', last_name: 'Doe', company: '', country: '', city: 'Riga', phone: '', state: '', zip: '' },
    }),
  ];
}

function fourPollVersions(id: string): SubscriberRow[] {
  return [
    poll({ id, email: 'a@example.com', date_updated: '2024-06-01 10:00:00', sent: 1 }),
    poll({ id, email: 'b@example.com', date_updated: '2024-06-02 10:00:00', sent: 1 }),
    poll({
      id,
      email: 'b@example.com',
      type: 'unsubscribed',
      date_unsubscribe: '2024-06-03 10:00:00',
      date_updated: '2024-06-03 10:00:00',
      sent: 1,
    }),
    poll({
      id,
      email: 'b@example.com',
      type: 'unsubscribed',
      date_unsubscribe: '2024-06-03 10:00:00',
      date_updated: '2024-06-04 10:00:00',
      sent: 2,
    }),
  ];
}

describe('versions arriving in every order give one timeline', () => {
  for (const [path, make] of [
    ['webhook', fourWebhookVersions],
    ['poll', fourPollVersions],
  ] as const) {
    test(`${path}: 24 orders of 4 versions, one call each`, async () => {
      const orders = permutations([0, 1, 2, 3]);
      expect(orders).toHaveLength(24);
      const timelines: string[] = [];
      let reference: VersionRow[] = [];
      for (const order of orders) {
        const id = newId();
        const versions = make(id);
        for (const k of order) await upsertSubscribers(tdb.pool, [versions[k] as SubscriberRow]);
        const t = await timeline(id);
        timelines.push(JSON.stringify(t.map(({ ...r }) => r)));
        if (reference.length === 0) reference = t;
        // `subscribers` shows the newest version whatever the order.
        expect((await readSubscriber(tdb.pool, id))?.sent).toBe(2);
      }
      expect(new Set(timelines).size).toBe(1);
      // Four distinct contents, chained: each valid_to is the next valid_from, the last is open.
      expect(reference).toHaveLength(4);
      for (let k = 0; k < 3; k++) expect(reference[k]?.valid_to).toBe(reference[k + 1]?.valid_from);
      expect(reference[3]?.valid_to).toBeNull();
      expect(reference.map((r) => [r.email, r.status, r.sent])).toEqual([
        ['a@example.com', 'active', 1],
        ['b@example.com', 'active', 1],
        ['b@example.com', 'unsubscribed', 1],
        ['b@example.com', 'unsubscribed', 2],
      ]);
    });

    test(`${path}: 24 orders of 4 versions, all in one batch`, async () => {
      const timelines = new Set<string>();
      for (const order of permutations([0, 1, 2, 3])) {
        const id = newId();
        const versions = make(id);
        await upsertSubscribers(
          tdb.pool,
          order.map((k) => versions[k] as SubscriberRow),
        );
        timelines.add(JSON.stringify(await timeline(id)));
      }
      expect(timelines.size).toBe(1);
      expect(JSON.parse([...timelines][0] as string)).toHaveLength(4);
    });
  }

  test('a change back to earlier content (A, B, A, A bumped) keeps four versions whatever the order', async () => {
    const shapes = (id: string) => [
      web({ id, email: 'x@example.com', updated_at: '2024-06-01T00:00:00.000001Z' }),
      web({ id, email: 'y@example.com', updated_at: '2024-06-02T00:00:00.000001Z' }),
      web({ id, email: 'x@example.com', updated_at: '2024-06-03T00:00:00.000001Z' }),
      web({ id, email: 'x@example.com', updated_at: '2024-06-04T00:00:00.000001Z' }), // only updated_at moved
    ];
    const seen = new Set<string>();
    for (const order of permutations([0, 1, 2, 3])) {
      const id = newId();
      const versions = shapes(id);
      for (const k of order) await upsertSubscribers(tdb.pool, [versions[k] as SubscriberRow]);
      const t = await timeline(id);
      seen.add(JSON.stringify(t.map((r) => [r.valid_from, r.valid_to, r.email])));
    }
    expect([...seen]).toEqual([
      JSON.stringify([
        ['2024-06-01T00:00:00.000001Z', '2024-06-02T00:00:00.000001Z', 'x@example.com'],
        ['2024-06-02T00:00:00.000001Z', '2024-06-03T00:00:00.000001Z', 'y@example.com'],
        ['2024-06-03T00:00:00.000001Z', '2024-06-04T00:00:00.000001Z', 'x@example.com'],
        ['2024-06-04T00:00:00.000001Z', null, 'x@example.com'],
      ]),
    ]);
  });
});

describe('subscriber versions', () => {
  test('identical rows write nothing; a fresh subscriber is its own current version', async () => {
    const id = newId();
    const row = web({ id, updated_at: '2024-06-01T00:00:00.000000Z' });
    await upsertSubscribers(tdb.pool, [row]);
    const read = () =>
      tdb.pool.query(
        `select xmin::text from subscribers where id = $1 union all select xmin::text from subscriber_versions_past where subscriber_id = $1`,
        [id],
      );
    const before = await read();
    await upsertSubscribers(tdb.pool, [row, row]);
    await upsertSubscribers(tdb.pool, [row]);
    expect((await read()).rows).toEqual(before.rows);
    expect(before.rows).toHaveLength(1); // the subscribers row; nothing in the past table
    expect((await timeline(id)).map((r) => [r.valid_from, r.valid_to])).toEqual([['2024-06-01T00:00:00.000000Z', null]]);
  });

  test('a late version goes to its place, neighbours fixed, subscribers keeps the newest', async () => {
    const id = newId();
    await upsertSubscribers(tdb.pool, [web({ id, email: 'new@example.com', updated_at: '2024-06-10T00:00:00.000000Z' })]);
    await upsertSubscribers(tdb.pool, [web({ id, email: 'old@example.com', updated_at: '2024-06-01T00:00:00.000000Z' })]);
    await upsertSubscribers(tdb.pool, [web({ id, email: 'mid@example.com', updated_at: '2024-06-05T00:00:00.000000Z' })]);
    expect((await timeline(id)).map((r) => [r.email, r.valid_from, r.valid_to])).toEqual([
      ['old@example.com', '2024-06-01T00:00:00.000000Z', '2024-06-05T00:00:00.000000Z'],
      ['mid@example.com', '2024-06-05T00:00:00.000000Z', '2024-06-10T00:00:00.000000Z'],
      ['new@example.com', '2024-06-10T00:00:00.000000Z', null],
    ]);
    expect((await readSubscriber(tdb.pool, id))?.email).toBe('new@example.com');
  });

  test('two newer versions in one batch are both kept, whatever their order in it', async () => {
    for (const order of [
      [0, 1],
      [1, 0],
    ]) {
      const id = newId();
      await upsertSubscribers(tdb.pool, [web({ id, sent: 1, updated_at: '2024-06-01T00:00:00.000001Z' })]);
      const batch = [
        web({ id, sent: 2, updated_at: '2024-06-01T00:00:00.000002Z' }),
        web({ id, sent: 3, updated_at: '2024-06-01T00:00:00.000003Z' }),
      ];
      await upsertSubscribers(
        tdb.pool,
        order.map((k) => batch[k] as SubscriberRow),
      );
      expect((await timeline(id)).map((r) => r.sent)).toEqual([1, 2, 3]);
    }
  });

  test('valid_from is the version time: an unsubscribe asserted after updated_at counts from unsubscribed_at', async () => {
    const id = newId();
    await upsertSubscribers(tdb.pool, [
      web({ id, status: 'unsubscribed', unsubscribed_at: '2024-06-02T00:00:00.000000Z', updated_at: '2024-06-01T00:00:00.000000Z' }),
    ]);
    expect((await timeline(id)).map((r) => r.valid_from)).toEqual(['2024-06-02T00:00:00.000000Z']);
  });

  test('a poll version is coarse: a webhook version of the same second replaces it, and a later poll row of that second adds nothing', async () => {
    const id = newId();
    await upsertSubscribers(tdb.pool, [web({ id, email: 'a@example.com', updated_at: '2024-06-01T00:00:00.000000Z' })]);
    await upsertSubscribers(tdb.pool, [poll({ id, email: 'b@example.com', date_updated: '2024-06-02 10:00:00' })]);
    await upsertSubscribers(tdb.pool, [web({ id, email: 'b@example.com', updated_at: '2024-06-02T10:00:00.700000Z' })]);
    await upsertSubscribers(tdb.pool, [poll({ id, email: 'b@example.com', date_updated: '2024-06-02 10:00:00' })]);
    expect((await timeline(id)).map((r) => [r.via, r.email, r.valid_from, r.valid_to])).toEqual([
      ['webhook', 'a@example.com', '2024-06-01T00:00:00.000000Z', '2024-06-02T10:00:00.700000Z'],
      ['webhook', 'b@example.com', '2024-06-02T10:00:00.700000Z', null],
    ]);
  });

  test('forget erases personal data from every version, also from versions arriving after it', async () => {
    const id = newId();
    await upsertSubscribers(tdb.pool, [
      web({ id, email: 'one@example.com', updated_at: '2024-06-01T00:00:00.000000Z', fields: { name: 'Ann', city: 'Oslo' } }),
    ]);
    await upsertSubscribers(tdb.pool, [
      web({ id, email: 'two@example.com', updated_at: '2024-06-03T00:00:00.000000Z', fields: { name: 'Ann', city: 'Rome' } }),
    ]);
    await upsertSubscribers(tdb.pool, [
      web({
        id,
        email: 'two@example.com',
        updated_at: '2024-06-05T00:00:00.000000Z',
        deleted_at: '2024-06-05T00:00:00.000000Z',
        forget_at: '2024-06-05T00:00:00.000000Z',
      }),
    ]);
    // A late version from before the forget arrives afterwards.
    await upsertSubscribers(tdb.pool, [
      web({ id, email: 'late@example.com', updated_at: '2024-06-02T00:00:00.000000Z', fields: { name: 'Ann', city: 'Bern' } }),
    ]);
    const t = await timeline(id);
    expect(t).toHaveLength(4);
    for (const v of t) {
      expect(v.email).toBeNull();
      expect(v.name).toBeNull();
      expect(v.fields).toEqual({});
    }
    const { rows } = await tdb.pool.query(
      `select count(*)::int as n from subscriber_versions where subscriber_id = $1 and (email is not null or name is not null or fields <> '{}'::jsonb)`,
      [id],
    );
    expect(rows[0].n).toBe(0);
  });

  test('HISTORY=off writes no versions and no membership periods', async () => {
    await configureHistory(tdb.pool, { enabled: false });
    const id = newId();
    await upsertSubscribers(tdb.pool, [web({ id, updated_at: '2024-06-01T00:00:00.000000Z' })]);
    await upsertSubscribers(tdb.pool, [web({ id, email: 'z@example.com', updated_at: '2024-06-02T00:00:00.000000Z' })]);
    await upsertMemberships(tdb.pool, '1000999', [{ subscriberId: id, type: 'active', at: '2024-06-01T00:00:00.000000Z' }], {
      via: 'poll',
    });
    await removeMembership(tdb.pool, '1000999', id, '2024-06-03T00:00:00.000000Z', 'webhook');
    // Only the current row (which is `subscribers` itself) is there: the replaced version was not kept.
    expect((await timeline(id)).map((r) => r.email)).toEqual(['z@example.com']);
    const { rows } = await tdb.pool.query(
      `select (select count(*) from subscriber_versions_past where subscriber_id = $1)::int as past,
              (select count(*) from group_membership_periods where subscriber_id = $1)::int as periods`,
      [id],
    );
    expect(rows[0]).toEqual({ past: 0, periods: 0 });
    expect((await readSubscriber(tdb.pool, id))?.email).toBe('z@example.com');
  });
});

describe('membership periods', () => {
  async function periods(subscriberId: string, groupId = GROUP) {
    const { rows } = await tdb.pool.query<{ type: string | null; started_at: string; ended_at: string | null }>(
      `select type, ${iso('started_at')} as started_at, ${iso('ended_at')} as ended_at
         from group_membership_periods where group_id = $1 and subscriber_id = $2 order by started_at`,
      [groupId, subscriberId],
    );
    return rows.map((r) => [r.type, r.started_at, r.ended_at]);
  }

  test('join, leave, re-join make two periods; a repeated listing changes nothing', async () => {
    const id = newId();
    const t = (d: number) => `2024-07-0${d}T00:00:00.000000Z`;
    await upsertMemberships(tdb.pool, GROUP, [{ subscriberId: id, type: 'active', at: t(1) }], { via: 'webhook' });
    await upsertMemberships(tdb.pool, GROUP, [{ subscriberId: id, type: 'active', at: t(2) }], { via: 'poll' });
    await removeMembership(tdb.pool, GROUP, id, t(3), 'webhook');
    await upsertMemberships(tdb.pool, GROUP, [{ subscriberId: id, type: 'unsubscribed', at: t(5) }], { via: 'webhook' });
    expect(await periods(id)).toEqual([
      ['active', t(1), t(3)],
      ['unsubscribed', t(5), null],
    ]);
  });

  test('a deletion ends every period; a full pass that no longer lists a member ends it', async () => {
    const a = newId();
    const b = newId();
    const t = (d: number) => `2024-08-0${d}T00:00:00.000000Z`;
    await upsertMemberships(tdb.pool, GROUP, [{ subscriberId: a, type: 'active', at: t(1) }], { via: 'poll' });
    await upsertMemberships(tdb.pool, '1000002', [{ subscriberId: a, type: 'active', at: t(1) }], { via: 'poll' });
    await endMemberships(tdb.pool, a, t(2), 'webhook');
    expect(await periods(a)).toEqual([['active', t(1), t(2)]]);
    expect(await periods(a, '1000002')).toEqual([['active', t(1), t(2)]]);

    const g = '1000077';
    await upsertMemberships(tdb.pool, g, [{ subscriberId: b, type: 'active', at: t(1) }], { via: 'poll', seenAt: t(1) });
    await removeMembersNotSeenSince(tdb.pool, g, t(4), t(5), { type: 'active' });
    expect(await periods(b, g)).toEqual([['active', t(1), t(5)]]);
  });
});

describe('as-of functions and retention', () => {
  test('subscribers_as_of and group_members_as_of answer for any instant', async () => {
    const id = newId();
    const g = '1000055';
    await upsertSubscribers(tdb.pool, [web({ id, email: 'v1@example.com', updated_at: '2024-09-01T00:00:00.000000Z' })]);
    await upsertSubscribers(tdb.pool, [web({ id, email: 'v2@example.com', updated_at: '2024-09-05T00:00:00.000000Z' })]);
    await upsertMemberships(tdb.pool, g, [{ subscriberId: id, type: 'active', at: '2024-09-02T00:00:00.000000Z' }], { via: 'webhook' });
    await removeMembership(tdb.pool, g, id, '2024-09-07T00:00:00.000000Z', 'webhook');
    const email = async (at: string) =>
      (await tdb.pool.query<{ email: string }>(`select email from subscribers_as_of($1) where id = $2`, [at, id])).rows.map((r) => r.email);
    const members = async (at: string) =>
      (await tdb.pool.query<{ email: string }>(`select email from group_members_as_of($1) where group_id = $2`, [at, g])).rows.map(
        (r) => r.email,
      );
    expect(await email('2024-08-31T00:00:00Z')).toEqual([]);
    expect(await email('2024-09-01T00:00:00Z')).toEqual(['v1@example.com']);
    expect(await email('2024-09-04T23:59:59Z')).toEqual(['v1@example.com']);
    expect(await email('2024-09-05T00:00:00Z')).toEqual(['v2@example.com']);
    expect(await members('2024-09-01T12:00:00Z')).toEqual([]);
    expect(await members('2024-09-03T00:00:00Z')).toEqual(['v1@example.com']);
    expect(await members('2024-09-06T00:00:00Z')).toEqual(['v2@example.com']);
    expect(await members('2024-09-07T00:00:00Z')).toEqual([]);
  });

  test('HISTORY_RETENTION purges closed versions and periods older than the window, never current ones', async () => {
    const id = newId();
    const g = '1000066';
    await upsertSubscribers(tdb.pool, [web({ id, email: 'old@example.com', updated_at: '2020-01-01T00:00:00.000000Z' })]);
    await upsertSubscribers(tdb.pool, [web({ id, email: 'newer@example.com', updated_at: '2020-02-01T00:00:00.000000Z' })]);
    await upsertMemberships(tdb.pool, g, [{ subscriberId: id, type: 'active', at: '2020-01-01T00:00:00.000000Z' }], { via: 'webhook' });
    await removeMembership(tdb.pool, g, id, '2020-01-02T00:00:00.000000Z', 'webhook');
    await upsertMemberships(tdb.pool, g, [{ subscriberId: id, type: 'active', at: '2020-01-03T00:00:00.000000Z' }], { via: 'webhook' });
    const deleted = await purgeHistory(tdb.pool, 365 * 86_400_000, 1);
    expect(deleted).toBeGreaterThanOrEqual(2);
    expect((await timeline(id)).map((r) => r.email)).toEqual(['newer@example.com']);
    const { rows } = await tdb.pool.query(`select ended_at from group_membership_periods where group_id = $1 and subscriber_id = $2`, [
      g,
      id,
    ]);
    expect(rows).toEqual([{ ended_at: null }]);
  });
});

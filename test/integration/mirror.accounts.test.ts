/**
 * Two accounts in one database (issue 35): the mirror's statements (store, history, erasure, field
 * definitions) read and change only the rows of the account their pool serves. Both accounts hold
 * the same ids with different data, so a statement that forgot the account would read, count or
 * change the other account's row.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase, type Database } from '../../src/db/client.js';
import type { Queryable } from '../../src/ground/queryable.js';
import {
  awaitingRedaction,
  eraseOnRequest,
  eraseOutOfGroups,
  forgottenAmongSql,
  logForgotten,
  markChecked,
  markRedacted,
  markRedactedNow,
  mirroredSubscribers,
  subscribersWithEmail,
} from '../../src/mirror/erasure.js';
import { eraseVersions, eraseVersionsOfErased, purgeHistory, recordVersions } from '../../src/mirror/history.js';
import { normalizeWebhookSubscriber } from '../../src/mirror/normalize.js';
import { eraseActivityLinks, eraseActivityLinksOfErased } from '../../src/mirror/store/activity.js';
import {
  awaitingProofIds,
  endMemberships,
  membersAwaitingProof,
  recordActivity,
  removeMembersNotSeenSince,
  removeMembership,
  replaceFieldDefinitions,
  upsertCampaigns,
  upsertGroups,
  upsertMemberships,
  upsertSubscribers,
} from '../../src/mirror/store/index.js';
import { webhookSubscriber } from '../fixtures/mirror/rows.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

const OTHER = 'other';
const GROUP = '4200';
const DAY = 86_400_000;

let db: TestDatabase;
/** The pool of account `other`; `db.pool` serves `default`. */
let other: Database;

beforeAll(async () => {
  db = await createTestDatabase();
  await db.pool.query(`insert into accounts (name) values ($1)`, [OTHER]);
  other = openDatabase(db.url, { account: OTHER, max: 3 });
});
afterAll(async () => {
  await other?.close();
  await db?.drop();
});

const web = (o: Record<string, unknown>) => normalizeWebhookSubscriber(webhookSubscriber(o));
const at = (day: number) => `2024-03-${String(day).padStart(2, '0')}T10:00:00.000000Z`;

/**
 * Every row of `table` for `id`, by account, with the columns asked for, ordered within an account by
 * `orderBy` (read across accounts on purpose).
 */
async function byAccount(table: string, idColumn: string, id: string, columns: string, orderBy = '2'): Promise<Record<string, unknown>[]> {
  const { rows } = await db.pool.query(`select account, ${columns} from ${table} where ${idColumn} = $1 order by account, ${orderBy}`, [
    id,
  ]);
  return rows as Record<string, unknown>[];
}

/** The past versions of `id` by account, oldest first. */
const pastEmails = (id: string) => byAccount('subscriber_versions_past', 'subscriber_id', id, 'email', 'valid_from');

async function emailOf(exec: Queryable, id: string): Promise<string | null | undefined> {
  const { rows } = await exec.query<{ email: string | null }>(
    `select email from subscribers where account = mirror_account() and id = $1`,
    [id],
  );
  return rows[0]?.email;
}

describe('subscribers and their history', () => {
  const id = '7100000000000000001';

  it('the same id is two subscribers; the newer-than guard and its counts read the own account only', async () => {
    expect(await upsertSubscribers(db.pool, [web({ id, email: 'd@example.com', updated_at: at(10) })])).toMatchObject({ inserted: 1 });
    expect(await upsertSubscribers(other.pool, [web({ id, email: 'o@example.com', updated_at: at(20) })])).toMatchObject({
      inserted: 1,
    });
    // Day 15 is newer than default's version and older than other's: written in one, skipped in the other.
    expect(await upsertSubscribers(db.pool, [web({ id, email: 'd15@example.com', updated_at: at(15) })])).toEqual({
      inserted: 0,
      updated: 1,
      unchanged: 0,
      skipped: 0,
    });
    expect(await upsertSubscribers(other.pool, [web({ id, email: 'o15@example.com', updated_at: at(15) })])).toEqual({
      inserted: 0,
      updated: 0,
      unchanged: 0,
      skipped: 1,
    });
    expect(await byAccount('subscribers', 'id', id, 'email')).toEqual([
      { account: 'default', email: 'd15@example.com' },
      { account: OTHER, email: 'o@example.com' },
    ]);
    // Each account's timeline: default's replaced version moved to its past; other's skipped one was placed in its own.
    expect(await pastEmails(id)).toEqual([
      { account: 'default', email: 'd@example.com' },
      { account: OTHER, email: 'o15@example.com' },
    ]);
  });

  it('a late version is placed in its own account’s timeline, against its own neighbours', async () => {
    expect(await recordVersions(db.pool, [web({ id, email: 'd12@example.com', updated_at: at(12) })])).toBe(1);
    expect(await pastEmails(id)).toEqual([
      { account: 'default', email: 'd@example.com' },
      { account: 'default', email: 'd12@example.com' },
      { account: OTHER, email: 'o15@example.com' },
    ]);
  });

  it('erasing versions and purging history leave the other account’s versions alone', async () => {
    // Other's timeline gets a version at day 10 too: the same (id, valid_from) as one default purges.
    expect(await recordVersions(other.pool, [web({ id, email: 'o10@example.com', updated_at: at(10) })])).toBe(1);
    expect(await eraseVersions(other.pool, [id])).toBe(2);
    expect(await pastEmails(id)).toEqual([
      { account: 'default', email: 'd@example.com' },
      { account: 'default', email: 'd12@example.com' },
      { account: OTHER, email: null },
      { account: OTHER, email: null },
    ]);
    // Everything of 2024 is past a one-day window: default keeps its current row only, other's versions stay.
    expect(await purgeHistory(db.pool, DAY)).toBe(2);
    expect(await pastEmails(id)).toEqual([
      { account: OTHER, email: null },
      { account: OTHER, email: null },
    ]);
  });

  it('a late version is placed, tied, or superseded against its own account’s versions of the same instant', async () => {
    const [h1, h2, h3, h4, h5, h6] = [1, 2, 3, 4, 5, 6].map((n) => `710000000000000010${n}`);
    const second = (ms: number) => `2024-03-10T10:00:00.${String(ms * 1000).padStart(6, '0')}Z`;
    const poll = (o: Record<string, unknown>) => ({ ...web(o), via: 'poll' as const });
    for (const h of [h1, h2, h3, h4, h5, h6])
      await upsertSubscribers(db.pool, [web({ id: h, email: `d20.${h}@example.com`, updated_at: at(20) })]);
    // h1: only other has a version at that instant; default has none, so it gets one.
    await upsertSubscribers(other.pool, [web({ id: h1, email: 'o10@example.com', updated_at: at(10) })]);
    await upsertSubscribers(other.pool, [web({ id: h1, email: 'o20@example.com', updated_at: at(20) })]);
    // h2: both have one; the later arrival rewrites default's, never other's.
    for (const pool of [db.pool, other.pool]) await recordVersions(pool, [web({ id: h2, email: 'first@example.com', updated_at: at(10) })]);
    // h3: other's poll version of the second a webhook version lands in (default's would be superseded).
    // h4, h5: other's webhook version of the second a poll version lands in (default's would make it coarse).
    await other.pool.query(
      `insert into subscriber_versions_past (subscriber_id, valid_from, via, email) values ($1, $2, 'poll', 'o-poll@example.com'),
         ($3, $4, 'webhook', 'o-hook@example.com')`,
      [h3, second(0), h4, second(300)],
    );
    await upsertSubscribers(other.pool, [web({ id: h5, email: 'o-hook@example.com', updated_at: second(300) })]);
    // h6: default's next version (a day later) has the same content as the one placed, so it is dropped;
    // other has versions between the two and at that later instant.
    const h6Version = web({ id: h6, email: 'same@example.com', updated_at: at(10) });
    await recordVersions(db.pool, [h6Version]);
    await db.pool.query(
      `update subscriber_versions_past set valid_from = valid_from + interval '1 day' where account = mirror_account() and subscriber_id = $1`,
      [h6],
    );
    await other.pool.query(
      `insert into subscriber_versions_past (subscriber_id, valid_from, via, email) values ($1, $2, 'webhook', 'o-mid@example.com'),
         ($1, $3, 'webhook', 'o-next@example.com')`,
      [h6, '2024-03-10T22:00:00Z', at(11)],
    );

    expect(await recordVersions(db.pool, [web({ id: h1, email: 'd10@example.com', updated_at: at(10) })])).toBe(1);
    expect(await recordVersions(db.pool, [web({ id: h2, email: 'second@example.com', updated_at: at(10) })])).toBe(1);
    expect(await recordVersions(db.pool, [web({ id: h3, email: 'd-hook@example.com', updated_at: second(500) })])).toBe(1);
    expect(await recordVersions(db.pool, [poll({ id: h4, email: 'd-poll@example.com', updated_at: second(0) })])).toBe(1);
    expect(await recordVersions(db.pool, [poll({ id: h5, email: 'd-poll@example.com', updated_at: second(0) })])).toBe(1);
    expect(await recordVersions(db.pool, [h6Version])).toBe(1);
    const { rows } = await db.pool.query(
      `select account, subscriber_id as id, email from subscriber_versions_past where subscriber_id = any($1) order by 2, 1, valid_from`,
      [[h1, h2, h3, h4, h5, h6]],
    );
    expect(rows).toEqual([
      { account: 'default', id: h1, email: 'd10@example.com' },
      { account: OTHER, id: h1, email: 'o10@example.com' },
      { account: 'default', id: h2, email: 'second@example.com' },
      { account: OTHER, id: h2, email: 'first@example.com' },
      { account: 'default', id: h3, email: 'd-hook@example.com' },
      { account: OTHER, id: h3, email: 'o-poll@example.com' },
      { account: 'default', id: h4, email: 'd-poll@example.com' },
      { account: OTHER, id: h4, email: 'o-hook@example.com' },
      { account: 'default', id: h5, email: 'd-poll@example.com' },
      { account: 'default', id: h6, email: 'same@example.com' },
      { account: OTHER, id: h6, email: 'o-mid@example.com' },
      { account: OTHER, id: h6, email: 'o-next@example.com' },
    ]);
  });
});

describe('memberships', () => {
  const [a, b, c, d] = ['7200000000000000001', '7200000000000000002', '7200000000000000003', '7200000000000000004'];

  it('upserts, removals and the removal proof touch the own account’s memberships only', async () => {
    await upsertMemberships(db.pool, GROUP, [{ subscriberId: a, type: 'active', at: at(10) }], { via: 'poll' });
    await upsertMemberships(
      other.pool,
      GROUP,
      [
        { subscriberId: a, type: 'active', at: at(20) },
        { subscriberId: b, type: 'active', at: at(20) },
      ],
      { via: 'poll' },
    );
    // A fact of day 15: newer than default's, older than other's (the counts read the own row).
    const fact = [{ subscriberId: a, type: 'unsubscribed', at: at(15) }];
    expect(await upsertMemberships(db.pool, GROUP, fact, { via: 'poll' })).toEqual({ inserted: 0, updated: 1, unchanged: 0, skipped: 0 });
    expect(await upsertMemberships(other.pool, GROUP, fact, { via: 'poll' })).toEqual({
      inserted: 0,
      updated: 0,
      unchanged: 0,
      skipped: 1,
    });

    // Not seen by a full pass: two in other, one in default.
    const seenBefore = at(25);
    expect(await membersAwaitingProof(other.pool, GROUP, seenBefore)).toMatchObject({ count: 2 });
    expect(await membersAwaitingProof(db.pool, GROUP, seenBefore)).toMatchObject({ count: 1 });
    expect(await awaitingProofIds(db.pool, GROUP, 'unsubscribed', seenBefore, 10)).toEqual([a]);
    expect(await awaitingProofIds(db.pool, GROUP, 'active', seenBefore, 10)).toEqual([]);

    expect(await removeMembership(db.pool, GROUP, a, at(16), 'webhook')).toBe(true);
    expect(await endMemberships(db.pool, b, at(22), 'webhook')).toBe(0);
    expect(await removeMembersNotSeenSince(db.pool, GROUP, seenBefore, at(26))).toBe(0);
    expect(await byAccount('group_members', 'group_id', GROUP, 'subscriber_id, type, removed_at is not null as removed')).toEqual([
      { account: 'default', subscriber_id: a, type: 'unsubscribed', removed: true },
      { account: OTHER, subscriber_id: a, type: 'active', removed: false },
      { account: OTHER, subscriber_id: b, type: 'active', removed: false },
    ]);

    expect(await endMemberships(other.pool, a, at(21), 'webhook')).toBe(1);
    expect(await removeMembersNotSeenSince(other.pool, GROUP, seenBefore, at(26))).toBe(1);
    const periods = await db.pool.query(
      `select account, subscriber_id, ended_at is not null as ended from group_membership_periods where group_id = $1 order by 1, 2`,
      [GROUP],
    );
    expect(periods.rows).toEqual([
      { account: 'default', subscriber_id: a, ended: true },
      { account: OTHER, subscriber_id: a, ended: true },
      { account: OTHER, subscriber_id: b, ended: true },
    ]);
  });

  it('a change is counted against the own account’s row, even where the other account holds that very fact', async () => {
    const fact = { subscriberId: c, type: 'unsubscribed', at: at(15) };
    await upsertMemberships(other.pool, '4300', [fact], { via: 'webhook' });
    await upsertMemberships(db.pool, '4300', [{ ...fact, type: 'active', at: at(10) }], { via: 'webhook' });
    expect(await upsertMemberships(db.pool, '4300', [fact], { via: 'webhook' })).toEqual({
      inserted: 0,
      updated: 1,
      unchanged: 0,
      skipped: 0,
    });
  });

  it('purging ended periods leaves the other account’s period of the same member and start', async () => {
    for (const pool of [db.pool, other.pool])
      await upsertMemberships(pool, '4400', [{ subscriberId: d, type: 'active', at: at(5) }], { via: 'poll' });
    await removeMembership(db.pool, '4400', d, at(6), 'webhook');
    expect(await purgeHistory(db.pool, DAY)).toBeGreaterThanOrEqual(1);
    const { rows } = await db.pool.query(`select account, ended_at is null as open from group_membership_periods where group_id = '4400'`);
    expect(rows).toEqual([{ account: OTHER, open: true }]);
  });
});

describe('reference rows and activity', () => {
  it('groups and campaigns of the same id are each account’s own', async () => {
    await upsertGroups(db.pool, [{ id: GROUP, name: 'Default list' }]);
    expect(await upsertGroups(other.pool, [{ id: GROUP, name: 'Other list' }])).toMatchObject({ inserted: 1 });
    const campaign = { id: '55', name: 'Spring', totalRecipients: null, previewUrl: null, date: null, sentAt: null };
    await upsertCampaigns(db.pool, [campaign]);
    expect(await upsertCampaigns(other.pool, [{ ...campaign, name: 'Autumn' }])).toMatchObject({ inserted: 1 });
    expect(await byAccount('groups', 'id', GROUP, 'name')).toEqual([
      { account: 'default', name: 'Default list' },
      { account: OTHER, name: 'Other list' },
    ]);
    expect(await byAccount('campaigns', 'id', '55', 'name')).toEqual([
      { account: 'default', name: 'Spring' },
      { account: OTHER, name: 'Autumn' },
    ]);
  });
});

describe('erasure', () => {
  const id = '7300000000000000001';
  const forgotten = '7300000000000000002';
  const link = 'https://shop.example.com/offer?email=x%40example.com';

  beforeAll(async () => {
    for (const pool of [db.pool, other.pool]) {
      await upsertSubscribers(pool, [web({ id, email: 'same@example.com', updated_at: at(10) })]);
      await upsertSubscribers(pool, [web({ id, email: 'same.later@example.com', updated_at: at(11) })]);
      await recordActivity(pool, [{ kind: 'campaign.click', subscriberId: id, occurredAt: at(10), campaignId: '55', linkUrl: link }]);
    }
    // Forgotten in other only.
    await upsertSubscribers(other.pool, [web({ id: forgotten, updated_at: at(12), forget_at: at(30), deleted_at: at(12) })]);
  });

  it('finds a person by email or id in its own account only', async () => {
    await upsertSubscribers(other.pool, [web({ id: '7300000000000000009', email: 'former.other@example.com', updated_at: at(9) })]);
    await upsertSubscribers(other.pool, [web({ id: '7300000000000000009', email: 'only.other@example.com', updated_at: at(10) })]);
    for (const email of ['only.other@example.com', 'former.other@example.com']) {
      expect(await subscribersWithEmail(db.pool, email)).toEqual([]);
      expect(await subscribersWithEmail(other.pool, email.toUpperCase())).toEqual(['7300000000000000009']);
    }
    expect(await mirroredSubscribers(db.pool, ['7300000000000000009', id])).toEqual([id]);
    const among = (pool: Queryable) =>
      pool.query<{ forgotten: string[] }>(forgottenAmongSql((t) => `'${t}'`, [id, forgotten])).then((r) => r.rows[0]?.forgotten);
    expect(await among(db.pool)).toEqual([]);
    expect(await among(other.pool)).toEqual([forgotten]);
  });

  it('erasing on request erases and logs in the own account; the other account’s copy keeps its data and its writes', async () => {
    expect(await eraseOnRequest(db.pool, [id])).toEqual({ subscribers: 1, logged: [id] });
    await markRedactedNow(db.pool, [id]);
    expect(await eraseVersions(db.pool, [id])).toBe(1);
    expect(await eraseActivityLinks(db.pool, [id])).toBe(1);
    expect(await emailOf(db.pool, id)).toBeNull();
    expect(await emailOf(other.pool, id)).toBe('same.later@example.com');
    // A later write in other is not erased by default's request (erasedOnRequestSql reads the own account).
    await upsertSubscribers(other.pool, [web({ id, email: 'newest@example.com', updated_at: at(12) })]);
    expect(await emailOf(other.pool, id)).toBe('newest@example.com');
    // And one in default stays erased.
    await upsertSubscribers(db.pool, [web({ id, email: 'back@example.com', updated_at: at(12) })]);
    expect(await emailOf(db.pool, id)).toBeNull();
    expect(await pastEmails(id)).toEqual([
      { account: 'default', email: null },
      { account: 'default', email: null },
      { account: OTHER, email: 'same@example.com' },
      { account: OTHER, email: 'same.later@example.com' },
    ]);
    expect(await byAccount('subscriber_activity', 'subscriber_id', id, 'link_url')).toEqual([
      { account: 'default', link_url: 'https://shop.example.com/offer' },
      { account: OTHER, link_url: link },
    ]);
  });

  it('the timer’s erasure log, re-checks and redaction marks stay within the account', async () => {
    expect(await logForgotten(db.pool)).toBe(0);
    expect(await logForgotten(other.pool)).toBe(1);
    // Other's erasure of `id` is logged, its versions and links not re-checked yet: default's run must not touch them.
    await other.pool.query(`insert into erasures (subscriber_id, reason, deliveries_redacted_at) values ($1, 'request', now())`, [id]);
    expect(await eraseVersionsOfErased(db.pool)).toBe(0);
    expect(await eraseActivityLinksOfErased(db.pool)).toBe(0);
    expect(await byAccount('subscriber_activity', 'subscriber_id', id, 'link_url')).toEqual([
      { account: 'default', link_url: 'https://shop.example.com/offer' },
      { account: OTHER, link_url: link },
    ]);
    expect((await pastEmails(id)).filter((r) => r.account === OTHER && r.email !== null)).toHaveLength(2);
    expect(await eraseVersionsOfErased(other.pool)).toBe(2);
    expect(await eraseActivityLinksOfErased(other.pool)).toBe(1);
    await other.pool.query(`delete from erasures where account = mirror_account() and subscriber_id = $1`, [id]);
    await markRedactedNow(db.pool, [forgotten]);
    expect(await awaitingRedaction(db.pool, 10)).toEqual([]);
    expect(await awaitingRedaction(other.pool, 10)).toEqual([forgotten]);
    await markRedacted(db.pool, [forgotten], '2030-01-01 00:00:00+00');
    expect(await awaitingRedaction(other.pool, 10)).toEqual([forgotten]);
    await markRedacted(other.pool, [forgotten], '2024-01-01 00:00:00+00');
    expect(await markChecked(db.pool, '2030-01-01 00:00:00+00')).toBe(1);
    expect(await markChecked(other.pool, '2030-01-01 00:00:00+00')).toBe(1);
    const marks = await db.pool.query(
      `select account, subscriber_id, deliveries_redacted_at = '2030-01-01T00:00:00Z' as checked from erasures order by 1, 2`,
    );
    expect(marks.rows).toEqual([
      { account: 'default', subscriber_id: id, checked: true },
      { account: OTHER, subscriber_id: forgotten, checked: true },
    ]);
  });

  it('out of every configured group: each account’s own memberships and completed passes decide', async () => {
    const gone = '7300000000000000003';
    for (const pool of [db.pool, other.pool]) {
      await pool.query(
        `insert into subscribers (id, email, status, updated_at, version_at, mirrored_via, mirrored_at)
         values ($1, 'gone@example.com', 'active', '2024-02-01T00:00:00Z', '2024-02-01T00:00:00Z', 'poll', now() - interval '60 days')`,
        [gone],
      );
      await pool.query(`insert into sync_state (group_id, type) values ('900', 'active')`);
      await pool.query(
        `insert into sync_passes (group_id, type, kind, source, started_at, listed_from, ended_at, status, complete, gap_free)
         select '900', 'active', 'full', 'legacy', t, t, t, 'succeeded', true, true from (select now() - interval '1 day' as t) x`,
      );
    }
    // Out for 40 days in default; still a member in other.
    await db.pool.query(
      `insert into group_members (group_id, subscriber_id, type, added_at, removed_at, mirrored_via)
       values ('900', $1, 'active', now() - interval '100 days', now() - interval '40 days', 'poll')`,
      [gone],
    );
    await other.pool.query(
      `insert into group_members (group_id, subscriber_id, type, added_at, removed_at, mirrored_via)
       values ('900', $1, 'active', now() - interval '100 days', null, 'poll')`,
      [gone],
    );
    for (const pool of [db.pool, other.pool]) {
      await pool.query(
        `insert into subscriber_versions_past (subscriber_id, valid_from, via, email) values ($1, '2024-01-15T00:00:00Z', 'poll', 'old.gone@example.com')`,
        [gone],
      );
    }
    const options = { groups: ['900'], types: ['active'], afterMs: 30 * DAY };
    expect(await eraseOutOfGroups(other.pool, options)).toEqual([]);
    expect(await eraseOutOfGroups(db.pool, options)).toEqual([gone]);
    expect(await byAccount('subscribers', 'id', gone, 'email')).toEqual([
      { account: 'default', email: null },
      { account: OTHER, email: 'gone@example.com' },
    ]);
    expect(await pastEmails(gone)).toEqual([
      { account: 'default', email: null },
      { account: OTHER, email: 'old.gone@example.com' },
    ]);
  });
});

describe('field definitions', () => {
  it('each account refreshes its own list; a key one account drops stays the other’s', async () => {
    await replaceFieldDefinitions(db.pool, [{ key: 'tier', title: 'Tier', type: 'text', upstreamId: '1' }]);
    const added = await replaceFieldDefinitions(other.pool, [
      { key: 'tier', title: 'Level', type: 'text', upstreamId: '9' },
      { key: 'score', title: 'Score', type: 'number', upstreamId: '10' },
    ]);
    // `tier` is new to other although default defines it.
    expect(added).toMatchObject({ added: ['tier', 'score'], removed: [] });
    expect(await replaceFieldDefinitions(db.pool, [])).toMatchObject({ removed: ['tier'] });
    const { rows } = await db.pool.query(`select account, key, title from fields order by 1, 2`);
    expect(rows).toEqual([
      { account: OTHER, key: 'score', title: 'Score' },
      { account: OTHER, key: 'tier', title: 'Level' },
    ]);
  });
});

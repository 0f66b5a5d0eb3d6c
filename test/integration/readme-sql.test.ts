/**
 * SQL for users (issue #6 part 6): the three views, and every ```sql example of docs/sql.md (and of
 * README.md, should it carry any), run against a mirror populated through `src/mirror/store/` with
 * a small, hand-checked world. An example that stops running, or stops answering its question, fails
 * here.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { campaignEngagement, currentGroupMembers, recentlyChangedSubscribers, type MirrorSource } from '../../src/db/schema.js';
import { SUBSCRIBER_FIELDS, emptyValues } from '../../src/mirror/normalize.js';
import {
  recordActivity,
  removeMembership,
  upsertCampaigns,
  upsertGroups,
  upsertMemberships,
  upsertSubscribers,
  type ActivityRow,
  type MemberInput,
  type SubscriberRow,
  type SubscriberValues,
} from '../../src/mirror/store/index.js';
import { closeRow, openRow, removalRule, saveRemovals } from '../../src/sync/pass-history.js';
import { replaceFieldDefinitions } from '../../src/mirror/store/index.js';
import { emptyTally, recordAuditResult } from '../../src/audit/state.js';
import { removeMembersNotSeenSince } from '../../src/mirror/store/index.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { iso } from '../helpers/mirror.js';

// ---------------------------------------------------------------------------------------------
// The documented examples

/** The examples' own page; every other page of docs/ and README.md may carry ```sql blocks too. */
const SQL_PAGE = 'docs/sql.md';

/** Every document whose ```sql blocks are executed here. */
const DOCUMENTS = [
  SQL_PAGE,
  ...readdirSync(fileURLToPath(new URL('../../docs', import.meta.url)))
    .filter((name) => name.endsWith('.md') && `docs/${name}` !== SQL_PAGE)
    .sort()
    .map((name) => `docs/${name}`),
  'README.md',
];

interface Example {
  /** Where the example is written. */
  document: string;
  /** The last prose line before the block: what the example answers. */
  explanation: string;
  sql: string;
}

/** Every ```sql block of a document, with the line that explains it. */
function sqlExamples(document: string): Example[] {
  const text = readFileSync(fileURLToPath(new URL(`../../${document}`, import.meta.url)), 'utf8');
  const examples: Example[] = [];
  let last = 0;
  for (const match of text.matchAll(/^```sql[ \t]*\n([\s\S]*?)^```[ \t]*$/gm)) {
    const prose = text
      .slice(last, match.index)
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l !== '');
    examples.push({ document, explanation: prose.at(-1) ?? '', sql: match[1] ?? '' });
    last = match.index + match[0].length;
  }
  return examples;
}

const DOC_EXAMPLES = sqlExamples(SQL_PAGE);
const EXAMPLES = DOCUMENTS.flatMap((d) => sqlExamples(d));

// ---------------------------------------------------------------------------------------------
// The world: two groups, ten subscribers, three campaigns (ids as in the documented examples)

const NEWSLETTER = '1000001';
const CUSTOMERS = '1000002'; // only ever polled: no name known
const LEAVERS = '1000003'; // polled; Ben left it, which two full passes proved
const MAY = '3000001';
const JUNE = '3000002';
const TEST_SEND = '3000003';
const SALE_URL = 'https://example.com/sale';
const BLOG_URL = 'https://example.com/blog';

// Legacy ids exceed 2^53 (invariant 6).
const ANA = '1261159647788771301';
const BEN = '1261159647788771302';
const CLEO = '1261159647788771303';
const DAN = '1261159647788771304';
const EVE = '1261159647788771305';
const FINN = '1261159647788771306';
const GUS = '1261159647788771307';
const HAL = '1261159647788771308';
const IVY = '1261159647788771309';
const JO = '1261159647788771310';
const KAI = '1261159647788771311';

const at = (day: string, time = '10:00:00') => `${day}T${time}.000000Z`;

/** Times relative to the database's clock (the views and examples use its `now()`). */
interface Clock {
  /** Within this week (Monday-based, session time zone) and within the last hour. */
  thisWeek: string;
  lastWeek: string;
  twoHoursAgo: string;
  threeHoursAgo: string;
  hours23Ago: string;
  hours25Ago: string;
  twoDaysAgo: string;
  fiveDaysAgo: string;
  tenDaysAgo: string;
}

async function readClock(pool: pg.Pool): Promise<Clock> {
  const { rows } = await pool.query<Clock>(`select
    ${iso(`greatest(date_trunc('week', now()), now() - interval '1 hour')`)} as "thisWeek",
    ${iso(`date_trunc('week', now()) - interval '3 days'`)} as "lastWeek",
    ${iso(`now() - interval '2 hours'`)} as "twoHoursAgo",
    ${iso(`now() - interval '3 hours'`)} as "threeHoursAgo",
    ${iso(`now() - interval '23 hours'`)} as "hours23Ago",
    ${iso(`now() - interval '25 hours'`)} as "hours25Ago",
    ${iso(`now() - interval '2 days'`)} as "twoDaysAgo",
    ${iso(`now() - interval '5 days'`)} as "fiveDaysAgo",
    ${iso(`now() - interval '10 days'`)} as "tenDaysAgo"`);
  const clock = rows[0];
  if (!clock) throw new Error('no clock row');
  return clock;
}

function subscriber(via: MirrorSource, values: Partial<SubscriberValues> & Pick<SubscriberValues, 'id' | 'updatedAt'>): SubscriberRow {
  return {
    via,
    values: { ...emptyValues(values.id, values.updatedAt), createdAt: at('2024-04-01'), subscribedAt: at('2024-04-01'), ...values },
    provided: SUBSCRIBER_FIELDS,
  };
}

async function populate(pool: pg.Pool, clock: Clock): Promise<void> {
  // History: Cleo was first seen active in Lisbon under another address, then changed both.
  await upsertSubscribers(pool, [
    subscriber('poll', {
      id: CLEO,
      email: 'cleo@old.example.com',
      name: 'Cleo',
      status: 'active',
      updatedAt: clock.tenDaysAgo,
      fields: { city: 'Lisbon' },
    }),
  ]);
  await upsertSubscribers(pool, [
    subscriber('poll', {
      id: ANA,
      email: 'ana@example.com',
      name: 'Ana',
      status: 'active',
      updatedAt: clock.tenDaysAgo,
      fields: { city: 'Berlin', company: 'Acme', score: '87', birthday: '1990-05-17' },
    }),
    subscriber('poll', {
      id: BEN,
      email: 'ben@example.com',
      name: 'Ben',
      status: 'active',
      updatedAt: clock.tenDaysAgo,
      // Neither parses: a number field holding text, a date field holding a day that does not exist.
      fields: { city: 'Lisbon', score: 'n/a', birthday: '1985-02-30' },
    }),
    // Listed as active, then unsubscribed by a webhook: `status` is fresher than the membership `type`.
    subscriber('webhook', {
      id: CLEO,
      email: 'cleo@example.com',
      name: 'Cleo',
      status: 'unsubscribed',
      unsubscribedAt: clock.thisWeek,
      updatedAt: clock.thisWeek,
      fields: { city: 'Berlin' },
    }),
    subscriber('poll', {
      id: DAN,
      email: 'dan@example.com',
      name: 'Dan',
      status: 'unsubscribed',
      unsubscribedAt: clock.lastWeek,
      updatedAt: clock.lastWeek,
    }),
    subscriber('poll', { id: EVE, email: 'eve@example.com', name: 'Eve', status: 'active', updatedAt: clock.tenDaysAgo }),
    // Deleted upstream while its membership is still open in the mirror: the view must hide it.
    subscriber('webhook', {
      id: FINN,
      email: 'finn@example.com',
      name: 'Finn',
      status: 'active',
      deletedAt: clock.twoDaysAgo,
      updatedAt: clock.twoDaysAgo,
      fields: { city: 'Berlin' },
    }),
    subscriber('webhook', {
      id: GUS,
      email: 'Gus@Example.COM',
      name: 'Gus',
      status: 'active',
      updatedAt: clock.twoHoursAgo,
      fields: { city: 'Berlin', company: 'Globex', score: '51.5', birthday: '2001-05-02T00:00:00' },
    }),
    subscriber('poll', { id: HAL, email: 'hal@example.com', name: 'Hal', status: 'bounced', updatedAt: clock.fiveDaysAgo }),
    subscriber('poll', {
      id: IVY,
      email: 'ivy@example.com',
      name: 'Ivy',
      status: 'active',
      updatedAt: clock.hours23Ago,
      fields: { score: '12', birthday: '1999-12-31' },
    }),
    subscriber('poll', { id: JO, email: 'jo@example.com', name: 'Jo', status: 'active', updatedAt: clock.hours25Ago }),
    subscriber('webhook', {
      id: KAI,
      email: 'kai@example.com',
      name: 'Kai',
      status: 'active',
      deletedAt: clock.threeHoursAgo,
      updatedAt: clock.threeHoursAgo,
    }),
  ]);

  await upsertGroups(pool, [{ id: NEWSLETTER, name: 'Newsletter' }]);
  const member = (subscriberId: string, type: string, day: string, time?: string): MemberInput => ({
    subscriberId,
    type,
    at: at(day, time),
  });
  await upsertMemberships(
    pool,
    NEWSLETTER,
    [
      member(ANA, 'active', '2024-05-01', '08:00:00'),
      member(BEN, 'active', '2024-05-01', '17:30:00'),
      member(CLEO, 'active', '2024-05-02', '09:00:00'),
      member(DAN, 'unsubscribed', '2024-05-02', '10:00:00'),
      member(EVE, 'active', '2024-05-02', '11:00:00'),
      member(FINN, 'active', '2024-05-03', '08:00:00'),
      member(HAL, 'bounced', '2024-05-03', '09:00:00'),
    ],
    { via: 'poll' },
  );
  await removeMembership(pool, NEWSLETTER, EVE, at('2024-05-20'), 'webhook');
  await upsertMemberships(
    pool,
    CUSTOMERS,
    [member(ANA, 'active', '2024-05-03', '12:00:00'), member(EVE, 'active', '2024-05-04'), member(GUS, 'active', '2024-05-05')],
    { via: 'poll' },
  );

  // Ben was listed in LEAVERS in May; two complete passes since did not list him: the rule ends him.
  await upsertMemberships(pool, LEAVERS, [member(BEN, 'active', '2024-05-03', '08:00:00')], {
    via: 'poll',
    seenAt: at('2024-05-03', '08:00:00'),
  });
  await endByTwoPasses(pool, LEAVERS, [clock.threeHoursAgo, clock.twoHoursAgo]);

  await upsertCampaigns(pool, [
    { id: MAY, name: 'May newsletter', totalRecipients: 6, previewUrl: null, date: at('2024-05-10'), sentAt: at('2024-05-10') },
    { id: JUNE, name: 'June promo', totalRecipients: null, previewUrl: null, date: at('2024-06-10'), sentAt: at('2024-06-10') },
    // No campaign.sent seen: sent_at falls back to the date; 0 recipients must not divide by zero.
    { id: TEST_SEND, name: 'Test send', totalRecipients: 0, previewUrl: null, date: at('2024-05-20'), sentAt: null },
  ]);

  // Each event comes in its own delivery (item 0), received at `when`.
  let deliveries = 0;
  const delivered = (row: Omit<ActivityRow, 'deliveryId' | 'itemIndex'>): ActivityRow => ({
    ...row,
    deliveryId: String(++deliveries),
    itemIndex: 0,
  });
  const open = (subscriberId: string, campaignId: string, when: string): ActivityRow =>
    delivered({ kind: 'campaign.open', subscriberId, campaignId, occurredAt: when });
  const click = (subscriberId: string, linkUrl: string, when: string): ActivityRow =>
    delivered({ kind: 'campaign.click', subscriberId, campaignId: MAY, linkUrl, occurredAt: when });
  const anaOpensMay = open(ANA, MAY, at('2024-05-10', '11:00:00'));
  await recordActivity(pool, [
    anaOpensMay,
    open(ANA, MAY, at('2024-05-12', '08:00:00')),
    anaOpensMay, // the same delivery applied again: collapses (invariant 5)
    open(BEN, MAY, at('2024-05-10', '12:00:00')),
    open(GUS, MAY, at('2024-05-11')),
    open(ANA, TEST_SEND, at('2024-05-20', '11:00:00')),
    click(ANA, SALE_URL, at('2024-05-10', '11:01:00')),
    click(ANA, BLOG_URL, at('2024-05-10', '11:02:00')),
    click(BEN, SALE_URL, at('2024-05-10', '12:01:00')),
    delivered({ kind: 'subscriber.unsubscribed', subscriberId: CLEO, occurredAt: clock.thisWeek }),
    // Jo complained of spam (still active): a suppression all the same.
    delivered({ kind: 'subscriber.spam_reported', subscriberId: JO, occurredAt: clock.twoDaysAgo }),
  ]);

  // The service's custom field definitions: two text fields, a number and a date.
  await replaceFieldDefinitions(pool, [
    { key: 'birthday', title: 'Birthday', type: 'date', upstreamId: '12' },
    { key: 'city', title: 'City', type: 'text', upstreamId: '5' },
    { key: 'company', title: 'Company', type: 'text', upstreamId: '3' },
    { key: 'score', title: 'Lead score', type: 'number', upstreamId: '11' },
  ]);

  // Kai asked to be forgotten: the erasure log keeps only the id (written here as the erasure run does).
  await pool.query(`insert into erasures (subscriber_id, reason, erased_at) values ($1, 'forget', $2)`, [KAI, clock.threeHoursAgo]);

  // The service counted the newsletter's active members in a pass; the audit read back ten rows, one differed.
  const counted = await openRow(pool, { groupId: NEWSLETTER, type: 'active', kind: 'full', source: 'legacy', trigger: 'schedule' });
  await closeRow(pool, counted, {
    status: 'succeeded',
    listedFrom: clock.twoHoursAgo,
    complete: true,
    gapFree: true,
    rowsSeen: 3,
    rowsWritten: 0,
    requests: 2,
    upstreamCount: 3,
  });
  await recordAuditResult(pool, NEWSLETTER, 'active', { ...emptyTally(), rowsChecked: 10, content: 1, repaired: 1 });
}

/** Two complete, gap-free full passes of the group's one type that listed nobody, then the rule, as the recorder runs it. */
async function endByTwoPasses(pool: pg.Pool, groupId: string, listedFrom: readonly string[]): Promise<void> {
  let last = 0;
  for (const from of listedFrom) {
    last = await openRow(pool, { groupId, type: 'active', kind: 'full', source: 'legacy', trigger: 'schedule' });
    await closeRow(pool, last, {
      status: 'succeeded',
      listedFrom: from,
      complete: true,
      gapFree: true,
      rowsSeen: 0,
      rowsWritten: 0,
      requests: 1,
    });
  }
  const rule = await removalRule(pool, groupId, ['active'], { sweeps: true });
  if (!rule) throw new Error('the two passes should prove the removal');
  const removed = await removeMembersNotSeenSince(pool, groupId, rule.cutoff, listedFrom.at(-1) as string, {
    types: ['active'],
    endedBy: last,
  });
  await saveRemovals(pool, last, removed, rule.proof);
}

// ---------------------------------------------------------------------------------------------
// Running examples: rows with Postgres's own text for every value (no JS Date / number conversion)

type TextRow = Record<string, string | null>;

// pg types `getTypeParser` as an overloaded generic no lambda satisfies, hence the cast.
const rawText = { getTypeParser: () => (value: string) => value } as unknown as pg.CustomTypesConfig;

/** Runs one example read-only, so no example can change what the next one sees. */
async function runReadOnly(client: pg.Client, text: string, setup: string[] = []): Promise<TextRow[]> {
  await client.query('begin transaction read only');
  try {
    for (const statement of setup) await client.query(statement);
    const result: unknown = await client.query(text);
    if (Array.isArray(result)) throw new Error('an example must be one statement');
    return (result as pg.QueryResult<TextRow>).rows;
  } finally {
    await client.query('rollback');
  }
}

interface Expectation {
  name: string;
  explanation: RegExp;
  check(rows: TextRow[], example: Example, client: pg.Client): void | Promise<void>;
}

/** The clock the world was populated with (the history examples' answers depend on it). */
let readmeClock: Clock | undefined;

const pick = (rows: TextRow[], ...columns: string[]) => rows.map((r) => Object.fromEntries(columns.map((c) => [c, r[c]])));

/** What each documented example must answer on the world above, keyed by its explanation line. */
const EXPECTATIONS: Expectation[] = [
  {
    name: 'active members of a group',
    explanation: /^Active members of a group, with/i,
    check: (rows) => {
      // Not: Cleo (unsubscribed since listed), Dan (unsubscribed), Eve (left), Finn (deleted), Hal (bounced).
      expect(pick(rows, 'subscriber_id', 'email', 'name')).toEqual([
        { subscriber_id: ANA, email: 'ana@example.com', name: 'Ana' },
        { subscriber_id: BEN, email: 'ben@example.com', name: 'Ben' },
      ]);
    },
  },
  {
    name: 'unsubscribed this week',
    explanation: /unsubscribed this week/i,
    check: (rows) => expect(rows.map((r) => r.id)).toEqual([CLEO]),
  },
  {
    name: 'engagement per campaign',
    explanation: /^Engagement per campaign/i,
    check: (rows) => {
      expect(pick(rows, 'campaign_name', 'total_recipients', 'unique_openers', 'unique_clickers', 'open_rate', 'click_rate')).toEqual([
        {
          campaign_name: 'June promo',
          total_recipients: null,
          unique_openers: '0',
          unique_clickers: '0',
          open_rate: null,
          click_rate: null,
        },
        { campaign_name: 'Test send', total_recipients: '0', unique_openers: '1', unique_clickers: '0', open_rate: null, click_rate: null },
        {
          campaign_name: 'May newsletter',
          total_recipients: '6',
          unique_openers: '3',
          unique_clickers: '2',
          open_rate: '50',
          click_rate: '33.33',
        },
      ]);
    },
  },
  {
    name: 'top clicked links of a campaign',
    explanation: /^Top clicked links/i,
    check: (rows) => {
      expect(rows).toEqual([
        { link_url: SALE_URL, clicks: '2', unique_clickers: '2' },
        { link_url: BLOG_URL, clicks: '1', unique_clickers: '1' },
      ]);
    },
  },
  {
    name: 'subscribers in two groups',
    explanation: /both of two groups/i,
    // Eve left the newsletter; Gus is only a customer.
    check: (rows) => expect(rows).toEqual([{ subscriber_id: ANA, email: 'ana@example.com' }]),
  },
  {
    name: 'custom field filter',
    explanation: /custom field/i,
    // Not Cleo (unsubscribed) nor Finn (deleted).
    check: (rows) => {
      expect(rows).toEqual([
        { id: ANA, email: 'ana@example.com', company: 'Acme' },
        { id: GUS, email: 'Gus@Example.COM', company: 'Globex' },
      ]);
    },
  },
  {
    name: 'case-insensitive email lookup on the lower(email) index',
    explanation: /by email/i,
    check: async (rows, example, client) => {
      expect(pick(rows, 'id', 'email', 'status')).toEqual([{ id: GUS, email: 'Gus@Example.COM', status: 'active' }]);
      // docs/sql.md promises the index: with sequential scans priced out, the plan must use it.
      const plan = await runReadOnly(client, `explain ${example.sql}`, ['set local enable_seqscan = off']);
      expect(plan.map((r) => r['QUERY PLAN']).join('\n')).toContain('subscribers_email_idx');
    },
  },
  {
    name: 'members added per day',
    explanation: /added to a group per day/i,
    check: (rows) => {
      expect(rows).toEqual([
        { day: '2024-05-01', members_added: '2' },
        { day: '2024-05-02', members_added: '3' }, // Eve counted although she left since
        { day: '2024-05-03', members_added: '2' },
      ]);
    },
  },
  {
    name: 'group sizes by status',
    explanation: /^Size of every group/i,
    check: (rows) => {
      expect(rows).toEqual([
        { account: 'default', group_id: NEWSLETTER, group_name: 'Newsletter', status: 'active', members: '2' },
        { account: 'default', group_id: NEWSLETTER, group_name: 'Newsletter', status: 'bounced', members: '1' },
        { account: 'default', group_id: NEWSLETTER, group_name: 'Newsletter', status: 'unsubscribed', members: '2' },
        { account: 'default', group_id: CUSTOMERS, group_name: null, status: 'active', members: '3' },
      ]);
    },
  },
  {
    name: 'history: members per day',
    explanation: /^Members of a group per day/i,
    check: (rows) => {
      expect(rows).toHaveLength(21);
      const byDay = new Map(rows.map((r) => [r.day, r.members]));
      // Ana, Ben; then Cleo, Dan, Eve; then Finn, Hal; Eve left on 20 May. (Finn's deletion two days
      // ago does not reach back: in May he was a member.)
      expect([
        byDay.get('2024-05-01'),
        byDay.get('2024-05-02'),
        byDay.get('2024-05-03'),
        byDay.get('2024-05-19'),
        byDay.get('2024-05-20'),
      ]).toEqual(['2', '5', '7', '7', '6']);
    },
  },
  {
    name: 'history: unsubscribes per week',
    explanation: /first saw it unsubscribed/i,
    check: async (rows, _example, client) => {
      // Dan (first seen unsubscribed last week) and Cleo (active, then unsubscribed this week).
      const { rows: weeks } = await client.query<{ last: string; this: string }>(
        `select date_trunc('week', $1::timestamptz)::text as last, date_trunc('week', $2::timestamptz)::text as this`,
        [readmeClock?.lastWeek, readmeClock?.thisWeek],
      );
      expect(rows).toEqual([
        { week: weeks[0]?.last, unsubscribes: '1' },
        { week: weeks[0]?.this, unsubscribes: '1' },
      ]);
    },
  },
  {
    name: "history: one subscriber's timeline",
    explanation: /^One subscriber's timeline/i,
    check: async (rows, _example, client) => {
      const { rows: times } = await client.query<{ ten: string; week: string }>(
        `select $1::timestamptz::text as ten, $2::timestamptz::text as week`,
        [readmeClock?.tenDaysAgo, readmeClock?.thisWeek],
      );
      expect(rows).toEqual([
        {
          valid_from: times[0]?.ten,
          valid_to: times[0]?.week,
          via: 'poll',
          email: 'cleo@old.example.com',
          status: 'active',
          city: 'Lisbon',
        },
        { valid_from: times[0]?.week, valid_to: null, via: 'webhook', email: 'cleo@example.com', status: 'unsubscribed', city: 'Berlin' },
      ]);
    },
  },
  {
    name: 'history: members on a date who have left since',
    explanation: /who have left it since/i,
    // Eve left the newsletter on 20 May; Finn was deleted upstream two days ago.
    check: (rows) =>
      expect(pick(rows, 'subscriber_id', 'email')).toEqual([
        { subscriber_id: EVE, email: 'eve@example.com' },
        { subscriber_id: FINN, email: 'finn@example.com' },
      ]),
  },
  {
    name: 'why was a member ended',
    explanation: /^The passes that proved why a member/i,
    check: (rows) => {
      expect(rows).toHaveLength(2);
      expect(rows.every((r) => r.subscriber_id === BEN && r.kind === 'full' && r.type === 'active' && r.removed_at !== null)).toBe(true);
      // The later pass settled it; both are its proof.
      expect(rows[1]?.settled_by).toBe(rows[1]?.pass);
      expect(Date.parse(String(rows[0]?.listed_from))).toBeLessThan(Date.parse(String(rows[1]?.listed_from)));
    },
  },
  {
    name: 'field definitions',
    explanation: /^Which fields the service defines/i,
    check: (rows) =>
      expect(rows).toEqual([
        { key: 'birthday', title: 'Birthday', type: 'date' },
        { key: 'city', title: 'City', type: 'text' },
        { key: 'company', title: 'Company', type: 'text' },
        { key: 'score', title: 'Lead score', type: 'number' },
      ]),
  },
  {
    name: 'a number field without a cast',
    explanation: /score above 50/i,
    // Not Ben ('n/a' is no number: null, no error), nor Ivy (12).
    check: (rows) =>
      expect(rows).toEqual([
        { id: ANA, email: 'ana@example.com', score: '87' },
        { id: GUS, email: 'Gus@Example.COM', score: '51.5' },
      ]),
  },
  {
    name: 'a date field without a cast',
    explanation: /birthday in May/i,
    // Not Ben (30 February is no day: null, no error), nor Ivy (December).
    check: (rows) =>
      expect(rows).toEqual([
        { id: ANA, birthday: '1990-05-17' },
        { id: GUS, birthday: '2001-05-02' },
      ]),
  },
  {
    name: 'the suppression list',
    explanation: /must not be mailed, and why/i,
    check: async (rows, _example, client) => {
      const { rows: times } = await client.query<Record<string, string>>(
        `select $1::timestamptz::text as week, $2::timestamptz::text as last, $3::timestamptz::text as two, $4::timestamptz::text as three,
                $5::timestamptz::text as five`,
        [readmeClock?.thisWeek, readmeClock?.lastWeek, readmeClock?.twoDaysAgo, readmeClock?.threeHoursAgo, readmeClock?.fiveDaysAgo],
      );
      const t = times[0] as Record<string, string>;
      expect(rows).toEqual([
        { email: 'hal@example.com', subscriber_id: HAL, reason: 'bounced', since: t.five, learned_via: 'poll' },
        { email: null, subscriber_id: KAI, reason: 'forgotten', since: t.three, learned_via: 'webhook' },
        { email: 'jo@example.com', subscriber_id: JO, reason: 'spam_complaint', since: t.two, learned_via: 'webhook' },
        { email: 'dan@example.com', subscriber_id: DAN, reason: 'unsubscribed', since: t.last, learned_via: 'poll' },
        { email: 'cleo@example.com', subscriber_id: CLEO, reason: 'unsubscribed', since: t.week, learned_via: 'webhook' },
      ]);
    },
  },
  {
    name: "group figures beside the service's",
    explanation: /beside the service's count/i,
    check: (rows) => {
      const newsletterActive = rows.find((r) => r.group_id === NEWSLETTER && r.type === 'active');
      // Ana, Ben, Cleo and Finn (deleted upstream, membership still open) are listed as active here.
      expect(newsletterActive).toMatchObject({
        group_name: 'Newsletter',
        mirror_members: '4',
        service_count: '3',
        difference: '-1',
        last_audit_accuracy: '0.900',
      });
      expect(newsletterActive?.service_count_at).not.toBeNull();
      // A pair no pass has counted yet: the mirror's figure, no service count.
      expect(rows.find((r) => r.group_id === CUSTOMERS && r.type === 'active')).toMatchObject({
        mirror_members: '3',
        service_count: null,
        difference: null,
        last_audit_at: null,
      });
    },
  },
  {
    name: 'changed in the last 24 hours',
    explanation: /last 24 hours/i,
    check: (rows) => {
      expect(pick(rows, 'id', 'status', 'mirrored_via')).toEqual([
        { id: CLEO, status: 'unsubscribed', mirrored_via: 'webhook' },
        { id: GUS, status: 'active', mirrored_via: 'webhook' },
        { id: KAI, status: 'active', mirrored_via: 'webhook' },
        { id: IVY, status: 'active', mirrored_via: 'poll' },
      ]);
    },
  },
];

// ---------------------------------------------------------------------------------------------

describe('SQL for users', () => {
  let database: TestDatabase;
  let client: pg.Client;
  let clock: Clock;

  beforeAll(async () => {
    database = await createTestDatabase();
    clock = await readClock(database.pool);
    readmeClock = clock;
    await populate(database.pool, clock);
    client = new pg.Client({ connectionString: database.url, types: rawText });
    await client.connect();
  });

  afterAll(async () => {
    await client?.end();
    await database?.drop();
  });

  describe('views', () => {
    it('exist with their contract columns, in order', async () => {
      const { rows } = await database.pool.query<{ table_name: string; columns: string[] }>(
        `select c.table_name, array_agg(c.column_name::text order by c.ordinal_position) as columns
           from information_schema.columns c
           join information_schema.views v on v.table_schema = c.table_schema and v.table_name = c.table_name
          where c.table_schema = 'public'
          group by c.table_name order by c.table_name`,
      );
      expect(rows).toEqual([
        {
          table_name: 'campaign_engagement',
          columns: [
            'account',
            'campaign_id',
            'campaign_name',
            'sent_at',
            'total_recipients',
            'unique_openers',
            'unique_clickers',
            'open_events',
            'click_events',
            'open_rate',
            'click_rate',
          ],
        },
        {
          table_name: 'current_group_members',
          columns: ['account', 'group_id', 'group_name', 'subscriber_id', 'email', 'name', 'status', 'type', 'added_at'],
        },
        {
          table_name: 'group_stats',
          columns: [
            'account',
            'group_id',
            'group_name',
            'type',
            'mirror_members',
            'service_count',
            'service_count_at',
            'difference',
            'last_audit_at',
            'last_audit_rows_checked',
            'last_audit_accuracy',
          ],
        },
        { table_name: 'recently_changed_subscribers', columns: ['account', 'id', 'email', 'status', 'updated_at', 'mirrored_via'] },
        { table_name: 'subscriber_fields', columns: ['account', 'id', 'birthday', 'city', 'company', 'score'] },
        {
          table_name: 'subscriber_versions',
          columns: [
            'account',
            'subscriber_id',
            'valid_from',
            'valid_to',
            'via',
            'recorded_at',
            'email',
            'name',
            'status',
            'source',
            'sent',
            'opens_count',
            'clicks_count',
            'subscribed_at',
            'unsubscribed_at',
            'created_at',
            'updated_at',
            'deleted_at',
            'forget_at',
            'fields',
          ],
        },
        { table_name: 'suppressions', columns: ['account', 'email', 'subscriber_id', 'reason', 'since', 'learned_via'] },
        {
          table_name: 'sync_status',
          columns: [
            'account',
            'group_id',
            'type',
            'cursor',
            'last_mode',
            'last_status',
            'last_run_started_at',
            'last_run_finished_at',
            'last_success_at',
            'last_error',
            'rows_last_run',
            'rows_seen_last_run',
            'requests_last_run',
            'future_rows_last_run',
            'last_full_completed_at',
            'step_backs_last_full',
            'upstream_count',
            'upstream_count_at',
            'full_pass_open',
            'full_pass_at',
          ],
        },
      ]);
    });

    it('current_group_members lists open memberships of subscribers not deleted', async () => {
      // Through drizzle: the declared view columns must match the real ones too.
      const rows = await database.db.select().from(currentGroupMembers);
      const tuples = rows.map((r) => [r.groupId, r.groupName, r.subscriberId, r.email, r.name, r.status, r.type].join(' | ')).sort();
      // Not: Eve in the newsletter (left), Finn (deleted upstream, membership still open).
      expect(tuples).toEqual(
        [
          [NEWSLETTER, 'Newsletter', ANA, 'ana@example.com', 'Ana', 'active', 'active'],
          [NEWSLETTER, 'Newsletter', BEN, 'ben@example.com', 'Ben', 'active', 'active'],
          [NEWSLETTER, 'Newsletter', CLEO, 'cleo@example.com', 'Cleo', 'unsubscribed', 'active'],
          [NEWSLETTER, 'Newsletter', DAN, 'dan@example.com', 'Dan', 'unsubscribed', 'unsubscribed'],
          [NEWSLETTER, 'Newsletter', HAL, 'hal@example.com', 'Hal', 'bounced', 'bounced'],
          [CUSTOMERS, '', ANA, 'ana@example.com', 'Ana', 'active', 'active'],
          [CUSTOMERS, '', EVE, 'eve@example.com', 'Eve', 'active', 'active'],
          [CUSTOMERS, '', GUS, 'Gus@Example.COM', 'Gus', 'active', 'active'],
        ]
          .map((t) => t.join(' | '))
          .sort(),
      );
      expect(rows.filter((r) => r.groupId === CUSTOMERS).every((r) => r.groupName === null)).toBe(true);
      const { rows: added } = await database.pool.query<{ added_at: string }>(
        `select ${iso('added_at')} as added_at from current_group_members where group_id = $1 and subscriber_id = $2`,
        [NEWSLETTER, BEN],
      );
      expect(added).toEqual([{ added_at: at('2024-05-01', '17:30:00') }]);
    });

    it('campaign_engagement counts unique and total opens and clicks, with null-safe rates', async () => {
      const rows = await database.db.select().from(campaignEngagement);
      rows.sort((a, b) => (a.campaignId ?? '').localeCompare(b.campaignId ?? ''));
      expect(new Set(rows.map((r) => r.account))).toEqual(new Set(['default']));
      expect(rows.map(({ sentAt: _sentAt, account: _account, ...r }) => r)).toEqual([
        // 3 of 6 opened, 2 of 6 clicked (33.33 %, two decimals); Ana's duplicate delivery counted once.
        {
          campaignId: MAY,
          campaignName: 'May newsletter',
          totalRecipients: 6,
          uniqueOpeners: 3,
          uniqueClickers: 2,
          openEvents: 4,
          clickEvents: 3,
          openRate: 50,
          clickRate: 33.33,
        },
        {
          campaignId: JUNE,
          campaignName: 'June promo',
          totalRecipients: null,
          uniqueOpeners: 0,
          uniqueClickers: 0,
          openEvents: 0,
          clickEvents: 0,
          openRate: null,
          clickRate: null,
        },
        {
          campaignId: TEST_SEND,
          campaignName: 'Test send',
          totalRecipients: 0,
          uniqueOpeners: 1,
          uniqueClickers: 0,
          openEvents: 1,
          clickEvents: 0,
          openRate: null,
          clickRate: null,
        },
      ]);
      const { rows: sent } = await database.pool.query<{ campaign_id: string; sent_at: string }>(
        `select campaign_id, ${iso('sent_at')} as sent_at from campaign_engagement order by campaign_id`,
      );
      expect(sent).toEqual([
        { campaign_id: MAY, sent_at: at('2024-05-10') },
        { campaign_id: JUNE, sent_at: at('2024-06-10') },
        { campaign_id: TEST_SEND, sent_at: at('2024-05-20') }, // the campaign date: no campaign.sent seen
      ]);
    });

    it('recently_changed_subscribers holds the last 24 hours of upstream changes, deleted ones included', async () => {
      const rows = await database.db.select().from(recentlyChangedSubscribers);
      // Not: Jo (25 hours ago), Finn (deleted two days ago), the others (older).
      expect(rows.map((r) => [r.id, r.email, r.status, r.mirroredVia].join(' | ')).sort()).toEqual(
        [
          [CLEO, 'cleo@example.com', 'unsubscribed', 'webhook'],
          [GUS, 'Gus@Example.COM', 'active', 'webhook'],
          [IVY, 'ivy@example.com', 'active', 'poll'],
          [KAI, 'kai@example.com', 'active', 'webhook'],
        ]
          .map((t) => t.join(' | '))
          .sort(),
      );
      const { rows: times } = await database.pool.query<{ id: string; updated_at: string }>(
        `select id, ${iso('updated_at')} as updated_at from recently_changed_subscribers where id = $1`,
        [GUS],
      );
      expect(times).toEqual([{ id: GUS, updated_at: clock.twoHoursAgo }]);
    });
  });

  describe('documented SQL examples', () => {
    it(`${SQL_PAGE} has at least 5 sql examples, among them every example checked here`, () => {
      expect(DOC_EXAMPLES.length, `${SQL_PAGE} needs ${'```'}sql examples`).toBeGreaterThanOrEqual(5);
      const missing = EXPECTATIONS.filter((e) => !DOC_EXAMPLES.some((x) => e.explanation.test(x.explanation))).map((e) => e.name);
      expect(missing).toEqual([]);
    });

    it.each(EXAMPLES.map((example, i) => [i + 1, example.document, example.explanation, example] as const))(
      'example %i (%s) runs and answers its question: %s',
      async (_n, _document, _explanation, example) => {
        const rows = await runReadOnly(client, example.sql);
        const expectation = EXPECTATIONS.find((e) => e.explanation.test(example.explanation));
        if (expectation) await expectation.check(rows, example, client);
      },
    );
  });
});

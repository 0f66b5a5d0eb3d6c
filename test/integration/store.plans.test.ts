/**
 * A pass fills the mirror's tables from empty, on connections that keep plans (PL/pgSQL keeps its
 * triggers' plans for the session; a named statement keeps a generic plan from its sixth run). What
 * one page reads must stay proportional to the page and its group, never to the page times the
 * table: a plan made while a table was nearly empty read the whole table for every row of a page
 * (a sequential scan is cheapest over a few rows; an index on `account` alone is as cheap as the
 * primary key), and a 10,000-member pass from empty took over a minute instead of 5 s.
 *
 * The webhook apply keeps its plans on purpose (`keepingPlans`: planning would be a quarter of its
 * Postgres CPU); what replans them is an ANALYZE of the table, which autovacuum runs as it grows.
 *
 * Postgres's own counters for the open transaction (`pg_stat_xact_user_tables`) say how many rows
 * each table gave the page's statements, by sequential and index scans. No timing is asserted.
 */
import { afterEach, beforeEach, expect, test } from 'vitest';
import type pg from 'pg';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import type { Queryable } from '../../src/ground/queryable.js';
import { normalizeWebhookSubscriber } from '../../src/mirror/normalize.js';
import { keepingPlans, upsertMemberships, upsertSubscribers } from '../../src/mirror/store/index.js';
import { GENERIC_PLANS_SQL } from '../../src/webhooks/apply-job.js';
import { ts, webhookSubscriber } from '../fixtures/mirror/rows.js';

const GROUP = '42';
const GROWN = 20_000;
const TABLES = ['subscribers', 'group_members', 'group_membership_periods'] as const;

let tdb: TestDatabase;

beforeEach(async () => {
  tdb = await createTestDatabase();
});
afterEach(async () => {
  await tdb?.drop();
});

const idOf = (n: number) => String(1_000_000 + n);

/** One page as a pass writes it: the subscribers, then the group's members. */
async function writePage(exec: Queryable, ids: readonly string[], at: string, type: string): Promise<void> {
  await upsertSubscribers(
    exec,
    ids.map((id) => normalizeWebhookSubscriber(webhookSubscriber({ id, updated_at: at, email: `${id}@example.com` }))),
  );
  await upsertMemberships(
    exec,
    GROUP,
    ids.map((id) => ({ subscriberId: id, type, at })),
    { via: 'poll', seenAt: ts(500) },
  );
}

/** The group grown behind the plans' back: plain inserts, triggers off, no ANALYZE. */
async function growTables(): Promise<void> {
  await tdb.pool.query(`
    begin;
    set local session_replication_role = replica;
    insert into subscribers (id, email, updated_at, version_at, mirrored_via)
      select (1000000 + n)::text, n || '@example.com', '${ts(100)}', '${ts(100)}', 'poll'
      from generate_series(100, ${GROWN + 99}) n;
    insert into group_members (group_id, subscriber_id, type, added_at, source_updated_at, mirrored_via)
      select '${GROUP}', (1000000 + n)::text, 'active', '${ts(100)}', '${ts(100)}', 'poll'
      from generate_series(100, ${GROWN + 99}) n;
    insert into group_membership_periods (group_id, subscriber_id, type, started_at)
      select '${GROUP}', (1000000 + n)::text, 'active', '${ts(100)}'
      from generate_series(100, ${GROWN + 99}) n;
    commit`);
}

/** Rows each table gave the open transaction's statements, by sequential and index scans. */
async function rowsRead(exec: pg.ClientBase): Promise<Record<string, number>> {
  const { rows } = await exec.query<{ relname: string; read: number }>(
    `select relname, (coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0))::int as read
       from pg_stat_xact_user_tables where relname = any ($1::text[])`,
    [TABLES],
  );
  return Object.fromEntries(rows.map((r) => [r.relname, r.read]));
}

/**
 * Plans made on nearly empty tables (eight small pages on one connection, `begin` sets the
 * transaction up as its writer does), the tables grown, then one page of 300 on that connection:
 * 100 new members (their periods start), 100 known ones with a newer fact and another type (their
 * periods change type), 100 known ones with an older fact (skipped). Returns what the page read.
 */
async function pageAfterGrowth(
  begin: string,
  exec: (client: pg.ClientBase) => Queryable,
  afterGrowth: () => Promise<void> = async () => {},
): Promise<Record<string, number>> {
  const client = await tdb.pool.connect();
  try {
    for (let p = 0; p < 8; p++) {
      await client.query(begin);
      await writePage(
        exec(client),
        Array.from({ length: 10 }, (_, i) => idOf(p * 10 + i)),
        ts(100),
        'active',
      );
      await client.query('commit');
    }
    await growTables();
    await afterGrowth();
    await client.query(begin);
    try {
      await writePage(
        exec(client),
        Array.from({ length: 100 }, (_, i) => idOf(GROWN + 200 + i)),
        ts(200),
        'active',
      );
      await writePage(
        exec(client),
        Array.from({ length: 100 }, (_, i) => idOf(200 + i)),
        ts(200),
        'unsubscribed',
      );
      await writePage(
        exec(client),
        Array.from({ length: 100 }, (_, i) => idOf(400 + i)),
        ts(50),
        'active',
      );
      return await rowsRead(client);
    } finally {
      await client.query('rollback');
    }
  } finally {
    client.release();
  }
}

/**
 * Three statements per table may each read the whole group once (a hash join over it is a fine
 * plan for a small table); a plan that reads the table once per row reads it a hundred times over.
 */
function expectProportionalReads(read: Record<string, number>): void {
  expect(Object.keys(read).sort()).toEqual([...TABLES].sort());
  for (const table of TABLES) expect(read[table] ?? 0, table).toBeLessThanOrEqual(6 * GROWN);
}

test("a pass's page of a grown table reads in proportion to the page, its plans made while the tables were empty", async () => {
  expectProportionalReads(await pageAfterGrowth('begin', (client) => client));
});

test("the webhook apply's kept plans, made while the tables were empty, read in proportion once the tables are analyzed", async () => {
  const read = await pageAfterGrowth(`begin; ${GENERIC_PLANS_SQL}`, keepingPlans, async () => {
    await tdb.pool.query('analyze subscribers, group_members, group_membership_periods');
  });
  expectProportionalReads(read);
});

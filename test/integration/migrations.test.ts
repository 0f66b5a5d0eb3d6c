import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MIGRATIONS_FOLDER, runMigrations } from '../../src/db/migrate.js';
import { removalRule } from '../../src/sync/pass-history.js';
import { listSyncStates } from '../../src/sync/state.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

/** The SQL contract (docs/sql.md, "Tables"), asserted from information_schema rather than from the ORM. */
const CONTRACT: Record<string, Record<string, string>> = {
  accounts: { name: 'text' },
  analyst_accounts: { role: 'text', account: 'text' },
  subscribers: {
    account: 'text',
    id: 'text',
    email: 'text',
    name: 'text',
    status: 'text',
    source: 'text',
    sent: 'integer',
    opens_count: 'integer',
    clicks_count: 'integer',
    open_rate: 'double precision',
    click_rate: 'double precision',
    ip_address: 'text',
    subscribed_at: 'timestamp with time zone',
    unsubscribed_at: 'timestamp with time zone',
    created_at: 'timestamp with time zone',
    updated_at: 'timestamp with time zone',
    deleted_at: 'timestamp with time zone',
    forget_at: 'timestamp with time zone',
    opted_in_at: 'timestamp with time zone',
    optin_ip: 'text',
    fields: 'jsonb',
    extra: 'jsonb',
    mirrored_at: 'timestamp with time zone',
    mirrored_via: 'text',
  },
  groups: { account: 'text', id: 'text', name: 'text' },
  group_members: {
    account: 'text',
    group_id: 'text',
    subscriber_id: 'text',
    type: 'text',
    added_at: 'timestamp with time zone',
    removed_at: 'timestamp with time zone',
  },
  subscriber_activity: {
    kind: 'text',
    subscriber_id: 'text',
    group_id: 'text',
    automation_id: 'text',
    campaign_id: 'text',
    link_url: 'text',
    occurred_at: 'timestamp with time zone',
  },
  campaigns: { id: 'text', name: 'text', total_recipients: 'integer', preview_url: 'text' },
  automations: { id: 'text', name: 'text' },
  sync_state: {
    group_id: 'text',
    type: 'text',
    cursor: 'timestamp with time zone',
    full_source: 'text',
    full_started_at: 'timestamp with time zone',
    full_offset: 'integer',
    full_cursor: 'text',
    full_pages: 'integer',
  },
  sync_passes: {
    id: 'bigint',
    group_id: 'text',
    type: 'text',
    kind: 'text',
    started_at: 'timestamp with time zone',
    listed_from: 'timestamp with time zone',
    ended_at: 'timestamp with time zone',
    complete: 'boolean',
    gap_free: 'boolean',
    read_since: 'timestamp with time zone',
    proof: 'ARRAY',
  },
  upstream_paging: { page_cap: 'integer', longest_page: 'integer' },
  audit_state: { group_id: 'text', type: 'text', sample_offset: 'integer', sample_cursor: 'text', pending_count: 'integer' },
  audit_results: { group_id: 'text', type: 'text', rows_checked: 'integer', content: 'integer', unrepaired: 'integer' },
  audit_webhooks: { id: 'text', enabled: 'boolean', problems: 'ARRAY' },
  fields: { key: 'text', title: 'text', type: 'text', upstream_id: 'text' },
  webhook_deliveries: {
    body_sha256: 'text',
    body: 'jsonb',
    status: 'text',
    attempts: 'integer',
    error: 'text',
  },
  webhook_endpoints: { id: 'text', url: 'text', events: 'ARRAY', secret: 'text', batchable: 'boolean', adopted: 'boolean' },
  webhook_delivery_hashes: {
    body_sha256: 'bytea',
    delivery_id: 'bigint',
    status: 'text',
    received_at: 'timestamp with time zone',
    purged_at: 'timestamp with time zone',
  },
  erasures: {
    subscriber_id: 'text',
    reason: 'text',
    erased_at: 'timestamp with time zone',
    deliveries_redacted_at: 'timestamp with time zone',
  },
  subscriber_versions_past: {
    subscriber_id: 'text',
    valid_from: 'timestamp with time zone',
    via: 'text',
    recorded_at: 'timestamp with time zone',
    email: 'text',
    name: 'text',
    status: 'text',
    fields: 'jsonb',
    sent: 'integer',
    opens_count: 'integer',
    clicks_count: 'integer',
    unsubscribed_at: 'timestamp with time zone',
    deleted_at: 'timestamp with time zone',
  },
  group_membership_periods: {
    group_id: 'text',
    subscriber_id: 'text',
    type: 'text',
    started_at: 'timestamp with time zone',
    ended_at: 'timestamp with time zone',
  },
  history_settings: { id: 'boolean', enabled: 'boolean' },
};

describe('migrations', () => {
  let database: TestDatabase;

  beforeAll(async () => {
    database = await createTestDatabase({ migrated: false });
  });

  afterAll(async () => {
    await database.drop();
  });

  it('creates every contract table and column with its type', async () => {
    const first = await runMigrations(database.url);
    expect(first.applied).toBeGreaterThan(0);

    const { rows } = await database.pool.query<{ table_name: string; column_name: string; data_type: string }>(
      `select table_name, column_name, data_type from information_schema.columns where table_schema = 'public'`,
    );
    const actual = new Map(rows.map((r) => [`${r.table_name}.${r.column_name}`, r.data_type]));
    for (const [table, columns] of Object.entries(CONTRACT)) {
      for (const [column, type] of Object.entries(columns)) {
        expect(actual.get(`${table}.${column}`), `${table}.${column}`).toBe(type);
      }
    }
  });

  it('keeps timestamps with microseconds', async () => {
    const { rows } = await database.pool.query<{ datetime_precision: number }>(
      `select distinct datetime_precision from information_schema.columns
        where table_schema = 'public' and data_type = 'timestamp with time zone'`,
    );
    expect(rows.map((r) => r.datetime_precision)).toEqual([6]);
  });

  it('has indexes for email, status, membership and cursor lookups', async () => {
    const { rows } = await database.pool.query<{ indexdef: string }>(`select indexdef from pg_indexes where schemaname = 'public'`);
    const defs = rows.map((r) => r.indexdef).join('\n');
    // Every lookup within an account: ids and addresses are unique only there.
    expect(defs).toMatch(/ON public\.subscribers USING btree \(account, lower\(email\)\)/);
    expect(defs).toMatch(/ON public\.subscribers USING btree \(account, status\)/);
    expect(defs).toMatch(/ON public\.subscribers USING btree \(account, id\)/);
    expect(defs).toMatch(/ON public\.group_members USING btree \(account, subscriber_id\)/);
    expect(defs).toMatch(/ON public\.sync_state USING btree \(account, group_id, type\)/);
    expect(defs).toMatch(/UNIQUE INDEX webhook_deliveries_body_sha256_key/);
  });

  it('is a no-op the second time', async () => {
    const before = await database.pool.query(`select count(*)::int as n from drizzle.__drizzle_migrations`);
    const again = await runMigrations(database.url);
    expect(again.applied).toBe(0);
    const after = await database.pool.query(`select count(*)::int as n from drizzle.__drizzle_migrations`);
    expect(after.rows[0]).toEqual(before.rows[0]);
  });

  it('serializes concurrent replicas under an advisory lock', async () => {
    const fresh = await createTestDatabase({ migrated: false });
    try {
      const results = await Promise.all(Array.from({ length: 5 }, () => runMigrations(fresh.url)));
      expect(results.filter((r) => r.applied > 0)).toHaveLength(1);
      const { rows } = await fresh.pool.query(
        `select count(*)::int as n from information_schema.tables where table_schema = 'public' and table_type = 'BASE TABLE'`,
      );
      expect((rows[0] as { n: number }).n).toBe(Object.keys(CONTRACT).length);
    } finally {
      await fresh.drop();
    }
  });

  it('gives an existing install one version per current row and one period per membership (issue #13)', async () => {
    // The migrations before history, as an install that existed before it has them.
    const before = mkdtempSync(path.join(os.tmpdir(), 'sm-migrations-'));
    const old = await createTestDatabase({ migrated: false });
    try {
      cpSync(MIGRATIONS_FOLDER, before, { recursive: true });
      const journalPath = path.join(before, 'meta', '_journal.json');
      const journal = JSON.parse(readFileSync(journalPath, 'utf8')) as { entries: Array<{ tag: string }> };
      const historyAt = journal.entries.findIndex((e) => e.tag.endsWith('_history'));
      expect(historyAt).toBeGreaterThan(0);
      journal.entries = journal.entries.slice(0, historyAt);
      writeFileSync(journalPath, JSON.stringify(journal));
      await runMigrations(old.url, before);
      await old.pool.query(
        `insert into subscribers (id, email, name, status, updated_at, unsubscribed_at, fields, mirrored_at, mirrored_via, version_at) values
           ('1', 'a@example.com', 'A', 'active', '2024-05-01T10:00:00Z', null, '{"city":"Oslo"}', '2024-05-02T00:00:00Z', 'poll', '2024-05-01T10:00:00Z'),
           ('2', 'b@example.com', 'B', 'unsubscribed', '2024-05-01T10:00:00Z', '2024-05-03T10:00:00Z', '{}', '2024-05-04T00:00:00Z', 'webhook', '2024-05-03T10:00:00Z')`,
      );
      await old.pool.query(
        `insert into group_members (group_id, subscriber_id, type, added_at, removed_at, source_updated_at, mirrored_via) values
           ('10', '1', 'active', '2024-04-01T00:00:00Z', null, '2024-04-01T00:00:00Z', 'poll'),
           ('10', '2', 'active', '2024-04-02T00:00:00Z', '2024-05-03T10:00:00Z', '2024-05-03T10:00:00Z', 'webhook')`,
      );

      await runMigrations(old.url);
      const { rows: versions } = await old.pool.query(
        `select subscriber_id, valid_from::text, valid_to, via, recorded_at::text, email, status, fields
           from subscriber_versions order by subscriber_id`,
      );
      expect(versions).toEqual([
        {
          subscriber_id: '1',
          valid_from: '2024-05-01 10:00:00+00',
          valid_to: null,
          via: 'poll',
          recorded_at: '2024-05-02 00:00:00+00',
          email: 'a@example.com',
          status: 'active',
          fields: { city: 'Oslo' },
        },
        // The version's time (version_at): the unsubscribe it asserts is later than its updated_at.
        {
          subscriber_id: '2',
          valid_from: '2024-05-03 10:00:00+00',
          valid_to: null,
          via: 'webhook',
          recorded_at: '2024-05-04 00:00:00+00',
          email: 'b@example.com',
          status: 'unsubscribed',
          fields: {},
        },
      ]);
      const { rows: periods } = await old.pool.query(
        `select group_id, subscriber_id, started_at::text, ended_at::text from group_membership_periods order by subscriber_id`,
      );
      expect(periods).toEqual([
        { group_id: '10', subscriber_id: '1', started_at: '2024-04-01 00:00:00+00', ended_at: null },
        { group_id: '10', subscriber_id: '2', started_at: '2024-04-02 00:00:00+00', ended_at: '2024-05-03 10:00:00+00' },
      ]);
    } finally {
      rmSync(before, { recursive: true, force: true });
      await old.drop();
    }
  });

  it('carries what sync_state knew into the pass history: the removal proof, the last run, open checkpoints (migration 0021)', async () => {
    const before = mkdtempSync(path.join(os.tmpdir(), 'sm-migrations-'));
    const old = await createTestDatabase({ migrated: false });
    try {
      cpSync(MIGRATIONS_FOLDER, before, { recursive: true });
      const journalPath = path.join(before, 'meta', '_journal.json');
      const journal = JSON.parse(readFileSync(journalPath, 'utf8')) as { entries: Array<{ tag: string }> };
      const historyAt = journal.entries.findIndex((e) => e.tag.endsWith('_pass_history'));
      expect(historyAt).toBeGreaterThan(0);
      journal.entries = journal.entries.slice(0, historyAt);
      writeFileSync(journalPath, JSON.stringify(journal));
      await runMigrations(old.url, before);
      const t = (minute: number) => `2026-11-20T10:${String(minute).padStart(2, '0')}:00Z`;
      // Group 1 (legacy, two types): both proof passes and a sweep each, the last run an incremental
      // one that failed after a success. Group 2 (current): a pass left open at page 3 by its cursor.
      await old.pool.query(
        `insert into sync_state (group_id, type, cursor, last_mode, last_status, last_run_started_at, last_run_finished_at,
                                 last_success_at, last_error, rows_last_run, requests_last_run, last_full_completed_at,
                                 prev_proof_started_at, prev_proof_ended_at, proof_started_at, proof_ended_at,
                                 swept_at, swept_since, upstream_count, step_backs_last_full)
         values ('1', 'active', $1, 'incremental', 'failed', $2, $3, $4, 'boom', 0, 1, $5, $6, $7, $8, $5, $9, $10, 40, 2),
                ('1', 'unsubscribed', $1, 'full', 'succeeded', $11, $12, $12, null, 3, 4, $12, $13, $14, $11, $12, $9, $10, 7, 0)`,
        [t(50), t(40), t(41), t(30), t(20), t(1), t(5), t(15), t(25), t(0), t(16), t(19), t(2), t(3)],
      );
      await old.pool.query(
        `insert into group_members (group_id, subscriber_id, type, added_at, source_updated_at, last_seen_at, mirrored_via)
         values ('2', '9', 'active', $1, $1, $1, 'current')`,
        [t(0)],
      );
      await old.pool.query(
        `insert into sync_state (group_id, type, last_mode, last_status, full_offset, full_cursor, full_started_at, full_continuous)
         values ('2', 'active', 'full', 'running', 3, 'abc', $1, true)`,
        [t(45)],
      );

      await runMigrations(old.url);
      const states = await listSyncStates(old.pool);
      const state = (group: string, type: string) => states.find((s) => s.groupId === group && s.type === type);
      expect(state('1', 'active')).toMatchObject({
        lastMode: 'incremental',
        lastStatus: 'failed',
        lastError: 'boom',
        lastSuccessAt: '2026-11-20T10:30:00.000000Z',
        lastFullCompletedAt: '2026-11-20T10:20:00.000000Z',
        stepBacksLastFull: 2,
        upstreamCount: 40,
        fullPassOpen: false,
      });
      expect(state('1', 'unsubscribed')).toMatchObject({ lastStatus: 'succeeded', rowsLastRun: 3, requestsLastRun: 4, upstreamCount: 7 });
      expect(state('2', 'active')).toMatchObject({
        fullSource: 'current',
        fullPages: 3,
        fullOffset: null,
        fullCursor: 'abc',
        fullPassOpen: true,
      });
      // The proof as it stood: two passes of each type and a sweep of each after the first round.
      const rule = await removalRule(old.pool, '1', ['active', 'unsubscribed'], { sweeps: true });
      expect(rule?.cutoff).toBe('2026-11-20T10:01:00.000000Z');
      expect(rule?.proof).toHaveLength(6);
    } finally {
      rmSync(before, { recursive: true, force: true });
      await old.drop();
    }
  });
});

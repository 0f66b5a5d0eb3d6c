import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runMigrations } from '../../src/db/migrate.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

/** The SQL contract of DESIGN.md, asserted from information_schema rather than from the ORM. */
const CONTRACT: Record<string, Record<string, string>> = {
  subscribers: {
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
  groups: { id: 'text', name: 'text' },
  group_members: {
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
    last_run_finished_at: 'timestamp with time zone',
    last_success_at: 'timestamp with time zone',
    last_error: 'text',
    rows_last_run: 'integer',
    requests_last_run: 'integer',
    proof_started_at: 'timestamp with time zone',
    prev_proof_started_at: 'timestamp with time zone',
    future_rows_last_run: 'integer',
  },
  upstream_paging: { page_cap: 'integer', longest_page: 'integer' },
  webhook_deliveries: {
    body_sha256: 'text',
    body: 'jsonb',
    status: 'text',
    attempts: 'integer',
    error: 'text',
  },
  webhook_endpoints: { id: 'text', url: 'text', events: 'ARRAY', secret: 'text', batchable: 'boolean' },
  erasures: {
    subscriber_id: 'text',
    reason: 'text',
    erased_at: 'timestamp with time zone',
    deliveries_redacted_at: 'timestamp with time zone',
  },
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
    const { rows } = await database.pool.query<{ indexdef: string }>(
      `select indexdef from pg_indexes where schemaname = 'public'`,
    );
    const defs = rows.map((r) => r.indexdef).join('\n');
    expect(defs).toMatch(/ON public\.subscribers USING btree \(lower\(email\)\)/);
    expect(defs).toMatch(/ON public\.subscribers USING btree \(status\)/);
    expect(defs).toMatch(/ON public\.group_members USING btree \(subscriber_id\)/);
    expect(defs).toMatch(/ON public\.sync_state USING btree \(group_id, type\)/);
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
      const { rows } = await fresh.pool.query(`select count(*)::int as n from information_schema.tables where table_schema = 'public' and table_type = 'BASE TABLE'`);
      expect((rows[0] as { n: number }).n).toBe(Object.keys(CONTRACT).length);
    } finally {
      await fresh.drop();
    }
  });
});

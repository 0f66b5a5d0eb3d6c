/**
 * Database roles (docs/sql.md): the read-only analyst role the migrations create reads
 * the mirrored tables and views but neither webhook secrets nor raw delivery bodies; the service runs
 * as a non-superuser that owns its database.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { runMigrations } from '../../src/db/migrate.js';
import { storeDelivery } from '../../src/webhooks/inbox/write.js';
import { replaceFieldDefinitions } from '../../src/mirror/store/index.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { withDatabase } from '../helpers/global-setup.js';

const ANALYST = 'subscriber_mirror_analyst';

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
  await db.pool.query(`insert into subscribers (id, email, version_at, mirrored_via) values ('1', 'a@example.com', now(), 'poll')`);
  await db.pool.query(
    `insert into webhook_endpoints (id, url, events, secret) values ('w1', 'https://x/webhooks', '{subscriber.created}', 'whsec-very-secret')`,
  );
  await storeDelivery(db.pool, {
    raw: Buffer.from('{"email":"a@example.com"}'),
    body: { email: 'a@example.com' },
    kinds: [],
    eventCount: 0,
    endpointId: null,
    status: 'ignored',
  });
});

afterAll(async () => {
  await db.drop();
});

/** Runs `sql` as the analyst role in a transaction that is rolled back. */
async function asAnalyst(sql: string): Promise<pg.QueryResult> {
  const client = await db.pool.connect();
  try {
    await client.query('begin');
    await client.query(`set local role ${ANALYST}`);
    return await client.query(sql);
  } finally {
    await client.query('rollback').catch(() => {});
    client.release();
  }
}

describe('the analyst role', () => {
  it('reads every mirrored table and view', async () => {
    expect((await asAnalyst('select * from subscribers')).rows).toEqual([expect.objectContaining({ id: '1', email: 'a@example.com' })]);
    const { rows } = await db.pool.query<{ relation: string }>(
      `select c.relname as relation from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = 'public' and c.relkind in ('r', 'v', 'm', 'p')
          and c.relname not in ('webhook_deliveries', 'webhook_endpoints', 'webhook_delivery_hashes')
        order by 1`,
    );
    expect(rows.map((r) => r.relation)).toEqual(
      expect.arrayContaining([
        'subscribers',
        'group_members',
        'current_group_members',
        'erasures',
        'fields',
        'subscriber_fields',
        'suppressions',
        'group_stats',
      ]),
    );
    for (const { relation } of rows) {
      await expect(asAnalyst(`select * from "${relation}" limit 1`), relation).resolves.toBeDefined();
    }
  });

  it('reads subscriber_fields after the definitions changed and the view was rebuilt', async () => {
    await replaceFieldDefinitions(db.pool, [{ key: 'score', title: 'Score', type: 'number', upstreamId: '1' }]);
    const { fields } = await asAnalyst('select * from subscriber_fields limit 1');
    expect(fields.map((f) => f.name)).toEqual(['account', 'id', 'score']);
    await replaceFieldDefinitions(db.pool, []);
  });

  it('cannot read a table a later migration creates until that migration grants it (no default privileges)', async () => {
    await db.pool.query('create table later_mirrored_table (id text primary key)');
    await expect(asAnalyst('select * from later_mirrored_table')).rejects.toThrow(/permission denied/);
    await db.pool.query(`grant select on later_mirrored_table to ${ANALYST}`);
    await expect(asAnalyst('select * from later_mirrored_table')).resolves.toBeDefined();
  });

  it('does not read the dedupe hashes of purged deliveries', async () => {
    await expect(asAnalyst('select * from webhook_delivery_hashes')).rejects.toThrow(/permission denied/);
  });

  it('reads delivery and endpoint metadata but neither webhook secrets nor raw bodies', async () => {
    expect((await asAnalyst('select id, status, kinds, received_at from webhook_deliveries')).rows).toHaveLength(1);
    expect((await asAnalyst('select id, url, events, enabled from webhook_endpoints')).rows).toEqual([
      expect.objectContaining({ id: 'w1', url: 'https://x/webhooks' }),
    ]);
    // Added by 0016 after 0006 granted the others by name.
    expect((await asAnalyst('select id, adopted from webhook_endpoints')).rows).toEqual([{ id: 'w1', adopted: false }]);
    await expect(asAnalyst('select secret from webhook_endpoints')).rejects.toThrow(/permission denied/);
    await expect(asAnalyst('select * from webhook_endpoints')).rejects.toThrow(/permission denied/);
    await expect(asAnalyst('select body from webhook_deliveries')).rejects.toThrow(/permission denied/);
    await expect(asAnalyst('select * from webhook_deliveries')).rejects.toThrow(/permission denied/);
  });

  it('cannot write', async () => {
    await expect(asAnalyst(`update subscribers set email = 'x@example.com'`)).rejects.toThrow(/permission denied/);
    await expect(asAnalyst(`insert into groups (id) values ('9')`)).rejects.toThrow(/permission denied/);
    await expect(asAnalyst(`delete from webhook_deliveries`)).rejects.toThrow(/permission denied/);
  });

  it('a login role made a member of it reads the mirror (how analysts connect)', async () => {
    const user = `sm_analyst_${process.pid}_${Math.random().toString(36).slice(2, 6)}`;
    await db.pool.query(`create role ${user} login in role ${ANALYST}`);
    const client = new pg.Client({ connectionString: withUser(db.url, user) });
    try {
      await client.connect();
      expect((await client.query('select count(*)::int as n from subscribers')).rows[0]).toEqual({ n: 1 });
      await expect(client.query('select secret from webhook_endpoints')).rejects.toThrow(/permission denied/);
    } finally {
      await client.end().catch(() => {});
      await db.pool.query(`drop owned by ${user}`);
      await db.pool.query(`drop role ${user}`);
    }
  });
});

describe('the service role', () => {
  it('migrates and runs as a non-superuser that owns its database (the analyst role already exists)', async () => {
    const owner = `sm_owner_${process.pid}_${Math.random().toString(36).slice(2, 6)}`;
    const name = `${owner}_db`;
    const base = inject('databaseUrl');
    const admin = new pg.Client({ connectionString: base });
    await admin.connect();
    try {
      await admin.query(`create role ${owner} login nosuperuser nocreaterole nocreatedb`);
      await admin.query(`create database ${name} owner ${owner} template template0`);
      // As Postgres 14 and older made it (15 no longer grants it): the migration revokes it itself.
      const superuser = new pg.Client({ connectionString: withDatabase(base, name) });
      await superuser.connect();
      await superuser.query('grant create on schema public to public').finally(() => superuser.end());
      const url = withUser(withDatabase(base, name), owner);
      expect((await runMigrations(url)).applied).toBeGreaterThan(0);
      // Scoped to the account the migration declared, as the service's pools are.
      const client = new pg.Client({ connectionString: url, options: '-c subscriber_mirror.account=default' });
      await client.connect();
      try {
        const { rows } = await client.query(`select rolsuper from pg_roles where rolname = current_user`);
        expect(rows[0]).toEqual({ rolsuper: false });
        await client.query(`insert into subscribers (id, version_at, mirrored_via) values ('1', now(), 'poll')`);
        const grants = await client.query(
          `select has_column_privilege($1, 'webhook_endpoints', 'secret', 'select') as secret,
                  has_table_privilege($1, 'subscribers', 'select') as subscribers`,
          [ANALYST],
        );
        expect(grants.rows[0]).toEqual({ secret: false, subscribers: true });
        const create = await client.query(
          `select exists (select 1 from pg_namespace n, aclexplode(n.nspacl) a
                           where n.nspname = 'public' and a.grantee = 0 and a.privilege_type = 'CREATE') as public_creates`,
        );
        expect(create.rows[0]).toEqual({ public_creates: false });
      } finally {
        await client.end();
      }
    } finally {
      await admin.query(`drop database if exists ${name} with (force)`);
      await admin.query(`drop role if exists ${owner}`);
      await admin.end();
    }
  });
});

function withUser(url: string, user: string): string {
  const u = new URL(url);
  u.username = user;
  u.password = '';
  return u.toString();
}

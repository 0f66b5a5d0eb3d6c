/**
 * The webhook receiver's database role (docs/security.md, "Who can read what"), tried as an attacker
 * who owns the receiver process would: logged in as a member of `subscriber_mirror_receiver`, the
 * receiver's own work (store deliveries, recognise duplicates, read the signing secrets, readiness)
 * succeeds; reading subscribers or stored bodies, and writing anything but a new inbox row, fails.
 */
import { readdirSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { ACCOUNT_SETTING, DEFAULT_ACCOUNT } from '../../src/db/client.js';
import { migrationsPending } from '../../src/db/migrate.js';
import { startService } from '../../src/commands/start.js';
import { signBody } from '../../src/webhooks/signature.js';
import { deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { ROOT } from '../helpers/cli.js';
import { purgeDeliveries } from '../../src/webhooks/inbox/lifecycle.js';
import { createInboxWriter, loadSecrets, storeDelivery, type DeliveryRecord } from '../../src/webhooks/inbox/write.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

const RECEIVER = 'subscriber_mirror_receiver';
let db: TestDatabase;
let login: string;
let attacker: pg.Pool;
let attackerUrl: string;

function record(text: string): DeliveryRecord {
  return {
    raw: Buffer.from(text),
    body: JSON.parse(text) as object,
    kinds: ['subscriber.updated'],
    eventCount: 1,
    endpointId: 'w1',
    status: 'pending',
  };
}

beforeAll(async () => {
  db = await createTestDatabase();
  await db.pool.query(`insert into subscribers (id, email, version_at, mirrored_via) values ('1', 'victim@example.com', now(), 'poll')`);
  await db.pool.query(
    `insert into webhook_endpoints (id, url, events, secret) values ('w1', 'https://x/webhooks', '{subscriber.updated}', 'whsec-0123456789abcdef')`,
  );
  await storeDelivery(db.pool, record('{"type":"subscriber.updated","subscriber":{"id":"1","email":"victim@example.com"}}'));
  login = `sm_receiver_${process.pid}_${Math.random().toString(36).slice(2, 6)}`;
  await db.pool.query(`create role ${login} login in role ${RECEIVER}`);
  const url = new URL(db.url);
  url.username = login;
  url.password = '';
  attackerUrl = url.toString();
  // The receiver's pool serves an account, as the service opens it (src/commands/start.ts).
  attacker = new pg.Pool({ connectionString: attackerUrl, max: 2, options: `-c ${ACCOUNT_SETTING}=${DEFAULT_ACCOUNT}` });
  // Dropping the database at the end terminates its connections; an ending client can still hear
  // that as an error event (seen on Node 24), which must not become an uncaught exception.
  attacker.on('error', () => {});
});

afterAll(async () => {
  await attacker?.end().catch(() => {});
  await db.drop();
  // Roles belong to the cluster: dropped from the server's default database once ours is gone.
  const admin = new pg.Client({ connectionString: inject('databaseUrl') });
  await admin.connect();
  try {
    await admin.query(`drop role if exists ${login}`);
  } finally {
    await admin.end().catch(() => {});
  }
});

describe('the receiver role does its own work', () => {
  it('stores deliveries, recognises duplicates, reads the signing secrets and the migration state', async () => {
    const writer = createInboxWriter(attacker);
    const fresh = await writer.store(record('{"type":"subscriber.updated","subscriber":{"id":"2","email":"new@example.com"}}'));
    expect(fresh).toMatchObject({ duplicate: false, status: 'pending' });
    const again = await writer.store(record('{"type":"subscriber.updated","subscriber":{"id":"2","email":"new@example.com"}}'));
    expect(again).toMatchObject({ duplicate: true, id: fresh.id });
    await writer.close();
    expect(await loadSecrets(attacker)).toEqual([{ endpointId: 'w1', secret: 'whsec-0123456789abcdef' }]);
    expect(await migrationsPending(attacker)).toBe(0);
  });

  it('stores a delivery under an account it names, a duplicate only within that account', async () => {
    await db.pool.query(`insert into accounts (name) values ('other') on conflict do nothing`);
    const text = '{"type":"subscriber.updated","subscriber":{"id":"4","email":"both@example.com"}}';
    const mine = await storeDelivery(attacker, record(text));
    const writer = createInboxWriter(attacker, { maxWaitMs: 0 }, 'other');
    const theirs = await writer.store(record(text));
    const again = await writer.store(record(text));
    await writer.close();
    expect(theirs).toMatchObject({ duplicate: false, status: 'pending' });
    expect(theirs.id).not.toBe(mine.id);
    expect(again).toMatchObject({ duplicate: true, id: theirs.id });
    const { rows } = await db.pool.query(
      `select id::text as id, account from webhook_deliveries where id = any($1::bigint[]) order by id`,
      [[mine.id, theirs.id]],
    );
    expect(rows).toEqual([
      { id: mine.id, account: 'default' },
      { id: theirs.id, account: 'other' },
    ]);
  });

  // A worker migrating a new database creates the drizzle schema before the migration that grants
  // the receiver USAGE on it: a receiver starting meanwhile waits (everything pending), not exits.
  it('reads every migration as pending while the journal is not yet readable to it', async () => {
    await db.pool.query(`revoke usage on schema drizzle from ${RECEIVER}`);
    try {
      const files = readdirSync(path.join(ROOT, 'drizzle')).filter((f) => f.endsWith('.sql'));
      expect(await migrationsPending(attacker)).toBe(files.length);
    } finally {
      await db.pool.query(`grant usage on schema drizzle to ${RECEIVER}`);
    }
    expect(await migrationsPending(attacker)).toBe(0);
  });

  it('recognises a delivery purged since as a duplicate', async () => {
    const text = '{"type":"subscriber.updated","subscriber":{"id":"3","email":"old@example.com"}}';
    const first = await storeDelivery(attacker, record(text));
    await db.pool.query(`update webhook_deliveries set status = 'applied' where id = $1`, [first.id]);
    expect(await purgeDeliveries(db.pool, 0)).toBeGreaterThan(0);
    expect(await storeDelivery(attacker, record(text))).toMatchObject({ duplicate: true, id: first.id });
  });
});

describe('the receiver service under its own role', () => {
  it('starts without migrating, is ready, and stores a signed delivery', async () => {
    const secret = 'whsec-receiver-role-0123456789';
    const prefix = uniquePrefix('recvrole');
    const config = loadConfig(
      { DATABASE_URL: attackerUrl, REDIS_URL: redisUrl(), REDIS_PREFIX: prefix, PORT: '0', WEBHOOK_SECRETS: secret, LOG_LEVEL: 'silent' },
      ['receive'],
    );
    const service = await startService(config, 'receiver');
    try {
      const base = `http://127.0.0.1:${service.port}`;
      await waitFor('ready', async () => (await fetch(`${base}/readyz`)).status === 200, 20_000, 100);
      const body = JSON.stringify({
        type: 'subscriber.updated',
        subscriber: { id: '5', email: 'signed@example.com', updated_at: '2024-06-01T00:00:00.000000Z' },
      });
      const res = await fetch(`${base}/webhooks`, {
        method: 'POST',
        body,
        headers: { signature: signBody(body, secret), 'content-type': 'application/json' },
      });
      expect(res.status).toBe(200);
      const stored = await db.pool.query(`select count(*)::int as n from webhook_deliveries where body::text like '%signed@example.com%'`);
      expect(stored.rows[0].n).toBe(1);
    } finally {
      await service.stop('test over');
      await deletePrefix(prefix);
    }
  });
});

describe('the receiver role, taken over', () => {
  const denied = /permission denied/;

  it('reads no mirrored table, view or stored body', async () => {
    const { rows } = await db.pool.query<{ relation: string }>(
      `select c.relname as relation from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = 'public' and c.relkind in ('r', 'v', 'm', 'p')
          and c.relname not in ('webhook_deliveries', 'webhook_endpoints', 'webhook_delivery_hashes', 'accounts')`,
    );
    expect(rows.map((r) => r.relation)).toEqual(
      expect.arrayContaining(['subscribers', 'subscriber_versions_past', 'subscriber_activity', 'erasures']),
    );
    for (const { relation } of rows) await expect(attacker.query(`select * from "${relation}" limit 1`), relation).rejects.toThrow(denied);
    await expect(attacker.query('select body from webhook_deliveries')).rejects.toThrow(denied);
    await expect(attacker.query('select * from webhook_deliveries')).rejects.toThrow(denied);
    await expect(attacker.query('select url, events from webhook_endpoints')).rejects.toThrow(denied);
    await expect(attacker.query('select adopted from webhook_endpoints')).rejects.toThrow(denied);
  });

  it('writes nothing but a new inbox row', async () => {
    const attempts = [
      `insert into subscribers (id, version_at, mirrored_via) values ('9', now(), 'poll')`,
      `update subscribers set email = 'x@example.com'`,
      `delete from subscribers`,
      `update webhook_deliveries set status = 'applied'`,
      `update webhook_deliveries set body = '{}'::jsonb`,
      `delete from webhook_deliveries`,
      `truncate webhook_deliveries`,
      `insert into webhook_deliveries (body_sha256, body, applied_at) values ('x', '{}', now())`,
      `delete from webhook_delivery_hashes`,
      `insert into webhook_delivery_hashes (body_sha256, delivery_id, status, received_at) values ('\\x00', 1, 'applied', now())`,
      `update webhook_endpoints set secret = 'mine'`,
      `insert into webhook_endpoints (id, url, events, secret) values ('w2', 'https://evil.example', '{}', 's')`,
      `insert into erasures (subscriber_id, reason) values ('1', 'forget')`,
      `insert into accounts (name) values ('loot')`,
      `delete from accounts`,
      `update history_settings set enabled = false`,
      `insert into sync_state (group_id, type) values ('1', 'active')`,
      `create table loot (x text)`,
      `create function f() returns int language sql as 'select 1'`,
    ];
    for (const sql of attempts) await expect(attacker.query(sql), sql).rejects.toThrow(denied);
  });
});

/**
 * The data migration of issue 12 on a populated database: the mirror as the code before it left
 * it, then the remaining migrations (version_at backfilled, activity rows re-keyed and re-timed).
 */
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { MIGRATIONS_FOLDER, runMigrations } from '../../src/db/migrate.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { iso } from '../helpers/mirror.js';

interface Journal {
  entries: Array<{ idx: number; tag: string }>;
}

let database: TestDatabase;
let before: string;

/** A migrations folder holding only the migrations before issue 12's. */
function foldersBefore(tagSuffix: string): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'sm-migrations-'));
  cpSync(MIGRATIONS_FOLDER, dir, { recursive: true });
  const journalPath = path.join(dir, 'meta', '_journal.json');
  const journal = JSON.parse(readFileSync(journalPath, 'utf8')) as Journal;
  const cut = journal.entries.findIndex((e) => e.tag.endsWith(tagSuffix));
  if (cut < 0) throw new Error(`no migration ${tagSuffix}`);
  writeFileSync(journalPath, JSON.stringify({ ...journal, entries: journal.entries.slice(0, cut) }));
  return dir;
}

beforeAll(async () => {
  database = await createTestDatabase({ migrated: false });
  before = foldersBefore('_version_at_activity_items');
});
afterAll(async () => {
  await database?.drop();
  rmSync(before, { recursive: true, force: true });
});

test('existing subscribers get their version time; activity rows their receipt time, subscriber time and item positions', async () => {
  await runMigrations(database.url, before);
  await database.pool.query(`insert into subscribers (id, status, updated_at, unsubscribed_at, deleted_at, mirrored_via) values
    ('1', 'unsubscribed', '2025-03-11T15:06:41Z', '2025-03-11T15:10:00Z', null, 'webhook'),
    ('2', 'active', '2025-03-11T15:06:41Z', '2025-03-11T16:10:00Z', null, 'poll'),
    ('3', 'active', '2025-03-11T15:06:41Z', null, '2025-03-12T09:00:00Z', 'webhook')`);
  await database.pool.query(`insert into webhook_deliveries (id, body_sha256, body, status, received_at)
    values (7, 'sha-7', '{}', 'applied', '2025-03-13T11:00:00Z')`);
  await database.pool.query(`insert into subscriber_activity (kind, subscriber_id, campaign_id, occurred_at, delivery_id) values
    ('campaign.open', '1', 'c', '2025-03-13T10:30:00Z', 7),
    ('campaign.open', '2', 'c', '2025-03-13T10:30:00Z', 7),
    ('campaign.open', '1', 'c', '2025-03-13T10:31:00Z', 8)`);

  expect((await runMigrations(database.url)).applied).toBeGreaterThan(0);

  const { rows: subscribers } = await database.pool.query(`select id, ${iso('version_at')} as v from subscribers order by id`);
  expect(subscribers).toEqual([
    { id: '1', v: '2025-03-11T15:10:00.000000Z' }, // unsubscribed: its unsubscribed_at
    { id: '2', v: '2025-03-11T15:06:41.000000Z' }, // active: a stale unsubscribed_at does not count
    { id: '3', v: '2025-03-12T09:00:00.000000Z' }, // deleted: its deleted_at
  ]);
  const { rows: activity } = await database.pool.query(
    `select subscriber_id, ${iso('occurred_at')} as occurred_at, ${iso('subscriber_updated_at')} as subscriber_updated_at,
            delivery_id::text, item_index
       from subscriber_activity order by id`,
  );
  expect(activity).toEqual([
    {
      subscriber_id: '1',
      occurred_at: '2025-03-13T11:00:00.000000Z',
      subscriber_updated_at: '2025-03-13T10:30:00.000000Z',
      delivery_id: '7',
      item_index: 0,
    },
    {
      subscriber_id: '2',
      occurred_at: '2025-03-13T11:00:00.000000Z',
      subscriber_updated_at: '2025-03-13T10:30:00.000000Z',
      delivery_id: '7',
      item_index: 1,
    },
    // Its delivery was purged: the old time stays, no better one is left.
    {
      subscriber_id: '1',
      occurred_at: '2025-03-13T10:31:00.000000Z',
      subscriber_updated_at: '2025-03-13T10:31:00.000000Z',
      delivery_id: '8',
      item_index: 0,
    },
  ]);
  const { rows: nulls } = await database.pool.query(
    `select is_nullable from information_schema.columns where table_name = 'subscribers' and column_name = 'version_at'`,
  );
  expect(nulls).toEqual([{ is_nullable: 'NO' }]);
});

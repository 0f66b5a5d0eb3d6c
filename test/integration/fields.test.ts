/**
 * Custom fields as typed columns (docs/sql.md, "Custom fields as columns"), against the simulator
 * through both interfaces: the worker's refresh loop (one request per reconcile) follows the
 * service's definitions while it runs (a field added, another one's type changed) within one
 * reconcile, and values that do not parse as their type are null in `subscriber_fields`, never an error.
 */
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/ground/log.js';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { refreshFields, startFieldRefresh, type FieldReader } from '../../src/sync/fields.js';
import { createCurrentClient } from '../../src/upstream/current/client.js';
import { createLegacyClient } from '../../src/upstream/legacy/client.js';
import { currentTestSource, passContext } from '../helpers/current.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { fullPassAllTypes, passAllTypes, passDeps } from '../helpers/poll.js';
import { deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

type Source = 'legacy' | 'current';

const silent = createLogger({ level: 'silent' }).logger;
const RECONCILE_MS = 400;

let database: TestDatabase;
let redis: Redis;
let prefix: string;
let sim: Simulator | undefined;

beforeAll(async () => {
  database = await createTestDatabase();
  prefix = uniquePrefix('fields');
  redis = new Redis(redisUrl(), { maxRetriesPerRequest: 1 });
});
afterEach(async () => {
  await sim?.close();
  sim = undefined;
  await database.pool.query('truncate subscribers, group_members, sync_state, sync_passes, upstream_paging');
  await refreshFields(database.pool, async () => [], silent);
});
afterAll(async () => {
  await deletePrefix(prefix);
  redis.disconnect();
  await database.drop();
});

function fieldReaderOf(source: Source, s: Simulator): FieldReader {
  const http = { retry: { retries: 2, minDelayMs: 5, maxDelayMs: 50 }, timeoutMs: 10_000 };
  if (source === 'legacy') return () => createLegacyClient({ baseUrl: s.url, apiKey: s.apiKey, http }).fields();
  return () => createCurrentClient({ baseUrl: s.url, token: s.webhooksToken, http }).fields();
}

async function fullPass(source: Source, s: Simulator, groupId: string): Promise<void> {
  if (source === 'legacy') await passAllTypes(passDeps(database, s), groupId, 'full');
  else await fullPassAllTypes(currentTestSource(s), passContext(database), groupId);
}

/** Requests for the field definitions the simulator answered so far. */
function fieldReads(s: Simulator): number {
  return s.requests.filter((r) => r.url.split('?')[0]?.endsWith('/fields') && r.status === 200).length;
}

/** The view's columns with their SQL types, in order. */
async function viewColumns(): Promise<string[]> {
  const { rows } = await database.pool.query<{ c: string }>(
    `select column_name || ' ' || data_type as c from information_schema.columns
      where table_schema = 'public' and table_name = 'subscriber_fields' order by ordinal_position`,
  );
  return rows.map((r) => r.c);
}

describe.each(['legacy', 'current'] as const)('custom fields from the %s API', (source) => {
  it('follows definitions changed under a running mirror within one reconcile; unparsable values are null', async () => {
    const s = (sim = await startSimulator({ subscribers: 20, groups: 1, seed: 3, rateLimit: false }));
    const groupId = s.world.groupIds()[0] as string;
    const [a, b, c] = s.world.members(groupId, 'active');
    if (!a || !b || !c) throw new Error('the seed needs three active members');
    s.world.defineField('score', 'text', 'Lead score');
    s.world.updateFields(a, { score: '87' });
    s.world.updateFields(b, { score: 'n/a' });
    await fullPass(source, s, groupId);

    const loop = startFieldRefresh({
      pool: database.pool,
      redis,
      prefix: `${prefix}:${source}`,
      read: fieldReaderOf(source, s),
      logger: silent,
      everyMs: RECONCILE_MS,
    });
    try {
      await waitFor('the first refresh', async () => (await viewColumns()).includes('score text'), 10_000);
      expect(await viewColumns()).toEqual([
        'account text',
        'id text',
        'city text',
        'company text',
        'country text',
        'last_name text',
        'name text',
        'phone text',
        'score text',
        'state text',
        'zip text',
      ]);

      // Under the running loop: a date field is added, the score becomes a number.
      s.world.defineField('joined', 'date', 'Joined');
      s.world.defineField('score', 'number', 'Lead score');
      s.world.updateFields(a, { joined: '2024-05-17' });
      s.world.updateFields(c, { joined: '2024-02-30', score: '12.5' });
      await fullPass(source, s, groupId);
      const readsBefore = fieldReads(s);
      await waitFor('the refresh after the change', async () => (await viewColumns()).includes('joined date'), 10_000);
      // Within one reconcile: the first read that started after the change (a read already in flight
      // may have seen the old definitions) rebuilt the view.
      expect(fieldReads(s) - readsBefore).toBeLessThanOrEqual(2);
      expect(await viewColumns()).toContain('score numeric');

      const { rows } = await database.pool.query<{ id: string; score: string | null; joined: string | null }>(
        `select id, score::text as score, joined::text as joined from subscriber_fields where id = any($1::text[]) order by score nulls last`,
        [[a, b, c]],
      );
      expect(rows).toEqual([
        { id: c, score: '12.5', joined: null }, // 30 February is no day: null, no error
        { id: a, score: '87', joined: '2024-05-17' },
        { id: b, score: null, joined: null }, // 'n/a' is no number
      ]);
      const { rows: defs } = await database.pool.query(`select key, title, type from fields where key in ('joined', 'score') order by key`);
      expect(defs).toEqual([
        { key: 'joined', title: 'Joined', type: 'date' },
        { key: 'score', title: 'Lead score', type: 'number' },
      ]);
    } finally {
      loop.stop();
    }
  });
});

describe('field definitions refresh', () => {
  it('changes nothing and rebuilds nothing when the service lists the same definitions', async () => {
    const s = (sim = await startSimulator({ subscribers: 5, groups: 1, seed: 4, rateLimit: false }));
    const read = fieldReaderOf('legacy', s);
    expect((await refreshFields(database.pool, read, silent)).rebuilt).toBe(true);
    expect(await refreshFields(database.pool, read, silent)).toEqual({ added: [], retyped: [], removed: [], retitled: [], rebuilt: false });
  });

  it('drops the column of a field the service no longer lists', async () => {
    await refreshFields(database.pool, async () => [{ key: 'tier', title: 'Tier', type: 'text', upstreamId: '1' }], silent);
    expect(await viewColumns()).toEqual(['account text', 'id text', 'tier text']);
    const changes = await refreshFields(database.pool, async () => [], silent);
    expect(changes.removed).toEqual(['tier']);
    expect(await viewColumns()).toEqual(['account text', 'id text']);
  });
});

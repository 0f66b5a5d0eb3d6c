/**
 * `subscriber-mirror erase` (docs/operations.md, "Erasing a person"), run as an operator would (the
 * real CLI in a child process): a person present in every table that can hold personal data is
 * erased, and a search of every text and jsonb column of every table, and a `pg_dump --data-only`,
 * finds the email neither plain nor URL-encoded. A second run changes nothing; bad input exits 2 and
 * changes nothing; what arrives for the person afterwards stays erased.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { configureHistory } from '../../src/mirror/history.js';
import { normalizeLegacySubscriber } from '../../src/mirror/normalize.js';
import { upsertSubscribers } from '../../src/mirror/store/index.js';
import { runErasure } from '../../src/webhooks/erasure-run.js';
import { legacySubscriber } from '../fixtures/mirror/rows.js';
import { applyDelivery } from '../../src/webhooks/apply-job.js';
import { storeDelivery, type DeliveryRecord } from '../../src/webhooks/inbox/write.js';
import { parseEraseArgs } from '../../src/commands/erase.js';
import { runCli } from '../helpers/cli.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

const run = promisify(execFile);
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
  await configureHistory(db.pool, { enabled: true });
});

afterAll(async () => {
  await db.drop();
});

interface Person {
  id: string;
  email: string;
  lastName: string;
}

const person = (id: string, tag: string): Person => ({ id, email: `Quinn.Erasable+${tag}@Example.org`, lastName: `Vandermolen${tag}` });

function subscriberJson(p: Person, updatedAt: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    id: p.id,
    email: p.email,
    status: 'active',
    source: 'api',
    sent: 3,
    ip_address: '203.0.113.77',
    subscribed_at: '2024-05-01T08:00:00.000000Z',
    unsubscribed_at: null,
    created_at: '2024-05-01T08:00:00.000000Z',
    updated_at: updatedAt,
    deleted_at: null,
    forget_at: null,
    fields: { name: 'Quinn', last_name: p.lastName, city: 'Basel' },
    ...extra,
  };
}

const updated = (p: Person, at: string, extra: Record<string, unknown> = {}) => ({
  type: 'subscriber.updated',
  subscriber: subscriberJson(p, at, extra),
});
const joined = (p: Person, at: string) => ({
  type: 'subscriber.added_to_group',
  subscriber: subscriberJson(p, at),
  group: { id: '121994866237474385', name: 'Newsletter' },
});
const click = (p: Person, at: string) => ({
  type: 'campaign.click',
  subscriber: subscriberJson(p, at),
  campaign: { id: '122511863480109157', name: 'June update', total_recipients: 1840, date: '2024-06-18T07:00:03.512844Z' },
  link_url: `https://shop.example.com/u/${p.email}/offer?email=${encodeURIComponent(p.email)}`,
});

async function deliver(body: object, options: { apply?: boolean; status?: DeliveryRecord['status'] } = {}): Promise<string> {
  const text = JSON.stringify(body);
  const stored = await storeDelivery(db.pool, {
    raw: Buffer.from(text),
    body,
    kinds: [(body as { type: string }).type],
    eventCount: 1,
    endpointId: null,
    status: options.status ?? 'pending',
  });
  if (options.apply !== false) expect((await applyDelivery(db.pool, stored.id)).outcome).toBe('applied');
  return stored.id;
}

/** Every text, text[] and jsonb column of every table: `table.column` → rows whose text holds `needle` (any case). */
async function columnsHolding(needle: string): Promise<Record<string, number>> {
  const { rows: columns } = await db.pool.query<{ table_name: string; column_name: string }>(
    `select c.table_name, c.column_name from information_schema.columns c
       join information_schema.tables t on t.table_schema = c.table_schema and t.table_name = c.table_name and t.table_type = 'BASE TABLE'
      where c.table_schema = 'public' and (c.data_type in ('text', 'jsonb', 'json', 'character varying') or c.udt_name in ('_text', '_varchar'))`,
  );
  expect(columns.length).toBeGreaterThan(20);
  const hits: Record<string, number> = {};
  for (const { table_name: table, column_name: column } of columns) {
    const { rows } = await db.pool.query<{ n: number }>(
      `select count(*)::int as n from "${table}" where strpos(lower("${column}"::text), lower($1)) > 0`,
      [needle],
    );
    if ((rows[0]?.n ?? 0) > 0) hits[`${table}.${column}`] = rows[0]?.n ?? 0;
  }
  return hits;
}

/** Forms an auditor searches a dump for: plain and URL-encoded (`%40`, `+` as `%2B`). */
const forms = (email: string) => [email, encodeURIComponent(email)];

async function dump(): Promise<string> {
  const { stdout } = await run('pg_dump', ['--data-only', '--no-owner', '--dbname', db.url], { maxBuffer: 256 * 1024 * 1024 });
  // pg_dump brackets its output with a random key per run (\restrict KEY … \unrestrict KEY).
  return stdout.replace(/^\\(un)?restrict .*$/gm, '');
}

/** Lines of the dump holding each form, in any case. */
const dumpHits = (text: string, email: string) =>
  forms(email).map(
    (f) =>
      text
        .toLowerCase()
        .split('\n')
        .filter((l) => l.includes(f.toLowerCase())).length,
  );

/** A legacy poll's listing of `p`, dated `at` (whole seconds). */
const pollRow = (p: Person, at: string) =>
  normalizeLegacySubscriber(legacySubscriber({ id: p.id, email: p.email, date_updated: at.slice(0, 19).replace('T', ' ') }), {
    sourceTimezone: 'UTC',
  });

const erase = (args: string[]) => runCli(['erase', ...args], { DATABASE_URL: db.url }, { timeoutMs: 60_000 });

describe('subscriber-mirror erase', () => {
  const jane = person('7301159647788771324', 'jane');
  const other = person('7301159647788771325', 'other');

  it('erases a person present in every table; the dump holds the email neither plain nor URL-encoded; a second run changes nothing', async () => {
    // Versions (history), a membership and its period, an activity row with the email in its link, an
    // applied delivery, one the consumer has not applied yet, one ignored; and someone else beside her.
    await deliver(updated(jane, '2024-06-01T10:00:00.000000Z'));
    await deliver(joined(jane, '2024-06-02T10:00:00.000000Z'));
    await deliver(updated(jane, '2024-06-03T10:00:00.000000Z', { sent: 4 }));
    await deliver(click(jane, '2024-06-04T10:00:00.000000Z'));
    await deliver({ events: [updated(jane, '2024-06-05T10:00:00.000000Z', { sent: 5 })] }, { apply: false });
    await deliver(
      { type: 'subscriber.unknown_kind', subscriber: subscriberJson(jane, '2024-06-05T11:00:00.000000Z') },
      { apply: false, status: 'ignored' },
    );
    await deliver(updated(other, '2024-06-01T10:00:00.000000Z'));

    const before = await columnsHolding(jane.email);
    expect(Object.keys(before).sort()).toEqual([
      'subscriber_activity.link_url',
      'subscriber_versions_past.email',
      'subscribers.email',
      'webhook_deliveries.body',
    ]);
    expect(await columnsHolding(encodeURIComponent(jane.email))).toEqual({
      'subscriber_activity.link_url': 1,
      'webhook_deliveries.body': 1,
    });
    expect(dumpHits(await dump(), jane.email).every((n) => n > 0)).toBe(true);

    const result = await erase(['--email', jane.email.toLowerCase()]);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout).toContain(`erased ${jane.email.toLowerCase()} (subscriber ${jane.id}) from the mirror`);
    expect(result.stdout).toMatch(/subscribers\s+1 row\(s\) emptied/);
    expect(result.stdout).toMatch(/subscriber_versions_past\s+[1-9]\d* version\(s\) emptied/);
    expect(result.stdout).toMatch(/subscriber_activity\s+1 link\(s\) cut/);
    expect(result.stdout).toMatch(/webhook_deliveries\s+6 body\(ies\) redacted/);
    expect(result.stdout).toMatch(/erasures\s+1 id\(s\) logged/);

    for (const needle of [jane.email, encodeURIComponent(jane.email), jane.lastName]) expect(await columnsHolding(needle)).toEqual({});
    const after = await dump();
    expect(dumpHits(after, jane.email)).toEqual(forms(jane.email).map(() => 0));
    // Ids stay, and so does everyone else.
    const { rows } = await db.pool.query('select id, email, fields from subscribers order by id');
    expect(rows).toEqual([
      { id: jane.id, email: null, fields: {} },
      { id: other.id, email: other.email, fields: expect.objectContaining({ last_name: other.lastName }) },
    ]);
    expect((await db.pool.query('select subscriber_id, reason from erasures')).rows).toEqual([
      { subscriber_id: jane.id, reason: 'request' },
    ]);
    // Who must not be mailed: an erased person is suppressed by id, since the address is gone.
    expect((await db.pool.query('select email, reason, learned_via from suppressions where subscriber_id = $1', [jane.id])).rows).toEqual([
      { email: null, reason: 'forgotten', learned_via: 'erase' },
    ]);

    const again = await erase(['--email', jane.email]);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain('nothing left to erase');
    const byId = await erase(['--id', jane.id]);
    expect(byId.code).toBe(0);
    expect(byId.stdout).toBe(`nothing left to erase for subscriber ${jane.id}: already erased\n`);
    expect(await dump()).toBe(after);

    // The delivery still pending is applied afterwards (redacted by the erase): she stays erased.
    const pending = await db.pool.query<{ id: string }>(`select id::text from webhook_deliveries where status = 'pending'`);
    expect(pending.rows.length).toBeGreaterThan(0);
    for (const { id } of pending.rows) expect((await applyDelivery(db.pool, id)).outcome).toBe('applied');
    const stored = () => db.pool.query('select email, fields from subscribers where id = $1', [jane.id]);
    expect((await stored()).rows).toEqual([{ email: null, fields: {} }]);
    // A newer change from the service (she still exists there, `forget_at: null`), and a poll of her:
    // the mirror keeps her erased (the service's own forget is the other half of the request).
    await deliver(updated(jane, '2024-07-01T10:00:00.000000Z', { sent: 9 }));
    await upsertSubscribers(db.pool, [pollRow(jane, '2024-07-02T10:00:00.000000Z')]);
    expect((await stored()).rows).toEqual([{ email: null, fields: {} }]);
    // The rest of her row still follows the service.
    expect((await db.pool.query('select mirrored_via from subscribers where id = $1', [jane.id])).rows).toEqual([{ mirrored_via: 'poll' }]);
    await runErasure(db.pool, { groups: [], types: [], outOfGroupsAfterMs: 0 });
    for (const needle of [jane.email, encodeURIComponent(jane.email), jane.lastName]) expect(await columnsHolding(needle)).toEqual({});
  });

  it('bad input exits 2 and changes nothing', async () => {
    const before = await dump();
    for (const args of [
      [],
      ['--email', other.email, '--id', other.id],
      ['--email', 'not-an-email'],
      ['--email', 'a b@example.org'],
      ['--id', 'abc'],
      ['--id', '999999'],
    ]) {
      const result = await erase(args);
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr).toMatch(/^subscriber-mirror: erase/);
    }
    expect(await dump()).toBe(before);
    expect((await db.pool.query('select email from subscribers where id = $1', [other.id])).rows).toEqual([{ email: other.email }]);
  });

  it('by id', async () => {
    const result = await erase(['--id', `00${other.id}`]);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain(`erased subscriber ${other.id} from the mirror`);
    expect(await columnsHolding(other.email)).toEqual({});
  });
});

describe('parseEraseArgs', () => {
  it.each([
    [['--email', ' x@example.org '], { email: 'x@example.org' }],
    [['--id', '007'], { id: '7' }],
  ])('%j', (args, expected) => {
    expect(parseEraseArgs(args)).toEqual(expected);
  });
  it.each([[[]], [['--email', 'a@b.c', '--id', '1']], [['--email', 'a@b']], [['--email', 'a\u001b@b.c']], [['--id', '-1']], [['--nope']]])(
    '%j is refused',
    (args) => {
      expect(() => parseEraseArgs(args)).toThrow();
    },
  );
});

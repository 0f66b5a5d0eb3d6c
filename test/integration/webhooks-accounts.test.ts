/**
 * Two accounts in one database (issue 35): the inbox, the consumer, replay, the purge, the erasure
 * of stored deliveries and what operators see each keep to the account of their pool. Both accounts
 * hold the same ids with different data: a statement that forgot the account would read, apply,
 * reopen or rewrite the other account's row, and these tests see it.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import { openDatabase, type Database } from '../../src/db/client.js';
import { createLogger } from '../../src/ground/log.js';
import { applyDelivery } from '../../src/webhooks/apply-job.js';
import { createDeliveryConsumer, listenForInbox, type DeliveryConsumer } from '../../src/webhooks/consumer.js';
import {
  deliveryBody,
  emailsOfSubscribers,
  replaceDeliveryBody,
  subscribersWithEmailInDeliveries,
} from '../../src/webhooks/inbox/erasure.js';
import {
  accountsWithDueDeliveries,
  deliveryStatus,
  nextRetryInMs,
  purgeDeliveries,
  recordFailedAttempt,
} from '../../src/webhooks/inbox/lifecycle.js';
import { countDeliveriesByStatus, latestFailedDeliveries } from '../../src/webhooks/inbox/report.js';
import { storeDelivery, type DeliveryRecord, type InboxStatus } from '../../src/webhooks/inbox/write.js';
import { redactDeliveries, redactDeliveriesSince } from '../../src/webhooks/redact.js';
import { replayDeliveries } from '../../src/webhooks/replay.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { webhookSubscriber } from '../fixtures/mirror/rows.js';
import { waitFor } from '../helpers/wait.js';

const OTHER = 'other';

let db: TestDatabase;
/** A pool of account `other`; `db.pool` serves `default`. */
let other: Database;
/** A deployment-wide pool: no account. */
let deployment: Database;
const consumers: DeliveryConsumer[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  await db.pool.query(`insert into accounts (name) values ($1)`, [OTHER]);
  other = openDatabase(db.url, { account: OTHER, max: 3 });
  deployment = openDatabase(db.url, { max: 2 });
});

afterAll(async () => {
  for (const c of consumers) await c.close(5_000);
  await other?.close();
  await deployment?.close();
  await db?.drop();
});

beforeEach(async () => {
  await db.pool.query(
    'truncate subscribers, group_members, groups, subscriber_activity, webhook_deliveries, webhook_delivery_hashes, erasures',
  );
});

function record(body: unknown, status: InboxStatus = 'pending'): DeliveryRecord {
  return { raw: Buffer.from(JSON.stringify(body)), body, kinds: [], eventCount: status === 'pending' ? 1 : 0, endpointId: null, status };
}

async function store(pool: Database['pool'], body: unknown, status: InboxStatus = 'pending'): Promise<string> {
  return (await storeDelivery(pool, record(body, status))).id;
}

function updated(id: string, email: string): Record<string, unknown> {
  return { event: 'subscriber.updated', account_id: 1, ...webhookSubscriber({ id, email }) };
}

async function rowsOf(id: string): Promise<Array<{ account: string; status: string }>> {
  const { rows } = await db.pool.query<{ account: string; status: string }>(
    'select account, status from webhook_deliveries where id = $1',
    [id],
  );
  return rows;
}

async function emailsById(id: string): Promise<Array<{ account: string; email: string }>> {
  const { rows } = await db.pool.query<{ account: string; email: string }>(
    'select account, email from subscribers where id = $1 order by account',
    [id],
  );
  return rows;
}

function consumer(pool: Database['pool'], listen = false): DeliveryConsumer {
  const created = createDeliveryConsumer({ pool, logger: createLogger({ level: 'silent' }).logger, listen, pollEveryMs: 0 });
  consumers.push(created);
  return created;
}

describe('the inbox', () => {
  test('the same bytes are one delivery per account, each a duplicate only within its own', async () => {
    const body = updated('7', 'same@example.com');
    const mine = await storeDelivery(db.pool, record(body));
    const theirs = await storeDelivery(other.pool, record(body));
    expect(mine.duplicate).toBe(false);
    expect(theirs.duplicate).toBe(false);
    expect(theirs.id).not.toBe(mine.id);
    expect(await storeDelivery(db.pool, record(body))).toMatchObject({ duplicate: true, id: mine.id });
    expect(await storeDelivery(other.pool, record(body))).toMatchObject({ duplicate: true, id: theirs.id });
    expect(await rowsOf(mine.id)).toEqual([{ account: 'default', status: 'pending' }]);
    expect(await rowsOf(theirs.id)).toEqual([{ account: OTHER, status: 'pending' }]);
  });

  test('the purge is deployment-wide: past retention in every account, each hash kept under its own account', async () => {
    const body = updated('7', 'same@example.com');
    const mine = await store(db.pool, body, 'ignored');
    const theirs = await store(other.pool, body, 'ignored');
    const recent = await store(other.pool, updated('8', 'recent@example.com'), 'ignored');
    await db.pool.query(`update webhook_deliveries set received_at = now() - interval '2 hours' where id = any($1::bigint[])`, [
      [mine, theirs],
    ]);
    // A pool without an account: the statement names each row's account itself.
    expect(await purgeDeliveries(deployment.pool, 3_600_000, { batch: 1 })).toBe(2);
    expect(await rowsOf(recent)).toEqual([{ account: OTHER, status: 'ignored' }]);
    const { rows: hashes } = await db.pool.query(
      'select account, delivery_id::text as id, status from webhook_delivery_hashes order by account',
    );
    expect(hashes).toEqual([
      { account: 'default', id: mine, status: 'ignored' },
      { account: OTHER, id: theirs, status: 'ignored' },
    ]);
    // The same bytes again: each account answers with its own purged delivery.
    expect(await storeDelivery(db.pool, record(body))).toMatchObject({ duplicate: true, id: mine, status: 'ignored' });
    expect(await storeDelivery(other.pool, record(body))).toMatchObject({ duplicate: true, id: theirs, status: 'ignored' });
  });
});

describe('the consumer', () => {
  test('claims, applies and marks only its own account’s deliveries, into its own account’s rows', async () => {
    const mine = await store(db.pool, updated('7', 'mine@example.com'));
    const theirs = await store(other.pool, updated('7', 'theirs@example.com'));

    expect(await consumer(db.pool).drain()).toBe(1);
    expect(await rowsOf(mine)).toEqual([{ account: 'default', status: 'applied' }]);
    expect(await rowsOf(theirs)).toEqual([{ account: OTHER, status: 'pending' }]);
    expect(await emailsById('7')).toEqual([{ account: 'default', email: 'mine@example.com' }]);

    // By id, from the wrong account: not found, nothing changed.
    expect(await applyDelivery(db.pool, theirs)).toEqual({ outcome: 'skipped', status: 'missing' });
    expect(await recordFailedAttempt(db.pool, theirs, 'not mine', true)).toBeUndefined();
    expect(await deliveryStatus(db.pool, theirs)).toBe('missing');
    expect(await rowsOf(theirs)).toEqual([{ account: OTHER, status: 'pending' }]);

    expect(await consumer(other.pool).drain()).toBe(1);
    expect(await emailsById('7')).toEqual([
      { account: 'default', email: 'mine@example.com' },
      { account: OTHER, email: 'theirs@example.com' },
    ]);
  });

  test('an add older than a deletion stored in another account ends nothing', async () => {
    await other.pool.query(
      `insert into subscribers (id, email, version_at, deleted_at, mirrored_via) values ('9', 'gone@example.com', '2030-01-01', '2030-01-01', 'webhook')`,
    );
    const added = {
      type: 'subscriber.added_to_group',
      subscriber: webhookSubscriber({ id: '9', email: 'kept@example.com' }),
      group: { id: '5', name: 'News' },
    };
    await store(db.pool, added);
    expect(await consumer(db.pool).drain()).toBe(1);
    const { rows } = await db.pool.query(`select account, removed_at from group_members where subscriber_id = '9'`);
    expect(rows).toEqual([{ account: 'default', removed_at: null }]);
  });

  test('a listening consumer is woken by its own account’s inbox and applies that account’s delivery', async () => {
    const listening = consumer(other.pool, true);
    await listening.listening;
    const mine = await store(db.pool, updated('7', 'mine@example.com'));
    const theirs = await store(other.pool, updated('7', 'theirs@example.com'));
    await waitFor(
      'the notified consumer to apply it',
      async () => ((await rowsOf(theirs))[0]?.status === 'applied' ? true : undefined),
      10_000,
      15,
    );
    expect(await rowsOf(mine)).toEqual([{ account: 'default', status: 'pending' }]);
    await listening.close(5_000);
  });

  test('a retry waiting in another account is not this account’s', async () => {
    const theirs = await store(other.pool, updated('7', 'theirs@example.com'));
    expect(await recordFailedAttempt(other.pool, theirs, 'transient', false)).toMatchObject({ status: 'pending' });
    expect(await nextRetryInMs(db.pool)).toBeNull();
    expect(await nextRetryInMs(other.pool)).toEqual(expect.any(Number));
  });
});

describe('replay', () => {
  test('reopens only its own account’s failed rows, and its own ignored ones', async () => {
    const failedMine = await store(db.pool, updated('7', 'mine@example.com'), 'failed');
    const failedTheirs = await store(other.pool, updated('7', 'theirs@example.com'), 'failed');
    expect(await replayDeliveries(db.pool)).toEqual([failedMine]);
    expect(await replayDeliveries(db.pool, { ids: [failedTheirs] })).toEqual([]);
    expect(await rowsOf(failedTheirs)).toEqual([{ account: OTHER, status: 'failed' }]);

    const ignoredMine = await store(db.pool, updated('8', 'mine@example.com'), 'ignored');
    const ignoredTheirs = await store(other.pool, updated('8', 'theirs@example.com'), 'ignored');
    expect(await replayDeliveries(other.pool, { status: 'ignored' })).toEqual([ignoredTheirs]);
    expect(await rowsOf(ignoredMine)).toEqual([{ account: 'default', status: 'ignored' }]);
  });
});

describe('erasure of stored deliveries', () => {
  test('reads and redacts only its own account’s bodies', async () => {
    const mine = await store(db.pool, updated('9', 'mine@example.com'), 'ignored');
    const theirs = await store(other.pool, updated('9', 'theirs@example.com'), 'ignored');
    const theirBody = await deliveryBody(other.pool, theirs);

    expect(await emailsOfSubscribers(db.pool, ['9'])).toEqual(['mine@example.com']);
    expect(await subscribersWithEmailInDeliveries(db.pool, 'theirs@example.com')).toEqual([]);
    expect(await subscribersWithEmailInDeliveries(other.pool, 'theirs@example.com')).toEqual(['9']);
    expect(await deliveryBody(db.pool, theirs)).toBeNull();
    await replaceDeliveryBody(db.pool, theirs, '{}');
    expect(await deliveryBody(other.pool, theirs)).toBe(theirBody);

    expect(await redactDeliveries(db.pool, ['9'])).toBe(1);
    expect(await deliveryBody(db.pool, mine)).not.toContain('mine@example.com');
    expect(await deliveryBody(other.pool, theirs)).toBe(theirBody);
  });

  test('the re-check redacts what mentions a subscriber erased in its own account only', async () => {
    await other.pool.query(
      `insert into erasures (subscriber_id, reason, deliveries_redacted_at) values ('9', 'forget', now() - interval '1 minute')`,
    );
    const mine = await store(db.pool, updated('9', 'mine@example.com'), 'ignored');
    const theirs = await store(other.pool, updated('9', 'theirs@example.com'), 'ignored');
    const now = new Date(Date.now() + 1_000).toISOString();
    expect(await redactDeliveriesSince(db.pool, now, 600_000)).toBe(0);
    expect(await deliveryBody(db.pool, mine)).toContain('mine@example.com');
    expect(await redactDeliveriesSince(other.pool, now, 600_000)).toBe(1);
    expect(await deliveryBody(other.pool, theirs)).not.toContain('theirs@example.com');
  });
});

describe('what operators see', () => {
  test('counts and latest failures of the pool’s account only', async () => {
    await store(db.pool, updated('7', 'mine@example.com'), 'failed');
    await store(other.pool, updated('7', 'theirs@example.com'), 'failed');
    await store(other.pool, updated('8', 'theirs@example.com'), 'ignored');
    expect(await countDeliveriesByStatus(db.pool)).toMatchObject({ failed: 1, ignored: 0 });
    expect(await countDeliveriesByStatus(other.pool)).toMatchObject({ failed: 1, ignored: 1 });
    const [mine] = await latestFailedDeliveries(db.pool);
    expect(await latestFailedDeliveries(db.pool)).toHaveLength(1);
    expect(await rowsOf(mine?.id ?? '')).toEqual([{ account: 'default', status: 'failed' }]);
  });
});

describe('the safety net of a worker of several accounts', () => {
  test('names the accounts with a pending delivery due now, and no other', async () => {
    const accounts = ['default', OTHER];
    expect(await accountsWithDueDeliveries(deployment.pool, accounts)).toEqual([]);
    // Done rows, and a pending one waiting for its next try, are nothing to claim.
    await store(db.pool, updated('7', 'mine@example.com'), 'ignored');
    const waiting = await store(db.pool, updated('8', 'mine@example.com'));
    await db.pool.query(`update webhook_deliveries set next_attempt_at = now() + interval '1 hour' where id = $1`, [waiting]);
    await store(other.pool, updated('7', 'theirs@example.com'), 'failed');
    expect(await accountsWithDueDeliveries(deployment.pool, accounts)).toEqual([]);
    await store(other.pool, updated('9', 'theirs@example.com'));
    expect(await accountsWithDueDeliveries(deployment.pool, accounts)).toEqual([OTHER]);
    // Only the accounts asked about: a worker does not wake an account it does not serve.
    expect(await accountsWithDueDeliveries(deployment.pool, ['default'])).toEqual([]);
    await db.pool.query(`update webhook_deliveries set next_attempt_at = now() - interval '1 second' where id = $1`, [waiting]);
    expect((await accountsWithDueDeliveries(deployment.pool, accounts)).sort()).toEqual(['default', OTHER]);
  });

  test("the process's one listener polls for its accounts: a delivery whose notification was lost wakes its account only", async () => {
    // Stored while nobody listens: its notification is gone.
    await store(other.pool, updated('9', 'theirs@example.com'));
    const woken: string[] = [];
    const listener = listenForInbox(
      deployment.pool,
      // Null is the (re)connection's wake of every account: only the poll names one.
      (account) => {
        if (account !== null) woken.push(account);
      },
      createLogger({ level: 'silent' }).logger,
      { accounts: ['default', OTHER], everyMs: 50 },
    );
    try {
      await listener.ready;
      await waitFor('the poll to name the account', async () => woken.includes(OTHER) || undefined, 5_000, 20);
      expect(woken.filter((a) => a !== OTHER)).toEqual([]);
    } finally {
      await listener.stop();
    }
  });
});

/**
 * One receiver for every account (docs/operations.md, "Several accounts"): each account's deliveries
 * at `WEBHOOK_PATH/<account>`, account `default`'s also at `WEBHOOK_PATH` (wherever ACCOUNTS puts it:
 * here last), each verified with its own
 * account's secrets only (WEBHOOK_SECRETS and its rows of `webhook_endpoints`) and stored under it.
 * The receiver runs on a pool that serves no account: a statement asking the session for its account
 * would fail there, so every one of them names the route's.
 *
 * The probe "a delivery signed for account A posted to B's path is refused":
 *   npx vitest run --config test/vitest.config.ts test/integration/receiver-accounts.test.ts -t probe
 */
import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import { openDatabase, type Database } from '../../src/db/client.js';
import { createLogger } from '../../src/ground/log.js';
import { buildServer } from '../../src/http/server.js';
import { accountRoutes, accountWebhookUrl, registerAccountRoutes, type AccountRouteSettings } from '../../src/webhooks/account-routes.js';
import type { WebhookRoute } from '../../src/webhooks/receiver.js';
import { signBody } from '../../src/webhooks/signature.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

const SECRET_A = 'account-a-static-secret-1f9c';
const SECRET_B = 'account-b-static-secret-83d2';
const ENDPOINT_SECRET_B = 'account-b-endpoint-secret-5e';
const SECRET_DEFAULT = 'account-default-static-secret-4a0e';
const MAX_BODY = 64 * 1024;
/** A third to nineteenth account, each with a static secret of its own; with `default`, 20 accounts in all. */
const MORE = Array.from({ length: 17 }, (_, i) => ({ name: `acc${i + 3}`, webhookSecrets: [`account-${i + 3}-static-secret-0000`] }));
/** The account of a single-account install, declared last: the bare WEBHOOK_PATH is its by name, not by place. */
const DEFAULT = { name: 'default', webhookSecrets: [SECRET_DEFAULT] };

/** Declared in the receiver's settings but not yet in `accounts`: no worker has started since it was added. */
const LATE = { name: 'late', webhookSecrets: ['account-late-static-secret-77ab'] };

const SETTINGS: AccountRouteSettings = {
  webhookPath: '/webhooks',
  webhookMaxBodyBytes: MAX_BODY,
  accounts: [{ name: 'a', webhookSecrets: [SECRET_A] }, { name: 'b', webhookSecrets: [SECRET_B] }, ...MORE, DEFAULT, LATE],
};

let db: TestDatabase;
/** The receiver's pool: no account of its own, two connections whatever the number of accounts. */
let deployment: Database;
let app: FastifyInstance;
let route: WebhookRoute;
const lines: string[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  const declared = SETTINGS.accounts.filter((a) => a !== LATE).map((a) => a.name);
  // The test database holds account default already (an upgraded install's rows are its).
  await db.pool.query(`insert into accounts (name) select unnest($1::text[]) on conflict do nothing`, [declared]);
  await db.pool.query(
    `insert into webhook_endpoints (account, id, url, events, secret) values ('b', '900', 'https://x/webhooks/b', '{subscriber.updated}', $1)`,
    [ENDPOINT_SECRET_B],
  );
  deployment = openDatabase(db.url, { max: 2 });
  const stream = new Writable({
    write(chunk, _enc, cb) {
      lines.push(...String(chunk).split('\n').filter(Boolean));
      cb();
    },
  });
  const secrets = [SECRET_A, SECRET_B, ENDPOINT_SECRET_B, SECRET_DEFAULT, ...MORE.flatMap((a) => a.webhookSecrets), ...LATE.webhookSecrets];
  const { logger } = createLogger({ level: 'info', destination: stream, secrets });
  app = buildServer({ logger, readiness: [] });
  route = registerAccountRoutes(app, SETTINGS, {
    pool: deployment.pool,
    logger,
    inbox: { maxWaitMs: 50 },
    secretsMissRefreshMs: 0,
    // Every rejection logged one by one: the tests read the lines.
    rejections: { samplesPerPeriod: 1_000 },
  });
  await app.ready();
});

afterAll(async () => {
  await app?.close();
  await deployment?.close();
  await db?.drop();
});

beforeEach(async () => {
  await db.pool.query('truncate webhook_deliveries, webhook_delivery_hashes');
  lines.length = 0;
});

let serial = 0;
function body(email = `person${++serial}@example.com`): string {
  return JSON.stringify({ event: 'subscriber.updated', id: String(7_000 + ++serial), email, updated_at: '2024-06-11T09:15:42Z' });
}

function post(path: string, text: string, secret: string | null) {
  return app.inject({
    method: 'POST',
    url: path,
    payload: text,
    headers: { 'content-type': 'application/json', ...(secret === null ? {} : { signature: signBody(text, secret) }) },
  });
}

async function stored(): Promise<Array<{ account: string; endpoint: string | null }>> {
  const { rows } = await db.pool.query<{ account: string; endpoint: string | null }>(
    'select account, endpoint_id as endpoint from webhook_deliveries order by id',
  );
  return rows;
}

function rejectionLines(): Array<Record<string, unknown>> {
  return lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === 'webhook delivery rejected');
}

describe('routes', () => {
  test('every account at WEBHOOK_PATH/<account>, account default also at WEBHOOK_PATH wherever it is declared', () => {
    expect(accountRoutes(SETTINGS).map((r) => `${r.path} → ${r.account}`)).toEqual([
      '/webhooks → default',
      '/webhooks/a → a',
      '/webhooks/b → b',
      ...MORE.map((a) => `/webhooks/${a.name} → ${a.name}`),
      '/webhooks/default → default',
      '/webhooks/late → late',
    ]);
    const paths = (name: string) => accountRoutes({ webhookPath: '/', accounts: [{ name, webhookSecrets: [] }] }).map((r) => r.path);
    expect(paths('default')).toEqual(['/', '/default']);
    expect(paths('a'), 'an account not named default, even alone, has its own path only').toEqual(['/a']);
  });

  test('register gives the service the account path: account default the URL as given, any other /<account> after it', () => {
    const url = 'https://hooks.example.com/webhooks';
    expect(accountWebhookUrl(url, 'default', SETTINGS)).toBe(url);
    expect(accountWebhookUrl(url, 'a', SETTINGS), 'the first declared, not named default').toBe('https://hooks.example.com/webhooks/a');
    expect(accountWebhookUrl(url, 'b', SETTINGS)).toBe('https://hooks.example.com/webhooks/b');
    expect(accountWebhookUrl(`${url}/`, 'b', SETTINGS)).toBe('https://hooks.example.com/webhooks/b');
    expect(accountWebhookUrl(`${url}/b`, 'b', SETTINGS)).toBe('https://hooks.example.com/webhooks/b');
    expect(accountWebhookUrl('https://hooks.example.com/proxy/in', 'b', SETTINGS)).toBe('https://hooks.example.com/proxy/in/b');
  });
});

describe('deliveries routed per account', () => {
  test("each account's signed delivery at its own path is stored under that account, the same bytes once per account", async () => {
    const text = body();
    expect((await post('/webhooks/a', text, SECRET_A)).statusCode, "A's delivery at A's path").toBe(200);
    expect((await post('/webhooks/b', text, SECRET_B)).statusCode, "B's delivery at B's path").toBe(200);
    expect((await post('/webhooks/b', text, SECRET_B)).json(), 'the same bytes again at B').toMatchObject({ status: 'duplicate' });
    expect(await stored()).toEqual([
      { account: 'a', endpoint: null },
      { account: 'b', endpoint: null },
    ]);
  });

  test("the bare WEBHOOK_PATH is account default's, declared last: its deliveries stored under it, the first account's refused", async () => {
    expect((await post('/webhooks', body(), SECRET_DEFAULT)).statusCode, "default's delivery at the bare path").toBe(200);
    expect((await post('/webhooks', body(), SECRET_A)).statusCode, "A's (the first declared) delivery at the bare path").toBe(401);
    expect(await stored()).toEqual([{ account: 'default', endpoint: null }]);
  });

  test("probe: a delivery signed for account A posted to B's path → 401, nothing stored, logged with account, path and reason only", async () => {
    const email = 'probe-person@example.com';
    const text = body(email);
    const signature = signBody(text, SECRET_A);
    const refused = await post('/webhooks/b', text, SECRET_A);
    expect(refused.statusCode, "A-signed delivery at B's path").toBe(401);
    expect(refused.json(), 'the public answer names no account').toEqual({ error: 'invalid signature' });
    expect(await stored(), "nothing stored for A's delivery at B's path").toEqual([]);
    expect(rejectionLines(), 'one line: B refused it, signed for A').toEqual([
      expect.objectContaining({
        status: 401,
        reason: 'Signature matches no known secret',
        account: 'b',
        path: '/webhooks/b',
        signedFor: 'a',
      }),
    ]);
    const log = lines.join('\n');
    for (const [what, value] of Object.entries({ email, body: text, signature, 'A secret': SECRET_A, 'B secret': SECRET_B })) {
      expect(log.includes(value), `the log holds no ${what}`).toBe(false);
    }
    // The same bytes at A's own path are A's.
    expect((await post('/webhooks/a', text, SECRET_A)).statusCode, "the same delivery at A's path").toBe(200);
    expect(await stored()).toEqual([{ account: 'a', endpoint: null }]);
  });

  test("an account's webhook_endpoints secrets verify at its paths only", async () => {
    expect((await post('/webhooks/a', body(), ENDPOINT_SECRET_B)).statusCode, "B's endpoint secret at A's path").toBe(401);
    expect((await post('/webhooks', body(), ENDPOINT_SECRET_B)).statusCode, "B's endpoint secret at the bare path").toBe(401);
    expect(rejectionLines().map((l) => [l.account, l.path, l.signedFor])).toEqual([
      ['a', '/webhooks/a', 'b'],
      ['default', '/webhooks', 'b'],
    ]);
    expect((await post('/webhooks/b', body(), ENDPOINT_SECRET_B)).statusCode, "B's endpoint secret at B's path").toBe(200);
    expect(await stored()).toEqual([{ account: 'b', endpoint: '900' }]);
  });

  test('a forged signature is refused at every path, naming no account it was signed for', async () => {
    expect((await post('/webhooks/b', body(), 'forged-secret-of-nobody-000')).statusCode).toBe(401);
    const [line] = rejectionLines();
    expect(line).toMatchObject({ account: 'b', path: '/webhooks/b' });
    expect(line).not.toHaveProperty('signedFor');
  });

  test('an unknown account path is 404 like any unknown path, nothing stored', async () => {
    expect((await post('/webhooks/c', body(), SECRET_A)).statusCode, 'an undeclared account').toBe(404);
    expect((await post('/webhooks/a/b', body(), SECRET_A)).statusCode, 'below an account path').toBe(404);
    expect((await post('/webhooksa', body(), SECRET_A)).statusCode, 'a path that only starts like one').toBe(404);
    expect(await stored()).toEqual([]);
  });

  test('every path answers before reading the body: 401 without a signature, 413 over the limit', async () => {
    for (const path of ['/webhooks', '/webhooks/a', '/webhooks/b', '/webhooks/default']) {
      expect((await post(path, body(), null)).statusCode, `${path} without a signature`).toBe(401);
      expect((await post(path, 'x'.repeat(MAX_BODY + 1), SECRET_A)).statusCode, `${path} over WEBHOOK_MAX_BODY`).toBe(413);
    }
    expect(
      rejectionLines()
        .filter((l) => l.status === 401)
        .map((l) => l.path),
    ).toEqual(['/webhooks', '/webhooks/a', '/webhooks/b', '/webhooks/default']);
    expect(await stored()).toEqual([]);
  });

  test('20 accounts share one writer on two connections: concurrent deliveries of all of them, in fewer statements', async () => {
    const before = route.writer.stats();
    const answers = await Promise.all(
      SETTINGS.accounts.map((account) => post(`/webhooks/${account.name}`, body(), account.webhookSecrets[0] ?? '')),
    );
    // LATE's row, in a statement with others, holds none of them back.
    expect(answers.map((a) => a.statusCode)).toEqual(SETTINGS.accounts.map((a) => (a === LATE ? 503 : 200)));
    const after = route.writer.stats();
    expect(after.rows - before.rows).toBe(21);
    expect(after.batches - before.batches, 'statements for 20 deliveries of 20 accounts').toBeLessThan(20);
    expect(deployment.pool.totalCount, 'connections of the receiver').toBeLessThanOrEqual(2);
    const { rows } = await db.pool.query<{ account: string; n: number }>(
      'select account, count(*)::int as n from webhook_deliveries group by account order by account',
    );
    expect(rows).toEqual(
      SETTINGS.accounts
        .filter((a) => a !== LATE)
        .map((a) => a.name)
        .sort()
        .map((account) => ({ account, n: 1 })),
    );
  });

  test('a delivery for an account no worker has declared yet: 503 naming the cause, nothing stored; stored once declared', async () => {
    const text = body();
    expect((await post('/webhooks/late', text, LATE.webhookSecrets[0]!)).statusCode).toBe(503);
    expect(await stored()).toEqual([]);
    const notStored = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === 'webhook delivery not stored');
    expect(notStored).toEqual([
      expect.objectContaining({
        status: 503,
        reason: 'account not declared yet: start a worker, it declares the accounts',
        account: 'late',
      }),
    ]);
    await db.pool.query(`insert into accounts (name) values ('late')`);
    expect((await post('/webhooks/late', text, LATE.webhookSecrets[0]!)).statusCode, 'the service retrying it').toBe(200);
    expect(await stored()).toEqual([{ account: 'late', endpoint: null }]);
  });
});

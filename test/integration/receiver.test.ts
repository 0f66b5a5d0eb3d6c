/**
 * The webhook route end to end: Fastify app from buildServer, real HMAC signatures, real Postgres.
 * Invariants 1 (2xx only when durable), 5 (duplicates collapse), 9 (bad input answers), 10 (no
 * secrets in logs).
 */
import { request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import { DEFAULT_ACCOUNT, openDatabase } from '../../src/db/client.js';
import { buildServer } from '../../src/http/server.js';
import { createLogger } from '../../src/ground/log.js';
import { bodySha256 } from '../../src/webhooks/inbox/write.js';
import { registerWebhookRoute, type WebhookRoute } from '../../src/webhooks/receiver.js';
import { signBody } from '../../src/webhooks/signature.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { fixture, loadFixtures } from '../fixtures/webhooks/index.js';

const STATIC_SECRET = 'static-rotation-secret-7f3a';
const ENDPOINT_SECRET = 'endpoint-secret-Q9wz81';
const PATH = '/webhooks';
const MAX_BODY = 64 * 1024;

interface Captured {
  lines: string[];
  stream: Writable;
}

function captureLogs(): Captured {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk, _enc, cb) {
      lines.push(String(chunk));
      cb();
    },
  });
  return { lines, stream };
}

interface Harness {
  app: FastifyInstance;
  route: WebhookRoute;
  stored: string[];
  logs: Captured;
}

async function startApp(pool: TestDatabase['pool'], options: { secretsTtlMs?: number } = {}): Promise<Harness> {
  const logs = captureLogs();
  const { logger } = createLogger({ level: 'info', destination: logs.stream, secrets: [STATIC_SECRET] });
  const app = buildServer({ logger, readiness: [] });
  const stored: string[] = [];
  const route = registerWebhookRoute(app, {
    path: PATH,
    maxBodyBytes: MAX_BODY,
    secrets: () => [STATIC_SECRET],
    pool,
    logger,
    onStored: (id) => {
      stored.push(id);
    },
    inbox: { maxWaitMs: 2 },
    secretsTtlMs: options.secretsTtlMs ?? 60_000,
    secretsMissRefreshMs: 0,
    secretsLoadTimeoutMs: 2_000,
  });
  // A JSON route outside the webhook's encapsulated context keeps Fastify's normal parsing.
  app.post('/echo', async (request) => ({ got: request.body }));
  await app.ready();
  return { app, route, stored, logs };
}

function post(app: FastifyInstance, body: string | Buffer, headers: Record<string, string | undefined> = {}) {
  const clean = Object.fromEntries(Object.entries(headers).filter(([, v]) => v !== undefined)) as Record<string, string>;
  return app.inject({ method: 'POST', url: PATH, payload: body, headers: { 'content-type': 'application/json', ...clean } });
}

function signed(app: FastifyInstance, body: string, secret = STATIC_SECRET, headers: Record<string, string | undefined> = {}) {
  return post(app, body, { signature: signBody(body, secret), ...headers });
}

interface DeliveryRow {
  id: string;
  body_sha256: string;
  body: unknown;
  kinds: string[];
  event_count: number;
  endpoint_id: string | null;
  status: string;
  error: string | null;
}

let db: TestDatabase;
let h: Harness;

async function rows(): Promise<DeliveryRow[]> {
  const { rows: r } = await db.pool.query<DeliveryRow>(
    'select id::text as id, body_sha256, body, kinds, event_count, endpoint_id, status, error from webhook_deliveries order by id',
  );
  return r;
}

async function rowFor(body: string): Promise<DeliveryRow | undefined> {
  const { rows: r } = await db.pool.query<DeliveryRow>(
    'select id::text as id, body_sha256, body, kinds, event_count, endpoint_id, status, error from webhook_deliveries where body_sha256 = $1',
    [bodySha256(Buffer.from(body))],
  );
  return r[0];
}

async function count(): Promise<number> {
  const { rows: r } = await db.pool.query<{ n: number }>('select count(*)::int as n from webhook_deliveries');
  return r[0]!.n;
}

/** A unique, valid flat delivery. */
let serial = 0;
function uniqueBody(kind = 'subscriber.updated'): string {
  serial++;
  return JSON.stringify({
    event: kind,
    id: `1307425${String(serial).padStart(11, '0')}`,
    email: `user${serial}@example.com`,
    updated_at: '2024-06-11T09:15:42.650913Z',
    account_id: 412873,
  });
}

beforeAll(async () => {
  db = await createTestDatabase();
  h = await startApp(db.pool);
});

afterAll(async () => {
  await h?.app.close();
  await db?.drop();
});

beforeEach(async () => {
  await db.pool.query('truncate webhook_deliveries');
  await db.pool.query('truncate webhook_endpoints');
  h.stored.length = 0;
  h.logs.lines.length = 0;
});

describe('signed fixtures', () => {
  test.each(loadFixtures().map((f) => [f.name, f] as const))('%s → 200, one pending row', async (_name, f) => {
    const response = await signed(h.app, f.body);
    expect(response.statusCode).toBe(200);
    expect(response.json()).toMatchObject({ status: 'stored' });

    const all = await rows();
    expect(all).toHaveLength(1);
    const row = all[0]!;
    const parsed = JSON.parse(f.body) as { events?: unknown[] };
    expect(row).toMatchObject({
      status: 'pending',
      kinds: [f.kind],
      event_count: parsed.events?.length ?? 1,
      endpoint_id: null,
      error: null,
      body_sha256: bodySha256(Buffer.from(f.body)),
    });
    expect(row.body).toEqual(parsed);
    expect(h.stored).toEqual([row.id]);
  });
});

describe('rejected before anything is stored', () => {
  const body = fixture('subscriber.created', 'flat').body;

  test.each([
    ['missing signature', undefined],
    ['empty signature', ''],
    ['forged signature (random hex)', 'ab'.repeat(32)],
    ['malformed signature', 'not-a-signature'],
    ['truncated signature', signBody(body, STATIC_SECRET).slice(0, 40)],
    ['signature of a different body', signBody(fixture('subscriber.created', 'nested').body, STATIC_SECRET)],
    ['signed with a wrong secret', signBody(body, 'wrong-secret-123')],
  ])('%s → 401, no row', async (_name, signature) => {
    const response = await post(h.app, body, { signature });
    expect(response.statusCode).toBe(401);
    expect(await count()).toBe(0);
    expect(h.stored).toEqual([]);
  });

  test.each([
    ['malformed JSON', '{"event":"subscriber.created","id":"1"'],
    ['empty body', ''],
    ['a JSON array', '[{"event":"subscriber.created","id":"1"}]'],
    ['a JSON string', '"subscriber.created"'],
    ['JSON null', 'null'],
    ['prototype poisoning (__proto__)', '{"event":"subscriber.created","id":"1","__proto__":{"isAdmin":true}}'],
    ['constructor.prototype poisoning', '{"event":"subscriber.created","id":"1","constructor":{"prototype":{"isAdmin":true}}}'],
  ])('correctly signed %s → 400, no row', async (_name, text) => {
    const response = await signed(h.app, text);
    expect(response.statusCode).toBe(400);
    expect(await count()).toBe(0);
  });

  test('oversized → 413, no row (checked before the signature)', async () => {
    const big = JSON.stringify({ event: 'subscriber.created', id: '1', padding: 'x'.repeat(MAX_BODY) });
    const response = await signed(h.app, big);
    expect(response.statusCode).toBe(413);
    expect(await count()).toBe(0);
  });

  test('a body just under the limit is accepted', async () => {
    const base = JSON.stringify({ event: 'subscriber.created', id: '1', padding: '' });
    const text = base.replace('"padding":""', `"padding":"${'x'.repeat(MAX_BODY - base.length)}"`);
    expect(Buffer.byteLength(text)).toBe(MAX_BODY);
    expect((await signed(h.app, text)).statusCode).toBe(200);
  });

  test('one log line per rejection (the first few of a period), without the signature or any secret', async () => {
    // A new period: earlier tests of this file used up the sampled lines of the current one.
    h.route.rejections.flush();
    const body2 = uniqueBody();
    const forged = signBody(body2, 'attacker-secret-xyz');
    await post(h.app, body2, { signature: forged });
    await signed(h.app, '{broken');
    const lines = h.logs.lines.filter((l) => l.includes('webhook delivery rejected'));
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/"status":401/);
    expect(lines[1]).toMatch(/"status":400/);
    const all = h.logs.lines.join('\n');
    for (const value of [forged, STATIC_SECRET, ENDPOINT_SECRET, signBody('{broken', STATIC_SECRET)]) {
      expect(all).not.toContain(value);
    }
  });
});

describe('stored and answered 200', () => {
  test('the same delivery three times → one row', async () => {
    const body = uniqueBody();
    const answers = [];
    for (let i = 0; i < 3; i++) answers.push(await signed(h.app, body));
    expect(answers.map((a) => a.statusCode)).toEqual([200, 200, 200]);
    expect(answers.map((a) => a.json().status)).toEqual(['stored', 'duplicate', 'duplicate']);
    expect(new Set(answers.map((a) => a.json().id)).size).toBe(1);
    expect(await count()).toBe(1);
  });

  test('the same delivery three times at once → one row', async () => {
    const body = uniqueBody();
    const answers = await Promise.all([1, 2, 3].map(() => signed(h.app, body)));
    expect(answers.map((a) => a.statusCode)).toEqual([200, 200, 200]);
    expect(answers.map((a) => a.json().status).sort()).toEqual(['duplicate', 'duplicate', 'stored']);
    expect(await count()).toBe(1);
  });

  test('an unknown kind → 200, stored as ignored, not handed to the consumer', async () => {
    const body = JSON.stringify({ event: 'subscriber.merged', id: '1', into: '2', account_id: 412873 });
    const response = await signed(h.app, body);
    expect(response.statusCode).toBe(200);
    expect(response.json()).toMatchObject({ status: 'ignored' });
    expect(await rowFor(body)).toMatchObject({ status: 'ignored', kinds: ['subscriber.merged'], event_count: 0 });
    expect(h.stored).toEqual([]);
    expect(h.logs.lines.join('\n')).toMatch(/no known event kind/);
  });

  test('a batch mixing known and unknown kinds → pending with all kinds recorded', async () => {
    const item = JSON.parse(fixture('campaign.open', 'batched').body).events[0];
    const body = JSON.stringify({ events: [item, { type: 'form.submitted', form: { id: '1' } }], total: 2 });
    expect((await signed(h.app, body)).statusCode).toBe(200);
    expect(await rowFor(body)).toMatchObject({
      status: 'pending',
      kinds: ['campaign.open', 'form.submitted'],
      event_count: 1,
      error: 'unknown event kind(s): form.submitted',
    });
  });

  test('signed but schema-invalid → 200, stored as failed with the reason', async () => {
    const body = JSON.stringify({ event: 'subscriber.updated', email: 'no-id@example.com', account_id: 412873 });
    const response = await signed(h.app, body);
    expect(response.statusCode).toBe(200);
    expect(response.json()).toMatchObject({ status: 'failed' });
    expect(await rowFor(body)).toMatchObject({
      status: 'failed',
      kinds: ['subscriber.updated'],
      event_count: 0,
      error: 'invalid subscriber.updated payload: id: id is missing',
    });
    expect(h.stored).toEqual([]);
  });

  test('ids beyond 2^53 stay exact in the stored body (jsonb from the raw text)', async () => {
    const body =
      '{"event":"subscriber.updated","id":"1261159647788771324","updated_at":"2024-06-11T09:15:42.650913Z","account_id":1261159647788771325}';
    expect((await signed(h.app, body)).json()).toMatchObject({ status: 'stored' });
    const { rows: r } = await db.pool.query<{ id: string; account: string }>(
      `select body->>'id' as id, body->>'account_id' as account from webhook_deliveries`,
    );
    // A JSON.parse round trip would have stored 1261159647788771300 for the account id.
    expect(r[0]).toEqual({ id: '1261159647788771324', account: '1261159647788771325' });
  });

  test('a body jsonb cannot hold as is (\\u0000) is still stored', async () => {
    const body = '{"event":"subscriber.updated","id":"5","email":"a\\u0000b@example.com","updated_at":"2024-06-11T09:15:42Z"}';
    const response = await signed(h.app, body);
    expect(response.statusCode).toBe(200);
    expect(await rowFor(body)).toMatchObject({ status: 'pending', body: { email: 'a\ufffdb@example.com' } });
  });

  test.each([
    ['application/json', 'application/json'],
    ['application/json with charset', 'application/json; charset=utf-8'],
    ['text/plain', 'text/plain'],
    ['form-urlencoded', 'application/x-www-form-urlencoded'],
    ['octet-stream', 'application/octet-stream'],
    ['no content type', undefined],
  ])('content type %s is accepted', async (_name, contentType) => {
    const body = uniqueBody();
    const response = await signed(h.app, body, STATIC_SECRET, { 'content-type': contentType });
    expect(response.statusCode).toBe(200);
    expect(await rowFor(body)).toMatchObject({ status: 'pending' });
  });

  test('the webhook parser is scoped: other routes still parse JSON', async () => {
    const response = await h.app.inject({ method: 'POST', url: '/echo', payload: { a: 1 } });
    expect(response.json()).toEqual({ got: { a: 1 } });
  });

  test('200 concurrent deliveries: every one stored, in fewer statements than requests', async () => {
    const before = h.route.writer.stats().batches;
    const bodies = Array.from({ length: 200 }, () => uniqueBody());
    const answers = await Promise.all(bodies.map((b) => signed(h.app, b)));
    expect(answers.every((a) => a.statusCode === 200)).toBe(true);
    const ids = answers.map((a) => a.json().id as string);
    expect(new Set(ids).size).toBe(200);
    expect(await count()).toBe(200);
    for (const [i, b] of bodies.entries()) expect((await rowFor(b))?.id).toBe(ids[i]);
    expect(h.route.writer.stats().batches - before).toBeLessThan(200);
  });
});

describe('secrets from webhook_endpoints', () => {
  async function addEndpoint(id: string, secret: string, enabled = true) {
    await db.pool.query(
      `insert into webhook_endpoints (id, url, events, secret, enabled) values ($1, 'https://example.com/hook', '{subscriber.created}', $2, $3)`,
      [id, secret, enabled],
    );
  }

  test('a secret that exists only in webhook_endpoints verifies, at once after it is registered', async () => {
    const body = uniqueBody();
    expect((await signed(h.app, body, ENDPOINT_SECRET)).statusCode).toBe(401);
    await addEndpoint('68074372004316503', ENDPOINT_SECRET);
    const response = await signed(h.app, body, ENDPOINT_SECRET);
    expect(response.statusCode).toBe(200);
    expect(await rowFor(body)).toMatchObject({ status: 'pending', endpoint_id: '68074372004316503' });
  });

  test('a disabled endpoint still verifies: the service sends the moment it enables one, before its row says so', async () => {
    await addEndpoint('68074372004316504', 'disabled-endpoint-secret', false);
    const body = uniqueBody();
    expect((await signed(h.app, body, 'disabled-endpoint-secret')).statusCode).toBe(200);
    expect(await rowFor(body)).toMatchObject({ status: 'pending', endpoint_id: '68074372004316504' });
    expect((await signed(h.app, uniqueBody(), 'a-secret-no-endpoint-has')).statusCode).toBe(401);
  });
});

describe('over a real socket', () => {
  let port: number;
  beforeAll(async () => {
    await h.app.listen({ port: 0, host: '127.0.0.1' });
    port = (h.app.server.address() as AddressInfo).port;
  });

  function send(body: Buffer, headers: Record<string, string>, chunked = false): Promise<number> {
    return new Promise((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port, path: PATH, method: 'POST', headers }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      });
      req.on('error', (error) =>
        (error as { code?: string }).code === 'EPIPE' || (error as { code?: string }).code === 'ECONNRESET' ? resolve(413) : reject(error),
      );
      if (chunked) {
        for (let i = 0; i < body.length; i += 16 * 1024) req.write(body.subarray(i, i + 16 * 1024));
        req.end();
      } else req.end(body);
    });
  }

  test('a chunked upload larger than the limit → 413, no row', async () => {
    const body = Buffer.from(JSON.stringify({ event: 'subscriber.created', id: '1', padding: 'y'.repeat(4 * MAX_BODY) }));
    const status = await send(body, { signature: signBody(body, STATIC_SECRET), 'transfer-encoding': 'chunked' }, true);
    expect(status).toBe(413);
    expect(await count()).toBe(0);
  });

  test('a signed delivery without content type → 200', async () => {
    const body = Buffer.from(uniqueBody());
    const status = await send(body, { signature: signBody(body, STATIC_SECRET), 'content-length': String(body.length) });
    expect(status).toBe(200);
    expect(await count()).toBe(1);
  });
});

describe('database unreachable', () => {
  test('→ 503, never 2xx; the endpoint secret cannot be checked either', async () => {
    const doomed = await createTestDatabase();
    const database = openDatabase(doomed.url, { max: 2, connectionTimeoutMillis: 1_000, account: DEFAULT_ACCOUNT });
    const down = await startApp(database.pool);
    try {
      await database.pool.query(
        `insert into webhook_endpoints (id, url, events, secret) values ('1', 'https://example.com/hook', '{subscriber.created}', $1)`,
        [ENDPOINT_SECRET],
      );
      const first = uniqueBody();
      expect((await signed(down.app, first)).statusCode).toBe(200); // works while the database is there

      await doomed.drop(); // drop … with (force): our pool's connections are terminated

      for (const body of [uniqueBody(), uniqueBody(), first]) {
        const response = await signed(down.app, body);
        expect(response.statusCode).toBe(503);
      }
      const concurrent = await Promise.all(Array.from({ length: 20 }, () => signed(down.app, uniqueBody())));
      expect(concurrent.map((r) => r.statusCode)).toEqual(Array(20).fill(503));
      // A signature that matches no cached secret cannot be judged while the endpoints are unreadable.
      expect((await signed(down.app, uniqueBody(), 'some-new-endpoint-secret')).statusCode).toBe(503);
      expect(down.logs.lines.some((l) => l.includes('webhook delivery not stored'))).toBe(true);
    } finally {
      await down.app.close();
      await database.close().catch(() => {});
    }
  });
});

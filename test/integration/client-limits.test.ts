/**
 * The public listener's per-client limits (src/http/client-limits.ts) and the 401 to an unsigned
 * delivery before its body is read (src/webhooks/early-answer.ts), over real sockets: loopback
 * addresses 127.0.0.2 and 127.0.0.3 are two clients.
 */
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import http from 'node:http';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/ground/log.js';
import { createMetrics } from '../../src/ground/metrics.js';
import { buildServer, DEFAULT_LISTENER_LIMITS, type ListenerLimits } from '../../src/http/server.js';
import { registerWebhookRoute, type WebhookRoute } from '../../src/webhooks/receiver.js';
import { LINGER_MS } from '../../src/webhooks/early-answer.js';
import { signBody } from '../../src/webhooks/signature.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { waitFor } from '../helpers/wait.js';

const SECRET = 'client-limits-secret-5d1c9a';
const PATH = '/webhooks';
const GOOD = '127.0.0.2';
const GREEDY = '127.0.0.3';

let db: TestDatabase;
let app: FastifyInstance | undefined;
let route: WebhookRoute;
let port: number;
const sockets: net.Socket[] = [];
const agents: http.Agent[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
});

afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  for (const a of agents.splice(0)) a.destroy();
  await app?.close();
  app = undefined;
});

afterAll(async () => {
  await db.drop();
});

async function start(limits: Partial<ListenerLimits>, trustProxy?: string[]) {
  const { logger } = createLogger({ level: 'silent' });
  const metrics = createMetrics();
  app = buildServer({ logger, readiness: [], metrics, public: true, limits: { ...DEFAULT_LISTENER_LIMITS, ...limits }, trustProxy });
  route = registerWebhookRoute(app, { path: PATH, maxBodyBytes: 10 * 1024 * 1024, secrets: () => [SECRET], pool: db.pool, logger });
  await app.listen({ host: '127.0.0.1', port: 0 });
  port = (app.server.address() as AddressInfo).port;
  return metrics;
}

let sequence = 0;
function delivery(): string {
  sequence += 1;
  return JSON.stringify({
    type: 'subscriber.updated',
    subscriber: {
      id: String(5_000 + sequence),
      email: `c${sequence}@example.org`,
      status: 'active',
      updated_at: '2024-06-01T10:00:00.000000Z',
    },
  });
}

/** A client whose connections leave from `address` (kept alive between requests). */
function client(address: string): http.Agent {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1, localAddress: address });
  agents.push(agent);
  return agent;
}

interface Answer {
  statusCode: number;
  headers: http.IncomingHttpHeaders;
}

/** Posts `body` whole (Content-Length), or in 64 KiB chunks without announcing its length. */
function post(agent: http.Agent, body: string, headers: Record<string, string> = {}, chunked = false): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port, path: PATH, method: 'POST', agent, headers: { 'content-type': 'application/json', ...headers } },
      (res) => {
        res.resume();
        res.on('end', () => resolve({ statusCode: res.statusCode ?? 0, headers: res.headers }));
      },
    );
    req.on('error', reject);
    if (!chunked) return void req.end(body);
    for (let i = 0; i < body.length; i += 64 * 1024) req.write(body.slice(i, i + 64 * 1024));
    req.end();
  });
}

/** The connections the server accepts from now on: their count, and the server's sockets. */
function countConnections(): { count: () => number; sockets: net.Socket[] } {
  const sockets: net.Socket[] = [];
  app?.server.on('connection', (s: net.Socket) => sockets.push(s));
  return { count: () => sockets.length, sockets };
}

const signedPost = (agent: http.Agent, body = delivery()) => post(agent, body, { signature: signBody(body, SECRET) });

/** Opens a raw connection from `address`; resolves once it is open, or closed by the server. */
function open(address: string): Promise<net.Socket> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port, localAddress: address });
    sockets.push(socket);
    socket.on('error', () => {});
    socket.once('connect', () => resolve(socket));
    socket.once('close', () => resolve(socket));
  });
}

const alive = (s: net.Socket) => !s.destroyed && !s.readableEnded;

describe('connections per client', () => {
  it('a client holding every socket it can open keeps only its share; another client still delivers', async () => {
    const metrics = await start({ maxConnectionsPerClient: 5 });
    const greedy = await Promise.all(Array.from({ length: 40 }, () => open(GREEDY)));
    // The server closes the ones beyond 5 as it accepts them.
    await waitFor('the greedy client to keep 5 sockets', () => greedy.filter(alive).length === 5, 10_000);
    expect(greedy.filter(alive)).toHaveLength(5);

    const agent = client(GOOD);
    for (let i = 0; i < 3; i++) expect((await signedPost(agent)).statusCode).toBe(200);
    expect(greedy.filter(alive)).toHaveLength(5);
    expect(
      (await metrics.registry.getSingleMetricAsString('subscriber_mirror_http_client_refusals_total')).match(
        /limit="connections"} (\d+)/,
      )?.[1],
    ).toBe('35');
  });

  it('a peer TRUST_PROXY trusts carries many clients: only HTTP_MAX_CONNECTIONS applies to it', async () => {
    await start({ maxConnectionsPerClient: 2 }, [GREEDY]);
    const proxied = await Promise.all(Array.from({ length: 6 }, () => open(GREEDY)));
    const others = await Promise.all(Array.from({ length: 6 }, () => open(GOOD)));
    await waitFor('the other client to keep 2 sockets', () => others.filter(alive).length === 2, 10_000);
    expect(proxied.filter(alive)).toHaveLength(6);
  });
});

describe('requests per client', () => {
  it('a flood of unsigned requests is answered 429 past the rate; signed deliveries give their token back', async () => {
    await start({ maxConnectionsPerClient: 4, requestRatePerClient: 4 });
    const flooder = client(GREEDY);
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) statuses.push((await post(flooder, delivery())).statusCode);
    expect(statuses.slice(0, 4)).toEqual([401, 401, 401, 401]);
    expect(statuses.filter((s) => s === 429).length).toBeGreaterThanOrEqual(6);
    const refused = await post(flooder, delivery());
    expect(refused.statusCode).toBe(429);
    expect(Number(refused.headers['retry-after'])).toBeGreaterThanOrEqual(1);

    // Another client is not touched, and valid deliveries alone never run out: 12 in a row at a rate of 4.
    const good = client(GOOD);
    const delivered: number[] = [];
    for (let i = 0; i < 12; i++) delivered.push((await signedPost(good)).statusCode);
    expect(delivered).toEqual(Array.from({ length: 12 }, () => 200));
  });

  it('behind a trusted proxy the forwarded client address is the one limited', async () => {
    await start({ maxConnectionsPerClient: 4, requestRatePerClient: 4 }, [GREEDY]);
    const proxy = client(GREEDY);
    const from = (ip: string) => post(proxy, delivery(), { 'x-forwarded-for': ip });
    const flood: number[] = [];
    for (let i = 0; i < 8; i++) flood.push((await from('198.51.100.7')).statusCode);
    expect(flood.slice(4)).toEqual([429, 429, 429, 429]);
    expect((await from('198.51.100.8')).statusCode).toBe(401);
  });
});

describe('unsigned bodies', () => {
  it('a delivery without a Signature header is answered 401 before its body is read, and its connection closed once the linger passes', async () => {
    await start({});
    const socket = await open(GOOD);
    let answer = '';
    socket.on('data', (d: Buffer) => (answer += d.toString()));
    // 8 MiB announced (under WEBHOOK_MAX_BODY: over it, the 413 comes first), 1 KiB sent: the answer cannot wait for the rest.
    socket.write(`POST ${PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${8 * 1024 * 1024}\r\n\r\n`);
    socket.write(Buffer.alloc(1024, 'a'));
    await waitFor('the answer headers', () => answer.includes('\r\n\r\n'), 10_000);
    const answered = Date.now();
    expect(answer.split('\r\n')[0]).toBe('HTTP/1.1 401 Unauthorized');
    expect(route.bodies.used()).toBe(0);
    // Still open while the rest of the body may come (discarded), then closed: the client never sends it.
    socket.write(Buffer.alloc(64 * 1024, 'a'));
    expect(socket.destroyed || socket.readableEnded).toBe(false);
    await waitFor('the server to close the connection', () => socket.destroyed || socket.readableEnded, 10_000);
    expect(Date.now() - answered).toBeGreaterThanOrEqual(LINGER_MS - 100);
    expect(route.bodies.used()).toBe(0);
  });

  it('a small unsigned body is drained after the 401 and the connection serves the next request', async () => {
    await start({});
    const agent = client(GOOD);
    const unsigned = await post(agent, delivery());
    expect(unsigned.statusCode).toBe(401);
    expect(unsigned.headers.connection).not.toBe('close');
    expect((await signedPost(agent)).statusCode).toBe(200);
  });

  it('a kept-alive connection answered early again and again holds no listener per answer', async () => {
    await start({});
    const connections = countConnections();
    const agent = client(GOOD);
    // Each 401 goes out before its body is read; the body then ends within the linger.
    for (let i = 0; i < 30; i++) expect((await post(agent, delivery())).statusCode).toBe(401);
    expect(connections.count()).toBe(1);
    // Node's own listeners only: before, each early answer left one for good (31 here).
    expect(connections.sockets[0]!.listenerCount('close')).toBeLessThan(5);
    expect((await signedPost(agent)).statusCode).toBe(200);
  });

  it('a client sending the whole large body still reads the 401, and its connection serves the next request', async () => {
    await start({});
    const connections = countConnections();
    const agent = client(GOOD);
    const r = await post(agent, 'x'.repeat(5 * 1024 * 1024));
    expect(r.statusCode).toBe(401);
    expect((await signedPost(agent)).statusCode).toBe(200);
    expect(connections.count()).toBe(1);
  });
});

// A server that closes while the client still sends makes the client's kernel reset the connection,
// which can discard the answer unread: the bad-input fault suite saw `write EPIPE` instead of a 413.
describe('answers before the whole body is read', () => {
  const tooLarge = 'x'.repeat(10 * 1024 * 1024 + 1);

  it('a body announced over WEBHOOK_MAX_BODY and sent whole: 413, the rest discarded, the connection kept', async () => {
    await start({});
    const connections = countConnections();
    const agent = client(GOOD);
    for (let i = 0; i < 3; i++) {
      const r = await post(agent, tooLarge, { signature: signBody(tooLarge, SECRET) });
      expect(r.statusCode).toBe(413);
      expect(r.headers.connection).not.toBe('close');
    }
    expect((await signedPost(agent)).statusCode).toBe(200);
    expect(connections.count()).toBe(1);
    expect(route.bodies.used()).toBe(0);
  });

  it('an unannounced body that grows past WEBHOOK_MAX_BODY while read: 413, the rest discarded, the connection kept', async () => {
    await start({});
    const connections = countConnections();
    const agent = client(GOOD);
    const r = await post(agent, tooLarge, { signature: signBody(tooLarge, SECRET) }, true);
    expect(r.statusCode).toBe(413);
    expect(route.bodies.used()).toBe(0);
    expect((await signedPost(agent)).statusCode).toBe(200);
    expect(connections.count()).toBe(1);
  });
});

/**
 * Webhooks end to end: the simulator's delivery engine (signed deliveries, batching, retries at
 * 10/100/1000 s × timeScale) → the receiver on a real port → the inbox → queue "events" → the
 * consumer → the mirror. After the simulator settles and the consumer drains, the mirror equals the
 * simulator's world for every subscriber the events touched: columns, memberships, activity.
 *
 * Faults: the receiver fails 20% of first attempts before storing (the service retries) and a few
 * after storing (the retry is a duplicate, invariant 5); and Postgres goes away behind a TCP proxy
 * while deliveries arrive: every answer is then 503, never 2xx (invariant 1), and the service's
 * retries land everything once it is back.
 */
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, test } from 'vitest';
import { openDatabase, type Database } from '../../src/db/client.js';
import { buildServer } from '../../src/http/server.js';
import { createLogger, type Logger } from '../../src/log.js';
import { erasePersonalData, normalizeWebhookSubscriber, SUBSCRIBER_FIELDS, type SubscriberValues } from '../../src/mirror/normalize.js';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { ALL_EVENT_KINDS, BATCH_ONLY_KINDS, type EventKind, type WebhookSubscriber } from '../../src/simulator/kinds.js';
import { mulberry32 } from '../../src/simulator/prng.js';
import type { World } from '../../src/simulator/world.js';
import { createDeliveryConsumer, type DeliveryConsumer } from '../../src/webhooks/consumer.js';
import { registerWebhookRoute, type ReceiverOutcome } from '../../src/webhooks/receiver.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { diffSubscribers, readMirroredSubscribers } from '../helpers/mirror.js';
import { deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';

// ---------------------------------------------------------------------------------------------
// A TCP proxy in front of Postgres: stopping it refuses and cuts every connection, like an outage.

interface Proxy {
  port: number;
  stop(): Promise<void>;
  start(): Promise<void>;
  close(): Promise<void>;
}

async function startProxy(targetHost: string, targetPort: number): Promise<Proxy> {
  const sockets = new Set<net.Socket>();
  let server: net.Server | null = null;
  let port = 0;
  const listen = () =>
    new Promise<void>((resolve, reject) => {
      const s = net.createServer((client) => {
        const upstream = net.connect(targetPort, targetHost);
        const close = () => {
          client.destroy();
          upstream.destroy();
          sockets.delete(client);
          sockets.delete(upstream);
        };
        sockets.add(client).add(upstream);
        for (const socket of [client, upstream]) socket.on('error', close).on('close', close);
        client.pipe(upstream).pipe(client);
      });
      s.once('error', reject);
      s.listen(port, '127.0.0.1', () => {
        port = (s.address() as AddressInfo).port;
        server = s;
        resolve();
      });
    });
  const stop = async () => {
    const s = server;
    server = null;
    for (const socket of sockets) socket.destroy();
    sockets.clear();
    if (s) await new Promise<void>((resolve) => s.close(() => resolve()));
  };
  await listen();
  return { get port() { return port; }, stop, start: listen, close: stop };
}

// ---------------------------------------------------------------------------------------------
// Harness: simulator → receiver → consumer → mirror

interface HarnessOptions {
  seed: number;
  /** Share of first attempts answered 500 before anything is stored. */
  failBeforeStore?: number;
  /** Share of first attempts stored, then answered 500 (the service's retry is a duplicate). */
  failAfterStore?: number;
  /** Put the service's Postgres behind a stoppable proxy. */
  proxy?: boolean;
  retryDelaysMs?: readonly number[];
}

interface Harness {
  sim: Simulator;
  db: TestDatabase;
  proxy: Proxy | null;
  outcomes: Map<ReceiverOutcome | 'injected-before' | 'injected-after', number>;
  close(): Promise<void>;
}

let harness: Harness | null = null;

afterEach(async () => {
  await harness?.close();
  harness = null;
});

function quietLogger(): Logger {
  return createLogger({ level: 'fatal', destination: new Writable({ write: (_c, _e, cb) => cb() }) }).logger;
}

async function startHarness(options: HarnessOptions): Promise<Harness> {
  const db = await createTestDatabase();
  const target = new URL(db.url);
  const proxy = options.proxy ? await startProxy(target.hostname, Number(target.port || 5432)) : null;
  const serviceUrl = new URL(db.url);
  if (proxy) {
    serviceUrl.hostname = '127.0.0.1';
    serviceUrl.port = String(proxy.port);
  }
  // Receiver and consumer share the service's pool (through the proxy when there is one).
  const service: Database = openDatabase(serviceUrl.toString(), { max: 10, connectionTimeoutMillis: 2_000 });
  const prefix = uniquePrefix('e2e');
  const logger = quietLogger();
  const consumer: DeliveryConsumer = createDeliveryConsumer({
    pool: service.pool,
    connection: { url: redisUrl(), maxRetriesPerRequest: null },
    prefix,
    logger,
    concurrency: 4,
    sweepEveryMs: 500,
    pendingGraceMs: 500,
    retry: { attempts: 10, backoffMs: 100 },
  });

  const outcomes: Harness['outcomes'] = new Map();
  const count = (key: ReceiverOutcome | 'injected-before' | 'injected-after') => outcomes.set(key, (outcomes.get(key) ?? 0) + 1);
  const rng = mulberry32(options.seed);
  const seen = new Set<string>();
  const failAfter = new WeakSet<object>();
  const secrets: string[] = [];
  const app: FastifyInstance = buildServer({ logger, readiness: [] });
  // Faults decided on a delivery's first attempt only (keyed by its signature), as a flaky receiver.
  app.addHook('onRequest', async (request, reply) => {
    const signature = String(request.headers.signature ?? '');
    if (request.url !== '/webhooks' || seen.has(signature)) return;
    seen.add(signature);
    const roll = rng();
    if (roll < (options.failBeforeStore ?? 0)) {
      count('injected-before');
      return reply.code(500).send({ error: 'injected' });
    }
    if (roll < (options.failBeforeStore ?? 0) + (options.failAfterStore ?? 0)) failAfter.add(request);
  });
  app.addHook('onSend', async (request, reply, payload) => {
    if (failAfter.has(request) && reply.statusCode === 200) {
      count('injected-after');
      reply.code(500);
    }
    return payload;
  });
  registerWebhookRoute(app, {
    path: '/webhooks',
    maxBodyBytes: 4 * 1024 * 1024,
    secrets: () => secrets,
    pool: service.pool,
    logger,
    onStored: (id) => consumer.enqueue(id),
    onOutcome: (outcome) => count(outcome),
    inbox: { maxWaitMs: 1 },
    secretsMissRefreshMs: 60_000,
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const receiverUrl = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/webhooks`;

  const sim = await startSimulator({
    subscribers: 0,
    groups: 3,
    largeIds: true,
    rateLimit: false,
    seed: options.seed,
    timeScale: 0.001,
    ...(options.retryDelaysMs ? { retryDelaysMs: options.retryDelaysMs } : {}),
  });
  // One plain webhook for the kinds it may take, one batchable for every kind: each event arrives
  // twice, in different bodies, and must be applied once.
  const plain = sim.webhooks.register({
    name: 'plain',
    url: receiverUrl,
    events: ALL_EVENT_KINDS.filter((k) => !BATCH_ONLY_KINDS.includes(k)),
    batchable: false,
  });
  const batched = sim.webhooks.register({ name: 'batched', url: receiverUrl, events: ALL_EVENT_KINDS, batchable: true });
  secrets.push(plain.secret, batched.secret);

  return {
    sim,
    db,
    proxy,
    outcomes,
    async close() {
      await sim.close();
      await app.close();
      await consumer.close(5_000);
      await service.close();
      await proxy?.close();
      await deletePrefix(prefix);
      await db.drop();
    },
  };
}

/** Waits for the service to deliver everything, then for the consumer to apply every stored delivery. */
async function drain(h: Harness): Promise<void> {
  await h.sim.deliveries.settle(30_000);
  await waitFor(async () => {
    const { rows } = await h.db.pool.query<{ n: number }>(`select count(*)::int as n from webhook_deliveries where status = 'pending'`);
    return rows[0]?.n === 0 ? true : undefined;
  }, 'pending deliveries to be applied');
  const failed = await h.db.pool.query<{ error: string }>(`select error from webhook_deliveries where status = 'failed' limit 5`);
  expect(failed.rows).toEqual([]);
  const { rows } = await h.db.pool.query<{ status: string; n: number }>(
    'select status, count(*)::int as n from webhook_deliveries group by status order by status',
  );
  expect(rows).toEqual([{ status: 'applied', n: expect.any(Number) as number }]);
}

async function waitFor<T>(probe: () => Promise<T | undefined>, what: string, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// ---------------------------------------------------------------------------------------------
// Mutations

type Mutation = (world: World, id: string, rng: () => number) => unknown;

/** Every mutation of the world, so every kind of spec §6.1 is emitted. */
const MUTATIONS: Record<string, Mutation> = {
  updateFields: (w, id, rng) => w.updateFields(id, { city: `City ${Math.floor(rng() * 1000)}`, last_name: `L${Math.floor(rng() * 99)}` }),
  changeEmail: (w, id, rng) => w.updateFields(id, { email: `moved.${Math.floor(rng() * 1e6)}@example.com` }),
  unsubscribe: (w, id) => w.unsubscribe(id),
  bounce: (w, id) => w.bounce(id),
  markJunk: (w, id) => w.markJunk(id),
  markUnconfirmed: (w, id) => w.markUnconfirmed(id),
  activate: (w, id) => w.activate(id),
  addToGroup: (w, id, rng) => w.addToGroup(id, pick(w.groupIds(), rng)),
  removeFromGroup: (w, id, rng) => w.removeFromGroup(id, pick(w.groupIds(), rng)),
  triggerAutomation: (w, id, rng) => w.triggerAutomation(id, pick(w.automations(), rng).id),
  completeAutomation: (w, id, rng) => w.completeAutomation(id, pick(w.automations(), rng).id),
  open: (w, id) => w.open(id),
  click: (w, id, rng) => w.click(id, { url: `https://example.com/p/${Math.floor(rng() * 5)}` }),
  delete: (w, id) => w.deleteSubscriber(id),
  forget: (w, id) => w.forget(id),
};

function pick<T>(list: readonly T[], rng: () => number): T {
  return list[Math.floor(rng() * list.length)] as T;
}

function createSubscribers(world: World, n: number, rng: () => number): string[] {
  const groups = world.groupIds();
  return Array.from({ length: n }, (_, i) =>
    world.createSubscriber({
      fields: { name: `Person ${i}` },
      groups: groups.filter(() => rng() < 0.5),
      status: i % 7 === 0 ? 'unconfirmed' : 'active',
    }),
  );
}

/** `rounds` random mutations (each kind once first), yielding now and then so deliveries interleave. */
async function mutate(world: World, ids: readonly string[], rounds: number, rng: () => number): Promise<void> {
  const names = Object.keys(MUTATIONS);
  for (let i = 0; i < rounds; i++) {
    const name = i < names.length ? (names[i] as string) : pick(names, rng);
    // Deletions are rarer, so most subscribers stay alive for later mutations.
    if ((name === 'delete' || name === 'forget') && i >= names.length && rng() < 0.8) continue;
    const id = pick(ids, rng);
    try {
      (MUTATIONS[name] as Mutation)(world, id, rng);
    } catch (error) {
      if (!(error instanceof RangeError)) throw error; // a deleted subscriber: skip
    }
    if (i % 25 === 0) await sleep(5);
  }
}

// ---------------------------------------------------------------------------------------------
// The mirror against the world

const TS = (col: string) => `to_char(${col} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

function expectedValues(subscriber: WebhookSubscriber): SubscriberValues {
  const values = normalizeWebhookSubscriber(subscriber as unknown as Record<string, unknown>).values;
  // A forgotten subscriber keeps its id and timestamps; its personal data is erased.
  return values.forgetAt ? erasePersonalData(values) : values;
}

async function expectMirrorEqualsWorld(h: Harness): Promise<{ touched: number; bumpedBySend: number }> {
  const world = h.sim.world;
  const events = world.events;
  // The last version of each subscriber that an event carried.
  const lastCarried = new Map<string, WebhookSubscriber>();
  for (const e of events) if (e.subscriberId && e.subscriber) lastCarried.set(e.subscriberId, e.subscriber);

  // Against the world itself, except for subscribers a later campaign.sent bumped: sending changes
  // `sent` and `updated_at` of every recipient with no event naming them (only polling sees it), so
  // for those the mirror must equal the last version an event carried.
  const expected = new Map<string, SubscriberValues>();
  let bumpedBySend = 0;
  for (const [id, carried] of lastCarried) {
    const now = world.renderWebhook(id);
    const bumped = now.updated_at !== carried.updated_at;
    if (bumped) bumpedBySend++;
    expected.set(id, expectedValues(bumped ? carried : now));
  }
  const mirrored = await readMirroredSubscribers(h.db.pool);
  expect(diffSubscribers(expected, mirrored, SUBSCRIBER_FIELDS, 20)).toEqual([]);
  expect([...mirrored.keys()].sort()).toEqual([...expected.keys()].sort());

  // Current memberships: what the legacy API lists for these subscribers (deleted ones: nothing).
  const wantMembers: string[] = [];
  for (const id of lastCarried.keys()) {
    for (const g of world.groupIds()) if (world.membership(g, id)) wantMembers.push(`${g}/${id}`);
  }
  const { rows: members } = await h.db.pool.query<{ k: string }>(
    `select group_id || '/' || subscriber_id as k from group_members where removed_at is null`,
  );
  expect(members.map((r) => r.k).sort()).toEqual(wantMembers.sort());

  // One activity row per event that concerns a subscriber, whatever the duplicates.
  const wantActivity = new Set<string>();
  for (const e of events) {
    if (!e.subscriber) continue;
    const key = [e.kind, e.subscriberId, e.group?.id, e.automation?.id, e.campaign?.id, e.linkUrl, e.subscriber.updated_at];
    wantActivity.add(key.filter((v) => v !== undefined && v !== null).join('|'));
  }
  const { rows: activity } = await h.db.pool.query<{ k: string }>(
    `select concat_ws('|', kind, subscriber_id, group_id, automation_id, campaign_id, link_url, ${TS('occurred_at')}) as k
       from subscriber_activity`,
  );
  expect(activity.map((r) => r.k).sort()).toEqual([...wantActivity].sort());

  // Reference rows: groups, automations and campaigns named by events, sent campaigns with sent_at.
  const { rows: campaigns } = await h.db.pool.query<{ id: string; name: string; sent_at: string | null }>(
    `select id, name, ${TS('sent_at')} as sent_at from campaigns`,
  );
  const sentCampaigns = events.filter((e) => e.kind === 'campaign.sent').map((e) => e.campaign);
  for (const c of sentCampaigns) expect(campaigns).toContainEqual({ id: c?.id, name: c?.name, sent_at: c?.date });
  const { rows: groups } = await h.db.pool.query<{ id: string; name: string }>('select id, name from groups order by id');
  const namedGroups = new Map(events.filter((e) => e.group).map((e) => [e.group?.id, e.group?.name]));
  expect(groups).toEqual([...namedGroups].map(([id, name]) => ({ id, name })).sort((a, b) => ((a.id ?? '') < (b.id ?? '') ? -1 : 1)));

  return { touched: lastCarried.size, bumpedBySend };
}

function kindsEmitted(world: World): Set<EventKind> {
  return new Set(world.events.map((e) => e.kind));
}

// ---------------------------------------------------------------------------------------------

describe('simulator → receiver → consumer → mirror', () => {
  test('every kind, with churn, flaky answers and duplicates: the mirror equals the world', async () => {
    harness = await startHarness({ seed: 11, failBeforeStore: 0.2, failAfterStore: 0.05 });
    const { sim } = harness;
    const rng = mulberry32(99);
    const ids = createSubscribers(sim.world, 40, rng);
    sim.world.sendCampaign({ name: 'Early campaign' });
    await mutate(sim.world, ids, 300, rng);
    sim.world.sendCampaign({ groupIds: sim.world.groupIds().slice(0, 1) });
    await mutate(sim.world, ids, 100, rng);
    sim.churn.setRate(300);
    await sleep(1_500);
    sim.churn.setRate(0);

    await drain(harness);
    expect([...kindsEmitted(sim.world)].sort()).toEqual([...ALL_EVENT_KINDS].sort());
    const { touched } = await expectMirrorEqualsWorld(harness);
    expect(touched).toBeGreaterThan(50);
    // The faults did happen, and the service's retries got through them.
    expect(harness.outcomes.get('injected-before')).toBeGreaterThan(10);
    expect(harness.outcomes.get('injected-after')).toBeGreaterThan(0);
    expect(harness.outcomes.get('duplicate')).toBeGreaterThan(0);
    expect(sim.deliveries.attempts.filter((a) => a.gaveUp)).toEqual([]);
  });

  test('Postgres down while deliveries arrive: 503, never 2xx; once back, retries land everything', async () => {
    harness = await startHarness({ seed: 12, proxy: true, retryDelaysMs: [300, 1_500, 5_000] });
    const { sim, proxy } = harness;
    const rng = mulberry32(7);
    const ids = createSubscribers(sim.world, 25, rng);
    await mutate(sim.world, ids, 60, rng);
    await drain(harness);

    await proxy?.stop();
    const outageStart = performance.timeOrigin + performance.now();
    await mutate(sim.world, ids, 80, rng);
    sim.deliveries.flush();
    await sleep(1_000);
    const outageEnd = performance.timeOrigin + performance.now();
    const during = sim.deliveries.attempts.filter((a) => a.startedAt >= outageStart && a.finishedAt <= outageEnd);
    await proxy?.start();

    expect(during.length).toBeGreaterThan(20);
    expect(during.filter((a) => a.ok)).toEqual([]);
    expect(new Set(during.map((a) => a.status))).toEqual(new Set([503]));

    await drain(harness);
    await expectMirrorEqualsWorld(harness);
    expect(sim.deliveries.attempts.filter((a) => a.gaveUp)).toEqual([]);
    // Every delivery first refused during the outage was stored by a retry and applied.
    const refused = new Set(during.map((a) => a.deliveryId));
    const landed = new Set(sim.deliveries.attempts.filter((a) => a.ok && refused.has(a.deliveryId)).map((a) => a.deliveryId));
    expect(landed).toEqual(refused);
  });
});

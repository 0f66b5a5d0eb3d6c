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
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, test } from 'vitest';
import { DEFAULT_ACCOUNT, openDatabase, type Database } from '../../src/db/client.js';
import { buildServer } from '../../src/http/server.js';
import { createLogger } from '../../src/ground/log.js';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { ALL_EVENT_KINDS, BATCH_ONLY_KINDS, type EventKind } from '../../src/simulator/kinds.js';
import { mulberry32 } from '../../src/simulator/prng.js';
import type { World } from '../../src/simulator/world.js';
import { createDeliveryConsumer, type DeliveryConsumer } from '../../src/webhooks/consumer.js';
import { registerWebhookRoute, type ReceiverOutcome } from '../../src/webhooks/receiver.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { hostPort, startTcpProxy, type TcpProxy } from '../helpers/proxy.js';
import { compareWebhookEffects, iso } from '../helpers/mirror.js';
import { createSubscribers, mutate } from '../helpers/mutations.js';
import { sleep, waitFor } from '../helpers/wait.js';

// ---------------------------------------------------------------------------------------------
// Harness: simulator → receiver → consumer → mirror

interface HarnessOptions {
  seed: number;
  /** Share of first attempts answered 500 before anything is stored. */
  failBeforeStore?: number;
  /** Share of first attempts stored, then answered 500 (the service's retry is a duplicate). */
  failAfterStore?: number;
  /** Put the service's Postgres behind a proxy that can cut it off. */
  proxy?: boolean;
  retryDelaysMs?: readonly number[];
}

interface Harness {
  sim: Simulator;
  db: TestDatabase;
  proxy: TcpProxy | null;
  outcomes: Map<ReceiverOutcome | 'injected-before' | 'injected-after', number>;
  close(): Promise<void>;
}

let harness: Harness | null = null;

afterEach(async () => {
  await harness?.close();
  harness = null;
});

async function startHarness(options: HarnessOptions): Promise<Harness> {
  const db = await createTestDatabase();
  const proxy = options.proxy ? await startTcpProxy(hostPort(db.url, 5432)) : null;
  // Receiver and consumer share the service's pool (through the proxy when there is one).
  const service: Database = openDatabase(proxy ? proxy.via(db.url) : db.url, {
    max: 10,
    connectionTimeoutMillis: 2_000,
    account: DEFAULT_ACCOUNT,
  });
  const logger = createLogger({ level: 'silent' }).logger;
  const consumer: DeliveryConsumer = createDeliveryConsumer({
    pool: service.pool,
    logger,
    pollEveryMs: 500,
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
      await db.drop();
    },
  };
}

/** Waits for the service to deliver everything, then for the consumer to apply every stored delivery. */
async function drain(h: Harness): Promise<void> {
  await h.sim.deliveries.settle(30_000);
  await waitFor(
    'pending deliveries to be applied',
    async () => {
      const { rows } = await h.db.pool.query<{ n: number }>(`select count(*)::int as n from webhook_deliveries where status = 'pending'`);
      return rows[0]?.n === 0 ? true : undefined;
    },
    30_000,
    20,
  );
  const failed = await h.db.pool.query<{ error: string }>(`select error from webhook_deliveries where status = 'failed' limit 5`);
  expect(failed.rows).toEqual([]);
  const { rows } = await h.db.pool.query<{ status: string; n: number }>(
    'select status, count(*)::int as n from webhook_deliveries group by status order by status',
  );
  expect(rows).toEqual([{ status: 'applied', n: expect.any(Number) as number }]);
}

// ---------------------------------------------------------------------------------------------
// The mirror against the world

async function expectMirrorEqualsWorld(h: Harness): Promise<{ touched: number }> {
  const world = h.sim.world;
  const events = world.events;
  // Subscribers (missing, extra, values), current memberships, activity (duplicated, missing, extra).
  const c = await compareWebhookEffects(h.db.pool, world);
  expect(c.problems).toEqual([]);

  // Reference rows: groups, automations and campaigns named by events, sent campaigns with sent_at.
  const { rows: campaigns } = await h.db.pool.query<{ id: string; name: string; sent_at: string | null }>(
    `select id, name, ${iso('sent_at')} as sent_at from campaigns`,
  );
  const sentCampaigns = events.filter((e) => e.kind === 'campaign.sent').map((e) => e.campaign);
  for (const sent of sentCampaigns) expect(campaigns).toContainEqual({ id: sent?.id, name: sent?.name, sent_at: sent?.date });
  const { rows: groups } = await h.db.pool.query<{ id: string; name: string }>('select id, name from groups order by id');
  const namedGroups = new Map(events.filter((e) => e.group).map((e) => [e.group?.id, e.group?.name]));
  expect(groups).toEqual([...namedGroups].map(([id, name]) => ({ id, name })).sort((a, b) => ((a.id ?? '') < (b.id ?? '') ? -1 : 1)));

  return { touched: c.touched };
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

    await proxy?.cut();
    const outageStart = performance.timeOrigin + performance.now();
    await mutate(sim.world, ids, 80, rng);
    sim.deliveries.flush();
    // Until more than 20 attempts have ended in the outage (a loaded machine makes fewer per second).
    const attemptsSince = () => sim.deliveries.attempts.filter((a) => a.startedAt >= outageStart && a.finishedAt > 0);
    await waitFor('20 delivery attempts during the outage', () => attemptsSince().length > 20, 30_000);
    const outageEnd = performance.timeOrigin + performance.now();
    const during = sim.deliveries.attempts.filter((a) => a.startedAt >= outageStart && a.finishedAt <= outageEnd);
    await proxy?.restore();

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

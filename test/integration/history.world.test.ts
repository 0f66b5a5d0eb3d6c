/**
 * History against the simulator's recorded world (issue #13 "Must show"): the simulator records
 * every change with its time (`recordChanges`), a run with churn (rename, field change, unsubscribe,
 * resubscribe, group leave and re-join, delete, opens, automations) goes through one path into the
 * mirror, and `subscribers_as_of(t)` / `group_members_as_of(t)` must equal the world at 20 instants
 * spread over the run, read after the run is over (so they come from history, not current state).
 *
 * - Webhooks delivering every change (a plain and a batchable webhook: each event arrives twice, in
 *   different bodies, and retries may reorder them): equal at every instant, to the microsecond.
 * - Webhooks off, poll only: each instant is taken after an incremental and a full pass that follow
 *   the phase's last change, and the next phase starts in a later second (legacy times have whole
 *   seconds). Equal for everything the poll can know: content at second precision; a deletion is
 *   seen as the end of the memberships (the legacy API stops listing the subscriber), not as a version.
 */
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, test } from 'vitest';
import { DEFAULT_ACCOUNT, openDatabase, type Database } from '../../src/db/client.js';
import type { SubscriberType } from '../../src/db/schema.js';
import { buildServer } from '../../src/http/server.js';
import { createLogger } from '../../src/ground/log.js';
import { isoMicros, startSimulator, type Simulator, type SubscriberView, type World } from '../../src/simulator/index.js';
import { ALL_EVENT_KINDS, BATCH_ONLY_KINDS } from '../../src/simulator/kinds.js';
import { mulberry32 } from '../../src/simulator/prng.js';
import { runPass, type PassDeps } from '../../src/sync/legacy-pass.js';
import { createLegacyClient } from '../../src/upstream/legacy/client.js';
import { createDeliveryConsumer, type DeliveryConsumer } from '../../src/webhooks/consumer.js';
import { registerWebhookRoute } from '../../src/webhooks/receiver.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { iso, stableJson } from '../helpers/mirror.js';
import { sleep, waitFor } from '../helpers/wait.js';

const { logger } = createLogger({ level: 'silent' });
const ALL_TYPES: SubscriberType[] = ['active', 'unsubscribed', 'bounced', 'junk', 'unconfirmed'];
const INSTANTS = 20;
const SUBSCRIBERS = 30;

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

// ---------------------------------------------------------------------------------------------
// Churn

type ChurnKind = 'rename' | 'fieldChange' | 'unsubscribe' | 'resubscribe' | 'leaveGroup' | 'rejoinGroup' | 'delete' | 'open' | 'automation';

/** One phase of churn: a few mutations of live subscribers. Returns the kinds that changed something. */
function churnPhase(world: World, rng: () => number, phase: number): ChurnKind[] {
  const done: ChurnKind[] = [];
  const groups = world.groupIds();
  const live = () => world.randomLiveId(rng) as string;
  const pick = <T>(list: readonly T[]) => list[Math.floor(rng() * list.length)] as T;
  const mutations: Record<ChurnKind, () => boolean> = {
    rename: () => world.updateFields(live(), { email: `renamed.${phase}.${Math.floor(rng() * 1e6)}@example.com` }).length > 0,
    fieldChange: () =>
      world.updateFields(live(), { city: `City ${phase}-${Math.floor(rng() * 100)}`, name: `Name ${Math.floor(rng() * 100)}` }).length > 0,
    unsubscribe: () => world.unsubscribe(live()).length > 0,
    resubscribe: () => {
      const id = [...world.ids()].find((x) => world.subscriber(x)?.status === 'unsubscribed');
      return id !== undefined && world.activate(id).length > 0;
    },
    leaveGroup: () => {
      const id = live();
      const group = world.subscriber(id)?.groups[0];
      return group !== undefined && world.removeFromGroup(id, group).length > 0;
    },
    rejoinGroup: () => {
      const id = live();
      const missing = groups.filter((g) => !world.subscriber(id)?.groups.includes(g));
      return missing.length > 0 && world.addToGroup(id, pick(missing)).length > 0;
    },
    // Every fourth phase deletes one subscriber, so most stay alive for the rest of the run.
    delete: () => phase % 4 === 3 && world.deleteSubscriber(live()).length > 0,
    open: () => world.open(live()).length > 0,
    automation: () => world.triggerAutomation(live()).length > 0,
  };
  for (const kind of Object.keys(mutations) as ChurnKind[]) {
    if (rng() < 0.8 && mutations[kind]()) done.push(kind);
  }
  // The same subscriber changed twice in one phase: only the last state is visible to a poll.
  const twice = live();
  world.updateFields(twice, { company: `Co ${phase}a` });
  world.updateFields(twice, { company: `Co ${phase}b` });
  done.push('fieldChange');
  return done;
}

function createSubscribers(world: World, rng: () => number): void {
  const groups = world.groupIds();
  for (let i = 0; i < SUBSCRIBERS; i++) {
    world.createSubscriber({
      email: `person.${i}@example.com`,
      fields: { name: `Person ${i}`, city: 'Vilnius' },
      groups: groups.filter(() => rng() < 0.6),
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Comparing history with the world

interface Row {
  id: string;
  email: string | null;
  name: string | null;
  status: string | null;
  sent: number | null;
  opens_count: number | null;
  clicks_count: number | null;
  fields: Record<string, string | null>;
  unsubscribed_at: string | null;
  updated_at: string | null;
  deleted_at: string | null;
}

type Precision = 'micros' | 'seconds';

const toSecond = (value: string | null) => (value === null ? null : `${value.slice(0, 19)}Z`);

function expectedRow(view: SubscriberView, precision: Precision): Row {
  const time = (us: number | null) => (us === null ? null : precision === 'micros' ? isoMicros(us) : toSecond(isoMicros(us)));
  return {
    id: view.id,
    email: view.email,
    name: view.fields.name ?? null,
    status: view.status,
    sent: view.sent,
    opens_count: view.opensCount,
    clicks_count: view.clicksCount,
    fields: { ...view.fields },
    unsubscribed_at: time(view.unsubscribedAtUs),
    updated_at: time(view.updatedAtUs),
    // The poll path cannot see deletions (deleted subscribers are not listed): compared on webhooks only.
    deleted_at: precision === 'micros' ? time(view.deletedAtUs) : null,
  };
}

async function subscribersAsOf(pool: Database['pool'], atUs: number, precision: Precision): Promise<Map<string, Row>> {
  const { rows } = await pool.query<Row>(
    `select id, email, name, status, sent, opens_count, clicks_count, fields,
            ${iso('unsubscribed_at')} as unsubscribed_at, ${iso('updated_at')} as updated_at, ${iso('deleted_at')} as deleted_at
       from subscribers_as_of($1)`,
    [isoMicros(atUs)],
  );
  return new Map(
    rows.map((r) => [
      r.id,
      precision === 'micros'
        ? r
        : { ...r, unsubscribed_at: toSecond(r.unsubscribed_at), updated_at: toSecond(r.updated_at), deleted_at: null },
    ]),
  );
}

async function membersAsOf(pool: Database['pool'], atUs: number): Promise<string[]> {
  const { rows } = await pool.query<{ k: string }>(
    `select group_id || '/' || subscriber_id || '/' || status as k from group_members_as_of($1) order by 1`,
    [isoMicros(atUs)],
  );
  return rows.map((r) => r.k);
}

/** Differences between the world at `atUs` and the mirror's history for that instant. */
async function compareAt(pool: Database['pool'], world: World, atUs: number, precision: Precision): Promise<string[]> {
  const problems: string[] = [];
  const views = world.asOf(atUs);
  const mirrored = await subscribersAsOf(pool, atUs, precision);
  const { rows: dup } = await pool.query<{ n: number }>(`select (count(*) - count(distinct id))::int as n from subscribers_as_of($1)`, [
    isoMicros(atUs),
  ]);
  if (dup[0]?.n !== 0) problems.push(`${dup[0]?.n} subscribers with two versions valid at ${isoMicros(atUs)}`);
  for (const view of views.values()) {
    // Poll only: it sees subscribers through group lists. A deleted one is no longer listed (its
    // last listed version stays current) and one in no synced group is not listed at all.
    if (precision === 'seconds' && (view.deleted || view.groups.length === 0)) continue;
    const got = mirrored.get(view.id);
    const want = expectedRow(view, precision);
    if (!got) problems.push(`${view.id}: missing at ${isoMicros(atUs)}`);
    else if (stableJson(got) !== stableJson(want))
      problems.push(`${view.id} at ${isoMicros(atUs)}: want ${stableJson(want)} got ${stableJson(got)}`);
  }
  for (const id of mirrored.keys()) if (!views.has(id)) problems.push(`${id}: in history at ${isoMicros(atUs)} before the world had it`);
  const want = world
    .membershipsAsOf(atUs)
    .map((m) => `${m.groupId}/${m.subscriberId}/${m.type}`)
    .sort();
  const have = await membersAsOf(pool, atUs);
  if (stableJson(have) !== stableJson(want)) {
    const missing = want.filter((k) => !have.includes(k));
    const extra = have.filter((k) => !want.includes(k));
    problems.push(`members at ${isoMicros(atUs)}: missing ${missing.join(', ') || '-'}; extra ${extra.join(', ') || '-'}`);
  }
  return problems;
}

const nowUs = (world: World) => Math.floor(world.now() * 1000);

// ---------------------------------------------------------------------------------------------
// Webhook path

async function startWebhookPath(db: TestDatabase, seed: number): Promise<Simulator> {
  const service: Database = openDatabase(db.url, { max: 10, account: DEFAULT_ACCOUNT });
  const consumer: DeliveryConsumer = createDeliveryConsumer({
    pool: service.pool,
    logger,
    pollEveryMs: 500,
    retry: { attempts: 10, backoffMs: 100 },
  });
  const secrets: string[] = [];
  const app: FastifyInstance = buildServer({ logger, readiness: [] });
  registerWebhookRoute(app, {
    path: '/webhooks',
    maxBodyBytes: 4 * 1024 * 1024,
    secrets: () => secrets,
    pool: service.pool,
    logger,
    inbox: { maxWaitMs: 1 },
    secretsMissRefreshMs: 60_000,
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/webhooks`;
  const sim = await startSimulator({
    subscribers: 0,
    groups: 3,
    largeIds: true,
    rateLimit: false,
    seed,
    timeScale: 0.001,
    recordChanges: true,
  });
  const plain = sim.webhooks.register({
    name: 'plain',
    url,
    events: ALL_EVENT_KINDS.filter((k) => !BATCH_ONLY_KINDS.includes(k)),
    batchable: false,
  });
  const batched = sim.webhooks.register({ name: 'batched', url, events: ALL_EVENT_KINDS, batchable: true });
  secrets.push(plain.secret, batched.secret);
  cleanups.push(async () => {
    await sim.close();
    await app.close();
    await consumer.close(5_000);
    await service.close();
  });
  return sim;
}

async function drainWebhooks(sim: Simulator, db: TestDatabase): Promise<void> {
  await sim.deliveries.settle(30_000);
  await waitFor(
    'every stored delivery applied',
    async () => {
      const { rows } = await db.pool.query<{ n: number }>(`select count(*)::int as n from webhook_deliveries where status <> 'applied'`);
      return rows[0]?.n === 0 ? true : undefined;
    },
    30_000,
    20,
  );
}

// ---------------------------------------------------------------------------------------------
// Poll path

function pollDeps(db: TestDatabase, sim: Simulator): PassDeps {
  return {
    pool: db.pool,
    legacy: createLegacyClient({
      baseUrl: sim.url,
      apiKey: sim.apiKey,
      http: { retry: { retries: 4, minDelayMs: 5, maxDelayMs: 50 }, timeoutMs: 5_000 },
    }),
    logger,
    sourceTimezone: 'UTC',
    lookbackMs: 86_400_000,
    pageSize: 1000,
    groupTypes: ALL_TYPES,
  };
}

/** One SYNC_EVERY tick (incremental) and one reconcile (full) pass over every group and type. */
/**
 * One incremental tick, then two full passes: a poll removal needs two complete full passes in a row
 * that missed the member (docs/architecture.md, invariant 11, issue 11), so an ended membership is only known then.
 */
async function pollEverything(deps: PassDeps, world: World): Promise<void> {
  // A SYNC_EVERY tick, then the removal proof: two rounds of full passes with the sweep between them.
  for (const mode of ['incremental', 'full', 'incremental', 'full'] as const) {
    for (const groupId of world.groupIds()) for (const type of ALL_TYPES) await runPass(deps, groupId, type, mode);
  }
}

/** Waits until the world's clock is in a later second than `us`: legacy times have whole seconds. */
async function nextSecond(world: World, us: number): Promise<void> {
  const target = (Math.floor(us / 1e6) + 1) * 1e6 + 20_000;
  while (nowUs(world) < target) await sleep(Math.max(1, Math.ceil((target - nowUs(world)) / 1000)));
}

// ---------------------------------------------------------------------------------------------

describe('history equals the recorded world at 20 instants of a churny run', () => {
  test('webhooks delivering every change: every instant, to the microsecond', async () => {
    const db = await createTestDatabase();
    cleanups.push(() => db.drop());
    const sim = await startWebhookPath(db, 1301);
    const rng = mulberry32(1301);
    createSubscribers(sim.world, rng);
    const kinds = new Set<ChurnKind>();
    const instants: number[] = [];
    for (let phase = 0; phase < INSTANTS; phase++) {
      for (const k of churnPhase(sim.world, rng, phase)) kinds.add(k);
      await sleep(3);
      instants.push(nowUs(sim.world));
      await sleep(3);
    }
    await drainWebhooks(sim, db);
    expect([...kinds].sort()).toEqual([
      'automation',
      'delete',
      'fieldChange',
      'leaveGroup',
      'open',
      'rejoinGroup',
      'rename',
      'resubscribe',
      'unsubscribe',
    ]);

    const problems: string[] = [];
    for (const at of instants) problems.push(...(await compareAt(db.pool, sim.world, at, 'micros')));
    expect(problems.slice(0, 10)).toEqual([]);
    // The run produced real history: several versions per subscriber on average, and ended periods.
    const { rows } = await db.pool.query<{ versions: number; ended: number }>(
      `select (select count(*) from subscriber_versions)::int as versions,
              (select count(*) from group_membership_periods where ended_at is not null)::int as ended`,
    );
    expect(rows[0]?.versions).toBeGreaterThan(SUBSCRIBERS * 3);
    expect(rows[0]?.ended).toBeGreaterThan(5);
  }, 120_000);

  test('webhooks off, poll only: every instant a SYNC_EVERY tick and the removal proof after the last change', async () => {
    const db = await createTestDatabase();
    cleanups.push(() => db.drop());
    const sim = await startSimulator({ subscribers: 0, groups: 3, largeIds: true, rateLimit: false, seed: 1302, recordChanges: true });
    cleanups.push(() => sim.close());
    const deps = pollDeps(db, sim);
    const rng = mulberry32(1302);
    createSubscribers(sim.world, rng);
    const instants: number[] = [];
    const intermediate: string[] = [];
    for (let phase = 0; phase < INSTANTS; phase++) {
      const before = sim.world.changes.length;
      churnPhase(sim.world, rng, phase);
      // The state between the two company changes of one subscriber: no poll saw it.
      const changes = sim.world.changes.slice(before);
      const middle = changes.at(-2);
      if (middle) intermediate.push(middle.subscriber.fields.company);
      await pollEverything(deps, sim.world);
      const at = nowUs(sim.world);
      instants.push(at);
      await nextSecond(sim.world, at);
    }
    const problems: string[] = [];
    for (const at of instants) problems.push(...(await compareAt(db.pool, sim.world, at, 'seconds')));
    expect(problems.slice(0, 10)).toEqual([]);
    // What history cannot know: a state that lasted between two polls was never seen.
    const { rows } = await db.pool.query<{ n: number }>(
      `select count(*)::int as n from subscriber_versions where fields->>'company' = any($1)`,
      [intermediate],
    );
    expect(intermediate).toHaveLength(INSTANTS);
    expect(rows[0]?.n).toBe(0);
  }, 180_000);
});

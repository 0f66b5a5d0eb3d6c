/**
 * The audit against the simulator's blind spots, on both read sources (docs/operations.md, "The
 * audit"): changes the service does not stamp, members joining with a 3-day-old stamp, removals
 * nothing announces, and a webhook the service disabled. Each is first shown to get past the passes
 * the mirror already runs (incremental passes, webhooks), then detected and repaired by the audit.
 *
 * Time is the audit's: tick k happens at k × AUDIT_EVERY (15 min) after the change (`now` moves by
 * that much per tick), so "detected within 2 × AUDIT_EVERY" reads as "within two ticks".
 */
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { SubscriberType } from '../../src/db/schema.js';
import { createLogger } from '../../src/ground/log.js';
import { formatEpochMs } from '../../src/ground/time.js';
import { removeMembership, withTransaction } from '../../src/mirror/store/index.js';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import type { WorldEvent } from '../../src/simulator/kinds.js';
import { directPayload } from '../../src/simulator/payloads.js';
import { currentAuditReader, legacyAuditReader, type AuditReader } from '../../src/audit/pair.js';
import { runAuditTick, type AuditLoopDeps, type TickOutcome } from '../../src/audit/loop.js';
import { auditWindow } from '../../src/audit/state.js';
import { runPass } from '../../src/sync/legacy-pass.js';
import { createCurrentClient } from '../../src/upstream/current/client.js';
import { createLegacyClient } from '../../src/upstream/legacy/client.js';
import { createWebhooksApi } from '../../src/upstream/webhooks-api.js';
import { listWebhooks, readEndpoint, updateWebhook } from '../../src/webhooks/manage.js';
import { applyPlan, planDelivery } from '../../src/webhooks/apply.js';
import { parseDelivery } from '../../src/webhooks/payloads.js';
import { currentTestSource, passContext } from '../helpers/current.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { ALL_TYPES, fullPassAllTypes, passAllTypes, passDeps } from '../helpers/poll.js';
import { deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';

const EVERY_MS = 15 * 60_000;
const DAY_MS = 86_400_000;
const { logger: silent } = createLogger({ level: 'silent' });
type Source = 'legacy' | 'current';

let database: TestDatabase;
let redis: Redis;
let prefix: string;
let sim: Simulator | undefined;

beforeAll(async () => {
  database = await createTestDatabase();
  prefix = uniquePrefix('audit');
  redis = new Redis(redisUrl(), { maxRetriesPerRequest: 1 });
});
afterEach(async () => {
  await sim?.close();
  sim = undefined;
  await database.pool.query(
    'truncate subscribers, group_members, sync_state, sync_passes, upstream_paging, audit_state, audit_results, audit_webhooks, webhook_endpoints',
  );
});
afterAll(async () => {
  await deletePrefix(prefix);
  redis.disconnect();
  await database.drop();
});

function reader(source: Source, s: Simulator): AuditReader {
  const http = { retry: { retries: 2, minDelayMs: 5, maxDelayMs: 50 }, timeoutMs: 10_000 };
  if (source === 'legacy') return legacyAuditReader(createLegacyClient({ baseUrl: s.url, apiKey: s.apiKey, http }), 'UTC');
  return currentAuditReader(createCurrentClient({ baseUrl: s.url, token: s.webhooksToken, http }), 'UTC');
}

/** Full passes of every type, twice (the removal proof), for the setup and for the full pass the audit asks for. */
async function fullPasses(source: Source, s: Simulator, groupId: string, rounds = 1): Promise<void> {
  for (let i = 0; i < rounds; i++) {
    if (source === 'legacy') await passAllTypes(passDeps(database, s), groupId, 'full');
    else await fullPassAllTypes(currentTestSource(s), passContext(database), groupId);
  }
}

interface Harness {
  deps: AuditLoopDeps;
  /** Moves the audit's clock on by one period (or `advanceMs`) and runs a tick. */
  tick(advanceMs?: number): Promise<TickOutcome>;
  asked: Array<{ groupId: string; type: SubscriberType }>;
}

function harness(source: Source, s: Simulator, groupId: string, extra: Partial<AuditLoopDeps> = {}): Harness {
  let now = Date.now();
  const asked: Harness['asked'] = [];
  const deps: AuditLoopDeps = {
    pool: database.pool,
    redis,
    prefix,
    logger: silent,
    everyMs: EVERY_MS,
    sampleSize: 100,
    settleMs: 2 * 60_000,
    groups: [groupId],
    types: ALL_TYPES,
    readerFactory: () => reader(source, s),
    perMinute: source === 'legacy' ? 60 : 120,
    share: 0.05,
    askFullPass: async (g, type) => {
      asked.push({ groupId: g, type });
      // What the worker does with the job: a full pass with its removal proof (two rounds of every
      // type, the legacy source's sweep between them).
      await fullPasses(source, s, g);
      if (source === 'legacy') await passAllTypes(passDeps(database, s), g, 'incremental');
      await fullPasses(source, s, g);
      return `job-${asked.length}`;
    },
    now: () => now,
    ...extra,
  };
  return {
    deps,
    asked,
    async tick(advanceMs = EVERY_MS) {
      now += advanceMs;
      return runAuditTick(deps, { force: true });
    },
  };
}

async function start(source: Source): Promise<{ s: Simulator; groupId: string }> {
  const s = await startSimulator({ subscribers: 150, groups: 2, seed: 7, rateLimit: false });
  sim = s;
  const groupId = s.world.groupIds()[0] as string;
  await fullPasses(source, s, groupId);
  return { s, groupId };
}

async function mirroredName(id: string): Promise<string | null> {
  const { rows } = await database.pool.query<{ name: string | null }>('select name from subscribers where id = $1', [id]);
  return rows[0]?.name ?? null;
}

/** What the consumer does with a delivery, in one transaction. */
async function applyWebhook(payload: object): Promise<void> {
  await withTransaction(database.pool, (client) => applyPlan(client, planDelivery(parseDelivery(payload).events)));
}

async function liveMember(groupId: string, id: string): Promise<string | null> {
  const { rows } = await database.pool.query<{ type: string }>(
    'select type from group_members where group_id = $1 and subscriber_id = $2 and removed_at is null',
    [groupId, id],
  );
  return rows[0]?.type ?? null;
}

function found(outcome: TickOutcome, kind: 'content' | 'missing' | 'extra'): string[] {
  return outcome.audits.flatMap((a) => a.ids[kind]);
}

function mismatches(outcome: TickOutcome): number {
  return outcome.audits.reduce((n, a) => n + a.tally.content + a.tally.missing + a.tally.extra + a.tally.count, 0);
}

describe.each<Source>(['legacy', 'current'])('the audit on the %s source', (source) => {
  it('finds 5 members renamed without a new stamp in its first tick, rewrites them, then finds nothing', async () => {
    const { s, groupId } = await start(source);
    const renamed = s.world.members(groupId, 'active').slice(0, 5);
    for (const [i, id] of renamed.entries()) s.world.updateFieldsSilently(id, { name: `Renamed ${i}` });
    // The passes the mirror runs between full passes do not see it.
    if (source === 'legacy') await passAllTypes(passDeps(database, s), groupId, 'incremental');
    expect(await mirroredName(renamed[0] as string)).not.toBe('Renamed 0');

    const h = harness(source, s, groupId);
    const first = await h.tick();
    expect(found(first, 'content').sort()).toEqual([...renamed].sort());
    for (const [i, id] of renamed.entries()) expect(await mirroredName(id)).toBe(`Renamed ${i}`);
    expect(first.audits.reduce((n, a) => n + a.tally.repaired, 0)).toBe(5);
    expect(first.audits.reduce((n, a) => n + a.tally.unrepaired, 0)).toBe(0);
    const second = await h.tick();
    expect(mismatches(second)).toBe(0);
    const window = await auditWindow(database.pool);
    expect(window.get(`${groupId}:active`)).toMatchObject({ content: 5, unrepaired: 0 });
  });

  it('adds a member who joined with a 3-day-old stamp in its first tick', async () => {
    const s = await startSimulator({ subscribers: 150, groups: 2, seed: 7, rateLimit: false });
    sim = s;
    const [g1, g2] = s.world.groupIds() as [string, string];
    const joiner = s.world.members(g2, 'active').find((id) => !s.world.membership(g1, id)) as string;
    s.world.restamp(joiner, Date.now() - 3 * DAY_MS);
    // A change of today in the group: the incremental window trails the cursor, so it reads back about 2 days.
    s.world.updateFields(s.world.members(g1, 'active')[0] as string, { city: 'Today' });
    await fullPasses(source, s, g1);
    s.world.addToGroupSilently(joiner, g1);
    if (source === 'legacy') await passAllTypes(passDeps(database, s), g1, 'incremental');
    expect(await liveMember(g1, joiner)).toBeNull();

    const h = harness(source, s, g1);
    const first = await h.tick();
    expect(found(first, 'missing')).toEqual([joiner]);
    expect(await liveMember(g1, joiner)).toBe('active');
    expect(mismatches(await h.tick())).toBe(0);
  });

  it('a member whose status a webhook changed, its membership type not yet, is neither extra nor a count gap of its old type', async () => {
    const { s, groupId } = await start(source);
    const id = s.world.members(groupId, 'bounced')[0] as string;
    expect(id).toBeDefined();
    // The stamped change and its webhook: the subscriber row now says active, the membership still bounced.
    const events: WorldEvent[] = [];
    const stop = s.world.onEvent((e) => events.push(e));
    s.world.activate(id);
    stop();
    for (const e of events) await applyWebhook(directPayload(e, 1));
    expect(await liveMember(groupId, id)).toBe('bounced');

    const h = harness(source, s, groupId, { types: ['bounced'] });
    const ticks = [await h.tick(), await h.tick(), await h.tick()];
    expect(ticks.map((t) => found(t, 'extra'))).toEqual([[], [], []]);
    expect(ticks.map(mismatches)).toEqual([0, 0, 0]);
    expect(h.asked).toEqual([]);
  });

  it('detects 3 members removed without a stamp by the second tick and has them ended by the full pass it asks for', async () => {
    const { s, groupId } = await start(source);
    await fullPasses(source, s, groupId);
    const leavers = s.world.members(groupId, 'active').slice(2, 5);
    for (const id of leavers) s.world.removeFromGroupSilently(id, groupId);
    if (source === 'legacy') await passAllTypes(passDeps(database, s), groupId, 'incremental');
    for (const id of leavers) expect(await liveMember(groupId, id)).toBe('active');
    // A status that is no type (one the service might add) does not make a member "moving": still extra.
    await database.pool.query(`update subscribers set status = 'archived' where id = $1`, [leavers[0]]);

    const h = harness(source, s, groupId, { types: ['active'] });
    const first = await h.tick();
    expect(h.asked).toEqual([]);
    const second = await h.tick();
    const active = second.audits[0];
    expect(active?.tally.count).toBe(1);
    expect(active?.countGap).toBe(-3);
    if (source === 'current') expect(active?.ids.extra.sort()).toEqual([...leavers].sort());
    expect(h.asked).toEqual([{ groupId, type: 'active' }]);
    for (const id of leavers) expect(await liveMember(groupId, id)).toBeNull();
    expect(mismatches(first)).toBe(0);
    // The next check of a count read after the repair finds it explained.
    await h.tick();
    expect(mismatches(await h.tick())).toBe(0);
  });
});

describe('the audit and the webhooks (current source)', () => {
  it('shows a webhook the service disabled after failed deliveries, re-enables it with WEBHOOKS_REENABLE, and catches up what it missed', async () => {
    const s = await startSimulator({ subscribers: 150, groups: 2, seed: 7, rateLimit: false });
    sim = s;
    const groupId = s.world.groupIds()[0] as string;
    await fullPasses('current', s, groupId);
    const created = s.webhooks.create({ url: 'http://127.0.0.1:9/hooks', events: ['subscriber.updated', 'subscriber.created'] });
    if (!created.ok) throw new Error('create failed');
    const hook = created.webhook;
    await database.pool.query(
      `insert into webhook_endpoints (id, url, events, enabled, batchable, secret) values ($1, $2, $3, true, false, 'x-secret-of-16-chars')`,
      [hook.id, hook.url, hook.events],
    );
    // Deliveries kept failing for 3 days: the service disabled it; meanwhile changes were stamped and sent nowhere.
    s.webhooks.update(hook.id, { enabled: false });
    const changed = s.world.members(groupId, 'active').slice(0, 4);
    for (const id of changed) s.world.updateFields(id, { city: 'Tromsø' });

    const api = () => createWebhooksApi({ baseUrl: s.url, token: s.webhooksToken });
    const h = harness('current', s, groupId, { webhooks: { api, reenable: false }, settleMs: 0 });
    const first = await h.tick();
    expect(first.webhooks).toEqual([expect.objectContaining({ id: hook.id, enabled: false, problems: ['disabled'] })]);
    expect(s.webhooks.get(hook.id)?.enabled).toBe(false);
    // What the webhook should have brought: written, and counted as missed deliveries, never as mismatches.
    const active = first.audits.find((a) => a.type === 'active');
    expect(active?.tally.missedDeliveries).toBe(4);
    expect(mismatches(first)).toBe(0);

    h.deps.webhooks = { api, reenable: true };
    const second = await h.tick();
    expect(s.webhooks.get(hook.id)?.enabled).toBe(true);
    expect(second.webhooks).toEqual([expect.objectContaining({ id: hook.id, enabled: true, problems: [] })]);
    const { rows } = await database.pool.query<{ reenabled: boolean }>('select reenabled_at is not null as reenabled from audit_webhooks');
    expect(rows).toEqual([{ reenabled: true }]);
  });
  it('WEBHOOKS_REENABLE leaves a webhook an operator disabled alone, and brings the local row of one the service disabled back in step', async () => {
    const s = await startSimulator({ subscribers: 20, groups: 1, seed: 7, rateLimit: false });
    sim = s;
    const groupId = s.world.groupIds()[0] as string;
    const events = ['subscriber.updated', 'subscriber.created'];
    const byOperator = s.webhooks.create({ url: 'http://127.0.0.1:9/a', events });
    const byService = s.webhooks.create({ url: 'http://127.0.0.1:9/b', events });
    if (!byOperator.ok || !byService.ok) throw new Error('create failed');
    for (const hook of [byOperator.webhook, byService.webhook]) {
      await database.pool.query(
        `insert into webhook_endpoints (id, url, events, enabled, batchable, secret) values ($1, $2, $3, true, false, $4)`,
        [hook.id, hook.url, hook.events, `secret-of-hook-${hook.id}-0123456789`],
      );
    }
    const api = () => createWebhooksApi({ baseUrl: s.url, token: s.webhooksToken });
    // The operator: `webhooks update ID --disable`. The service: failed deliveries; then an operator's
    // `webhooks list` refreshed both rows from what the service says (both disabled locally now).
    await updateWebhook(api(), database.pool, byOperator.webhook.id, { enabled: false });
    s.webhooks.update(byService.webhook.id, { enabled: false });
    await listWebhooks(api(), database.pool);
    expect((await readEndpoint(database.pool, byService.webhook.id))?.enabled).toBe(false);
    expect((await readEndpoint(database.pool, byOperator.webhook.id))?.disabledByOperator).toBe(true);
    expect((await readEndpoint(database.pool, byService.webhook.id))?.disabledByOperator).toBe(false);

    const h = harness('current', s, groupId, { webhooks: { api, reenable: true }, settleMs: 0 });
    s.clearRequests();
    const tick = await h.tick();
    const puts = s.requests.filter((r) => r.api === 'webhooks' && r.method === 'PUT').map((r) => r.url);
    expect(puts).toEqual([expect.stringContaining(`/${byService.webhook.id}`)]);
    expect(s.webhooks.get(byOperator.webhook.id)?.enabled).toBe(false);
    expect(s.webhooks.get(byService.webhook.id)?.enabled).toBe(true);
    expect(tick.webhooks).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ id: byOperator.webhook.id, enabled: false, problems: ['disabled'] }),
        expect.objectContaining({ id: byService.webhook.id, enabled: true, problems: [] }),
      ]),
    );
    // The local rows say what was done.
    expect((await readEndpoint(database.pool, byService.webhook.id))?.enabled).toBe(true);
    expect((await readEndpoint(database.pool, byOperator.webhook.id))?.enabled).toBe(false);

    // The operator enables it again: it is the service's to disable (and the audit's to re-enable) from then on.
    await updateWebhook(api(), database.pool, byOperator.webhook.id, { enabled: true });
    expect((await readEndpoint(database.pool, byOperator.webhook.id))?.disabledByOperator).toBe(false);
    s.webhooks.update(byOperator.webhook.id, { enabled: false });
    await h.tick();
    expect(s.webhooks.get(byOperator.webhook.id)?.enabled).toBe(true);
  });
});

describe('the audit stays quiet under stamped changes', () => {
  it.each<Source>(['legacy', 'current'])('%s: changes stamped just before the tick are in flight, not mismatches', async (source) => {
    const { s, groupId } = await start(source);
    const ids = s.world.members(groupId, 'active').slice(0, 6);
    s.world.updateFields(ids[0] as string, { name: 'Stamped' });
    s.world.unsubscribe(ids[1] as string);
    s.world.removeFromGroup(ids[2] as string, groupId);
    s.world.bounce(ids[3] as string);
    const newcomer = s.world.createSubscriber({ groups: [groupId] });
    const h = harness(source, s, groupId);
    const first = await h.tick(0);
    expect(mismatches(first)).toBe(0);
    expect(first.audits.reduce((n, a) => n + a.tally.inFlight, 0)).toBeGreaterThan(0);
    // The changes arrive: the removal as its webhook applies it, the rest as the next incremental pass
    // (legacy) or their webhooks (current; a full pass here) bring them.
    const left = s.world.subscriber(ids[2] as string) as { updatedAtUs: number };
    await removeMembership(database.pool, groupId, ids[2] as string, formatEpochMs(left.updatedAtUs / 1000), 'webhook');
    if (source === 'legacy') for (const t of ALL_TYPES) await runPass(passDeps(database, s), groupId, t, 'incremental');
    else await fullPasses(source, s, groupId);
    const second = await h.tick();
    expect(mismatches(second)).toBe(0);
    expect(await liveMember(groupId, newcomer)).toBe('active');
  });
});

describe('the audit yields to passes', () => {
  it('waits out a request queued for a moment, but leaves the pair for a later tick while passes keep waiting', async () => {
    const { s, groupId } = await start('legacy');
    const clearsAt = Date.now() + 300;
    const transient = harness('legacy', s, groupId, { types: ['active'], limiterWaiting: () => (Date.now() < clearsAt ? 1 : 0) });
    const first = await runAuditTick(transient.deps, { allowance: 100 });
    expect(first.skipped).toEqual([]);
    expect(first.audits.map((a) => a.type)).toEqual(['active']);

    await database.pool.query('truncate audit_state');
    const busy = harness('legacy', s, groupId, { types: ['active'], limiterWaiting: () => 1 });
    const started = Date.now();
    const second = await runAuditTick(busy.deps, { allowance: 100 });
    expect(second.audits).toEqual([]);
    expect(second.skipped).toEqual([{ groupId, type: 'active', reason: 'passes are waiting for the rate limit' }]);
    // A tenth of the 15 min period, at most 2 s.
    expect(Date.now() - started).toBeGreaterThanOrEqual(2_000);
    expect(second.requests).toBe(0);
  });
});

/**
 * The audit's cost at the defaults (docs/operations.md, "The audit", "Cost"): the real loop
 * (`loopTick`, as `start` runs it) against the simulator, for a five-type legacy group at
 * API_RATE_LIMIT=60 and a current-platform group (five statuses) at 120, AUDIT_EVERY=15m,
 * AUDIT_SAMPLE = SYNC_PAGE_SIZE = 1000, webhook management configured (the webhooks are read back
 * every period).
 *
 * Time is compressed, not waited for: before each tick the audit's clock moves on one period and the
 * claims of the previous tick are aged by one period (what 15 minutes would do). What is counted is
 * what was sent: the requests the service received during the ticks, and the ones that went through
 * the shared limiter; per hour = requests ÷ (ticks × 15 min) × 1 h. The limiter itself runs at a
 * rate that does not make compressed time wait; the audit's budget is computed from 60 (120) a
 * minute, as in production. Compared with `requestsPerHour` of audit-core (the formula the docs quote).
 */
import { Redis } from 'ioredis';
import { SUBSCRIBER_TYPES } from '../../src/db/schema.js';
import { createLogger } from '../../src/ground/log.js';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { requestsPerHour, tickCost } from '../../src/audit/core.js';
import { loopTick, type AuditLoopDeps, type AuditLoopState } from '../../src/audit/loop.js';
import { currentAuditReader, legacyAuditReader } from '../../src/audit/pair.js';
import { currentSource } from '../../src/sync/current-pass.js';
import { legacySource } from '../../src/sync/source.js';
import { createCurrentClient } from '../../src/upstream/current/client.js';
import { createLegacyClient } from '../../src/upstream/legacy/client.js';
import { createLimiter, type Limiter } from '../../src/ratelimit/limiter.js';
import { createWebhooksApi } from '../../src/upstream/webhooks-api.js';
import { BATCHED_KINDS, REALTIME_KINDS } from '../../src/webhooks/manage.js';
import { createScratchDatabase, type ScratchDatabase } from './lib/scratch-db.js';

type Source = 'legacy' | 'current';

/** The defaults the figure is stated for. */
const EVERY_MS = 15 * 60_000;
const PAGE_SIZE = 1000;
const PER_MINUTE: Record<Source, number> = { legacy: 60, current: 120 };
/** Fast enough that compressed time never waits for it (the audit's budget is computed from PER_MINUTE). */
const LIMITER_PER_MINUTE = 60_000;

export interface AuditBenchRun {
  source: Source;
  groups: number;
  types: number;
  members: number;
  ticks: number;
  everyMs: number;
  perMinute: number;
  /** Requests the service received, per tick. */
  requestsPerTick: number[];
  /** Requests the service received during the ticks, and the part that went through the shared limiter. */
  requests: { service: number; throughLimiter: number; webhookReads: number };
  /** Pairs audited and skipped over all ticks (a pair skipped for the budget takes its turn later). */
  pairs: { audited: number; skipped: number };
  /** Measured: service requests per hour at this period. */
  perHour: number;
  /** audit-core's `requestsPerHour` for the same groups, types and source. */
  computedPerHour: number;
  /** perHour ÷ (perMinute × 60). */
  share: number;
}

export interface AuditBenchFigures {
  runs: AuditBenchRun[];
}

export async function benchAudit(options: {
  subscribers: number;
  ticks: number;
  databaseUrl: string;
  redisUrl: string;
  log: (line: string) => void;
}): Promise<AuditBenchFigures> {
  const runs: AuditBenchRun[] = [];
  for (const source of ['legacy', 'current'] as const) runs.push(await benchOne(source, options));
  return { runs };
}

async function benchOne(
  source: Source,
  options: { subscribers: number; ticks: number; databaseUrl: string; redisUrl: string; log: (line: string) => void },
): Promise<AuditBenchRun> {
  const sim = await startSimulator({ subscribers: options.subscribers, groups: 1, rateLimit: false, seed: 41 });
  const db = await createScratchDatabase(options.databaseUrl, `audit_${source}`);
  const prefix = `bench-audit-${source}-${process.pid}-${Date.now().toString(36)}`;
  const redis = new Redis(options.redisUrl, { maxRetriesPerRequest: 1 });
  const limiter = createLimiter({ mode: 'redis', redisUrl: options.redisUrl, prefix, perMinute: LIMITER_PER_MINUTE });
  try {
    const groupId = sim.world.groupIds()[0] as string;
    await fullPasses(source, sim, db, limiter, groupId);
    await registerWebhooks(sim, db);
    const clock = { now: Date.now() };
    const deps = auditDeps(source, { sim, db, redis, limiter, prefix, groupId, clock });
    const state: AuditLoopState = { rotation: 0, allowance: 0 };
    const requestsPerTick: number[] = [];
    const pairs = { audited: 0, skipped: 0 };
    sim.clearRequests();
    const limiterBefore = limiter.stats().scheduled;
    for (let tick = 0; tick < options.ticks; tick++) {
      clock.now += EVERY_MS;
      await agePeriod(db, redis, prefix);
      const before = sim.requests.length;
      const outcome = await loopTick(deps, state);
      requestsPerTick.push(sim.requests.length - before);
      pairs.audited += outcome.audits.length;
      pairs.skipped += outcome.skipped.length;
      if (outcome.failed.length > 0) throw new Error(`audit tick failed: ${outcome.failed.map((f) => f.error).join('; ')}`);
    }
    const service = sim.requests.length;
    const webhookReads = sim.requests.filter((r) => r.api === 'webhooks').length;
    const throughLimiter = limiter.stats().scheduled - limiterBefore;
    const perHour = (service * 3_600_000) / (options.ticks * EVERY_MS);
    const computedPerHour = requestsPerHour(1, SUBSCRIBER_TYPES.length, source, EVERY_MS);
    const share = perHour / (PER_MINUTE[source] * 60);
    const members = sim.world.memberCount(groupId);
    options.log(
      `audit ${source}: ${members} members, ${options.ticks} ticks of 15 min: ${service} requests (${throughLimiter} through the limiter, ${webhookReads} webhook reads), ` +
        `${perHour} an hour (computed ${computedPerHour}), ${(share * 100).toFixed(2)} % of ${PER_MINUTE[source]}/min; per tick ${requestsPerTick.join(' ')} (whole tick ${tickCost(1, SUBSCRIBER_TYPES.length, source)})`,
    );
    return {
      source,
      groups: 1,
      types: SUBSCRIBER_TYPES.length,
      members,
      ticks: options.ticks,
      everyMs: EVERY_MS,
      perMinute: PER_MINUTE[source],
      requestsPerTick,
      requests: { service, throughLimiter, webhookReads },
      pairs,
      perHour,
      computedPerHour,
      share: Math.round(share * 10_000) / 10_000,
    };
  } finally {
    await limiter.close();
    await redis.del(`${prefix}:audit-webhooks`).catch(() => 0);
    redis.disconnect();
    await sim.close();
    await db.drop();
  }
}

/** The loop's dependencies as `start` wires them at the defaults, on the shared limiter, with the audit's clock `clock`. */
function auditDeps(
  source: Source,
  w: { sim: Simulator; db: ScratchDatabase; redis: Redis; limiter: Limiter; prefix: string; groupId: string; clock: { now: number } },
): AuditLoopDeps {
  const { sim, limiter } = w;
  return {
    pool: w.db.pool,
    redis: w.redis,
    prefix: w.prefix,
    logger: createLogger({ level: 'silent' }).logger,
    everyMs: EVERY_MS,
    sampleSize: PAGE_SIZE,
    settleMs: 2 * 60_000,
    groups: [w.groupId],
    types: SUBSCRIBER_TYPES,
    readerFactory: () =>
      source === 'legacy'
        ? legacyAuditReader(createLegacyClient({ baseUrl: sim.url, apiKey: sim.apiKey, limiter }), 'UTC')
        : currentAuditReader(createCurrentClient({ baseUrl: sim.url, token: sim.webhooksToken, limiter }), 'UTC'),
    perMinute: PER_MINUTE[source],
    share: 0.05,
    limiterWaiting: () => limiter.stats().waiting,
    // What the worker's job would do is not the audit's cost: the request is counted, not run.
    askFullPass: () => Promise.resolve('bench'),
    webhooks: { api: () => createWebhooksApi({ baseUrl: sim.url, token: sim.webhooksToken, http: { gate: w.limiter } }), reenable: false },
    now: () => w.clock.now,
  };
}

/** A complete full pass of every type, so that the audit has a mirror to check. */
async function fullPasses(source: Source, sim: Simulator, db: ScratchDatabase, limiter: Limiter, groupId: string): Promise<void> {
  const reader =
    source === 'legacy'
      ? legacySource({
          legacyFactory: () => createLegacyClient({ baseUrl: sim.url, apiKey: sim.apiKey, limiter }),
          sourceTimezone: 'UTC',
          lookbackMs: 86_400_000,
          pageSize: PAGE_SIZE,
        })
      : currentSource({
          sourceTimezone: 'UTC',
          pageSize: PAGE_SIZE,
          clientFactory: () => createCurrentClient({ baseUrl: sim.url, token: sim.webhooksToken, limiter }),
        });
  const ctx = { pool: db.pool, logger: createLogger({ level: 'silent' }).logger, groupTypes: SUBSCRIBER_TYPES };
  for (const type of SUBSCRIBER_TYPES) await reader.runPass(ctx, groupId, type, 'full');
}

/** The two webhooks `webhooks register` makes, at the service and in webhook_endpoints (the audit reads them back). */
async function registerWebhooks(sim: Simulator, db: ScratchDatabase): Promise<void> {
  const url = 'https://mirror.example.com/webhooks';
  for (const input of [
    { url, events: [...REALTIME_KINDS], batchable: false },
    { url, events: [...BATCHED_KINDS], batchable: true },
  ]) {
    const w = sim.webhooks.register(input);
    await db.pool.query(`insert into webhook_endpoints (id, url, events, batchable, secret) values ($1, $2, $3, $4, $5)`, [
      w.id,
      w.url,
      w.events,
      w.batchable,
      w.secret,
    ]);
  }
}

/** What one period does to the claims: each pair's last audit and the webhook check's claim are a period older. */
async function agePeriod(db: ScratchDatabase, redis: Redis, prefix: string): Promise<void> {
  await db.pool.query(`update audit_state set last_audit_at = last_audit_at - make_interval(secs => $1::double precision / 1000)`, [
    EVERY_MS,
  ]);
  await redis.del(`${prefix}:audit-webhooks`);
}

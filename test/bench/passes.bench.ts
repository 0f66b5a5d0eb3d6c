/**
 * Full passes under departures, and what a full pass costs in requests (issue 20). Request counts
 * only: they do not depend on the machine, so these figures are exact wherever they run.
 *
 * - Departures per request: a group of `subscribers` active members read at `pageSize` while, after
 *   every list request of the pass, `perRequest` members the pass already read leave the group (and
 *   a burst: 60 more every 10th request, on top of one per request). Each figure: the requests of
 *   the moving pass ÷ those of the same pass over the quiet list, its step backs and gaps, members
 *   that left, false removals (members still listed that got `removed_at`, after every pass), and
 *   leavers ended by the confirming pass (the pass after the one that missed them), or not ended.
 * - The 5-type group of the issue (4,200 / 900 / 120 / 30 / 0 members, page 1000): requests of the
 *   first full pass of every type on a fresh install and of a later one, against the minimum (the
 *   pages each type's members fill, at least one list request per type, plus one `/count` per type:
 *   9 + 5 = 14), and of an incremental tick over the unchanged group. Then the removal proof: after
 *   10 active members leave, a backfill of `active` through the sync worker (BullMQ on REDIS_URL, own
 *   prefix) misses them and proves their removal at once (docs/architecture.md, "Proof in rounds"):
 *   its confirming requests against a later full pass of every type plus an incremental tick.
 *
 *   npx tsx test/bench/passes.bench.ts [--subscribers 20000] [--page-size 500] [--json path]
 *
 * Uses DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres); creates and drops its own
 * databases. Throws when a pass concludes a false removal or a leaver is not ended.
 */
import os from 'node:os';
import path from 'node:path';
import type { SubscriberType } from '../../src/db/schema.js';
import { createLogger } from '../../src/ground/log.js';
import { startSimulator, type PageChurnSettings, type Simulator } from '../../src/simulator/index.js';
import { waitForPass } from '../../src/sync/backfill.js';
import { runPass, type PassDeps } from '../../src/sync/legacy-pass.js';
import type { PassResult } from '../../src/sync/pass-recorder.js';
import { createSyncQueue, enqueueBackfill } from '../../src/sync/schedule.js';
import { createSyncWorker } from '../../src/sync/worker.js';
import { Redis } from 'ioredis';
import { deleteKeysByPrefix } from '../helpers/redis-prefix.js';
import { createLegacyClient } from '../../src/upstream/legacy/client.js';
import { createLimiter } from '../../src/ratelimit/limiter.js';
import { argText, isMain } from './lib/cli.js';
import { figure, printTable, writeJson, type BenchResult } from './lib/report.js';
import { createScratchDatabase, type ScratchDatabase } from './lib/scratch-db.js';

const DEFAULT_DB = 'postgres://postgres@127.0.0.1:5432/postgres';
const GROUP_SIZES: ReadonlyArray<[SubscriberType, number]> = [
  ['active', 4_200],
  ['unsubscribed', 900],
  ['bounced', 120],
  ['junk', 30],
  ['unconfirmed', 0],
];
const GROUP_PAGE = 1_000;

export interface PassesBenchOptions {
  /** Active members of the departures group (default 20,000). */
  subscribers?: number;
  /** Page size of the departures passes (default 500). */
  pageSize?: number;
  databaseUrl?: string;
  redisUrl?: string;
  log?: (line: string) => void;
  json?: string | null;
}

export interface DepartureFigure {
  label: string;
  churn: PageChurnSettings;
  requests: number;
  quiet: number;
  ratio: number;
  stepBacks: number;
  gaps: number;
  left: number;
  falseRemovals: number;
  endedByConfirming: number;
  notEnded: number;
}

export interface PassesBenchFigures {
  members: number;
  pageSize: number;
  departures: DepartureFigure[];
  group: { first: number; later: number; minimum: number; incrementalTick: number; types: number; proof: ProofFigure };
}

/** A backfill of `active` after members left, through the worker: its own pass, then the proof. */
export interface ProofFigure {
  left: number;
  removed: number;
  confirmingPasses: number;
  /** Requests of the backfill's own full pass of `active`. */
  ownPass: number;
  /** Requests of the proof: the confirming passes and the sweep. */
  proof: number;
  /** What the proof is expected to cost: a later full pass of every type + an incremental tick. */
  expected: number;
}

function deps(sim: Simulator, scratch: ScratchDatabase, pageSize: number, groupTypes: SubscriberType[]): PassDeps {
  const { logger } = createLogger({ level: 'silent' });
  // mode 'off': no spacing and no Redis; request counts are what is measured.
  const limiter = createLimiter({ mode: 'off', perMinute: 60 });
  return {
    pool: scratch.pool,
    legacy: createLegacyClient({ baseUrl: sim.url, apiKey: sim.apiKey, apiKeyHeader: sim.apiKeyHeader, limiter }),
    logger,
    sourceTimezone: 'UTC',
    lookbackMs: 86_400_000,
    pageSize,
    groupTypes,
  };
}

async function removedIds(scratch: ScratchDatabase, groupId: string): Promise<Set<string>> {
  const { rows } = await scratch.pool.query<{ id: string }>(
    `select subscriber_id as id from group_members where group_id = $1 and removed_at is not null`,
    [groupId],
  );
  return new Set(rows.map((r) => r.id));
}

async function countFalseRemovals(sim: Simulator, scratch: ScratchDatabase, groupId: string): Promise<number> {
  const removed = await removedIds(scratch, groupId);
  return sim.world.members(groupId, 'active').filter((id) => removed.has(id)).length;
}

const SETTINGS: ReadonlyArray<{ label: string; churn: PageChurnSettings }> = [
  { label: '1 per request', churn: { leave: 1 } },
  { label: '2 per request', churn: { leave: 2 } },
  { label: '4 per request', churn: { leave: 4 } },
  { label: '1 per request + 60 every 10th', churn: { leave: 1, burst: { every: 10, leave: 60 } } },
];

/**
 * Upstream times have whole seconds, and a fact in the cutoff's second blocks a removal (invariant
 * 11): at small sizes a pass takes less than a second, so the pass that misses the leavers (the
 * cutoff) starts in a later second than they left, as it always does at real sizes.
 */
async function nextWholeSecond(): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, 1000 - (Date.now() % 1000) + 5));
}

/** One setting: a pass under departures, the pass that misses the leavers, and its confirming pass. */
async function departures(
  sim: Simulator,
  scratch: ScratchDatabase,
  d: PassDeps,
  groupId: string,
  quiet: PassResult,
  setting: (typeof SETTINGS)[number],
): Promise<DepartureFigure> {
  const leftBefore = sim.pageChurn.left.length;
  sim.pageChurn.set({ groupId, ...setting.churn });
  const moving = await runPass(d, groupId, 'active', 'full');
  sim.pageChurn.clear();
  const leavers = sim.pageChurn.left.slice(leftBefore);
  let falseRemovals = await countFalseRemovals(sim, scratch, groupId);
  await nextWholeSecond();
  const missing = await runPass(d, groupId, 'active', 'full');
  falseRemovals = Math.max(falseRemovals, await countFalseRemovals(sim, scratch, groupId));
  const confirming = await runPass(d, groupId, 'active', 'full');
  falseRemovals = Math.max(falseRemovals, await countFalseRemovals(sim, scratch, groupId));
  const removed = await removedIds(scratch, groupId);
  return {
    label: setting.label,
    churn: setting.churn,
    requests: moving.requests,
    quiet: quiet.requests,
    ratio: Math.round((moving.requests / quiet.requests) * 1000) / 1000,
    stepBacks: moving.stepBacks,
    gaps: moving.gaps,
    left: leavers.length,
    falseRemovals,
    endedByConfirming: confirming.removed + missing.removed,
    notEnded: leavers.filter((id) => !removed.has(id)).length,
  };
}

async function departureFigures(
  options: Required<Pick<PassesBenchOptions, 'subscribers' | 'pageSize'>> & { databaseUrl: string; log: (l: string) => void },
): Promise<DepartureFigure[]> {
  const scratch = await createScratchDatabase(options.databaseUrl, 'passes');
  const sim = await startSimulator({ subscribers: 0, groups: 1, rateLimit: false, seed: 20 });
  try {
    const groupId = sim.world.groupIds()[0] as string;
    for (let i = 0; i < options.subscribers; i++) sim.world.createSubscriber({ groups: [groupId], status: 'active' });
    const d = deps(sim, scratch, options.pageSize, ['active']);
    await runPass(d, groupId, 'active', 'full');
    const quiet = await runPass(d, groupId, 'active', 'full');
    const out: DepartureFigure[] = [];
    for (const setting of SETTINGS) {
      const f = await departures(sim, scratch, d, groupId, quiet, setting);
      options.log(
        `departures ${f.label}: ${f.requests} requests vs ${f.quiet} quiet (${f.ratio}x), ${f.stepBacks} step backs, ${f.left} left, ${f.notEnded} not ended, ${f.falseRemovals} false removals`,
      );
      if (f.falseRemovals > 0 || f.notEnded > 0)
        throw new Error(`departures ${f.label}: ${f.falseRemovals} false removals, ${f.notEnded} leavers not ended`);
      out.push(f);
    }
    return out;
  } finally {
    await sim.close();
    await scratch.drop();
  }
}

/** The 5-type group: first and later full pass of every type, and an incremental tick, in requests. */
async function groupFigures(databaseUrl: string, redisUrl: string): Promise<PassesBenchFigures['group']> {
  const scratch = await createScratchDatabase(databaseUrl, 'passes_group');
  // The members joined over the last 60 days (as a real list's did): an incremental tick's lookback
  // window holds a few days of them, less than a page per type.
  const total = GROUP_SIZES.reduce((n, [, size]) => n + size, 0);
  const from = Date.now() - 60 * 86_400_000;
  let now = from;
  // The proof runs on the real clock: its passes start at the worker's now.
  let live = false;
  const sim = await startSimulator({ subscribers: 0, groups: 1, rateLimit: false, seed: 14, clock: () => (live ? Date.now() : now) });
  try {
    const groupId = sim.world.groupIds()[0] as string;
    let created = 0;
    for (const [type, n] of GROUP_SIZES) {
      for (let i = 0; i < n; i++) {
        // Types interleaved in time: member k of every type joins at the same share of the 60 days.
        now = from + (i / Math.max(1, n)) * 60 * 86_400_000;
        sim.world.createSubscriber({ groups: [groupId], status: type });
        created += 1;
      }
    }
    if (created !== total) throw new Error(`seeded ${created} members, expected ${total}`);
    now = Date.now();
    const types = GROUP_SIZES.map(([t]) => t);
    const d = deps(sim, scratch, GROUP_PAGE, types);
    const every = async (mode: 'full' | 'incremental') => {
      let requests = 0;
      for (const type of types) requests += (await runPass(d, groupId, type, mode)).requests;
      return requests;
    };
    const first = await every('full');
    const later = await every('full');
    const incrementalTick = await every('incremental');
    const minimum = GROUP_SIZES.reduce((sum, [, n]) => sum + Math.max(1, Math.ceil(n / GROUP_PAGE)) + 1, 0);
    live = true;
    const proof = { ...(await proofFigure(sim, scratch, groupId, types, redisUrl)), expected: later + incrementalTick };
    return { first, later, minimum, incrementalTick, types: types.length, proof };
  } finally {
    await sim.close();
    await scratch.drop();
  }
}

/** After 10 active members leave: a backfill of `active` through the sync worker, and what its proof cost. */
async function proofFigure(
  sim: Simulator,
  scratch: ScratchDatabase,
  groupId: string,
  types: SubscriberType[],
  redisUrl: string,
): Promise<Omit<ProofFigure, 'expected'>> {
  const prefix = `sm-bench-passes-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
  const connection = { url: redisUrl, maxRetriesPerRequest: null };
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
  const queue = createSyncQueue(connection, prefix);
  const { logger } = createLogger({ level: 'silent' });
  const limiter = createLimiter({ mode: 'off', perMinute: 60 });
  const worker = createSyncWorker({
    pool: scratch.pool,
    redis,
    connection,
    prefix,
    legacyFactory: () => createLegacyClient({ baseUrl: sim.url, apiKey: sim.apiKey, apiKeyHeader: sim.apiKeyHeader, limiter }),
    apiKey: sim.apiKey,
    logger,
    sourceTimezone: 'UTC',
    lookbackMs: 86_400_000,
    pageSize: GROUP_PAGE,
    groups: [groupId],
    types,
  });
  try {
    const leavers = sim.world.members(groupId, 'active').slice(100, 110);
    for (const id of leavers) sim.world.removeFromGroup(id, groupId);
    const outcome = await waitForPass(queue, await enqueueBackfill(queue, groupId, 'active'), { pollMs: 50 });
    if (outcome.state !== 'completed') throw new Error(`proof backfill failed: ${outcome.error}`);
    const r = outcome.result;
    const removed = await removedIds(scratch, groupId);
    const notEnded = leavers.filter((id) => !removed.has(id)).length;
    if (notEnded > 0 || r.awaitingProof !== 0)
      throw new Error(`proof backfill: ${notEnded} leavers not ended, ${r.awaitingProof} awaiting proof`);
    return {
      left: leavers.length,
      removed: r.removed ?? 0,
      confirmingPasses: r.confirmingPasses ?? 0,
      ownPass: r.requests - (r.proofRequests ?? 0),
      proof: r.proofRequests ?? 0,
    };
  } finally {
    await worker.close(5_000);
    await queue.close();
    redis.disconnect();
    await deleteKeysByPrefix(redisUrl, prefix);
  }
}

export async function benchPasses(options: PassesBenchOptions = {}): Promise<PassesBenchFigures> {
  const startedAt = new Date();
  const log = options.log ?? (() => {});
  const databaseUrl = options.databaseUrl ?? process.env.DATABASE_URL ?? DEFAULT_DB;
  const subscribers = options.subscribers ?? 20_000;
  const pageSize = options.pageSize ?? 500;
  const group = await groupFigures(databaseUrl, options.redisUrl ?? process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
  log(
    `5-type group: first full pass ${group.first}, later ${group.later}, minimum ${group.minimum}; incremental tick ${group.incrementalTick}`,
  );
  const proof = group.proof;
  log(
    `5-type group, backfill after ${proof.left} left: own pass ${proof.ownPass}, proof ${proof.proof} requests in ${proof.confirmingPasses} confirming passes + the sweep (expected ${proof.expected}), ${proof.removed} ended`,
  );
  const figures: PassesBenchFigures = {
    members: subscribers,
    pageSize,
    departures: await departureFigures({ subscribers, pageSize, databaseUrl, log }),
    group,
  };
  if (options.json) {
    const result: BenchResult = {
      bench: 'passes',
      rows: subscribers,
      startedAt: startedAt.toISOString(),
      durationMs: Date.now() - startedAt.getTime(),
      environment: { pageSize: String(pageSize), groupPage: String(GROUP_PAGE) },
      figures: [
        figure('5-type group, first full pass', group.first, 'requests', group.minimum),
        figure('5-type group, later full pass', group.later, 'requests', group.minimum),
        figure('5-type group, incremental tick', group.incrementalTick, 'requests', group.types),
        figure(
          '5-type group, removal proof after a backfill',
          group.proof.proof,
          'requests',
          group.proof.expected,
          `${group.proof.left} left, ${group.proof.confirmingPasses} confirming passes, ${group.proof.removed} ended`,
        ),
        ...figures.departures.map((f) =>
          figure(
            `departures ${f.label}`,
            f.requests,
            'requests',
            f.quiet,
            `${f.stepBacks} step backs, ${f.left} left, ${f.falseRemovals} false removals, ${f.notEnded} not ended`,
          ),
        ),
      ],
    };
    writeJson(options.json, result);
    printTable(result);
  }
  return figures;
}

if (isMain(import.meta.url)) {
  benchPasses({
    subscribers: Number(argText('--subscribers') ?? 20_000),
    pageSize: Number(argText('--page-size') ?? 500),
    json: argText('--json') ?? path.join(os.tmpdir(), 'subscriber-mirror-bench', 'passes.json'),
    log: (line) => console.error(line),
  }).catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
}

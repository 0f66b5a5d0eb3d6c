/**
 * The removal proof on the current API (docs/architecture.md, "Pass history and the removal rule"):
 * after a complete pass of every status over `subscribers` members, `k` members leave; a pass of
 * `active` misses them and the proof (`confirmRemovals`, the worker's own code, on the same read
 * source) ends them. Figure: the requests the proof spent, against its baseline measured in the same
 * run, a second round (one complete pass of every status: what the proof cost before it could ask
 * about one member). Request counts only: exact wherever they run. The simulator serves 100 rows a
 * page, the lowest maximum anyone states for the service.
 *
 *   npx tsx test/bench/proof.bench.ts [--subscribers 1000000] [--leavers 10,50000]
 *
 * Uses DATABASE_URL and REDIS_URL (own database, own key prefix, both removed after). Throws when a
 * leaver is not ended or a member still listed is.
 */
import { Redis } from 'ioredis';
import { SUBSCRIBER_TYPES, type SubscriberType } from '../../src/db/schema.js';
import { createLogger } from '../../src/ground/log.js';
import { CURRENT_REQUESTS, startSimulator } from '../../src/simulator/index.js';
import { currentSource } from '../../src/sync/current-pass.js';
import { tryAcquirePassLock } from '../../src/sync/lock.js';
import type { PassContext, PassResult } from '../../src/sync/pass-recorder.js';
import { confirmRemovals, passLockKey, type ProofContext } from '../../src/sync/proof.js';
import { createCurrentClient } from '../../src/upstream/current/client.js';
import { deleteKeysByPrefix } from '../helpers/redis-prefix.js';
import { argText, isMain } from './lib/cli.js';
import { createScratchDatabase } from './lib/scratch-db.js';

const PAGE_CAP = 100;
const DEFAULT_DB = 'postgres://postgres@127.0.0.1:5432/postgres';

export interface ProofFigure {
  leavers: number;
  /** `checks` (one request per candidate) or `rounds` (passes), as the proof chose. */
  strategy: 'checks' | 'rounds';
  proofRequests: number;
  /** A second round: the requests of one complete pass of every status, measured in this run. */
  roundRequests: number;
  ended: number;
  seconds: number;
}

export interface ProofBenchFigures {
  subscribers: number;
  members: number;
  runs: ProofFigure[];
}

export async function benchProof(options: {
  subscribers: number;
  leavers: readonly number[];
  databaseUrl: string;
  redisUrl: string;
  log: (line: string) => void;
}): Promise<ProofBenchFigures> {
  const sim = await startSimulator({ subscribers: options.subscribers, groups: 1, rateLimit: false, currentPageCap: PAGE_CAP, seed: 23 });
  const db = await createScratchDatabase(options.databaseUrl, 'proof');
  const redis = new Redis(options.redisUrl);
  const prefix = `bench-proof-${process.pid}`;
  try {
    const groupId = sim.world.groupIds()[0] as string;
    const source = currentSource({
      sourceTimezone: 'UTC',
      pageSize: 500,
      clientFactory: () => createCurrentClient({ baseUrl: sim.url, token: sim.webhooksToken }),
    });
    const { logger } = createLogger({ level: 'silent' });
    const ctx: PassContext = { pool: db.pool, logger, groupTypes: SUBSCRIBER_TYPES };
    const requestsNow = () => sim.requests.filter(CURRENT_REQUESTS).length;
    const pass = (type: SubscriberType): Promise<PassResult> => source.runPass(ctx, groupId, type, 'full');

    // The first complete pass of every status; its requests are a round's.
    let before = requestsNow();
    for (const type of SUBSCRIBER_TYPES) await pass(type);
    const roundRequests = requestsNow() - before;
    // What autovacuum does in production after a first mirror; the bench's server may run without it,
    // and the next pass's upserts would then be planned on an empty table's statistics.
    await db.pool.query('analyze');
    sim.clearRequests();
    const members = sim.world.memberCount(groupId);
    options.log(`proof: ${members.toLocaleString('en-US')} members; a round of every status: ${roundRequests} requests`);

    const proofContext: ProofContext = {
      pool: db.pool,
      redis,
      prefix,
      types: SUBSCRIBER_TYPES,
      source,
      log: logger,
      closing: () => false,
      runPass: (type) => pass(type),
    };
    const runs: ProofFigure[] = [];
    let offset = 0;
    for (const k of options.leavers) {
      const leavers = sim.world.members(groupId, 'active').slice(offset, offset + k);
      offset += k;
      for (const id of leavers) sim.world.removeFromGroup(id, groupId);
      const first = await pass('active');
      const lock = await tryAcquirePassLock(redis, passLockKey(prefix, groupId, 'active'));
      if (!lock) throw new Error('the pass lock is taken');
      sim.clearRequests();
      before = requestsNow();
      const started = performance.now();
      const outcome = await confirmRemovals(proofContext, { groupId, type: 'active', trigger: 'backfill' }, lock, first);
      const seconds = (performance.now() - started) / 1000;
      const proofRequests = requestsNow() - before;
      await verify(db.pool, groupId, leavers, sim.world.members(groupId));
      const run: ProofFigure = {
        leavers: k,
        strategy: outcome.checked > 0 && outcome.passes === 0 ? 'checks' : 'rounds',
        proofRequests,
        roundRequests,
        ended: outcome.removed + first.removed,
        seconds: Math.round(seconds * 10) / 10,
      };
      runs.push(run);
      options.log(
        `proof: ${k} leavers: ${run.strategy}, ${proofRequests} requests (a second round: ${roundRequests}), ${run.ended} ended, ${run.seconds} s`,
      );
    }
    return { subscribers: options.subscribers, members, runs };
  } finally {
    await deleteKeysByPrefix(options.redisUrl, prefix).catch(() => 0);
    redis.disconnect();
    await sim.close();
    await db.drop();
  }
}

/** Every leaver ended, no listed member ended. */
async function verify(pool: import('pg').Pool, groupId: string, leavers: readonly string[], listed: readonly string[]): Promise<void> {
  const { rows } = await pool.query<{ id: string }>(
    'select subscriber_id as id from group_members where group_id = $1 and removed_at is not null',
    [groupId],
  );
  const ended = new Set(rows.map((r) => r.id));
  const notEnded = leavers.filter((id) => !ended.has(id));
  if (notEnded.length > 0) throw new Error(`${notEnded.length} leavers not ended, e.g. ${notEnded[0]}`);
  const listedSet = new Set(listed);
  const falseRemovals = [...ended].filter((id) => listedSet.has(id));
  if (falseRemovals.length > 0) throw new Error(`${falseRemovals.length} listed members ended, e.g. ${falseRemovals[0]}`);
}

if (isMain(import.meta.url)) {
  const subscribers = Number(argText('--subscribers') ?? 1_000_000);
  const leavers = (argText('--leavers') ?? '10,50000').split(',').map(Number);
  const figures = await benchProof({
    subscribers,
    leavers,
    databaseUrl: process.env.DATABASE_URL ?? DEFAULT_DB,
    redisUrl: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
    log: console.log,
  });
  console.log(JSON.stringify(figures, null, 1));
}

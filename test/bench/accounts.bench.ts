/**
 * Several accounts in one deployment (issue 35; docs/benchmarks.md, "accounts"). Each account is a
 * simulator of its own (its own world, key and budget: legacy 60 requests a minute per endpoint,
 * current 120 a minute for the account), half of them legacy and half current, one group each.
 *
 * 1. The floor: each kind of account alone, in a one-account deployment of the same process
 *    (`node dist/cli.js start --role worker`), from its spawn until every type of its group has a
 *    complete full pass. The slower of the two is the slowest account's own floor. The kind that
 *    peaks higher runs `--baseline-runs` times in all (default 3), and the median of its peaks is
 *    the one-account baseline: one run of it moves by some 20 MB from the next (151-174 MB in one
 *    day), more than the goal's tenth.
 * 2. Every account at once, with 1 and with 3 worker replicas (processes sharing the database and
 *    Redis): the time until every account is mirrored, set against that floor (goal: floor ÷ time
 *    ≥ 0.8 with 3 replicas), and the peak RSS of each replica (goal: ≤ 1.1 × the one-account peak).
 * 2b. (`kinds`) Each kind's accounts together, with 1 replica: the legacy half at once, then the
 *    current half at once, each against the one-account peak. Which kind's reading at once the
 *    memory over one account's comes from (docs/benchmarks.md, "accounts").
 * 2b'. (`4`, only when named) Every account with 4 worker replicas: 5 accounts each, the most one
 *    replica holds within the goal by part `sizes`.
 * 2c. (`sizes`) Fewer accounts on one replica: `--sizes` of them (default 4, 8, 12 and 16), each
 *    half legacy and half current, each peak against the one-account peak. A line through those
 *    peaks, the one-account baseline's and, when part 1 ran, every account's gives what a replica
 *    adds for each account it reads and the most accounts it holds within the goal
 *    (lib/accounts-per-replica.ts): steadier than any one run's ratio, which moves by about the goal's tenth.
 * 3. A backfill of a big account (`--big-members`, default 1,000,000) while the others tick every
 *    `--sync-every` seconds: for `--window` seconds, the delay of the others' scheduled passes, each
 *    the gap between two starts of the same (account, group, type) less SYNC_EVERY (p99; goal: at
 *    most one SYNC_EVERY).
 * 4. (`idle`) What the accounts' own parts hold, with nothing to read: every account of a group of
 *    no members (their passes read one empty page a type), with 1 and with 3 replicas (which deal
 *    the accounts out), against each kind alone: the RSS each process settles at (the median of
 *    the second half of its `--idle` seconds, by default 20, sampled every 500 ms) and its VmHWM:
 *    the part of a replica's memory that no bound on reading reaches (docs/benchmarks.md, "accounts").
 *
 *   npm run bench -- accounts [--accounts-n 20] [--accounts-members 20000] [--accounts-big-members 1000000]
 *        [--accounts-sync-every 30] [--accounts-window 180] [--accounts-idle 20] [--accounts-baseline-runs 3]
 *        [--accounts-sizes 4,8,12,16] [--accounts-parts floor,1,3,kinds,sizes,backfill,idle; also 4]
 *   npx tsx test/bench/accounts.bench.ts [--accounts 20] [--members 20000] [--big-members 1000000]
 *        [--sync-every 30] [--window 180] [--idle 20] [--baseline-runs 3] [--sizes 4,8,12,16]
 *        [--parts floor,1,3,kinds,sizes,backfill,idle; also 4] [--json path]
 *
 * Parts 1, 3, 4, kinds and sizes measure the floor whether `floor` is named or not: it is their baseline.
 * Real time (the service's budget is per minute): the default run takes about twenty-five minutes (sizes about eight of them).
 * Builds dist/ first; uses DATABASE_URL and REDIS_URL. The replicas are spawned by lib/service-run.ts
 * (spawnService), so BENCH_NODE_FLAGS, BENCH_ENV, BENCH_OUTPUT and BENCH_RSS_TRACE apply to them too;
 * BENCH_LOG_LEVEL sets their LOG_LEVEL (default warn: `info` with BENCH_OUTPUT shows, for one, which
 * accounts each replica reads and when it takes them). BENCH_REPLICA_STAGGER_MS spawns each replica
 * that long after the one before (default 0: together), to measure replicas that reach their first
 * heartbeat apart, as a busy host's do.
 */
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import pg from 'pg';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { liveReplicaReads } from '../../src/sync/replicas.js';
import { freePort } from '../helpers/child-service.js';
import { deleteKeysByPrefix } from '../helpers/redis-prefix.js';
import { argNumber, argText, isMain } from './lib/cli.js';
import { figure, printTable, writeJson, type BenchFigure, type BenchResult } from './lib/report.js';
import { createScratchDatabase, type ScratchDatabase } from './lib/scratch-db.js';
import { accountsWithin, defaultSizes, fitPeaks, type PeakLine, type SizePeak } from './lib/accounts-per-replica.js';
import { describeConnectionWaits, scrapeConnectionWaits, type ConnectionWaits } from './lib/connection-waits.js';
import { buildDist, describeProductionEnv, peakRssMb, REPO_ROOT, spawnService, tenthMb, type ServiceProcess } from './lib/service-run.js';

const PAGE_SIZE = 1000;

export type Kind = 'legacy' | 'current';

/**
 * What `parts` may name: the floor, every account with 1, 3 and 4 replicas, each kind's accounts
 * together, fewer accounts on one replica, the big backfill, the accounts' parts alone.
 */
export const ACCOUNTS_PARTS = ['floor', '1', '3', '4', 'kinds', 'sizes', 'backfill', 'idle'] as const;
export type AccountsPart = (typeof ACCOUNTS_PARTS)[number];
/** What runs when no part is named: all but `4`, a hand check of the rule `sizes` gives (docs/operations.md). */
export const DEFAULT_ACCOUNTS_PARTS: readonly AccountsPart[] = ACCOUNTS_PARTS.filter((p) => p !== '4');

interface Account {
  name: string;
  kind: Kind;
  sim: Simulator;
  groupId: string;
  members: number;
}

export interface AccountsBenchOptions {
  accounts?: number;
  members?: number;
  bigMembers?: number;
  syncEverySeconds?: number;
  windowSeconds?: number;
  /** How long each idle deployment runs (`idle`); the last half of its samples give its settled RSS. */
  idleSeconds?: number;
  /** Runs of the one-account deployment whose peak is the baseline (the median of them); default 3. */
  baselineRuns?: number;
  /** `sizes`: the accounts of each one-replica deployment, half of each kind (default 4, 8, 12, 16 below `accounts`). */
  sizes?: readonly number[];
  parts?: readonly string[];
  databaseUrl?: string;
  redisUrl?: string;
  log?: (line: string) => void;
  json?: string | null;
}

const accountName = (i: number) => `a${String(i + 1).padStart(2, '0')}`;

async function startAccount(i: number, kind: Kind, members: number): Promise<Account> {
  const name = accountName(i);
  const sim = await startSimulator({
    subscribers: members,
    groups: 1,
    seed: 100 + i,
    apiKey: `key-${name}-${Math.random().toString(36).slice(2)}`,
    webhooksToken: `token-${name}-${Math.random().toString(36).slice(2)}`,
  });
  const groupId = sim.world.groupIds()[0] ?? '';
  return { name, kind, sim, groupId, members: sim.world.memberCount(groupId) };
}

/** The settings of a deployment of `accounts` (docs/operations.md, "Several accounts"). */
function accountsEnv(accounts: readonly Account[]): Record<string, string> {
  const env: Record<string, string> = { ACCOUNTS: accounts.map((a) => a.name).join(',') };
  for (const a of accounts) {
    const p = `ACCOUNT_${a.name.toUpperCase()}__`;
    env[`${p}SYNC_SOURCE`] = a.kind;
    env[`${p}SYNC_GROUPS`] = a.groupId;
    if (a.kind === 'legacy') {
      env[`${p}MAILER_LEGACY_URL`] = a.sim.url;
      env[`${p}MAILER_API_KEY`] = a.sim.apiKey;
      env[`${p}MAILER_API_KEY_HEADER`] = a.sim.apiKeyHeader;
    } else {
      env[`${p}MAILER_API_URL`] = a.sim.url;
      env[`${p}MAILER_API_TOKEN`] = a.sim.webhooksToken;
    }
  }
  return env;
}

type Urls = { databaseUrl: string; redisUrl: string };
type Log = (line: string) => void;

/**
 * A deployment's scratch database, Redis prefix and environment; `dispose` drops what it made.
 * Each run gets its own, so no run starts from another's mirror, schedules or budgets.
 */
interface Deployment {
  env: Record<string, string>;
  /** Its REDIS_PREFIX: where its replicas announce themselves. */
  prefix: string;
  /** Reads across accounts (a pool with no account of its own). */
  unscoped: pg.Pool;
  dispose(): Promise<void>;
}

async function prepareDeployment(
  accounts: readonly Account[],
  urls: Urls,
  label: string,
  extraEnv: Record<string, string> = {},
): Promise<Deployment> {
  const scratch: ScratchDatabase = await createScratchDatabase(urls.databaseUrl, `accounts-${label}`);
  const prefix = `bench-accounts-${label}-${process.pid}-${Date.now()}`;
  const env = {
    DATABASE_URL: scratch.url,
    REDIS_URL: urls.redisUrl,
    REDIS_PREFIX: prefix,
    SYNC_PAGE_SIZE: String(PAGE_SIZE),
    AUDIT_EVERY: 'off',
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? 'warn',
    ...extraEnv,
    ...accountsEnv(accounts),
  };
  const unscoped = new pg.Pool({ connectionString: scratch.url, max: 1 });
  return {
    env,
    prefix,
    unscoped,
    dispose: async () => {
      await unscoped.end();
      // The limiter's keys start with b_<prefix> (Bottleneck's naming).
      for (const p of [prefix, `b_${prefix}`]) await deleteKeysByPrefix(urls.redisUrl, p).catch(() => 0);
      await scratch.drop();
    },
  };
}

async function stopAll(replicas: readonly ServiceProcess[]): Promise<void> {
  await Promise.all(replicas.map((r) => r.stop()));
}

/** Throws with the replica's stderr when one has died: the figures of a deployment short of a replica mean nothing. */
function assertRunning(replicas: readonly ServiceProcess[], label: string): void {
  for (const r of replicas) {
    const exited = r.exited();
    if (exited) throw new Error(`${label}: a replica ${exited}: ${r.stderrTail()}`);
  }
}

/** Accounts whose every type has a complete full pass, read across accounts (a pool without one). */
async function mirroredAccounts(pool: pg.Pool): Promise<Set<string>> {
  const { rows } = await pool.query<{ account: string }>(
    `select account from sync_status group by account having count(*) = 5 and count(last_full_completed_at) = 5`,
  );
  return new Set(rows.map((r) => r.account));
}

/** Memberships mirrored in all; throws when an account has none (its mirror is not what the run claims). */
async function checkMemberships(pool: pg.Pool, accounts: readonly Account[], label: string): Promise<number> {
  const { rows } = await pool.query<{ account: string; n: number }>(
    `select account, count(*)::int as n from current_group_members group by account`,
  );
  const byAccount = new Map(rows.map((r) => [r.account, r.n]));
  const wrong = accounts.filter((a) => (byAccount.get(a.name) ?? 0) === 0);
  if (wrong.length > 0) throw new Error(`${label}: no members mirrored for ${wrong.map((a) => a.name).join(', ')}`);
  return rows.reduce((n, r) => n + r.n, 0);
}

interface DeploymentRun {
  elapsedMs: number;
  /** Per replica: the higher of the sampled RSS peak and VmHWM, MB. */
  peaksMb: number[];
  /** Per replica, in the order of `peaksMb`: what it last said it reads (its heartbeat), by kind. */
  reads: ReplicaReads[];
  /** Memberships mirrored, every account (each has some: checked). */
  rows: number;
  /** Per kind, when its accounts were mirrored, ms from the spawn: the median and the last. */
  byKind: KindTimes[];
  /** Per replica, in the order of `peaksMb`: its checkouts of a connection until every account was mirrored (null: no metrics). */
  connectionWaits: Array<ConnectionWaits | null>;
}

/** When the accounts of one kind were mirrored in a deployment. */
export interface KindTimes {
  kind: Kind;
  medianMs: number;
  lastMs: number;
}

/** The median and the last of each kind's times: which kind sets the pace, and how far behind its floor. */
function timesByKind(accounts: readonly Account[], mirroredAt: ReadonlyMap<string, number>): KindTimes[] {
  const kinds: Kind[] = ['legacy', 'current'];
  return kinds.flatMap((kind) => {
    const times = accounts.filter((a) => a.kind === kind).map((a) => mirroredAt.get(a.name) ?? Number.NaN);
    const median = percentile(times, 50);
    return median === null ? [] : [{ kind, medianMs: Math.round(median), lastMs: Math.round(Math.max(...times)) }];
  });
}

const MIRROR_TIMEOUT_MS = 30 * 60_000;

/** What one replica read while the accounts were mirrored: the accounts of each kind it last said it reads. */
export interface ReplicaReads {
  legacy: number;
  current: number;
  /** Whether its reads changed while it ran (a hand-over: replicas starting a heartbeat apart). */
  changed: boolean;
}

/**
 * Who reads what, from the replicas' own heartbeats (src/sync/replicas.ts): a replica's id carries
 * its pid, the one the benchmark spawned and samples. Which replica reads how many legacy accounts
 * is what its peak follows (docs/benchmarks.md, "accounts").
 */
class ReadsWatch {
  private readonly redis: Redis;
  private readonly said = new Map<number, string[]>();
  private readonly changed = new Set<number>();

  constructor(
    redisUrl: string,
    private readonly namespace: string,
  ) {
    this.redis = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
    this.redis.on('error', () => {});
  }

  async poll(): Promise<void> {
    const reads = await liveReplicaReads(this.redis, this.namespace).catch(() => new Map<string, string[] | null>());
    for (const [id, accounts] of reads) {
      const pid = Number(id.split(':')[1]);
      if (accounts === null || !Number.isInteger(pid)) continue;
      const before = this.said.get(pid);
      if (before && before.join(',') !== accounts.join(',')) this.changed.add(pid);
      this.said.set(pid, accounts);
    }
  }

  of(pid: number, accounts: readonly Account[]): ReplicaReads {
    const names = new Set(this.said.get(pid) ?? []);
    const count = (kind: Kind) => accounts.filter((a) => a.kind === kind && names.has(a.name)).length;
    return { legacy: count('legacy'), current: count('current'), changed: this.changed.has(pid) };
  }

  close(): void {
    this.redis.disconnect();
  }
}

/** "182.8 MB (reads 4 legacy, 3 current)" for each replica. */
export function peaksWithReads(run: Pick<DeploymentRun, 'peaksMb' | 'reads'>): string {
  return run.peaksMb
    .map((mb, i) => {
      const r = run.reads[i];
      return r ? `${mb} MB (reads ${r.legacy} legacy, ${r.current} current${r.changed ? ', after a hand-over' : ''})` : `${mb} MB`;
    })
    .join(', ');
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Waits until every one of `accounts` is mirrored, sampling the replicas' RSS meanwhile; returns when
 * each account was first seen mirrored, ms from the call (within the 200 ms of a poll).
 */
async function waitUntilMirrored(
  pool: pg.Pool,
  accounts: readonly Account[],
  replicas: readonly ServiceProcess[],
  label: string,
  watch?: ReadsWatch,
): Promise<Map<string, number>> {
  const started = performance.now();
  const want = new Set(accounts.map((a) => a.name));
  const mirroredAt = new Map<string, number>();
  for (;;) {
    assertRunning(replicas, label);
    for (const r of replicas) r.sampleRss();
    await watch?.poll();
    const done = await mirroredAccounts(pool).catch(() => new Set<string>());
    for (const name of done) if (want.has(name) && !mirroredAt.has(name)) mirroredAt.set(name, performance.now() - started);
    if ([...want].every((a) => done.has(a))) return mirroredAt;
    if (performance.now() - started > MIRROR_TIMEOUT_MS)
      throw new Error(`${label}: not mirrored within 30 minutes (${done.size}/${want.size})`);
    await sleep(200);
  }
}

/** BENCH_REPLICA_STAGGER_MS: the time between two replicas' spawns (a hand measurement's setting). */
function replicaStaggerMs(): number {
  const raw = process.env.BENCH_REPLICA_STAGGER_MS ?? '0';
  const ms = Number(raw);
  if (!Number.isInteger(ms) || ms < 0) throw new Error(`BENCH_REPLICA_STAGGER_MS must be a whole number of milliseconds, got ${raw}`);
  return ms;
}

/** Runs `replicas` worker processes for `accounts` until every account is mirrored (timed from the first spawn). */
async function runDeployment(accounts: readonly Account[], replicas: number, urls: Urls, label: string): Promise<DeploymentRun> {
  const deployment = await prepareDeployment(accounts, urls, label);
  const watch = new ReadsWatch(urls.redisUrl, deployment.prefix);
  const staggerMs = replicaStaggerMs();
  const started = performance.now();
  const running: ServiceProcess[] = [];
  try {
    const opsPorts: number[] = [];
    for (let i = 0; i < replicas; i++) {
      if (i > 0 && staggerMs > 0) await sleep(staggerMs);
      // Its /metrics on a port of its own: how long its accounts waited for its connections.
      opsPorts.push(await freePort());
      running.push(spawnService({ ...deployment.env, OPS_PORT: String(opsPorts[i]) }));
    }
    const mirroredAt = await waitUntilMirrored(deployment.unscoped, accounts, running, label, watch);
    const elapsedMs = performance.now() - started;
    const peaksMb = running.map(peakRssMb);
    const reads = running.map((r) => watch.of(r.pid, accounts));
    const byKind = timesByKind(accounts, mirroredAt);
    const connectionWaits = await Promise.all(opsPorts.map(scrapeConnectionWaits));
    return { elapsedMs, peaksMb, reads, rows: await checkMemberships(deployment.unscoped, accounts, label), byKind, connectionWaits };
  } finally {
    watch.close();
    await stopAll(running);
    await deployment.dispose();
  }
}

/** The p-th percentile (nearest rank); null when there is nothing to rank. */
function percentile(values: readonly number[], p: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? null;
}

interface BackfillRun {
  /** Delays of the others' scheduled passes during the backfill, ms. */
  delaysMs: number[];
  /** The same with the others ticking alone, just before, ms. */
  baselineDelaysMs: number[];
  bigRowsDuringWindow: number;
}

/**
 * The delays of the scheduled incremental passes of `accounts` from `from` to `to`: each gap between
 * two starts of one (account, group, type) in the window, less SYNC_EVERY, and for each of them the
 * time from its last start to the window's end, less SYNC_EVERY (a pass overdue and not started yet
 * is a delay too, not a missing gap).
 */
async function scheduledDelays(pool: pg.Pool, accounts: readonly Account[], from: Date, to: Date, syncEveryMs: number): Promise<number[]> {
  const names = accounts.map((a) => a.name);
  const gaps = await pool.query<{ gap_ms: number | null }>(
    `select extract(epoch from started_at - lag(started_at) over w) * 1000 as gap_ms
       from sync_passes
      where account = any ($1::text[]) and trigger = 'schedule' and kind = 'incremental' and started_at >= $2 and started_at < $3
     window w as (partition by account, group_id, type order by started_at)`,
    [names, from, to],
  );
  const trailing = await pool.query<{ gap_ms: number }>(
    `select extract(epoch from $2::timestamptz - max(started_at)) * 1000 as gap_ms
       from sync_passes
      where account = any ($1::text[]) and trigger = 'schedule' and kind = 'incremental' and started_at < $2
      group by account, group_id, type`,
    [names, to],
  );
  return [...gaps.rows.map((r) => r.gap_ms).filter((g): g is number => g !== null), ...trailing.rows.map((r) => r.gap_ms)].map((g) =>
    Math.max(0, g - syncEveryMs),
  );
}

/**
 * The big account's first full pass (a backfill: nothing of it mirrored yet) while the others tick.
 * A replica serving the others alone mirrors them, then they tick for `windowMs` (the baseline: the
 * delays their own budgets and passes make); then a replica serving every account starts the
 * backfill (an account's Redis prefix follows its name: adding one changes no other's), and for
 * another `windowMs` their scheduled passes are timed again. Full passes stay on a daily schedule
 * (RECONCILE_EVERY=24h): what ticks is the incremental passes. A first run that started every
 * account at once timed the others' own first mirror (a current account's takes 107 s of its
 * budget) as delays the backfill caused.
 */
async function runBackfill(
  big: Account,
  others: readonly Account[],
  options: { syncEveryMs: number; windowMs: number } & Urls,
): Promise<BackfillRun> {
  const every = `${Math.round(options.syncEveryMs / 1000)}s`;
  const deployment = await prepareDeployment(others, options, 'backfill', { SYNC_EVERY: every, RECONCILE_EVERY: '24h' });
  const pool = deployment.unscoped;
  const running: ServiceProcess[] = [];
  try {
    const alone = spawnService(deployment.env);
    running.push(alone);
    await waitUntilMirrored(pool, others, running, 'backfill (the others first)');
    const baselineStart = new Date();
    await sleep(options.windowMs);
    assertRunning(running, 'backfill (the others alone)');
    const baselineDelaysMs = await scheduledDelays(pool, others, baselineStart, new Date(), options.syncEveryMs);
    await alone.stop();
    running.length = 0;

    const windowStart = new Date();
    running.push(spawnService({ ...deployment.env, ...accountsEnv([...others, big]) }));
    await sleep(options.windowMs);
    assertRunning(running, 'backfill');
    const delaysMs = await scheduledDelays(pool, others, windowStart, new Date(), options.syncEveryMs);
    const bigRows = await pool.query<{ n: number }>(`select count(*)::int as n from group_members where account = $1`, [big.name]);
    return { delaysMs, baselineDelaysMs, bigRowsDuringWindow: bigRows.rows[0]?.n ?? 0 };
  } finally {
    await stopAll(running);
    await deployment.dispose();
  }
}

/** One kind of account alone, in a one-account deployment. */
export interface AccountsAloneFigures {
  kind: Kind;
  members: number;
  elapsedMs: number;
  peakRssMb: number;
}

/** The baseline of every deployment: the slower kind's time and the higher one-account peak. */
export interface AccountsFloorFigures {
  floorMs: number;
  /** The kind whose time is the floor. */
  slowest: Kind;
  /** The one-account baseline: the median of `baselinePeaksMb`. */
  peakRssMb: number;
  /** The kind that peaked higher, and each of its runs' peaks (the first is its run in `alone`). */
  baselineKind: Kind;
  baselinePeaksMb: number[];
  alone: AccountsAloneFigures[];
}

/** Every account at once with `replicas` worker processes. */
export interface AccountsDeploymentFigures {
  replicas: number;
  elapsedMs: number;
  /** Per replica, MB. */
  peaksMb: number[];
  /** Per replica, in the order of `peaksMb`: the accounts of each kind it read. */
  reads: ReplicaReads[];
  memberships: number;
  byKind: KindTimes[];
  /** Per replica, in the order of `peaksMb`: its accounts' waits for its shared Postgres connections. */
  connectionWaits: Array<ConnectionWaits | null>;
}

/** One kind's accounts together, with 1 replica. */
export interface AccountsKindFigures {
  kind: Kind;
  accounts: number;
  elapsedMs: number;
  /** That kind's one account alone, ms (the floor's figure for it). */
  aloneMs: number;
  peakRssMb: number;
}

/** The big account's backfill while the others tick. */
export interface AccountsBackfillFigures {
  bigMembers: number;
  others: number;
  syncEveryMs: number;
  windowMs: number;
  /** Delays measured: gaps between two scheduled starts of one (account, group, type) of the others, and each one's time since its last start. */
  gaps: number;
  /** Delay beyond SYNC_EVERY; null when no gap was measured. */
  p50Ms: number | null;
  p99Ms: number | null;
  /** The same with the others ticking alone, just before the backfill (the baseline). */
  baselineGaps: number;
  baselineP99Ms: number | null;
  bigRowsDuringWindow: number;
}

/**
 * Each kind of account alone: the slower one's time is the floor; the kind that peaks higher runs
 * `baselineRuns` times in all, and the median of its peaks is the one-account baseline.
 */
async function measureFloor(
  accounts: readonly Account[],
  baselineRuns: number,
  urls: Urls,
  log: Log,
  figures: BenchFigure[],
): Promise<AccountsFloorFigures> {
  const alone: AccountsAloneFigures[] = [];
  for (const kind of ['legacy', 'current'] as const) {
    const account = accounts.find((a) => a.kind === kind);
    if (!account) continue;
    const run = await runDeployment([account], 1, urls, `floor-${kind}`);
    const peakRssMb = run.peaksMb[0] ?? 0;
    alone.push({ kind, members: account.members, elapsedMs: Math.round(run.elapsedMs), peakRssMb });
    log(
      `accounts: one ${kind} account alone: ${(run.elapsedMs / 1000).toFixed(1)} s, peak RSS ${peakRssMb} MB; ` +
        `waits for a database connection: ${describeConnectionWaits(run.connectionWaits[0] ?? null)}`,
    );
    figures.push(
      figure(
        `one ${kind} account alone: time to mirror`,
        run.elapsedMs / 1000,
        's',
        null,
        `${account.members} members; peak RSS ${peakRssMb} MB`,
      ),
    );
  }
  if (alone.length === 0) throw new Error('floor: no account to measure');
  const slowest = alone.reduce((a, b) => (b.elapsedMs > a.elapsedMs ? b : a));
  const higher = alone.reduce((a, b) => (b.peakRssMb > a.peakRssMb ? b : a));
  const baselinePeaksMb = await baselinePeaks(accounts, higher, baselineRuns, urls);
  const peakRssMb = tenthMb(percentile(baselinePeaksMb, 50) ?? higher.peakRssMb);
  log(
    `accounts: one-account baseline ${peakRssMb} MB: the median of ${baselinePeaksMb.join(', ')} MB (${baselinePeaksMb.length} runs of one ${higher.kind} account alone)`,
  );
  return { floorMs: slowest.elapsedMs, slowest: slowest.kind, peakRssMb, baselineKind: higher.kind, baselinePeaksMb, alone };
}

/** The peaks of `runs` one-account deployments of `higher`'s kind, its run in the floor first. */
async function baselinePeaks(accounts: readonly Account[], higher: AccountsAloneFigures, runs: number, urls: Urls): Promise<number[]> {
  const account = accounts.find((a) => a.kind === higher.kind);
  const peaks = [higher.peakRssMb];
  for (let i = 1; account && i < runs; i++) {
    const run = await runDeployment([account], 1, urls, `baseline-${higher.kind}-${i + 1}`);
    peaks.push(run.peaksMb[0] ?? 0);
  }
  return peaks;
}

const seconds = (ms: number | null) => (ms === null ? '—' : `${(ms / 1000).toFixed(1)} s`);

/** Every account at once, with 1, 3 and 4 replicas (those of them `parts` names). */
async function measureDeployments(
  accounts: readonly Account[],
  floor: AccountsFloorFigures,
  parts: ReadonlySet<string>,
  urls: Urls,
  log: Log,
  figures: BenchFigure[],
): Promise<AccountsDeploymentFigures[]> {
  const n = accounts.length;
  const deployments: AccountsDeploymentFigures[] = [];
  for (const replicas of [1, 3, 4]) {
    if (!parts.has(String(replicas))) continue;
    const run = await runDeployment(accounts, replicas, urls, `r${replicas}`);
    deployments.push({
      replicas,
      elapsedMs: Math.round(run.elapsedMs),
      peaksMb: run.peaksMb,
      reads: run.reads,
      memberships: run.rows,
      byKind: run.byKind,
      connectionWaits: run.connectionWaits,
    });
    const speed = floor.floorMs / run.elapsedMs;
    const peak = Math.max(...run.peaksMb);
    log(
      `accounts: ${n} accounts, ${replicas} replica(s): ${(run.elapsedMs / 1000).toFixed(1)} s (floor ${(floor.floorMs / 1000).toFixed(1)} s, speed ${speed.toFixed(2)}× the floor's); ` +
        `peak RSS per replica ${peaksWithReads(run)} (one account: ${floor.peakRssMb} MB); ${run.rows} memberships; ` +
        run.byKind.map((k) => `${k.kind} accounts mirrored at ${seconds(k.medianMs)} (median), ${seconds(k.lastMs)} (last)`).join(', ') +
        `; waits for a database connection: ${run.connectionWaits.map(describeConnectionWaits).join('; ')}`,
    );
    figures.push(
      figure(
        `${n} accounts, ${replicas} replica(s): time to mirror every account`,
        run.elapsedMs / 1000,
        's',
        floor.floorMs / 1000,
        `speed ${speed.toFixed(2)} of the slowest account's floor (goal ≥ 0.8 with 3 replicas); ` +
          run.byKind.map((k) => `${k.kind} mirrored at ${seconds(k.medianMs)} median, ${seconds(k.lastMs)} last`).join('; '),
      ),
      figure(
        `${n} accounts, ${replicas} replica(s): peak RSS per replica`,
        peak,
        'MB',
        floor.peakRssMb,
        `${(peak / floor.peakRssMb).toFixed(2)}× one account's (goal ≤ 1.1); replicas: ${peaksWithReads(run)}`,
      ),
    );
  }
  return deployments;
}

/**
 * Each kind's accounts together with 1 replica, against the one-account peak: whether the memory a
 * deployment of every account holds over one account's comes from one kind reading at once. The
 * simulators keep each key's one-minute budget from run to run: after parts 1 and 3 the legacy
 * accounts may start with some of theirs spent, so `--parts kinds` alone gives the cleaner figures.
 */
async function measureKinds(
  accounts: readonly Account[],
  floor: AccountsFloorFigures,
  urls: Urls,
  log: Log,
  figures: BenchFigure[],
): Promise<AccountsKindFigures[]> {
  const kinds: AccountsKindFigures[] = [];
  for (const alone of floor.alone) {
    const same = accounts.filter((a) => a.kind === alone.kind);
    const run = await runDeployment(same, 1, urls, `kind-${alone.kind}`);
    const peakRssMb = run.peaksMb[0] ?? 0;
    kinds.push({ kind: alone.kind, accounts: same.length, elapsedMs: Math.round(run.elapsedMs), aloneMs: alone.elapsedMs, peakRssMb });
    const ratio = (peakRssMb / floor.peakRssMb).toFixed(2);
    log(
      `accounts: the ${alone.kind} accounts together (${same.length}), 1 replica: ${seconds(run.elapsedMs)} (one alone: ${seconds(alone.elapsedMs)}); ` +
        `peak RSS ${peakRssMb} MB, ${ratio}× one account's ${floor.peakRssMb} MB`,
    );
    figures.push(
      figure(
        `the ${alone.kind} accounts together (${same.length}), 1 replica: peak RSS`,
        peakRssMb,
        'MB',
        floor.peakRssMb,
        `${ratio}× one account's; mirrored in ${seconds(run.elapsedMs)} (one ${alone.kind} account alone: ${seconds(alone.elapsedMs)})`,
      ),
    );
  }
  return kinds;
}

/** One replica reading `accounts` of them (half of each kind) until every one is mirrored. */
export interface AccountsSizeRun {
  accounts: number;
  elapsedMs: number;
  peakRssMb: number;
}

/** Fewer accounts on one replica: where its peak crosses the goal (lib/accounts-per-replica.ts). */
export interface AccountsSizesFigures {
  runs: AccountsSizeRun[];
  /** Through the one-account baseline, every size and, when part `1` ran, every account on one replica; null: no line. */
  line: PeakLine | null;
  /** The most accounts one replica holds within 1.1× of one account's peak, on the line; null when the line does not rise. */
  within: number | null;
}

/** The memory goal of issue 35: a replica's peak within this many times a one-account deployment's. */
export const RSS_GOAL_RATIO = 1.1;

/**
 * One replica with each of `sizes` accounts (the first of the list: half legacy, half current),
 * against the one-account baseline; with the line through those peaks, how many accounts one
 * replica holds within the goal (docs/operations.md, "How many accounts one worker holds").
 */
async function measureSizes(
  accounts: readonly Account[],
  sizes: readonly number[],
  floor: AccountsFloorFigures,
  everyAccount: AccountsDeploymentFigures | undefined,
  urls: Urls,
  log: Log,
  figures: BenchFigure[],
): Promise<AccountsSizesFigures> {
  const runs: AccountsSizeRun[] = [];
  for (const k of sizes) {
    const run = await runDeployment(accounts.slice(0, k), 1, urls, `size-${k}`);
    const peakRssMb = run.peaksMb[0] ?? 0;
    runs.push({ accounts: k, elapsedMs: Math.round(run.elapsedMs), peakRssMb });
    const ratio = (peakRssMb / floor.peakRssMb).toFixed(2);
    log(
      `accounts: ${k} accounts, 1 replica: ${seconds(run.elapsedMs)}; peak RSS ${peakRssMb} MB, ${ratio}× one account's ${floor.peakRssMb} MB`,
    );
    figures.push(
      figure(
        `${k} accounts, 1 replica: peak RSS`,
        peakRssMb,
        'MB',
        floor.peakRssMb,
        `${ratio}× one account's; mirrored in ${seconds(run.elapsedMs)}`,
      ),
    );
  }
  const points: SizePeak[] = [
    { accounts: 1, peakMb: floor.peakRssMb },
    ...runs.map((r) => ({ accounts: r.accounts, peakMb: r.peakRssMb })),
    ...(everyAccount ? [{ accounts: accounts.length, peakMb: Math.max(...everyAccount.peaksMb) }] : []),
  ];
  const line = fitPeaks(points);
  const within = line ? accountsWithin(line, floor.peakRssMb, RSS_GOAL_RATIO) : null;
  if (line) {
    const says = within === null ? 'no size over the goal' : `${within} accounts within ${RSS_GOAL_RATIO}× one account's peak`;
    log(
      `accounts: the line through ${points.length} peaks: ${line.perAccountMb.toFixed(2)} MB an account, ${line.interceptMb.toFixed(1)} MB at none: ${says}`,
    );
    figures.push(
      figure(
        'MB a replica adds for each account it reads (the line through the peaks)',
        Math.round(line.perAccountMb * 100) / 100,
        'MB',
        null,
        `${line.interceptMb.toFixed(1)} MB at none; ${says} (${points.map((p) => `${p.accounts}: ${p.peakMb}`).join(', ')} MB)`,
      ),
    );
  }
  return { runs, line, within };
}

/** A big account's backfill while the others tick. */
async function measureBackfill(
  accounts: readonly Account[],
  options: { bigMembers: number; syncEveryMs: number; windowMs: number } & Urls,
  log: Log,
  figures: BenchFigure[],
): Promise<AccountsBackfillFigures> {
  const n = accounts.length;
  log(`accounts: the big account (${options.bigMembers.toLocaleString('en-US')} members) seeding…`);
  const big = await startAccount(n, 'legacy', options.bigMembers);
  try {
    const run = await runBackfill(big, accounts.slice(0, n - 1), options);
    const backfill: AccountsBackfillFigures = {
      bigMembers: big.members,
      others: n - 1,
      syncEveryMs: options.syncEveryMs,
      windowMs: options.windowMs,
      gaps: run.delaysMs.length,
      p50Ms: percentile(run.delaysMs, 50),
      p99Ms: percentile(run.delaysMs, 99),
      baselineGaps: run.baselineDelaysMs.length,
      baselineP99Ms: percentile(run.baselineDelaysMs, 99),
      bigRowsDuringWindow: run.bigRowsDuringWindow,
    };
    log(
      `accounts: backfill of ${big.members.toLocaleString('en-US')} while ${n - 1} tick every ${options.syncEveryMs / 1000} s: ${backfill.gaps} gaps measured, ` +
        `delay p50 ${seconds(backfill.p50Ms)}, p99 ${seconds(backfill.p99Ms)} (the others alone just before: ${backfill.baselineGaps} measured, p99 ${seconds(backfill.baselineP99Ms)}); ` +
        `the big account mirrored ${run.bigRowsDuringWindow} members in the window`,
    );
    // No gap, no figure: a p99 of nothing would read as no delay at all.
    if (backfill.p99Ms !== null)
      figures.push(
        figure(
          `backfill of ${big.members} members: delay of the other accounts' scheduled passes, p99`,
          backfill.p99Ms / 1000,
          's',
          options.syncEveryMs / 1000,
          `goal ≤ one SYNC_EVERY (the baseline); ${backfill.gaps} delays over ${options.windowMs / 1000} s; p50 ${seconds(backfill.p50Ms)}; the others alone just before: p99 ${seconds(backfill.baselineP99Ms)}; ${run.bigRowsDuringWindow} of the big account's members mirrored in the window`,
        ),
      );
    return backfill;
  } finally {
    await big.sim.close();
  }
}

/** One deployment of accounts with nothing to read. */
export interface AccountsIdleRun {
  /** `legacy` or `current` alone, or `all` (every account, half of each kind). */
  who: Kind | 'all';
  accounts: number;
  /** Worker processes: 1, or 3 sharing the accounts out (`all` only). */
  replicas: number;
  /** The median RSS of the second half of the run, MB (the highest replica's). */
  settledMb: number;
  /** Each replica's settled RSS, MB. */
  replicasSettledMb: number[];
  /** VmHWM at the end, MB: the start's peak included (the highest replica's). */
  peakMb: number;
}

/** The accounts' parts alone: each kind alone, then every account, each with nothing to read. */
export interface AccountsIdleFigures {
  seconds: number;
  runs: AccountsIdleRun[];
  /** Every account's settled RSS less the higher one-account figure, per account beyond the first, MB. */
  perAccountMb: number;
}

/** One deployment of `accounts` with `replicas` worker processes for `seconds`, each sampled every 500 ms. */
async function runIdle(
  accounts: readonly Account[],
  who: AccountsIdleRun['who'],
  seconds: number,
  urls: Urls,
  replicas = 1,
): Promise<AccountsIdleRun> {
  const label = `idle-${who}-r${replicas}`;
  const deployment = await prepareDeployment(accounts, urls, label);
  const running = Array.from({ length: replicas }, () => spawnService(deployment.env));
  try {
    const samples: number[][] = running.map(() => []);
    const until = performance.now() + seconds * 1000;
    while (performance.now() < until) {
      await sleep(500);
      assertRunning(running, label);
      running.forEach((r, i) => samples[i]?.push(r.sampleRss()));
    }
    const settled = samples.map((s) => tenthMb(percentile(s.slice(Math.floor(s.length / 2)), 50) ?? 0));
    return {
      who,
      accounts: accounts.length,
      replicas,
      settledMb: Math.max(...settled),
      replicasSettledMb: settled,
      peakMb: Math.max(...running.map((r) => peakRssMb(r))),
    };
  } finally {
    await stopAll(running);
    await deployment.dispose();
  }
}

/**
 * What a replica holds for its accounts before it reads a page: `n` accounts of a group of no
 * members against one of each kind alone. Their passes still run (one empty page a type), so the
 * figure is the accounts' parts and their first passes, not the members.
 */
async function measureIdle(n: number, seconds: number, urls: Urls, log: Log, figures: BenchFigure[]): Promise<AccountsIdleFigures> {
  const empty: Account[] = [];
  try {
    for (let i = 0; i < n; i++) empty.push(await startAccount(i, i % 2 === 0 ? 'legacy' : 'current', 0));
    const runs: AccountsIdleRun[] = [];
    for (const kind of ['legacy', 'current'] as const) {
      const one = empty.find((a) => a.kind === kind);
      if (one) runs.push(await runIdle([one], kind, seconds, urls));
    }
    const all = await runIdle(empty, 'all', seconds, urls);
    // The replicas deal the accounts out: each holds the parts of its share only.
    const shared = await runIdle(empty, 'all', seconds, urls, 3);
    const one = Math.max(...runs.map((r) => r.settledMb));
    const perAccountMb = n > 1 ? Math.round(((all.settledMb - one) / (n - 1)) * 100) / 100 : 0;
    for (const r of [...runs, all, shared])
      log(
        `accounts: idle, ${r.who === 'all' ? `${r.accounts} accounts, ${r.replicas} replica(s)` : `one ${r.who} account`}: settled at ${r.replicasSettledMb.join(', ')} MB, peak ${r.peakMb} MB`,
      );
    figures.push(
      figure(
        `${n} accounts with nothing to read, 1 replica: settled RSS`,
        all.settledMb,
        'MB',
        one,
        `one account alone (the higher kind) settles at ${one} MB: ${perAccountMb} MB an account beyond it; peaks ${[...runs, all].map((r) => r.peakMb).join(', ')} MB; after ${seconds} s`,
      ),
      figure(
        `${n} accounts with nothing to read, 3 replicas: settled RSS per replica (the highest)`,
        shared.settledMb,
        'MB',
        one,
        `one account alone (the higher kind) settles at ${one} MB; replicas ${shared.replicasSettledMb.join(', ')} MB (each reads its share of the accounts); after ${seconds} s`,
      ),
    );
    return { seconds, runs: [...runs, all, shared], perAccountMb };
  } finally {
    for (const a of empty) await a.sim.close();
  }
}

export interface AccountsBenchFigures {
  accounts: number;
  members: number;
  /** Null when no part needed it (only `backfill` asked for). */
  floor: AccountsFloorFigures | null;
  deployments: AccountsDeploymentFigures[];
  kinds: AccountsKindFigures[];
  /** Null unless `sizes` was asked for. */
  sizes: AccountsSizesFigures | null;
  backfill: AccountsBackfillFigures | null;
  /** Null unless `idle` was asked for. */
  idle: AccountsIdleFigures | null;
  result: BenchResult;
}

/** `parts` as a set, refusing a name the bench does not know (a typo would silently skip a part). */
function partsOf(parts: readonly string[] | undefined): Set<AccountsPart> {
  const given = parts ?? DEFAULT_ACCOUNTS_PARTS;
  const unknown = given.filter((p) => !(ACCOUNTS_PARTS as readonly string[]).includes(p));
  if (unknown.length > 0) throw new Error(`unknown part(s) ${unknown.join(', ')} (choose from ${ACCOUNTS_PARTS.join(', ')})`);
  return new Set(given as readonly AccountsPart[]);
}

function environmentOf(n: number, members: number): Record<string, string> {
  return {
    node: process.version,
    cpus: String(os.cpus().length),
    cpuModel: os.cpus()[0]?.model ?? 'unknown',
    memoryGb: String(Math.round(os.totalmem() / 2 ** 30)),
    accounts: `${n} (half legacy at 60 requests a minute per endpoint, half current at 120 a minute), ${members} members each, page ${PAGE_SIZE}`,
    process: `node dist/cli.js start --role worker (${describeProductionEnv()}); simulators, Postgres and Redis on the same cores`,
  };
}

/** The sizes asked for, each a whole number of accounts from 1 to `n`; the defaults below `n` when none. */
function sizesOf(sizes: readonly number[] | undefined, n: number): number[] {
  if (sizes === undefined || sizes.length === 0) return defaultSizes(n);
  const wrong = sizes.filter((k) => !Number.isInteger(k) || k < 1 || k > n);
  if (wrong.length > 0) throw new RangeError(`accounts: --sizes takes whole numbers of accounts from 1 to ${n}, got ${wrong.join(', ')}`);
  return [...sizes];
}

/** The parts whose baseline is the floor: it is measured when any of them is asked for. */
const NEED_THE_FLOOR: readonly AccountsPart[] = ['floor', '1', '3', '4', 'kinds', 'sizes'];

export async function benchAccounts(options: AccountsBenchOptions = {}): Promise<AccountsBenchFigures> {
  const n = options.accounts ?? 20;
  const members = options.members ?? 20_000;
  const bigMembers = options.bigMembers ?? 1_000_000;
  const syncEveryMs = (options.syncEverySeconds ?? 30) * 1000;
  const windowMs = (options.windowSeconds ?? 180) * 1000;
  const idleSeconds = options.idleSeconds ?? 20;
  const baselineRuns = options.baselineRuns ?? 3;
  if (!Number.isInteger(baselineRuns) || baselineRuns < 1)
    throw new RangeError(`accounts: --baseline-runs must be an integer >= 1, got ${baselineRuns}`);
  const parts = partsOf(options.parts);
  const urls = {
    databaseUrl: options.databaseUrl ?? process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
    redisUrl: options.redisUrl ?? process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
  };
  const log = options.log ?? (() => {});
  const startedAt = new Date();
  log('accounts: building dist/ (the process measured is node dist/cli.js)…');
  buildDist();
  const figures: BenchFigure[] = [];
  const accounts: Account[] = [];
  let floor: AccountsFloorFigures | null = null;
  let deployments: AccountsDeploymentFigures[] = [];
  let kinds: AccountsKindFigures[] = [];
  let sizes: AccountsSizesFigures | null = null;
  let backfill: AccountsBackfillFigures | null = null;
  let idle: AccountsIdleFigures | null = null;
  try {
    // `idle` starts accounts of its own, with no members.
    if ([...parts].some((p) => p !== 'idle')) {
      for (let i = 0; i < n; i++) accounts.push(await startAccount(i, i % 2 === 0 ? 'legacy' : 'current', members));
      log(`accounts: ${n} simulators of ${members.toLocaleString('en-US')} members (half legacy, half current) up`);
    }

    if (NEED_THE_FLOOR.some((p) => parts.has(p))) floor = await measureFloor(accounts, baselineRuns, urls, log, figures);
    if (floor) deployments = await measureDeployments(accounts, floor, parts, urls, log, figures);
    if (floor && parts.has('kinds')) kinds = await measureKinds(accounts, floor, urls, log, figures);
    if (floor && parts.has('sizes')) {
      const oneReplica = deployments.find((d) => d.replicas === 1);
      sizes = await measureSizes(accounts, sizesOf(options.sizes, n), floor, oneReplica, urls, log, figures);
    }
    if (parts.has('backfill')) backfill = await measureBackfill(accounts, { bigMembers, syncEveryMs, windowMs, ...urls }, log, figures);
    if (parts.has('idle')) idle = await measureIdle(n, idleSeconds, urls, log, figures);
  } finally {
    for (const a of accounts) await a.sim.close();
  }
  const result: BenchResult = {
    bench: 'accounts',
    rows: accounts.length * members,
    startedAt: startedAt.toISOString(),
    durationMs: Date.now() - startedAt.getTime(),
    environment: environmentOf(n, members),
    figures,
  };
  if (options.json !== null) printTable(result);
  if (options.json) writeJson(options.json, result);
  return { accounts: n, members, floor, deployments, kinds, sizes, backfill, idle, result };
}

if (isMain(import.meta.url)) {
  const parts = argText('--parts');
  const sizesText = argText('--sizes');
  await benchAccounts({
    accounts: argNumber('accounts'),
    members: argNumber('members'),
    bigMembers: argNumber('big-members'),
    syncEverySeconds: argNumber('sync-every'),
    windowSeconds: argNumber('window'),
    idleSeconds: argNumber('idle'),
    baselineRuns: argNumber('baseline-runs'),
    ...(sizesText ? { sizes: sizesText.split(',').map(Number) } : {}),
    ...(parts ? { parts: parts.split(',') } : {}),
    log: (line) => console.log(line),
    json: argText('--json') ?? path.join(REPO_ROOT, 'bench-accounts.json'),
  });
}

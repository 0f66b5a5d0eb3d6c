/**
 * Several accounts in one deployment (issue 35; docs/benchmarks.md, "accounts"). Each account is a
 * simulator of its own (its own world, key and budget: legacy 60 requests a minute per endpoint,
 * current 120 a minute for the account), half of them legacy and half current, one group each.
 *
 * 1. The floor: each kind of account alone, in a one-account deployment of the same process
 *    (`node dist/cli.js start --role worker`), from its spawn until every type of its group has a
 *    complete full pass. The slower of the two is the slowest account's own floor; the higher peak
 *    RSS is the one-account baseline.
 * 2. Every account at once, with 1 and with 3 worker replicas (processes sharing the database and
 *    Redis): the time until every account is mirrored, set against that floor (goal: floor ÷ time
 *    ≥ 0.8 with 3 replicas), and the peak RSS of each replica (goal: ≤ 1.1 × the one-account peak).
 * 3. A backfill of a big account (`--big-members`, default 1,000,000) while the others, mirrored
 *    first, tick every `--sync-every` seconds: for `--window` seconds, the delay of the others'
 *    scheduled passes, each the gap between two starts of the same (account, group, type) less
 *    SYNC_EVERY (p99; goal: at most one SYNC_EVERY).
 *
 *   npx tsx test/bench/accounts.bench.ts [--accounts 20] [--members 20000] [--big-members 1000000]
 *        [--sync-every 30] [--window 180] [--parts floor,1,3,backfill] [--json path]
 *
 * Real time (the service's budget is per minute): the default run takes about fifteen minutes.
 * Builds dist/ first; uses DATABASE_URL and REDIS_URL.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { deleteKeysByPrefix } from '../helpers/redis-prefix.js';
import { argNumber, argText, isMain } from './lib/cli.js';
import { figure, printTable, writeJson, type BenchFigure, type BenchResult } from './lib/report.js';
import { createScratchDatabase, type ScratchDatabase } from './lib/scratch-db.js';
import { buildDist, describeProductionEnv, PRODUCTION_ENV, REPO_ROOT } from './lib/service-run.js';

const CLI = path.join(REPO_ROOT, 'dist/cli.js');
const PAGE_SIZE = 1000;

type Kind = 'legacy' | 'current';

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

interface Replica {
  child: ChildProcess;
  peakMb: number;
  stderr: string;
  exited: string | null;
}

function rssMb(pid: number, field = 'VmRSS'): number {
  try {
    const match = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match ? Number(match[1]) / 1024 : 0;
  } catch {
    return 0;
  }
}

function spawnReplica(env: Record<string, string>): Replica {
  const child = spawn(process.execPath, [CLI, 'start', '--role', 'worker'], {
    cwd: REPO_ROOT,
    env: { PATH: process.env.PATH ?? '', ...PRODUCTION_ENV, ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const replica: Replica = { child, peakMb: 0, stderr: '', exited: null };
  child.stderr?.on('data', (chunk: Buffer) => (replica.stderr = (replica.stderr + chunk.toString('utf8')).slice(-4000)));
  child.on('exit', (code, signal) => (replica.exited = `exited with ${code ?? signal}`));
  return replica;
}

async function stopReplicas(replicas: readonly Replica[]): Promise<void> {
  await Promise.all(
    replicas.map(async (r) => {
      if (r.exited) return;
      const gone = new Promise((resolve) => r.child.once('exit', resolve));
      r.child.kill('SIGTERM');
      const timer = setTimeout(() => r.child.kill('SIGKILL'), 15_000);
      await gone;
      clearTimeout(timer);
    }),
  );
}

/** Accounts whose every type has a complete full pass, read across accounts (a pool without one). */
async function mirroredAccounts(pool: pg.Pool): Promise<Set<string>> {
  const { rows } = await pool.query<{ account: string }>(
    `select account from sync_status group by account having count(*) = 5 and count(last_full_completed_at) = 5`,
  );
  return new Set(rows.map((r) => r.account));
}

/** Waits until every one of `accounts` is mirrored, sampling the replicas' RSS meanwhile. */
async function waitUntilMirrored(pool: pg.Pool, accounts: readonly Account[], replicas: readonly Replica[], label: string): Promise<void> {
  const started = performance.now();
  const want = new Set(accounts.map((a) => a.name));
  for (;;) {
    for (const r of replicas) {
      if (r.exited) throw new Error(`${label}: a replica ${r.exited}: ${r.stderr}`);
      r.peakMb = Math.max(r.peakMb, rssMb(r.child.pid ?? 0));
    }
    const done = await mirroredAccounts(pool).catch(() => new Set<string>());
    if ([...want].every((a) => done.has(a))) return;
    if (performance.now() - started > 30 * 60_000) throw new Error(`${label}: not mirrored within 30 minutes (${done.size}/${want.size})`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

interface DeploymentRun {
  elapsedMs: number;
  /** Per replica: the higher of the sampled RSS peak and VmHWM, MB. */
  peaksMb: number[];
  /** Rows mirrored per account equal the simulator's members (checked). */
  rows: number;
}

/** Runs `replicas` worker processes for `accounts` until every account is mirrored. */
async function runDeployment(
  accounts: readonly Account[],
  replicas: number,
  urls: { databaseUrl: string; redisUrl: string },
  label: string,
): Promise<DeploymentRun> {
  const scratch = await createScratchDatabase(urls.databaseUrl, `accounts-${label}`);
  const prefix = `bench-accounts-${label}-${process.pid}-${Date.now()}`;
  const env = {
    DATABASE_URL: scratch.url,
    REDIS_URL: urls.redisUrl,
    REDIS_PREFIX: prefix,
    SYNC_PAGE_SIZE: String(PAGE_SIZE),
    AUDIT_EVERY: 'off',
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'warn',
    ...accountsEnv(accounts),
  };
  const unscoped = new pg.Pool({ connectionString: scratch.url, max: 1 });
  const started = performance.now();
  const running: Replica[] = [];
  try {
    for (let i = 0; i < replicas; i++) running.push(spawnReplica(env));
    await waitUntilMirrored(unscoped, accounts, running, label);
    const elapsedMs = performance.now() - started;
    const peaksMb = running.map((r) => Math.round(Math.max(r.peakMb, rssMb(r.child.pid ?? 0, 'VmHWM')) * 10) / 10);
    const { rows } = await unscoped.query<{ account: string; n: number }>(
      `select account, count(*)::int as n from current_group_members group by account`,
    );
    const byAccount = new Map(rows.map((r) => [r.account, r.n]));
    const wrong = accounts.filter((a) => (byAccount.get(a.name) ?? 0) === 0);
    if (wrong.length > 0) throw new Error(`${label}: no members mirrored for ${wrong.map((a) => a.name).join(', ')}`);
    return { elapsedMs, peaksMb, rows: rows.reduce((n, r) => n + r.n, 0) };
  } finally {
    await stopReplicas(running);
    await unscoped.end();
    for (const p of [prefix, `b_${prefix}`]) await deleteKeysByPrefix(urls.redisUrl, p).catch(() => 0);
    await scratch.drop();
  }
}

function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? 0;
}

interface BackfillRun {
  /** Delays of the others' scheduled passes during the backfill, ms. */
  delaysMs: number[];
  /** The same with the others alone, just before, ms. */
  baselineDelaysMs: number[];
  bigRowsDuringWindow: number;
}

/** The gaps between consecutive scheduled starts of each (account, group, type) of `accounts` from `from` to `to`, less SYNC_EVERY. */
async function scheduledDelays(pool: pg.Pool, accounts: readonly Account[], from: Date, to: Date, syncEveryMs: number): Promise<number[]> {
  const { rows } = await pool.query<{ gap_ms: number | null }>(
    `select extract(epoch from started_at - lag(started_at) over w) * 1000 as gap_ms
       from sync_passes
      where account = any ($1::text[]) and trigger = 'schedule' and started_at >= $2 and started_at < $3
     window w as (partition by account, group_id, type order by started_at)`,
    [accounts.map((a) => a.name), from, to],
  );
  return rows
    .map((r) => r.gap_ms)
    .filter((g): g is number => g !== null)
    .map((g) => Math.max(0, g - syncEveryMs));
}

/**
 * The big account's first full pass (a backfill: nothing of it mirrored yet) while the others tick.
 * A replica serving the others alone mirrors them, then they tick for `windowMs` (the baseline:
 * the delays their own budgets and passes make); then a replica serving every account (the others
 * first, so the first account keeps its Redis prefix) starts the backfill, and for another
 * `windowMs` their scheduled passes are timed again. A delay is a gap between two starts of one
 * (account, group, type), both in the window, less SYNC_EVERY. Full passes are left to their daily
 * schedule (RECONCILE_EVERY=24h): what ticks is the incremental passes.
 */
async function runBackfill(
  big: Account,
  others: readonly Account[],
  options: { syncEveryMs: number; windowMs: number; databaseUrl: string; redisUrl: string },
): Promise<BackfillRun> {
  const scratch: ScratchDatabase = await createScratchDatabase(options.databaseUrl, 'accounts-backfill');
  const prefix = `bench-accounts-backfill-${process.pid}-${Date.now()}`;
  const base = {
    DATABASE_URL: scratch.url,
    REDIS_URL: options.redisUrl,
    REDIS_PREFIX: prefix,
    SYNC_PAGE_SIZE: String(PAGE_SIZE),
    SYNC_EVERY: `${Math.round(options.syncEveryMs / 1000)}s`,
    RECONCILE_EVERY: '24h',
    AUDIT_EVERY: 'off',
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'warn',
  };
  const unscoped = new pg.Pool({ connectionString: scratch.url, max: 1 });
  const running: Replica[] = [];
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
  try {
    const alone = spawnReplica({ ...base, ...accountsEnv(others) });
    running.push(alone);
    await waitUntilMirrored(unscoped, others, [alone], 'backfill (the others first)');
    const baselineStart = new Date();
    await sleep(options.windowMs);
    if (alone.exited) throw new Error(`backfill: the replica ${alone.exited}: ${alone.stderr}`);
    const baselineDelaysMs = await scheduledDelays(unscoped, others, baselineStart, new Date(), options.syncEveryMs);
    await stopReplicas([alone]);

    const windowStart = new Date();
    const replica = spawnReplica({ ...base, ...accountsEnv([...others, big]) });
    running.push(replica);
    await sleep(options.windowMs);
    if (replica.exited) throw new Error(`backfill: the replica ${replica.exited}: ${replica.stderr}`);
    const delaysMs = await scheduledDelays(unscoped, others, windowStart, new Date(), options.syncEveryMs);
    const bigRows = await unscoped.query<{ n: number }>(`select count(*)::int as n from group_members where account = $1`, [big.name]);
    return { delaysMs, baselineDelaysMs, bigRowsDuringWindow: bigRows.rows[0]?.n ?? 0 };
  } finally {
    await stopReplicas(running);
    await unscoped.end();
    for (const p of [prefix, `b_${prefix}`]) await deleteKeysByPrefix(options.redisUrl, p).catch(() => 0);
    await scratch.drop();
  }
}

type Urls = { databaseUrl: string; redisUrl: string };
type Log = (line: string) => void;

/** Each kind of account alone: the slower one's time is the floor, the higher peak RSS the one-account baseline. */
async function measureFloor(
  accounts: readonly Account[],
  urls: Urls,
  log: Log,
  figures: BenchFigure[],
): Promise<{ floorMs: number; peakMb: number }> {
  let floorMs = 0;
  let peakMb = 0;
  for (const kind of ['legacy', 'current'] as const) {
    const alone = accounts.find((a) => a.kind === kind);
    if (!alone) continue;
    const run = await runDeployment([alone], 1, urls, `floor-${kind}`);
    log(`accounts: one ${kind} account alone: ${(run.elapsedMs / 1000).toFixed(1)} s, peak RSS ${run.peaksMb[0]} MB`);
    figures.push(
      figure(
        `one ${kind} account alone: time to mirror`,
        run.elapsedMs / 1000,
        's',
        null,
        `${alone.members} members; peak RSS ${run.peaksMb[0]} MB`,
      ),
    );
    floorMs = Math.max(floorMs, run.elapsedMs);
    peakMb = Math.max(peakMb, ...run.peaksMb);
  }
  return { floorMs, peakMb };
}

/** Every account at once, with 1 and with 3 replicas. */
async function measureDeployments(
  accounts: readonly Account[],
  floor: { floorMs: number; peakMb: number },
  parts: ReadonlySet<string>,
  urls: Urls,
  log: Log,
  figures: BenchFigure[],
): Promise<void> {
  const n = accounts.length;
  for (const replicas of [1, 3]) {
    if (!parts.has(String(replicas))) continue;
    const run = await runDeployment(accounts, replicas, urls, `r${replicas}`);
    const speed = floor.floorMs / run.elapsedMs;
    const peak = Math.max(...run.peaksMb);
    log(
      `accounts: ${n} accounts, ${replicas} replica(s): ${(run.elapsedMs / 1000).toFixed(1)} s (floor ${(floor.floorMs / 1000).toFixed(1)} s, speed ${speed.toFixed(2)}× the floor's); ` +
        `peak RSS per replica ${run.peaksMb.join(', ')} MB (one account: ${floor.peakMb} MB); ${run.rows} memberships`,
    );
    figures.push(
      figure(
        `${n} accounts, ${replicas} replica(s): time to mirror every account`,
        run.elapsedMs / 1000,
        's',
        floor.floorMs / 1000,
        `speed ${speed.toFixed(2)} of the slowest account's floor (goal ≥ 0.8 with 3 replicas)`,
      ),
      figure(
        `${n} accounts, ${replicas} replica(s): peak RSS per replica`,
        peak,
        'MB',
        floor.peakMb,
        `${(peak / floor.peakMb).toFixed(2)}× one account's (goal ≤ 1.1); replicas: ${run.peaksMb.join(', ')} MB`,
      ),
    );
  }
}

/** A big account's backfill while the others tick. */
async function measureBackfill(
  accounts: readonly Account[],
  options: { bigMembers: number; syncEveryMs: number; windowMs: number } & Urls,
  log: Log,
  figures: BenchFigure[],
): Promise<void> {
  const n = accounts.length;
  log(`accounts: the big account (${options.bigMembers.toLocaleString('en-US')} members) seeding…`);
  const big = await startAccount(n, 'legacy', options.bigMembers);
  try {
    const run = await runBackfill(big, accounts.slice(0, n - 1), options);
    const p99 = percentile(run.delaysMs, 99);
    const p50 = percentile(run.delaysMs, 50);
    const baselineP99 = percentile(run.baselineDelaysMs, 99);
    log(
      `accounts: backfill of ${big.members.toLocaleString('en-US')} while ${n - 1} tick every ${options.syncEveryMs / 1000} s: ${run.delaysMs.length} gaps measured, ` +
        `delay p50 ${(p50 / 1000).toFixed(1)} s, p99 ${(p99 / 1000).toFixed(1)} s (the others alone: ${run.baselineDelaysMs.length} gaps, p99 ${(baselineP99 / 1000).toFixed(1)} s); ` +
        `the big account mirrored ${run.bigRowsDuringWindow} members in the window`,
    );
    figures.push(
      figure(
        `backfill of ${big.members} members: delay of the other accounts' scheduled passes, p99`,
        p99 / 1000,
        's',
        baselineP99 / 1000,
        `baseline: the same ${n - 1} accounts ticking alone just before; goal ≤ one SYNC_EVERY (${options.syncEveryMs / 1000} s); ${run.delaysMs.length} gaps over ${options.windowMs / 1000} s; p50 ${(p50 / 1000).toFixed(1)} s; ${run.bigRowsDuringWindow} of the big account's members mirrored in the window`,
      ),
    );
  } finally {
    await big.sim.close();
  }
}

export interface AccountsBenchFigures {
  result: BenchResult;
}

export async function benchAccounts(options: AccountsBenchOptions = {}): Promise<AccountsBenchFigures> {
  const n = options.accounts ?? 20;
  const members = options.members ?? 20_000;
  const bigMembers = options.bigMembers ?? 1_000_000;
  const syncEveryMs = (options.syncEverySeconds ?? 30) * 1000;
  const windowMs = (options.windowSeconds ?? 180) * 1000;
  const parts = new Set(options.parts ?? ['floor', '1', '3', 'backfill']);
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
  try {
    for (let i = 0; i < n; i++) accounts.push(await startAccount(i, i % 2 === 0 ? 'legacy' : 'current', members));
    log(`accounts: ${n} simulators of ${members.toLocaleString('en-US')} members (half legacy, half current) up`);

    const floor = parts.has('floor') || parts.has('1') || parts.has('3') ? await measureFloor(accounts, urls, log, figures) : null;
    if (floor) await measureDeployments(accounts, floor, parts, urls, log, figures);
    if (parts.has('backfill')) await measureBackfill(accounts, { bigMembers, syncEveryMs, windowMs, ...urls }, log, figures);
  } finally {
    for (const a of accounts) await a.sim.close();
  }
  const result: BenchResult = {
    bench: 'accounts',
    rows: n * members,
    startedAt: startedAt.toISOString(),
    durationMs: Date.now() - startedAt.getTime(),
    environment: {
      node: process.version,
      cpus: String(os.cpus().length),
      cpuModel: os.cpus()[0]?.model ?? 'unknown',
      memoryGb: String(Math.round(os.totalmem() / 2 ** 30)),
      accounts: `${n} (half legacy at 60 requests a minute per endpoint, half current at 120 a minute), ${members} members each, page ${PAGE_SIZE}`,
      process: `node dist/cli.js start --role worker (${describeProductionEnv()}); simulators, Postgres and Redis on the same cores`,
    },
    figures,
  };
  if (options.json !== null) printTable(result);
  if (options.json) writeJson(options.json, result);
  return { result };
}

if (isMain(import.meta.url)) {
  const parts = argText('--parts');
  await benchAccounts({
    accounts: argNumber('accounts'),
    members: argNumber('members'),
    bigMembers: argNumber('big-members'),
    syncEverySeconds: argNumber('sync-every'),
    windowSeconds: argNumber('window'),
    ...(parts ? { parts: parts.split(',') } : {}),
    log: (line) => console.log(line),
    json: argText('--json') ?? path.join(REPO_ROOT, 'bench-accounts.json'),
  });
}

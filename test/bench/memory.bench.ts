/**
 * Peak RSS of a full mirror (docs/architecture.md, invariant 8, "bounded memory"): goal ≤ 200 MB for
 * a group of 100k and of 1M subscribers, and the 1M figure within 1.1× of the 100k one (memory must
 * not grow with group size).
 *
 * For each speed and size this process seeds the simulator (which holds the whole world in memory,
 * so it must not count) and a scratch database, then measures the production process: `node
 * dist/cli.js start --role worker` started as the image starts it (lib/service-run.ts: the image's
 * NODE_OPTIONS and malloc settings, read from the Dockerfile), from its spawn until every type of
 * the one group had its first full pass (five passes side by side, page size 1000). Speeds:
 *
 * - `budget`: the service's per-endpoint budget, 60 requests a minute per method and path
 *   (simulator `rateLimitScope: 'endpoint'`, API_RATE_LIMIT 60), as the budget benchmark's
 *   `endpoint` scenario: what production runs at;
 * - `full`: the limit out of the way (API_RATE_LIMIT 100000, simulator unlimited): as fast as the
 *   mirror commits, the most pages in flight.
 *
 * Its RSS is sampled from /proc every 50 ms and compared with the kernel's high-water mark (VmHWM);
 * a process that dies (e.g. out of heap under the image's cap) fails the run. The RSS once passes
 * started is reported as the floor the passes add to. `--process plain` measures the same process
 * without the image's memory settings; `--process child` the old in-process pass under tsx
 * (memory-pass.child.ts, full speed only).
 *
 *   npx tsx test/bench/memory.bench.ts [--sizes 100000,1000000] [--quick] [--speeds budget,full] [--page-size 1000]
 *     [--process service|plain|child] [--json path]
 *
 * `--quick` measures 100k and 300k instead. Builds dist/ first; uses DATABASE_URL and REDIS_URL.
 * Variants by hand (lib/service-run.ts): BENCH_NODE_FLAGS, BENCH_ENV, BENCH_OUTPUT, BENCH_RSS_TRACE.
 */
import { spawn } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { SUBSCRIBER_TYPES, type SubscriberType } from '../../src/db/schema.js';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { deleteKeysByPrefix } from '../helpers/redis-prefix.js';
import { buildDist, describeProductionEnv, runServiceUntilMirrored } from './lib/service-run.js';
import type { MemoryChildConfig, MemoryChildReport } from './memory-pass.child.js';
import { argText, isMain } from './lib/cli.js';
import { figure, printTable, writeJson, type BenchFigure, type BenchResult } from './lib/report.js';
import { createScratchDatabase, type ScratchDatabase } from './lib/scratch-db.js';

export const DEFAULT_MEMORY_SIZES = [100_000, 1_000_000] as const;
export const QUICK_MEMORY_SIZES = [100_000, 300_000] as const;
/** Goals from the issue: peak RSS per pass, and largest ÷ smallest. */
export const MEMORY_GOAL_MB = 200;
export const MEMORY_GROWTH_GOAL = 1.1;

/** `budget`: the service's per-endpoint budget (60 a minute per endpoint); `full`: no limit. */
export const MEMORY_SPEEDS = ['budget', 'full'] as const;
export type MemorySpeed = (typeof MEMORY_SPEEDS)[number];
/** The service's per-endpoint budget: requests a minute per method and path (the budget benchmark's). */
export const ENDPOINT_BUDGET_PER_MINUTE = 60;

export interface MemoryBenchOptions {
  /** Group sizes, smallest first (default 100k and 1M). */
  sizes?: readonly number[];
  /** Speeds, each measured at every size (default both: budget, then full). */
  speeds?: readonly MemorySpeed[];
  pageSize?: number;
  sampleMs?: number;
  types?: readonly SubscriberType[];
  databaseUrl?: string;
  log?: (line: string) => void;
  json?: string | null;
  print?: boolean;
  /**
   * What is measured: `service` (default) the production process as the image starts it; `plain`
   * the same without the image's memory settings (PRODUCTION_ENV); `child` the old in-process pass
   * under tsx (memory-pass.child.ts), at full speed only.
   */
  process?: 'service' | 'plain' | 'child';
  redisUrl?: string;
}

export interface MemoryRun extends MemoryChildReport {
  subscribers: number;
  speed: MemorySpeed;
  seedMs: number;
  /** max(sampled peak, maxRSS): the figure held to the goal. */
  peakRssMb: number;
  rowsPerSecond: number;
}

export interface MemoryBenchFigures {
  runs: MemoryRun[];
  /** Per speed: peak of the largest size ÷ peak of the smallest. */
  growth: Partial<Record<MemorySpeed, number>>;
  result: BenchResult;
}

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO_ROOT = path.resolve(HERE, '../..');
const CHILD = path.join(HERE, 'memory-pass.child.ts');

function runChild(config: MemoryChildConfig): Promise<MemoryChildReport> {
  return new Promise((resolve, reject) => {
    // cwd = repo root so `--import tsx` resolves the project's tsx.
    const child = spawn(process.execPath, ['--import', 'tsx', CHILD, JSON.stringify(config)], {
      cwd: REPO_ROOT,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString('utf8')));
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      const last = out.trim().split('\n').at(-1) ?? '';
      if (code !== 0) reject(new Error(`memory child exited with ${code ?? signal}`));
      else {
        try {
          resolve(JSON.parse(last) as MemoryChildReport);
        } catch {
          reject(new Error(`memory child printed no report: ${out.slice(0, 500)}`));
        }
      }
    });
  });
}

type MeasureSettings = Required<Pick<MemoryBenchOptions, 'pageSize' | 'sampleMs' | 'types' | 'process'>> & {
  databaseUrl: string;
  redisUrl: string;
};

/**
 * The production process (`node dist/cli.js start --role worker`, lib/service-run.ts) from its spawn
 * to a full pass of every type, at the speed's limit (the simulator's is set by `measure`).
 */
async function measureService(
  simulator: Simulator,
  scratch: ScratchDatabase,
  groupId: string,
  expected: number,
  speed: MemorySpeed,
  opts: MeasureSettings,
): Promise<MemoryChildReport> {
  const prefix = `bench-memory-${process.pid}-${Date.now()}`;
  try {
    const run = await runServiceUntilMirrored({
      env: {
        DATABASE_URL: scratch.url,
        REDIS_URL: opts.redisUrl,
        REDIS_PREFIX: prefix,
        SYNC_SOURCE: 'legacy',
        MAILER_LEGACY_URL: simulator.url,
        MAILER_API_KEY: simulator.apiKey,
        MAILER_API_KEY_HEADER: simulator.apiKeyHeader,
        SYNC_GROUPS: groupId,
        SYNC_TYPES: opts.types.join(','),
        SYNC_PAGE_SIZE: String(opts.pageSize),
        API_RATE_LIMIT: speed === 'budget' ? String(ENDPOINT_BUDGET_PER_MINUTE) : '100000',
        AUDIT_EVERY: 'off',
        PORT: '0',
        HOST: '127.0.0.1',
        LOG_LEVEL: 'warn',
      },
      pool: scratch.pool,
      groupId,
      types: opts.types,
      timeoutMs: 60 * 60_000,
      sampleMs: opts.sampleMs,
      productionFlags: opts.process === 'service',
    });
    return {
      rows: expected,
      rowsWritten: expected,
      requests: simulator.requests.length,
      passMs: Math.round(run.elapsedMs),
      rssBeforeMb: run.rssStartMb,
      rssPeakSampledMb: run.rssPeakSampledMb,
      maxRssMb: run.vmHwmMb,
      rssEndMb: 0,
      heapUsedPeakMb: 0,
      heapTotalPeakMb: 0,
      externalPeakMb: 0,
      samples: 0,
      rssProfileMb: [],
    };
  } finally {
    for (const p of [prefix, `b_${prefix}`]) await deleteKeysByPrefix(opts.redisUrl, p).catch(() => 0);
  }
}

async function measure(subscribers: number, speed: MemorySpeed, opts: MeasureSettings): Promise<MemoryRun> {
  const seedStarted = performance.now();
  const simulator = await startSimulator({
    subscribers,
    groups: 1,
    largeIds: true,
    ...(speed === 'budget'
      ? { rateLimit: ENDPOINT_BUDGET_PER_MINUTE, rateLimitWindowMs: 60_000, rateLimitScope: 'endpoint' as const }
      : { rateLimit: false as const }),
  });
  const seedMs = performance.now() - seedStarted;
  let scratch: ScratchDatabase | undefined;
  try {
    scratch = await createScratchDatabase(opts.databaseUrl, 'memory');
    const groupId = simulator.world.groupIds()[0];
    if (!groupId) throw new Error('simulator seeded no group');
    const expected = opts.types.reduce((n, t) => n + simulator.world.memberCount(groupId, t), 0);
    if (opts.process !== 'child') {
      const report = await measureService(simulator, scratch, groupId, expected, speed, opts);
      const { rows } = await scratch.pool.query<{ n: number }>('select count(*)::int as n from subscribers');
      if (rows[0]?.n !== expected) throw new Error(`mirror holds ${rows[0]?.n} subscribers after the pass, expected ${expected}`);
      return {
        ...report,
        subscribers,
        speed,
        seedMs: Math.round(seedMs),
        peakRssMb: Math.max(report.rssPeakSampledMb, report.maxRssMb),
        rowsPerSecond: Math.round((expected / report.passMs) * 1000),
      };
    }
    // The child opens its own connections; the scratch pool is not needed while it runs.
    const report = await runChild({
      simulatorUrl: simulator.url,
      apiKey: simulator.apiKey,
      apiKeyHeader: simulator.apiKeyHeader,
      databaseUrl: scratch.url,
      groupId,
      types: [...opts.types],
      pageSize: opts.pageSize,
      sampleMs: opts.sampleMs,
    });
    if (report.rows !== expected || report.rowsWritten !== expected) {
      throw new Error(`memory pass saw ${report.rows} and wrote ${report.rowsWritten} rows, expected ${expected}`);
    }
    const { rows } = await scratch.pool.query<{ n: number }>('select count(*)::int as n from subscribers');
    if (rows[0]?.n !== expected) throw new Error(`mirror holds ${rows[0]?.n} subscribers after the pass, expected ${expected}`);
    return {
      ...report,
      subscribers,
      speed,
      seedMs: Math.round(seedMs),
      peakRssMb: Math.max(report.rssPeakSampledMb, report.maxRssMb),
      rowsPerSecond: Math.round((report.rows / report.passMs) * 1000),
    };
  } finally {
    await simulator.close();
    await scratch?.drop();
  }
}

/** The figures of one speed's runs, smallest size first: each peak against the smallest's. */
function figuresOf(atSpeed: readonly MemoryRun[]): BenchFigure[] {
  const smallest = atSpeed[0] as MemoryRun;
  return atSpeed.flatMap((run) => {
    const label = `${compact(run.subscribers)}, ${speedLabel(run.speed)}`;
    return [
      figure(
        `peak RSS, ${label}`,
        run.peakRssMb,
        'MB',
        run === smallest ? run.rssBeforeMb : smallest.peakRssMb,
        `${run === smallest ? 'baseline: the process before (child) or as passes started (service)' : `baseline: the ${compact(smallest.subscribers)} pass`}; ` +
          `sampled ${run.rssPeakSampledMb} MB, maxRSS ${run.maxRssMb} MB, heapUsed peak ${run.heapUsedPeakMb} MB; ` +
          `RSS over the pass ${run.rssProfileMb.join(' ')} MB`,
      ),
      figure(
        `full mirror rate, ${label} (${run.rssProfileMb.length > 0 ? 'child process' : 'from the spawn'})`,
        run.rowsPerSecond,
        'rows/s',
        null,
        `${run.rows} rows, ${run.requests} requests, ${(run.passMs / 1000).toFixed(1)} s`,
      ),
    ];
  });
}

export async function benchMemory(options: MemoryBenchOptions = {}): Promise<MemoryBenchFigures> {
  const sizes = [...(options.sizes ?? DEFAULT_MEMORY_SIZES)].sort((a, b) => a - b);
  if (sizes.length === 0) throw new Error('memory bench needs at least one size');
  const log = options.log ?? (() => {});
  const startedAt = new Date();
  const settings = {
    pageSize: options.pageSize ?? 1000,
    sampleMs: options.sampleMs ?? 50,
    types: options.types ?? SUBSCRIBER_TYPES,
    databaseUrl: options.databaseUrl ?? process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
    redisUrl: options.redisUrl ?? process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
    process: options.process ?? 'service',
  };
  const speeds = settings.process === 'child' ? (['full'] as const) : [...(options.speeds ?? MEMORY_SPEEDS)];
  if (speeds.length === 0) throw new Error('memory bench needs at least one speed');
  if (settings.process !== 'child') buildDist();
  const runs: MemoryRun[] = [];
  const growth: Partial<Record<MemorySpeed, number>> = {};
  const figures: BenchFigure[] = [];
  for (const speed of speeds) {
    const atSpeed: MemoryRun[] = [];
    for (const size of sizes) {
      const where = settings.process === 'child' ? 'a child process under tsx' : 'node dist/cli.js';
      log(`memory: full pass of ${size.toLocaleString('en-US')} subscribers at ${speedLabel(speed)} (${where})…`);
      const run = await measure(size, speed, settings);
      log(
        `memory: ${size.toLocaleString('en-US')} at ${speedLabel(speed)}: peak RSS ${run.peakRssMb} MB (as passes started ${run.rssBeforeMb} MB), ` +
          `${run.rows.toLocaleString('en-US')} rows in ${(run.passMs / 1000).toFixed(1)} s`,
      );
      atSpeed.push(run);
    }
    runs.push(...atSpeed);
    const smallest = atSpeed[0] as MemoryRun;
    const largest = atSpeed.at(-1) as MemoryRun;
    growth[speed] = Math.round((largest.peakRssMb / smallest.peakRssMb) * 1000) / 1000;
    figures.push(...figuresOf(atSpeed));
  }
  const result: BenchResult = {
    bench: 'memory',
    rows: runs.reduce((n, r) => n + r.rows, 0),
    startedAt: startedAt.toISOString(),
    durationMs: Date.now() - startedAt.getTime(),
    environment: {
      node: process.version,
      cpus: String(os.cpus().length),
      sizes: sizes.join(','),
      speeds: speeds.map(speedLabel).join('; '),
      pageSize: String(settings.pageSize),
      sampleMs: String(settings.sampleMs),
      process:
        settings.process === 'child'
          ? 'memory-pass.child.ts under node --import tsx'
          : `node dist/cli.js start --role worker${settings.process === 'service' ? ` (${describeProductionEnv()})` : ' (no image settings)'}`,
      types: settings.types.join(','),
      goal: `peak RSS ≤ ${MEMORY_GOAL_MB} MB each; largest ÷ smallest ≤ ${MEMORY_GROWTH_GOAL}`,
    },
    figures,
  };
  if (options.print !== false) printTable(result);
  if (options.json) writeJson(options.json, result);
  return { runs, growth, result };
}

/** How a speed reads in the tables. */
export function speedLabel(speed: MemorySpeed): string {
  return speed === 'budget' ? `per-endpoint budget (${ENDPOINT_BUDGET_PER_MINUTE}/min)` : 'full speed (no limit)';
}

/** 100000 → 100k, 1000000 → 1M. */
export function compact(n: number): string {
  if (n >= 1_000_000 && n % 100_000 === 0) return `${n / 1_000_000}M`;
  if (n >= 1000 && n % 1000 === 0) return `${n / 1000}k`;
  return n.toLocaleString('en-US');
}

if (isMain(import.meta.url)) {
  const sizesArg = argText('--sizes');
  const sizes = sizesArg ? sizesArg.split(',').map(Number) : process.argv.includes('--quick') ? QUICK_MEMORY_SIZES : DEFAULT_MEMORY_SIZES;
  if (sizes.some((n) => !Number.isSafeInteger(n) || n <= 0)) throw new Error(`--sizes takes positive whole numbers, got ${sizesArg}`);
  const speedsArg = argText('--speeds');
  const speeds = speedsArg ? speedsArg.split(',') : MEMORY_SPEEDS;
  const unknown = speeds.filter((s) => !(MEMORY_SPEEDS as readonly string[]).includes(s));
  if (unknown.length > 0) throw new Error(`--speeds takes ${MEMORY_SPEEDS.join(', ')}, got ${unknown.join(',')}`);
  benchMemory({
    sizes,
    speeds: speeds as MemorySpeed[],
    pageSize: Number(argText('--page-size') ?? 1000),
    process: (argText('--process') ?? 'service') as 'service' | 'plain' | 'child',
    json: argText('--json') ?? path.join(os.tmpdir(), 'subscriber-mirror-bench', 'memory.json'),
    log: (line) => console.error(line),
  }).catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
}

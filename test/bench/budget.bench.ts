/**
 * Time to a full mirror under each budget model the service may count by (docs/benchmarks.md,
 * "budget"). For each scenario: a simulator with one group and a legacy limit of `limit` per minute
 * per budget, counted by the model (`endpoint`, `account`, `mixed`), a scratch database and its own
 * Redis prefix; then the production process (`node dist/cli.js start --role worker`, see
 * lib/service-run.ts) from its spawn until every type has a successful full pass. Each time is set
 * against its floor, the least time the model allows:
 *
 * - endpoint: the largest type's list pages (each list is its own budget; counts have their own);
 * - account: every request (every type's pages plus one `/count` per type) on one budget;
 * - mixed: the largest type's list pages (counts share one budget, five requests).
 *
 * A figure is the floor ÷ the time (1 = at the floor; the goal is ≥ 0.9), plus the 429s the
 * simulator answered (goal: 0 in steady state, at most one per change of model) and the model the
 * limiter published. Groups: the (100,000 members, seed 1: 70,065 / 11,965 / 5,985 / 4,041 /
 * 7,944) and one spread evenly over the five types.
 *
 *   npx tsx test/bench/budget.bench.ts [--subscribers 100000] [--page-size 1000] [--models endpoint,account,mixed] [--json path]
 *
 * Real time: the service's window is one minute, so the default run takes about eight minutes.
 * Builds dist/ first; uses DATABASE_URL and REDIS_URL.
 */
import os from 'node:os';
import { Redis } from 'ioredis';
import { SUBSCRIBER_TYPES } from '../../src/db/schema.js';
import { startSimulator } from '../../src/simulator/index.js';
import { RATE_LIMIT_MODELS } from '../../src/simulator/server.js';
import { readRateBudgets } from '../../src/ratelimit/budget-limiter.js';
import { deleteKeysByPrefix } from '../helpers/redis-prefix.js';
import { argNumber, argText, isMain } from './lib/cli.js';
import { figure, printTable, writeJson, type BenchFigure, type BenchResult } from './lib/report.js';
import { createScratchDatabase } from './lib/scratch-db.js';
import { buildDist, describeProductionEnv, runServiceUntilMirrored } from './lib/service-run.js';

export type BudgetModelName = (typeof RATE_LIMIT_MODELS)[number];
export type Spread = 'issue' | 'even';

export interface BudgetBenchOptions {
  subscribers?: number;
  pageSize?: number;
  /** Requests per minute per budget, the simulator's and API_RATE_LIMIT (default 60). */
  limit?: number;
  scenarios?: ReadonlyArray<{ model: BudgetModelName; spread: Spread }>;
  databaseUrl?: string;
  redisUrl?: string;
  log?: (line: string) => void;
  json?: string | null;
}

export interface BudgetScenarioRun {
  model: BudgetModelName;
  spread: Spread;
  members: Record<string, number>;
  floorRequests: number;
  floorMs: number;
  elapsedMs: number;
  tooMany: number;
  requests: number;
  learned: string;
  modelChanges: number;
  peakRssMb: number;
}

export const DEFAULT_SCENARIOS: ReadonlyArray<{ model: BudgetModelName; spread: Spread }> = [
  { model: 'endpoint', spread: 'issue' },
  { model: 'account', spread: 'issue' },
  { model: 'mixed', spread: 'issue' },
  { model: 'endpoint', spread: 'even' },
  { model: 'account', spread: 'even' },
];

const WINDOW_MS = 60_000;
const EVEN = [1, 1, 1, 1, 1];

/** The least number of request slots the model needs, one a slot at `limit` per minute. */
export function floorRequests(model: BudgetModelName, members: readonly number[], pageSize: number): number {
  const pages = members.map((n) => Math.max(1, Math.ceil(n / pageSize)));
  if (model === 'account') return pages.reduce((a, b) => a + b, 0) + members.length;
  return Math.max(...pages);
}

async function runScenario(
  scenario: { model: BudgetModelName; spread: Spread },
  settings: Required<Pick<BudgetBenchOptions, 'subscribers' | 'pageSize' | 'limit' | 'databaseUrl' | 'redisUrl'>>,
): Promise<BudgetScenarioRun> {
  const sim = await startSimulator({
    subscribers: settings.subscribers,
    groups: 1,
    seed: 1,
    rateLimit: settings.limit,
    rateLimitWindowMs: WINDOW_MS,
    rateLimitScope: scenario.model,
    ...(scenario.spread === 'even' ? { typeWeights: EVEN } : {}),
  });
  const scratch = await createScratchDatabase(settings.databaseUrl, 'budget');
  const prefix = `bench-budget-${process.pid}-${Date.now()}`;
  const redis = new Redis(settings.redisUrl, { maxRetriesPerRequest: 1 });
  try {
    const groupId = sim.world.groupIds()[0] ?? '';
    const members = SUBSCRIBER_TYPES.map((t) => sim.world.memberCount(groupId, t));
    const floor = floorRequests(scenario.model, members, settings.pageSize);
    const run = await runServiceUntilMirrored({
      env: {
        DATABASE_URL: scratch.url,
        REDIS_URL: settings.redisUrl,
        REDIS_PREFIX: prefix,
        SYNC_SOURCE: 'legacy',
        MAILER_LEGACY_URL: sim.url,
        MAILER_API_KEY: sim.apiKey,
        MAILER_API_KEY_HEADER: sim.apiKeyHeader,
        SYNC_GROUPS: groupId,
        SYNC_PAGE_SIZE: String(settings.pageSize),
        API_RATE_LIMIT: String(settings.limit),
        AUDIT_EVERY: 'off',
        PORT: '0',
        HOST: '127.0.0.1',
        LOG_LEVEL: 'warn',
      },
      pool: scratch.pool,
      groupId,
      types: SUBSCRIBER_TYPES,
      timeoutMs: (floor * WINDOW_MS) / settings.limit + 10 * 60_000,
    });
    const report = await readRateBudgets(redis, prefix);
    return {
      ...scenario,
      members: Object.fromEntries(SUBSCRIBER_TYPES.map((t, i) => [t, members[i] ?? 0])),
      floorRequests: floor,
      floorMs: (floor * WINDOW_MS) / settings.limit,
      elapsedMs: Math.round(run.elapsedMs),
      tooMany: sim.requests.filter((r) => r.status === 429).length,
      requests: sim.requests.length,
      learned: report?.model ?? 'none published',
      modelChanges: report?.modelChanges ?? 0,
      peakRssMb: Math.max(run.rssPeakSampledMb, run.vmHwmMb),
    };
  } finally {
    // The limiter's keys start with b_<prefix> (Bottleneck's naming).
    for (const p of [prefix, `b_${prefix}`]) await deleteKeysByPrefix(settings.redisUrl, p).catch(() => 0);
    redis.disconnect();
    await scratch.drop();
    await sim.close();
  }
}

export interface BudgetBenchFigures {
  runs: BudgetScenarioRun[];
  result: BenchResult;
}

export async function benchBudget(options: BudgetBenchOptions = {}): Promise<BudgetBenchFigures> {
  const settings = {
    subscribers: options.subscribers ?? 100_000,
    pageSize: options.pageSize ?? 1000,
    limit: options.limit ?? 60,
    databaseUrl: options.databaseUrl ?? process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
    redisUrl: options.redisUrl ?? process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
  };
  const log = options.log ?? (() => {});
  const startedAt = new Date();
  log('budget: building dist/ (the process measured is node dist/cli.js)…');
  buildDist();
  const runs: BudgetScenarioRun[] = [];
  const figures: BenchFigure[] = [];
  for (const scenario of options.scenarios ?? DEFAULT_SCENARIOS) {
    log(`budget: ${scenario.model} budgets, ${scenario.spread} group of ${settings.subscribers.toLocaleString('en-US')}…`);
    const run = await runScenario(scenario, settings);
    runs.push(run);
    const label = `${scenario.model} budgets, ${scenario.spread === 'issue' ? "the issue's group" : 'even group'}`;
    const note =
      `${(run.elapsedMs / 1000).toFixed(1)} s from spawn against a floor of ${run.floorRequests} requests = ${(run.floorMs / 1000).toFixed(0)} s; ` +
      `members ${Object.values(run.members).join('/')}; ${run.requests} requests; learned model ${run.learned} (${run.modelChanges} change(s)); peak RSS ${run.peakRssMb} MB`;
    figures.push(
      figure(`time to mirror, ${label}`, run.elapsedMs / 1000, 's', run.floorMs / 1000, note),
      figure(`429s, ${label}`, run.tooMany, 'answers', run.modelChanges, 'baseline: the model changes (at most one 429 each)'),
    );
    log(`budget: ${label}: ${note}; ${run.tooMany} 429(s)`);
  }
  const result: BenchResult = {
    bench: 'budget',
    rows: runs.reduce((n, r) => n + Object.values(r.members).reduce((a, b) => a + b, 0), 0),
    startedAt: startedAt.toISOString(),
    durationMs: Date.now() - startedAt.getTime(),
    environment: {
      node: process.version,
      cpus: String(os.cpus().length),
      cpuModel: os.cpus()[0]?.model ?? 'unknown',
      subscribers: String(settings.subscribers),
      pageSize: String(settings.pageSize),
      limit: `${settings.limit} per minute per budget`,
      process: `node dist/cli.js start --role worker (${describeProductionEnv()})`,
      goal: 'time ≤ floor ÷ 0.9 (ratio ≤ 1.11); endpoint budgets on the issue group ≤ 79 s; 429s ≤ model changes',
    },
    figures,
  };
  if (options.json !== null) printTable(result);
  if (options.json) writeJson(options.json, result);
  return { runs, result };
}

function parseScenarios(text: string | undefined): ReadonlyArray<{ model: BudgetModelName; spread: Spread }> | undefined {
  if (!text) return undefined;
  const models = text.split(',').map((m) => m.trim());
  for (const m of models) if (!(RATE_LIMIT_MODELS as readonly string[]).includes(m)) throw new Error(`unknown model "${m}"`);
  return DEFAULT_SCENARIOS.filter((s) => models.includes(s.model));
}

if (isMain(import.meta.url)) {
  const options: BudgetBenchOptions = { log: (line) => console.log(line), json: argText('--json') ?? 'bench-budget.json' };
  const subscribers = argNumber('subscribers');
  const pageSize = argNumber('page-size');
  const scenarios = parseScenarios(argText('--models'));
  if (subscribers !== undefined) options.subscribers = subscribers;
  if (pageSize !== undefined) options.pageSize = pageSize;
  if (scenarios) options.scenarios = scenarios;
  benchBudget(options)
    .then(() => process.exit(0))
    .catch((error: unknown) => {
      console.error(error);
      process.exit(1);
    });
}

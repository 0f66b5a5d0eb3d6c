/**
 * Runs the production process (`node dist/cli.js start --role worker`, built by `npm run build`)
 * against a simulator, a scratch database and its own Redis prefix, until every type of one group
 * has a successful full pass. Measures the time from the spawn, and the process's RSS (sampled from
 * /proc every `sampleMs`, and its kernel high-water mark VmHWM at the end).
 */
import { execFileSync, spawn } from 'node:child_process';
import { createWriteStream, existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const REPO_ROOT = path.resolve(HERE, '../../..');
const CLI = path.join(REPO_ROOT, 'dist/cli.js');
/**
 * The environment the image gives every node process for memory: the runtime stage's `ENV` of
 * `NODE_OPTIONS` and of glibc's `MALLOC_*` tunables, read from the Dockerfile, the one place they
 * are written (docs/benchmarks.md, "memory"), so the benchmark measures the process the image runs.
 */
export function imageMemoryEnv(dockerfile: string = readFileSync(path.join(REPO_ROOT, 'Dockerfile'), 'utf8')): Record<string, string> {
  const runtime = dockerfile.split(/^(?=FROM )/m).at(-1) ?? '';
  const env: Record<string, string> = {};
  for (const [, line] of runtime.matchAll(/^ENV (.+)$/gm)) {
    for (const [, name, quoted, bare] of (line ?? '').matchAll(/([A-Za-z_][A-Za-z0-9_]*)=(?:"([^"]*)"|(\S*))/g)) {
      if (name === 'NODE_OPTIONS' || name?.startsWith('MALLOC_')) env[name] = quoted ?? bare ?? '';
    }
  }
  return env;
}

/** What the image adds (imageMemoryEnv): the production process of the benchmarks. */
export const PRODUCTION_ENV: Readonly<Record<string, string>> = imageMemoryEnv();

/** PRODUCTION_ENV as one line, for a benchmark's report. */
export function describeProductionEnv(env: Readonly<Record<string, string>> = PRODUCTION_ENV): string {
  return Object.entries(env)
    .map(([k, v]) => (/\s/.test(v) ? `${k}="${v}"` : `${k}=${v}`))
    .join(' ');
}

export interface ServiceRunOptions {
  env: Record<string, string>;
  pool: pg.Pool;
  groupId: string;
  types: readonly string[];
  timeoutMs: number;
  sampleMs?: number;
  /** Start it as the image does (PRODUCTION_ENV); default true. False: plain `node`. */
  productionFlags?: boolean;
}

export interface ServiceRun {
  /** From the spawn to the moment every type had a successful full pass. */
  elapsedMs: number;
  /** Highest RSS sampled, MB. */
  rssPeakSampledMb: number;
  /** VmHWM just before the stop, MB: the kernel's high-water mark of the process's life. */
  vmHwmMb: number;
  /** RSS once the service was up (first sample after the first pass started), MB. */
  rssStartMb: number;
}

function statusField(pid: number, field: string): number {
  try {
    const text = readFileSync(`/proc/${pid}/status`, 'utf8');
    const match = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text);
    return match ? Number(match[1]) / 1024 : 0;
  } catch {
    return 0;
  }
}

async function fullPassesDone(pool: pg.Pool, groupId: string, types: readonly string[]): Promise<{ done: number; started: number }> {
  const { rows } = await pool.query<{ done: number; started: number }>(
    // Completed full passes: a type done early may already have run an incremental pass since.
    `select count(last_full_completed_at)::int as done, count(*)::int as started
       from sync_status where group_id = $1 and type = any($2)`,
    [groupId, [...types]],
  );
  return rows[0] ?? { done: 0, started: 0 };
}

/** Builds dist/ (`tsc -p src`), so the process measured is the code of this checkout. */
export function buildDist(): void {
  execFileSync(process.execPath, [path.join(REPO_ROOT, 'node_modules/typescript/bin/tsc'), '-p', path.join(REPO_ROOT, 'src')], {
    cwd: REPO_ROOT,
    stdio: 'inherit',
  });
}

export async function runServiceUntilMirrored(options: ServiceRunOptions): Promise<ServiceRun> {
  if (!existsSync(CLI)) throw new Error('dist/cli.js is missing: run `npm run build` first');
  const sampleMs = options.sampleMs ?? 100;
  const started = performance.now();
  const production = options.productionFlags !== false;
  // For measuring variants by hand: BENCH_NODE_FLAGS adds node flags on the command line (flags that
  // NODE_OPTIONS refuses too), BENCH_ENV adds NAME=VALUE pairs to the environment (after the image's).
  const extra = (process.env.BENCH_NODE_FLAGS ?? '').split(' ').filter((f) => f !== '');
  const extraEnv = Object.fromEntries(
    (process.env.BENCH_ENV ?? '')
      .split(' ')
      .filter((pair) => pair.includes('='))
      .map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]),
  );
  // BENCH_OUTPUT=<file>: the process's stdout and stderr appended there, after a line naming the run
  // (e.g. with BENCH_NODE_FLAGS=--trace-gc).
  const output = process.env.BENCH_OUTPUT ? createWriteStream(process.env.BENCH_OUTPUT, { flags: 'a' }) : null;
  output?.write(`=== ${new Date().toISOString()} ${JSON.stringify({ env: options.env, production, extra, extraEnv })}\n`);
  const child = spawn(process.execPath, [...extra, CLI, 'start', '--role', 'worker'], {
    cwd: REPO_ROOT,
    env: { PATH: process.env.PATH ?? '', ...(production ? PRODUCTION_ENV : {}), ...extraEnv, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  if (output) {
    child.stdout.pipe(output);
    child.stderr.pipe(output);
  } else child.stdout.resume();
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString('utf8')).slice(-4000)));
  const state: { exited: string | null } = { exited: null };
  child.on('exit', (code, signal) => (state.exited = `exited with ${code ?? signal}`));
  const pid = child.pid ?? 0;
  let peak = 0;
  let atStart = 0;
  try {
    for (;;) {
      if (state.exited) throw new Error(`service ${state.exited}: ${stderr}`);
      const rss = statusField(pid, 'VmRSS');
      peak = Math.max(peak, rss);
      if (performance.now() - started > options.timeoutMs)
        throw new Error(`service did not mirror the group within ${options.timeoutMs} ms: ${stderr}`);
      const { done, started: passes } = await fullPassesDone(options.pool, options.groupId, options.types).catch(() => ({
        done: 0,
        started: 0,
      }));
      if (atStart === 0 && passes > 0) atStart = rss;
      if (done === options.types.length) break;
      await new Promise((resolve) => setTimeout(resolve, sampleMs));
    }
    const elapsedMs = performance.now() - started;
    const vmHwmMb = statusField(pid, 'VmHWM');
    return {
      elapsedMs,
      rssPeakSampledMb: Math.round(peak * 10) / 10,
      vmHwmMb: Math.round(vmHwmMb * 10) / 10,
      rssStartMb: Math.round(atStart * 10) / 10,
    };
  } finally {
    if (!state.exited) {
      const gone = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await gone;
      clearTimeout(timer);
    }
  }
}

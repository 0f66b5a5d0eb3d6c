/**
 * Runs the production process (`node dist/cli.js start --role worker`, built by `npm run build`)
 * against a simulator, a scratch database and its own Redis prefix, until every type of one group
 * has a successful full pass. Measures the time from the spawn, and the process's RSS (sampled from
 * /proc every `sampleMs`, and its kernel high-water mark VmHWM at the end).
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const REPO_ROOT = path.resolve(HERE, '../../..');
const CLI = path.join(REPO_ROOT, 'dist/cli.js');
/** What the production start command and the image add (Dockerfile): kept here so the benchmark measures the same process. */
export const PRODUCTION_NODE_OPTIONS = ['--max-semi-space-size=4', '--heap-growing-percent=30'];
export const PRODUCTION_ENV: Readonly<Record<string, string>> = { MALLOC_MMAP_THRESHOLD_: '131072' };

export interface ServiceRunOptions {
  env: Record<string, string>;
  pool: pg.Pool;
  groupId: string;
  types: readonly string[];
  timeoutMs: number;
  sampleMs?: number;
  /** Start it as the image does (PRODUCTION_NODE_OPTIONS, PRODUCTION_ENV); default true. False: plain `node`. */
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
       from sync_state where group_id = $1 and type = any($2)`,
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
  const extra = (process.env.BENCH_NODE_FLAGS ?? '').split(' ').filter((f) => f !== '');
  const child = spawn(process.execPath, [...(production ? PRODUCTION_NODE_OPTIONS : []), ...extra, CLI, 'start', '--role', 'worker'], {
    cwd: REPO_ROOT,
    env: { PATH: process.env.PATH ?? '', ...(production ? PRODUCTION_ENV : {}), ...options.env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
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

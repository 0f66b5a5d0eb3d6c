/**
 * The production process of the benchmarks (`node dist/cli.js start --role worker`, built by
 * `buildDist`): spawned as the image starts it (spawnService), its RSS read from /proc (sampled, and
 * the kernel's high-water mark VmHWM), stopped with SIGTERM then SIGKILL. runServiceUntilMirrored
 * runs one against a simulator, a scratch database and its own Redis prefix until every type of one
 * group has a successful full pass; the accounts benchmark runs several replicas of it at once.
 */
import { execFileSync, spawn, type ChildProcessByStdio } from 'node:child_process';
import { appendFileSync, createWriteStream, existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Readable } from 'node:stream';
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

/** A field of /proc/<pid>/status in MB (VmRSS: now; VmHWM: the peak of the process's life); 0 once it is gone. */
export function procStatusMb(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  try {
    const text = readFileSync(`/proc/${pid}/status`, 'utf8');
    const match = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text);
    return match ? Number(match[1]) / 1024 : 0;
  } catch {
    return 0;
  }
}

/** MB to one decimal, as the reports print them. */
export const tenthMb = (mb: number): number => Math.round(mb * 10) / 10;

export interface SpawnServiceOptions {
  /** Start it as the image does (PRODUCTION_ENV); default true. False: plain `node`. */
  productionFlags?: boolean;
}

/** One running `node dist/cli.js start --role worker`. */
export interface ServiceProcess {
  readonly pid: number;
  /** How it ended (`exited with <code or signal>`), or null while it runs. */
  exited(): string | null;
  /** The end of its stderr, for the message when it dies. */
  stderrTail(): string;
  /** Reads VmRSS now (MB) and keeps the highest read in `peakSampledMb`. */
  sampleRss(): number;
  /** Highest VmRSS read by sampleRss, MB. */
  peakSampledMb(): number;
  /** VmHWM now, MB: the kernel's high-water mark, which catches a peak between two samples. */
  vmHwmMb(): number;
  /** SIGTERM, then SIGKILL if it is still there after 15 s; resolves once it has exited. */
  stop(): Promise<void>;
}

/** Only so much of stderr is kept: the error it ends with, not a long run's warnings. */
const STDERR_TAIL = 4000;
const KILL_AFTER_MS = 15_000;

/**
 * For measuring variants by hand: BENCH_NODE_FLAGS adds node flags on the command line (flags that
 * NODE_OPTIONS refuses too), BENCH_ENV adds NAME=VALUE pairs to the environment (after the image's).
 */
function handVariant(): { nodeFlags: string[]; env: Record<string, string> } {
  const nodeFlags = (process.env.BENCH_NODE_FLAGS ?? '').split(' ').filter((f) => f !== '');
  const env = Object.fromEntries(
    (process.env.BENCH_ENV ?? '')
      .split(' ')
      .filter((pair) => pair.includes('='))
      .map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]),
  );
  return { nodeFlags, env };
}

/** Spawns the production process with `env` (after PRODUCTION_ENV and the hand variant's). */
export function spawnService(env: Record<string, string>, options: SpawnServiceOptions = {}): ServiceProcess {
  if (!existsSync(CLI)) throw new Error('dist/cli.js is missing: run `npm run build` first');
  const production = options.productionFlags !== false;
  const variant = handVariant();
  // BENCH_OUTPUT=<file>: the process's stdout and stderr appended there, after a line naming the run
  // (e.g. with BENCH_NODE_FLAGS=--trace-gc).
  const output = process.env.BENCH_OUTPUT ? createWriteStream(process.env.BENCH_OUTPUT, { flags: 'a' }) : null;
  output?.write(
    `=== ${new Date().toISOString()} ${JSON.stringify({ env, production, extra: variant.nodeFlags, extraEnv: variant.env })}\n`,
  );
  const child = spawn(process.execPath, [...variant.nodeFlags, CLI, 'start', '--role', 'worker'], {
    cwd: REPO_ROOT,
    env: { PATH: process.env.PATH ?? '', ...(production ? PRODUCTION_ENV : {}), ...variant.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  if (output) {
    child.stdout.pipe(output);
    child.stderr.pipe(output);
  } else child.stdout.resume();
  return watch(child);
}

/** The higher of the sampled peak and VmHWM, MB to one decimal: the process's peak RSS so far. */
export function peakRssMb(service: ServiceProcess): number {
  return tenthMb(Math.max(service.peakSampledMb(), service.vmHwmMb()));
}

function watch(child: ChildProcessByStdio<null, Readable, Readable>): ServiceProcess {
  const pid = child.pid ?? 0;
  let stderr = '';
  let exited: string | null = null;
  let peak = 0;
  child.stderr.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString('utf8')).slice(-STDERR_TAIL)));
  child.on('exit', (code, signal) => (exited = `exited with ${code ?? signal}`));
  return {
    pid,
    exited: () => exited,
    stderrTail: () => stderr,
    sampleRss: () => {
      const rss = procStatusMb(pid, 'VmRSS');
      // BENCH_RSS_TRACE=<file>: every sample appended as `pid ms-since-epoch MB`, for the shape of a peak.
      if (process.env.BENCH_RSS_TRACE) appendFileSync(process.env.BENCH_RSS_TRACE, `${pid} ${Date.now()} ${rss.toFixed(1)}\n`);
      peak = Math.max(peak, rss);
      return rss;
    },
    peakSampledMb: () => peak,
    vmHwmMb: () => procStatusMb(pid, 'VmHWM'),
    stop: async () => {
      if (exited) return;
      const gone = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), KILL_AFTER_MS);
      await gone;
      clearTimeout(timer);
    },
  };
}

export interface ServiceRunOptions extends SpawnServiceOptions {
  env: Record<string, string>;
  pool: pg.Pool;
  groupId: string;
  types: readonly string[];
  timeoutMs: number;
  sampleMs?: number;
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
  const sampleMs = options.sampleMs ?? 100;
  const started = performance.now();
  const service = spawnService(options.env, options);
  let atStart = 0;
  try {
    for (;;) {
      const exited = service.exited();
      if (exited) throw new Error(`service ${exited}: ${service.stderrTail()}`);
      const rss = service.sampleRss();
      if (performance.now() - started > options.timeoutMs)
        throw new Error(`service did not mirror the group within ${options.timeoutMs} ms: ${service.stderrTail()}`);
      const { done, started: passes } = await fullPassesDone(options.pool, options.groupId, options.types).catch(() => ({
        done: 0,
        started: 0,
      }));
      if (atStart === 0 && passes > 0) atStart = rss;
      if (done === options.types.length) break;
      await new Promise((resolve) => setTimeout(resolve, sampleMs));
    }
    const elapsedMs = performance.now() - started;
    return {
      elapsedMs,
      rssPeakSampledMb: tenthMb(service.peakSampledMb()),
      vmHwmMb: tenthMb(service.vmHwmMb()),
      rssStartMb: tenthMb(atStart),
    };
  } finally {
    await service.stop();
  }
}

/**
 * The service as operators run it, in child processes (`node --import tsx src/cli.ts …`, one process
 * so SIGKILL reaches the process doing the work), with every line of output sent to the collector.
 */
import type { ChildProcess } from 'node:child_process';
import { spawnCli, type CliResult } from '../../helpers/cli.js';
import { capture, record } from './collector.js';
import { withSecondAccount } from './second-account.js';
import { sleep, waitFor } from '../../helpers/wait.js';

export interface LogLine {
  level?: string;
  msg?: string;
  time?: string;
  port?: number;
  groupId?: string;
  type?: string;
  /** The account whose part logged it; none for the deployment's own lines. */
  account?: string;
  [key: string]: unknown;
}

export interface ServiceProcess {
  child: ChildProcess;
  label: string;
  /** Parsed JSON log lines so far (live array). */
  lines: LogLine[];
  /** The HTTP port from the "service started" line. */
  port: Promise<number>;
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** The last 20 kB the process wrote to stderr. */
  stderr(): string;
}

const live = new Set<ChildProcess>();

/**
 * Starts `start --role <role>` with `env` for the scenario's account (`default`) and the file's second
 * account beside it (second-account.ts): every service process of the fault suite serves two.
 */
export function startService(role: 'all' | 'worker' | 'receiver', env: Record<string, string>, label: string): ServiceProcess {
  const child = spawnCli(['start', '--role', role], withSecondAccount(env));
  live.add(child);
  const lines: LogLine[] = [];
  let resolvePort: (port: number) => void = () => {};
  const port = new Promise<number>((resolve) => (resolvePort = resolve));
  const source = capture(child, `${label}-${role}`, (line) => {
    try {
      const parsed = JSON.parse(line) as LogLine;
      lines.push(parsed);
      if (parsed.msg === 'service started' && typeof parsed.port === 'number') resolvePort(parsed.port);
    } catch {
      // not a log line (kept by the collector all the same)
    }
  });
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    stderr = (stderr + d.toString('utf8')).slice(-20_000);
  });
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('close', (code, signal) => {
      live.delete(child);
      resolve({ code, signal });
    }),
  );
  // A child that dies before it starts must fail the test, not hang it.
  void exit.then(() => resolvePort(Number.NaN));
  return { child, label: source, lines, port, exit, stderr: () => stderr };
}

/**
 * The lines a check of `account` reads: its own (an account's parts log with its name) and the
 * deployment's, which name none. The accounts of one process log the same messages about their passes.
 */
export function linesOf(service: ServiceProcess, account: string): LogLine[] {
  return service.lines.filter((l) => l.account === undefined || l.account === account);
}

/** Throws, with what the process printed to stderr, when it is no longer running. */
export function assertRunning(service: ServiceProcess, when: string): void {
  const { exitCode, signalCode } = service.child;
  if (exitCode === null && signalCode === null) return;
  throw new Error(`${service.label} exited (code ${exitCode}, signal ${signalCode}) ${when}; its stderr:\n${service.stderr()}`);
}

/** Waits for the "service started" line; throws with the process's output if it never comes. */
export async function servicePort(service: ServiceProcess, timeoutMs = 60_000): Promise<number> {
  const port = await Promise.race([service.port, sleep(timeoutMs).then(() => Number.NaN)]);
  if (!Number.isFinite(port)) {
    throw new Error(
      `${service.label} did not start within ${timeoutMs} ms; last lines:\n${service.lines
        .slice(-5)
        .map((l) => JSON.stringify(l))
        .join('\n')}`,
    );
  }
  return port;
}

export async function killHard(service: ServiceProcess): Promise<void> {
  service.child.kill('SIGKILL');
  await service.exit;
}

export async function stopGracefully(service: ServiceProcess, timeoutMs = 40_000): Promise<number | null> {
  service.child.kill('SIGTERM');
  const result = await Promise.race([service.exit, sleep(timeoutMs).then(() => null)]);
  if (!result) {
    service.child.kill('SIGKILL');
    throw new Error(`${service.label} did not stop within ${timeoutMs} ms of SIGTERM`);
  }
  return result.code;
}

/** Kills every child still running (afterAll). */
export function killAll(): void {
  for (const child of live) child.kill('SIGKILL');
}

/** `runCli` with its output recorded for the secret scan. */
export function runCollected(
  args: string[],
  env: Record<string, string | undefined>,
  label: string,
  options: { timeoutMs?: number } = {},
): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawnCli(args, env);
    live.add(child);
    let stdout = '';
    let stderr = '';
    const source = `${label}(pid ${child.pid ?? '?'})`;
    child.stdout?.on('data', (d: Buffer) => {
      stdout += d.toString();
      record(source, 'stdout', d.toString());
    });
    child.stderr?.on('data', (d: Buffer) => {
      stderr += d.toString();
      record(source, 'stderr', d.toString());
    });
    const timeoutMs = options.timeoutMs ?? 60_000;
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`CLI ${args.join(' ')} did not exit within ${timeoutMs} ms\n${stdout}\n${stderr}`));
    }, timeoutMs);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      live.delete(child);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

export { sleep, waitFor };

/** One line a scenario prints for the issue note: `[faults] <scenario>: k=v, …`. */
export function printSummary(scenario: string, figures: Record<string, number | string>): void {
  const text = Object.entries(figures)
    .map(([k, v]) => `${k}=${v}`)
    .join(', ');
  console.log(`[faults] ${scenario}: ${text}`);
}

/** A port nothing listens on right now (for a receiver URL that must be known before it starts). */
export async function freePort(): Promise<number> {
  const { createServer } = await import('node:net');
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/**
 * `subscriber-mirror start` in a child process for tests that need the real command (a Prometheus
 * scraping it, the demo): its JSON log lines, its port, and a stop that never hangs.
 */
import type { ChildProcess } from 'node:child_process';
import net from 'node:net';
import { createInterface } from 'node:readline';
import { spawnCli } from './cli.js';
import { sleep } from './wait.js';

export interface ChildService {
  child: ChildProcess;
  /** Every stdout line, parsed when it is JSON (live array). */
  lines: Array<Record<string, unknown> | string>;
  port: Promise<number>;
  stop(): Promise<void>;
}

export function startChildCli(
  args: string[],
  env: Record<string, string>,
  portFrom: (line: Record<string, unknown>) => number | null,
): ChildService {
  const child = spawnCli(args, env);
  const lines: ChildService['lines'] = [];
  let resolvePort: (port: number) => void = () => {};
  const port = new Promise<number>((resolve) => (resolvePort = resolve));
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => (stderr = (stderr + d.toString('utf8')).slice(-10_000)));
  createInterface({ input: child.stdout! }).on('line', (line) => {
    try {
      const parsed = JSON.parse(line) as Record<string, unknown>;
      lines.push(parsed);
      const p = portFrom(parsed);
      if (p !== null) resolvePort(p);
    } catch {
      lines.push(line);
    }
  });
  const exited = new Promise<void>((resolve) => child.on('close', () => resolve()));
  void exited.then(() => resolvePort(Number.NaN));
  const started = port.then((p) => {
    if (!Number.isFinite(p)) throw new Error(`${args.join(' ')} exited before it started; stderr:\n${stderr}`);
    return p;
  });
  // Callers that never ask for the port (the demo) must not get an unhandled rejection at exit.
  started.catch(() => {});
  return {
    child,
    lines,
    port: started,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      if (await Promise.race([exited.then(() => true), sleep(30_000).then(() => false)])) return;
      child.kill('SIGKILL');
      await exited;
    },
  };
}

/** A port nothing listens on right now (for programs that cannot be given port 0). */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

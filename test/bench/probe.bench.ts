/**
 * The public port under one greedy client (issue 36): one client opens as many connections as it can
 * to the receiver's public port and holds them, while another posts a signed delivery every second.
 * Figures: the second client's latency p99 (goal < 1 s) and its deliveries lost (not acknowledged 2xx,
 * or acknowledged and not in the inbox; goal 0), against a baseline in the same run: the same client
 * with no attacker. A third phase runs the attack against a receiver without the per-client limits
 * (`HTTP_MAX_CONNECTIONS_PER_CLIENT=0`), to show what they change; it has no goal.
 *
 *   npx tsx test/bench/probe.bench.ts [--seconds 30] [--attack-sockets 3000] [--json path]
 *
 * The receiver is the real `start --role receiver` (from source, through tsx) with its default limits,
 * on a scratch database and its own Redis prefix. The attacker is a separate node process binding its
 * sockets to 127.0.0.3; the delivering client is this process, from 127.0.0.2 (Linux routes all of
 * 127/8 to loopback). Each delivery opens a new connection, as a sender of one event a second would.
 * The 1-minute load (`uptime`) before and after each phase is recorded: other work on the machine
 * shows in the figures.
 */
import { execFileSync, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import type pg from 'pg';
import { signBody } from '../../src/webhooks/signature.js';
import { spawnCli } from '../helpers/cli.js';
import { argNumber, argText, isMain } from './lib/cli.js';
import { runLoadGenerator } from './lib/load-generator.js';
import { round } from './lib/report.js';
import { createScratchDatabase } from './lib/scratch-db.js';

const SECRET = 'probe-bench-secret-0f9e8d7c';
const CLIENT_ADDRESS = '127.0.0.2';
const ATTACKER_ADDRESS = '127.0.0.3';
export const PROBE_GOAL_P99_MS = 1_000;

export interface ProbeOptions {
  /** Seconds of each phase (one delivery a second). */
  seconds?: number;
  /** Connections the attacker keeps trying to hold at once. */
  attackSockets?: number;
  databaseUrl?: string;
  redisUrl?: string;
  log?: (line: string) => void;
}

export interface PhaseFigures {
  phase: 'baseline' | 'attack' | 'attack, no per-client limits';
  deliveries: number;
  acknowledged: number;
  /** Not acknowledged 2xx within 10 s, or acknowledged and not in the inbox. */
  lost: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** What the attacker saw: sockets it opened, and the most it held open at once for over a second. */
  attacker: { opened: number; heldPeak: number; closedWithinSecond: number } | null;
  load: { before: string; after: string };
}

export interface ProbeBenchFigures {
  at: string;
  machine: { cpus: number; node: string };
  seconds: number;
  attackSockets: number;
  phases: PhaseFigures[];
}

/** `uptime`'s load averages (other engineers share the machine). */
function uptime(): string {
  try {
    return execFileSync('uptime', { encoding: 'utf8' }).trim();
  } catch {
    return `load average: ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(', ')}`;
  }
}

interface Receiver {
  port: number;
  child: ChildProcess;
  stop(): Promise<void>;
}

/** `start --role receiver` on a free port; resolves once it logs that it started. */
async function startReceiver(env: Record<string, string>): Promise<Receiver> {
  const child = spawnCli(['start', '--role', 'receiver'], {
    ...env,
    PORT: '0',
    HOST: '127.0.0.1',
    WEBHOOK_SECRETS: SECRET,
    LOG_FORMAT: 'json',
  });
  const port = await new Promise<number>((resolve, reject) => {
    let buffer = '';
    const timer = setTimeout(() => reject(new Error('the receiver did not start within 60 s')), 60_000);
    child.stdout?.on('data', (d: Buffer) => {
      buffer += d.toString();
      for (;;) {
        const end = buffer.indexOf('\n');
        if (end < 0) break;
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + 1);
        try {
          const parsed = JSON.parse(line) as { msg?: string; port?: number };
          if (parsed.msg === 'service started' && typeof parsed.port === 'number') {
            clearTimeout(timer);
            resolve(parsed.port);
          }
        } catch {
          // not a log line
        }
      }
    });
    child.stderr?.resume();
    child.on('exit', (code) => reject(new Error(`the receiver exited with ${code} before it started`)));
  });
  child.stdout?.resume();
  return {
    port,
    child,
    stop: () =>
      new Promise((resolve) => {
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

/** One signed delivery on a new connection from CLIENT_ADDRESS; its status (0: no answer) and latency. */
function deliverOnce(port: number, body: string): Promise<{ status: number; ms: number }> {
  const started = performance.now();
  return new Promise((resolve) => {
    const done = (status: number) => resolve({ status, ms: performance.now() - started });
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        path: '/webhooks',
        method: 'POST',
        localAddress: CLIENT_ADDRESS,
        agent: false,
        timeout: 10_000,
        headers: { 'content-type': 'application/json', signature: signBody(body, SECRET) },
      },
      (res) => {
        res.resume();
        res.on('end', () => done(res.statusCode ?? 0));
        res.on('error', () => done(0));
      },
    );
    req.on('timeout', () => req.destroy());
    req.on('error', () => done(0));
    req.end(body);
  });
}

let sequence = 0;
function deliveryBody(): string {
  sequence += 1;
  return JSON.stringify({
    type: 'subscriber.updated',
    subscriber: {
      id: String(900_000 + sequence),
      email: `probe${sequence}@example.org`,
      status: 'active',
      updated_at: new Date().toISOString().replace('Z', '000Z'),
    },
  });
}

/** One delivery a second for `seconds`; the answers, and the bodies acknowledged. */
async function deliverEverySecond(
  port: number,
  seconds: number,
): Promise<{ results: Array<{ status: number; ms: number }>; acked: string[] }> {
  const pending: Array<Promise<{ status: number; ms: number; body: string }>> = [];
  for (let i = 0; i < seconds; i++) {
    const body = deliveryBody();
    pending.push(deliverOnce(port, body).then((r) => ({ ...r, body })));
    await new Promise((resolve) => setTimeout(resolve, 1_000));
  }
  const all = await Promise.all(pending);
  return { results: all, acked: all.filter((r) => r.status >= 200 && r.status < 300).map((r) => r.body) };
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? 0;
}

/**
 * The attacker (a separate process): keeps `sockets` connections open or opening from `address`,
 * each sending the start of a request and then nothing; a closed one is opened again at once.
 */
const ATTACKER = String.raw`
const net = require('node:net');
const { port, address, sockets, seconds } = JSON.parse(process.argv[1]);
let opened = 0, open = 0, held = 0, heldPeak = 0, closedWithinSecond = 0, stopping = false;
function one() {
  if (stopping) return;
  opened += 1;
  const socket = net.connect({ host: '127.0.0.1', port, localAddress: address });
  let connectedAt = 0, counted = false;
  const heldTimer = setTimeout(() => { if (connectedAt) { counted = true; held += 1; heldPeak = Math.max(heldPeak, held); } }, 1000);
  socket.on('connect', () => { connectedAt = Date.now(); open += 1; socket.write('POST /webhooks HTTP/1.1\r\nHost: x\r\n'); });
  socket.on('error', () => {});
  socket.on('close', () => {
    clearTimeout(heldTimer);
    if (connectedAt) { open -= 1; if (Date.now() - connectedAt < 1000) closedWithinSecond += 1; }
    if (counted) held -= 1;
    setImmediate(one);
  });
}
for (let i = 0; i < sockets; i++) one();
setTimeout(() => {
  stopping = true;
  process.stdout.write(JSON.stringify({ opened, heldPeak, closedWithinSecond }));
  process.exit(0);
}, seconds * 1000);
`;

/** Which of the acknowledged bodies are in the inbox (by the hash the receiver keys them on). */
async function stored(pool: pg.Pool, bodies: readonly string[]): Promise<number> {
  if (bodies.length === 0) return 0;
  const hashes = bodies.map((b) => createHash('sha256').update(b).digest('hex'));
  const { rows } = await pool.query<{ n: number }>(
    'select count(*)::int as n from webhook_deliveries where body_sha256 = any($1::text[])',
    [hashes],
  );
  return rows[0]?.n ?? 0;
}

async function runPhase(
  phase: PhaseFigures['phase'],
  receiver: Receiver,
  pool: pg.Pool,
  o: Required<Pick<ProbeOptions, 'seconds' | 'attackSockets'>>,
): Promise<PhaseFigures> {
  const before = uptime();
  const attack =
    phase === 'baseline'
      ? null
      : runLoadGenerator<NonNullable<PhaseFigures['attacker']>>(ATTACKER, {
          port: receiver.port,
          address: ATTACKER_ADDRESS,
          sockets: o.attackSockets,
          // One second of attack before the first delivery, and it lasts past the last one.
          seconds: o.seconds + 3,
        });
  if (attack) await new Promise((resolve) => setTimeout(resolve, 1_000));
  const { results, acked } = await deliverEverySecond(receiver.port, o.seconds);
  const attacker = attack ? await attack : null;
  const inInbox = await stored(pool, acked);
  const ms = results.map((r) => r.ms).sort((a, b) => a - b);
  return {
    phase,
    deliveries: results.length,
    acknowledged: acked.length,
    lost: results.length - inInbox,
    p50Ms: round(percentile(ms, 50), 1),
    p99Ms: round(percentile(ms, 99), 1),
    maxMs: round(ms[ms.length - 1] ?? 0, 1),
    attacker,
    load: { before, after: uptime() },
  };
}

export async function benchProbe(options: ProbeOptions = {}): Promise<ProbeBenchFigures> {
  const o = { seconds: options.seconds ?? 30, attackSockets: options.attackSockets ?? 3_000 };
  const log = options.log ?? ((line: string) => console.error(line));
  const databaseUrl = options.databaseUrl ?? process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
  const redisUrl = options.redisUrl ?? process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const db = await createScratchDatabase(databaseUrl, 'probe');
  const env = { DATABASE_URL: db.url, REDIS_URL: redisUrl, REDIS_PREFIX: `sm-probe-${process.pid}-${Date.now().toString(36)}` };
  const phases: PhaseFigures[] = [];
  try {
    let receiver = await startReceiver(env);
    try {
      log(`probe: baseline, one delivery a second for ${o.seconds} s`);
      phases.push(await runPhase('baseline', receiver, db.pool, o));
      log(`probe: attack (${o.attackSockets} sockets from ${ATTACKER_ADDRESS}), one delivery a second from ${CLIENT_ADDRESS}`);
      phases.push(await runPhase('attack', receiver, db.pool, o));
    } finally {
      await receiver.stop();
    }
    receiver = await startReceiver({ ...env, HTTP_MAX_CONNECTIONS_PER_CLIENT: '0', HTTP_REQUEST_RATE_PER_CLIENT: '0' });
    try {
      log('probe: the same attack, per-client limits off');
      phases.push(await runPhase('attack, no per-client limits', receiver, db.pool, o));
    } finally {
      await receiver.stop();
    }
  } finally {
    await db.drop();
    await deleteKeys(redisUrl, env.REDIS_PREFIX);
  }
  const result: ProbeBenchFigures = {
    at: new Date().toISOString(),
    machine: { cpus: os.cpus().length, node: process.version },
    seconds: o.seconds,
    attackSockets: o.attackSockets,
    phases,
  };
  printProbe(result, (line) => console.log(line));
  return result;
}

/** The receivers' Redis keys (the queue its deliveries were handed to). */
async function deleteKeys(url: string, prefix: string): Promise<void> {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await redis.connect();
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 500);
      cursor = next;
      if (keys.length > 0) await redis.del(...keys);
    } while (cursor !== '0');
  } finally {
    redis.disconnect();
  }
}

export function printProbe(r: ProbeBenchFigures, out: (line: string) => void): void {
  out(
    `probe: ${r.seconds} deliveries per phase, attacker holding up to ${r.attackSockets} sockets; ${r.machine.cpus} CPUs, node ${r.machine.node}`,
  );
  for (const p of r.phases) {
    const a = p.attacker ? `; attacker opened ${p.attacker.opened}, held ≥1 s at most ${p.attacker.heldPeak} at once` : '';
    out(
      `  ${p.phase.padEnd(30)} p50 ${p.p50Ms} ms, p99 ${p.p99Ms} ms, max ${p.maxMs} ms, acknowledged ${p.acknowledged}/${p.deliveries}, lost ${p.lost}${a}`,
    );
    out(`    ${p.load.before}  →  ${p.load.after}`);
  }
}

if (isMain(import.meta.url)) {
  const seconds = argNumber('seconds');
  const attackSockets = argNumber('attack-sockets');
  const json = argText('--json') ?? path.join(os.tmpdir(), 'subscriber-mirror-bench', 'probe.json');
  benchProbe({ ...(seconds ? { seconds } : {}), ...(attackSockets ? { attackSockets } : {}) }).then(
    async (r) => {
      const { mkdirSync, writeFileSync } = await import('node:fs');
      mkdirSync(path.dirname(json), { recursive: true });
      writeFileSync(json, `${JSON.stringify(r, null, 2)}\n`);
      console.log(`JSON: ${json}`);
      process.exit(0);
    },
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
}

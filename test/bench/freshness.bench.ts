/**
 * Webhook freshness: how long after a delivery is stored its row is committed in the mirror, at a
 * steady 500 signed `subscriber.updated` deliveries/s (goal: p99 < 250 ms on 2 cores, issue 37; and
 * CPU per delivery, service + Postgres, at most 1.25 ms).
 *
 *   npx tsx test/bench/freshness.bench.ts [--rate 500] [--seconds 10] [--concurrency 4] [--json path]
 *
 * Receiver and consumer run in this process, as `start --role all` runs them: Fastify on a real port
 * with the inbox, the consumer (woken by the inbox's NOTIFY, claiming batches), a scratch database
 * (DATABASE_URL or the local default; created, migrated, dropped here). No Redis: the webhook path
 * no longer uses it. The load generator is a separate Node process sending at a fixed rate
 * (open loop: the schedule does not wait for answers, so a slow receiver shows up as latency, not as
 * a lower rate), over keep-alive sockets speaking minimal HTTP/1.1. Every body is unique and carries
 * a distinct subscriber (so no two applies contend for one row; contention is the store bench's topic).
 *
 * The measure is the consumer's own bookkeeping: `applied_at − received_at` of each delivery, both
 * stamped by Postgres (`received_at` when the inbox INSERT ran, `applied_at` at the end of the apply
 * transaction, just before its commit): store → notify → claim → apply → row committed. The HTTP
 * acknowledgement latency seen by the sender is reported next to it. Prints a table, writes the
 * figures as JSON (test/bench/lib/report.ts shape, goal as baseline; default
 * $TMPDIR/subscriber-mirror-bench/freshness.json) and returns them. Never asserts on timing.
 */
import { cpus, loadavg, tmpdir } from 'node:os';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { DEFAULT_ACCOUNT, openDatabase } from '../../src/db/client.js';
import { buildServer, DEFAULT_LISTENER_LIMITS } from '../../src/http/server.js';
import { createLogger } from '../../src/ground/log.js';
import { createDeliveryConsumer } from '../../src/webhooks/consumer.js';
import { registerWebhookRoute } from '../../src/webhooks/receiver.js';
import { argNumber, isMain } from './lib/cli.js';
import { runLoadGenerator } from './lib/load-generator.js';
import { figure, printTable, round, writeJson, type BenchResult } from './lib/report.js';
import { createScratchDatabase } from './lib/scratch-db.js';

export interface FreshnessOptions {
  /** Deliveries per second sent (default 500). */
  rate?: number;
  /** Seconds of load (default 10). */
  seconds?: number;
  /** Consumer batches at once (default 2, as the worker runs them). */
  concurrency?: number;
  /** Service pool size shared by receiver and consumer (default 10, like `openDatabase`). */
  poolSize?: number;
  /**
   * The receiver's keep-alive (HTTP_IDLE_TIMEOUT; default the service's). `--keepalive-ms 5000`
   * replays the release before issue 37, whose receiver closed idle connections the generator
   * still meant to reuse.
   */
  keepAliveMs?: number;
  databaseUrl?: string;
  /** Where the JSON result is written; null to skip. */
  json?: string | null;
  print?: boolean;
}

export interface FreshnessFigure {
  name: string;
  value: number;
  unit: string;
  /** The target this figure is held to, or null when it is context only. */
  goal: number | null;
}

export interface FreshnessResult {
  figures: FreshnessFigure[];
  result: BenchResult;
}

const SECRET = 'bench-freshness-secret-2b7e';

export async function benchFreshness(options: FreshnessOptions = {}): Promise<FreshnessResult> {
  const rate = options.rate ?? 500;
  const seconds = options.seconds ?? 10;
  const concurrency = options.concurrency ?? 2;
  const baseUrl = options.databaseUrl ?? process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
  const loadBefore = loadavg()[0] ?? 0;
  const startedAt = new Date();

  const scratch = await createScratchDatabase(baseUrl, 'freshness');
  const database = openDatabase(scratch.url, { max: options.poolSize ?? 10, applicationName: 'freshness-bench', account: DEFAULT_ACCOUNT });
  const { logger } = createLogger({ level: 'warn', secrets: [SECRET] });
  const consumer = createDeliveryConsumer({ pool: database.pool, logger, concurrency });
  const limits = { ...DEFAULT_LISTENER_LIMITS, ...(options.keepAliveMs === undefined ? {} : { idleTimeoutMs: options.keepAliveMs }) };
  const app = buildServer({ logger, readiness: [], limits });
  try {
    const route = registerWebhookRoute(app, {
      path: '/webhooks',
      maxBodyBytes: 1024 * 1024,
      secrets: () => [SECRET],
      pool: database.pool,
      logger,
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const port = (app.server.address() as AddressInfo).port;
    const run = await measureLoad(database.pool, scratch.name, { port, rate, seconds });
    const outcome = await readOutcome(database.pool);
    const inbox = route.writer.stats();
    const figures = [
      ...freshnessFigures(run, outcome, { rate, seconds }),
      {
        name: 'inbox rows per statement (warm-up included)',
        value: round(inbox.rows / Math.max(1, inbox.batches), 2),
        unit: 'rows',
        goal: null,
      },
    ];
    const result: BenchResult = {
      bench: 'freshness',
      rows: outcome.applied,
      startedAt: startedAt.toISOString(),
      durationMs: Date.now() - startedAt.getTime(),
      environment: {
        cpus: String(cpus().length),
        node: process.version,
        postgres: outcome.serverVersion,
        load: `${round(loadBefore, 2)} → ${round(loadavg()[0] ?? 0, 2)}`,
        rate: String(rate),
        seconds: String(seconds),
        concurrency: String(concurrency),
        pool: String(options.poolSize ?? 10),
        keepAliveMs: String(limits.idleTimeoutMs),
      },
      figures: figures.map((f) => figure(f.name, f.value, f.unit, f.goal)),
    };
    report(result, options, rate);
    if (options.print !== false) for (const problem of run.load.problems) console.log(`  request: ${problem}`);
    return { figures, result };
  } finally {
    await app.close();
    await consumer.close(10_000);
    await database.close();
    await scratch.drop();
  }
}

/** What the measured run took: the generator's answer, and the time and CPU the service spent. */
interface LoadRun {
  load: GeneratorResult;
  drainMs: number;
  cpu: NodeJS.CpuUsage;
  wallMs: number;
  pgCpuMs: number;
}

/** A warm-up at up to 200/s (then emptied), then the measured run, drained to the last delivery. */
async function measureLoad(
  pool: import('pg').Pool,
  databaseName: string,
  load: { port: number; rate: number; seconds: number },
): Promise<LoadRun> {
  const { port, rate, seconds } = load;
  // Warm up connections, prepared statements and the JIT before measuring.
  await runLoadGenerator<GeneratorResult>(GENERATOR, {
    port,
    secret: SECRET,
    rate: Math.min(rate, 200),
    seconds: 1,
    runId: 'warmup',
  } satisfies GeneratorConfig);
  await waitDrained(pool, 30_000);
  await pool.query('truncate webhook_deliveries, subscribers, subscriber_activity');

  const pgBefore = await postgresCpuMs(pool, databaseName);
  const cpuBefore = process.cpuUsage();
  const wallBefore = performance.now();
  const generated = await runLoadGenerator<GeneratorResult>(GENERATOR, {
    port,
    secret: SECRET,
    rate,
    seconds,
    runId: 'measure',
  } satisfies GeneratorConfig);
  const drainMs = await waitDrained(pool, 120_000);
  const cpu = process.cpuUsage(cpuBefore);
  const wallMs = performance.now() - wallBefore;
  const pgCpuMs = (await postgresCpuMs(pool, databaseName)) - pgBefore;
  return { load: generated, drainMs, cpu, wallMs, pgCpuMs };
}

/** What the inbox says of the measured deliveries: each one's lag, sorted, and the counts. */
interface Outcome {
  lags: number[];
  applied: number;
  /** Apply transactions that marked them. */
  batches: number;
  first: number;
  last: number;
  notApplied: number;
  serverVersion: string;
}

async function readOutcome(pool: import('pg').Pool): Promise<Outcome> {
  // Rows applied by one batch share its transaction id (xmin): the count of those is the count of batches.
  const { rows } = await pool.query<{ lag: number[]; applied: number; batches: number; first: number; last: number }>(`
      select array_agg((extract(epoch from applied_at - received_at) * 1000)::float8) as lag,
             count(*)::int as applied, count(distinct xmin::text)::int as batches,
             (extract(epoch from min(received_at)) * 1000)::float8 as first,
             (extract(epoch from max(applied_at)) * 1000)::float8 as last
        from webhook_deliveries where status = 'applied'`);
  const stats = rows[0] ?? { lag: [], applied: 0, batches: 0, first: 0, last: 0 };
  const lags = (stats.lag ?? []).map(Number).sort((a, b) => a - b);
  const { rows: other } = await pool.query<{ status: string; n: number }>(
    `select status, count(*)::int as n from webhook_deliveries where status <> 'applied' group by status`,
  );
  const settings = await pool.query<{ server_version: string }>('show server_version');
  return {
    lags,
    applied: stats.applied,
    batches: stats.batches,
    first: stats.first,
    last: stats.last,
    notApplied: other.reduce((n, r) => n + r.n, 0),
    serverVersion: settings.rows[0]?.server_version ?? '?',
  };
}

function freshnessFigures(run: LoadRun, stats: Outcome, offered: { rate: number; seconds: number }): FreshnessFigure[] {
  const { load, cpu, wallMs, pgCpuMs, drainMs } = run;
  const { lags } = stats;
  const { rate, seconds } = offered;
  return [
    { name: 'store → row committed p50', value: round(q(lags, 0.5), 1), unit: 'ms', goal: null },
    { name: 'store → row committed p90', value: round(q(lags, 0.9), 1), unit: 'ms', goal: null },
    { name: 'store → row committed p99', value: round(q(lags, 0.99), 1), unit: 'ms', goal: 250 },
    { name: 'store → row committed max', value: round(lags.at(-1) ?? 0, 1), unit: 'ms', goal: null },
    { name: 'offered rate', value: round(load.sent / seconds, 0), unit: 'deliveries/s', goal: rate },
    {
      name: 'applied rate',
      value: round(stats.applied / Math.max(0.001, (stats.last - stats.first) / 1000), 0),
      unit: 'deliveries/s',
      goal: rate,
    },
    { name: 'HTTP ack p50', value: load.p50Ms, unit: 'ms', goal: null },
    { name: 'HTTP ack p99', value: load.p99Ms, unit: 'ms', goal: null },
    { name: 'applied', value: stats.applied, unit: 'deliveries', goal: load.acknowledged },
    { name: 'not 2xx or errors', value: load.non2xx + load.errors, unit: 'requests', goal: 0 },
    { name: 'requests left without an answer', value: load.errors, unit: 'requests', goal: 0 },
    { name: 'connections the server closed while idle', value: load.closedIdle, unit: 'connections', goal: null },
    { name: 'least idle time of those', value: load.closedIdleMinMs, unit: 'ms', goal: null },
    {
      name: 'unanswered requests on connections idle ≥ 4 s',
      value: load.unansweredAfterLongIdle,
      unit: 'requests',
      goal: null,
    },
    {
      name: 'deliveries per apply transaction',
      value: round(stats.applied / Math.max(1, stats.batches), 2),
      unit: 'deliveries',
      goal: null,
    },
    { name: 'not applied (failed, ignored, pending)', value: stats.notApplied, unit: 'deliveries', goal: 0 },
    { name: 'drain after last send', value: round(drainMs, 0), unit: 'ms', goal: null },
    { name: 'service process CPU', value: round(((cpu.user + cpu.system) / 1000 / wallMs) * 100, 0), unit: '% of one core', goal: null },
    { name: 'load generator CPU', value: load.generatorCpuPct, unit: '% of one core', goal: null },
    // CPU per delivery does not depend on what else the machine runs (latency does): the figures
    // to compare between runs on a shared machine.
    { name: 'service CPU per delivery', value: round((cpu.user + cpu.system) / Math.max(1, stats.applied), 0), unit: 'µs', goal: null },
    { name: 'Postgres CPU per delivery', value: round((pgCpuMs * 1000) / Math.max(1, stats.applied), 0), unit: 'µs', goal: null },
  ];
}

/** Prints the table (unless `print: false`) and writes the JSON (unless `json: null`). */
function report(result: BenchResult, options: FreshnessOptions, rate: number): void {
  if (options.print !== false) {
    printTable(result);
    console.log(`  goal: p99 < 250 ms at ${rate}/s; ${cpus().length} CPUs, load ${result.environment.load}`);
  }
  const json = options.json === undefined ? path.join(tmpdir(), 'subscriber-mirror-bench', 'freshness.json') : options.json;
  if (json !== null) {
    writeJson(json, result);
    if (options.print !== false) console.log(`JSON: ${json}`);
  }
}

async function waitDrained(pool: import('pg').Pool, timeoutMs: number): Promise<number> {
  const started = performance.now();
  for (;;) {
    const { rows } = await pool.query<{ n: number }>(`select count(*)::int as n from webhook_deliveries where status = 'pending'`);
    if (rows[0]?.n === 0) return performance.now() - started;
    if (performance.now() - started > timeoutMs) throw new Error(`${rows[0]?.n} deliveries still pending after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * CPU time (ms) used so far by the Postgres backends connected to `database` (same host only: read
 * from /proc; 0 where unavailable). Receiver and consumer hold their pooled connections throughout.
 */
async function postgresCpuMs(pool: import('pg').Pool, database: string): Promise<number> {
  const { rows } = await pool.query<{ pid: number }>('select pid from pg_stat_activity where datname = $1', [database]);
  const { readFile } = await import('node:fs/promises');
  let ticks = 0;
  for (const { pid } of rows) {
    try {
      const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14 and 15)
    } catch {
      // not on this host, or the backend ended
    }
  }
  return ticks * 10; // USER_HZ = 100 on Linux
}

function q(sorted: readonly number[], p: number): number {
  return sorted.length === 0 ? 0 : (sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? 0);
}

// ---------------------------------------------------------------------------------------------
// Load generator (a separate Node process; plain JS so it needs no TypeScript loader)

interface GeneratorConfig {
  port: number;
  secret: string;
  rate: number;
  seconds: number;
  runId: string;
}

interface GeneratorResult {
  sent: number;
  acknowledged: number;
  non2xx: number;
  errors: number;
  p50Ms: number;
  p99Ms: number;
  generatorCpuPct: number;
  /** Connections the server ended while they sat idle in the generator's pool, and the least idle time among them. */
  closedIdle: number;
  closedIdleMinMs: number;
  /** Requests left without an answer whose connection had been idle 4 s or more before the request was written. */
  unansweredAfterLongIdle: number;
  /** Each non-2xx answer and each request left without one, described (printed after the table). */
  problems: string[];
}

// Open loop: every tick sends what the schedule says is due, on an idle keep-alive connection
// (opening another one when all are busy), so the offered rate does not bend to the receiver.
// Connections are opened when a request needs one, as an HTTP client's pool does: this generator
// used to open 16 at start, and those a run never needed sent nothing for longer than the
// receiver's header timeout (HTTP_HEADERS_TIMEOUT, 5 s, its guard against silent connections),
// which then answered 408 and closed them, racing the generator's first request on them (issue 37
// measured it: 0–1 requests left without an answer per run at 300/s). Idle connections that did
// serve a request are the receiver's keep-alive's to keep (HTTP_IDLE_TIMEOUT, longer than clients').
const GENERATOR = String.raw`
const net = require('node:net');
const crypto = require('node:crypto');
const cfg = JSON.parse(process.argv[1]);
const run = crypto.randomBytes(4).toString('hex');
const base = 130742518836315811n + BigInt(Number.parseInt(run, 16)) * 1000000n + (cfg.runId === 'warmup' ? 500000n : 0n);
const head = 'POST /webhooks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n';
let seq = 0;
function body() {
  seq++;
  const micros = String(seq % 1000000).padStart(6, '0');
  return '{"event":"subscriber.updated","id":"' + String(base + BigInt(seq)) + '","email":"fresh.' + run + '.' + seq +
    '@example.com","status":"active","source":"api","sent":14,"opens_count":9,"clicks_count":3,"open_rate":64.29,' +
    '"click_rate":21.43,"ip_address":"203.0.113.24","subscribed_at":"2022-04-05T22:39:05.000000Z","unsubscribed_at":null,' +
    '"created_at":"2022-04-05T22:39:05.000000Z","updated_at":"2024-06-11T09:15:42.' + micros + 'Z","deleted_at":null,' +
    '"forget_at":null,"fields":{"name":"Jonas","last_name":"Weber","company":"","country":"Germany","city":"Berlin",' +
    '"phone":"","state":"","zip":""},"opted_in_at":null,"optin_ip":null,"account_id":412873}';
}
const CRLF2 = Buffer.from('\r\n\r\n');
const idle = [];
const latencies = [];
let sent = 0, ok = 0, non2xx = 0, errors = 0, inFlight = 0, open = 0;
// Who closes: connections the server ended while idle here, how long they had been idle, and for each
// request left without an answer how long its connection had been idle before it was written.
const closedIdleMs = [], problems = [];
let unansweredAfterLongIdle = 0, moreProblems = 0;
// The first 20 described, the rest counted (an overloaded receiver can leave thousands).
const note = (text) => { if (problems.length < 20) problems.push(text); else moreProblems++; };
function connect() {
  const sock = net.connect(cfg.port, '127.0.0.1');
  sock.setNoDelay(true);
  open++;
  const c = { sock, buf: Buffer.alloc(0), t0: 0, busy: false, ready: false, pending: null, idleSince: performance.now(), idleBefore: 0,
    opened: performance.now(), served: 0, gone: false, error: '' };
  sock.on('connect', () => { c.ready = true; if (c.pending) { const p = c.pending; c.pending = null; write(c, p); } else idle.push(c); });
  sock.on('data', (chunk) => {
    c.buf = c.buf.length === 0 ? chunk : Buffer.concat([c.buf, chunk]);
    for (;;) {
      const h = c.buf.indexOf(CRLF2);
      if (h === -1) return;
      const headers = c.buf.toString('latin1', 0, h);
      const m = /content-length:\s*(\d+)/i.exec(headers);
      const total = h + 4 + (m ? Number(m[1]) : 0);
      if (c.buf.length < total) return;
      const status = Number(headers.slice(9, 12));
      c.buf = c.buf.subarray(total);
      latencies.push(performance.now() - c.t0);
      c.idleSince = performance.now();
      if (status >= 200 && status < 300) ok++; else { non2xx++; note('HTTP ' + status + (c.busy ? '' : ' unasked')); }
      c.served++;
      c.busy = false; inFlight--;
      idle.push(c);
    }
  });
  const lost = (error) => {
    if (error && error.code) c.error = error.code;
    if (c.gone) return;
    c.gone = true;
    const unanswered = c.busy || c.pending !== null;
    if (unanswered) {
      errors++;
      if (c.busy) inFlight--;
      c.busy = false; c.pending = null;
      if (c.idleBefore >= 4000) unansweredAfterLongIdle++;
      note('no answer: ' + (c.error || 'closed') + ', connection ' + Math.round(performance.now() - c.opened) + ' ms old, ' + c.served +
        ' answered before, idle ' + Math.round(c.idleBefore) + ' ms before the request');
    }
    const i = idle.indexOf(c); if (i >= 0) idle.splice(i, 1); open--;
  };
  sock.on('end', () => { if (!c.busy) closedIdleMs.push(Math.round(performance.now() - c.idleSince)); });
  sock.on('error', lost);
  sock.on('close', () => lost());
  return c;
}
function write(c, text) {
  const sig = crypto.createHmac('sha256', cfg.secret).update(text).digest('hex');
  c.t0 = performance.now(); c.busy = true; inFlight++; c.idleBefore = c.t0 - c.idleSince;
  c.sock.write(head + 'Content-Length: ' + Buffer.byteLength(text) + '\r\nSignature: ' + sig + '\r\n\r\n' + text);
}
function send() {
  sent++;
  const text = body();
  const c = idle.pop();
  if (c) write(c, text); else { const n = connect(); n.pending = text; }
}
setTimeout(() => {
  const start = performance.now();
  const end = start + cfg.seconds * 1000;
  const timer = setInterval(() => {
    const now = Math.min(performance.now(), end);
    const due = Math.floor(((now - start) / 1000) * cfg.rate);
    while (sent < due) send();
    if (now >= end) {
      clearInterval(timer);
      const wait = setInterval(() => {
        if (inFlight > 0 && performance.now() < end + 30000) return;
        clearInterval(wait);
        const cpu = process.cpuUsage();
        latencies.sort((a, b) => a - b);
        const q = (p) => latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] : 0;
        const r = (x) => Math.round(x * 100) / 100;
        process.stdout.write(JSON.stringify({ sent, acknowledged: ok, non2xx, errors, p50Ms: r(q(0.5)), p99Ms: r(q(0.99)),
          generatorCpuPct: Math.round((cpu.user + cpu.system) / 10 / (performance.now() - start)),
          closedIdle: closedIdleMs.length, closedIdleMinMs: closedIdleMs.length ? Math.min(...closedIdleMs) : 0,
          unansweredAfterLongIdle, problems: moreProblems > 0 ? [...problems, moreProblems + ' more'] : problems }));
        process.exit(0);
      }, 10);
    }
  }, 2);
}, 200);
`;

if (isMain(import.meta.url)) {
  const jsonArg = process.argv.indexOf('--json');
  benchFreshness({
    rate: argNumber('rate') ?? 500,
    seconds: argNumber('seconds') ?? 10,
    concurrency: argNumber('concurrency') ?? 2,
    poolSize: argNumber('pool') ?? 10,
    keepAliveMs: argNumber('keepalive-ms'),
    ...(jsonArg === -1 ? {} : { json: process.argv[jsonArg + 1] ?? null }),
  }).catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
}

/**
 * Webhook receiver throughput: signed deliveries/s acknowledged with a durable write, and latency,
 * against a verify-only route measured in the same run (what HTTP + HMAC alone cost on this machine).
 *
 *   npx tsx test/bench/webhooks.bench.ts [--seconds 10] [--connections 64] [--max-batch 256]
 *                                        [--max-wait-ms 2] [--max-concurrent 2] [--routes verify-only,store]
 *                                        [--json path]
 *
 * The receiver runs in this process on a real port with a scratch database (DATABASE_URL or the local
 * default; created, migrated and dropped here). The load generator is a separate Node process on
 * loopback (keep-alive raw sockets speaking minimal HTTP/1.1, N connections each with one request in
 * flight) so it does not share the server's event loop; on a 2-core machine it still shares the CPUs with the server and
 * Postgres, which the figures include. Every body is unique (a duplicate would skip the write).
 * Prints a table, writes the figures as JSON (test/bench/lib/report.ts shape; default
 * $TMPDIR/subscriber-mirror-bench/webhooks.json, `--json path`), returns them.
 */
import { cpus, loadavg, tmpdir } from 'node:os';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import { DEFAULT_ACCOUNT, openDatabase } from '../../src/db/client.js';
import { buildServer } from '../../src/http/server.js';
import { createLogger } from '../../src/ground/log.js';
import type { InboxWriterOptions, InboxWriterStats } from '../../src/webhooks/inbox/write.js';
import { parseDelivery } from '../../src/webhooks/payloads.js';
import { registerWebhookRoute } from '../../src/webhooks/receiver.js';
import { verifySignature } from '../../src/webhooks/signature.js';
import { argNumber, isMain } from './lib/cli.js';
import { runLoadGenerator } from './lib/load-generator.js';
import { figure, round, writeJson, type BenchResult } from './lib/report.js';
import { createScratchDatabase } from './lib/scratch-db.js';

export interface BenchOptions {
  /** Measured seconds per route (after warm-up). */
  seconds?: number;
  warmupSeconds?: number;
  /** Concurrent keep-alive connections of the generator. */
  connections?: number;
  databaseUrl?: string;
  inbox?: InboxWriterOptions;
  /** Which routes to measure (all three by default; the ratio needs verify-only and store). */
  routes?: RouteName[];
  /** Where the JSON result is written; null to skip. */
  json?: string | null;
  print?: boolean;
}

export type RouteName = 'verify-only' | 'verify+parse' | 'store';

const ROUTES: Record<RouteName, string> = {
  'verify-only': '/bench/verify',
  'verify+parse': '/bench/verify-parse',
  store: '/webhooks',
};

export interface RouteFigures {
  route: RouteName;
  /** 2xx answers completed inside the measured window. */
  acknowledged: number;
  non2xx: number;
  errors: number;
  seconds: number;
  perSecond: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  maxMs: number;
  /** CPU time of the server process (all threads) / wall time; 100 = one core. */
  serverCpuPct: number;
  /** The same for the load generator process. */
  generatorCpuPct: number;
}

export interface WebhookBenchFigures {
  at: string;
  machine: {
    cpus: number;
    node: string;
    postgres: string;
    synchronousCommit: string;
    fsync: string;
    /** 1-minute load average before and after: other work on the machine skews the figures. */
    loadBefore: number;
    loadAfter: number;
  };
  options: { seconds: number; warmupSeconds: number; connections: number; inbox: Required<InboxWriterOptions> };
  routes: RouteFigures[];
  /** store ÷ verify-only deliveries/s. */
  ratio: number;
  inbox: { batches: number; rows: number; avgBatch: number; maxBatch: number; rowsInTable: number; acknowledgedTotal: number };
  /** The same figures in the shared benchmark JSON shape. */
  result: BenchResult;
}

const SECRET = 'bench-webhook-secret-5d1c';

export async function benchWebhooks(options: BenchOptions = {}): Promise<WebhookBenchFigures> {
  const load: LoadSettings = {
    seconds: options.seconds ?? 10,
    warmupSeconds: options.warmupSeconds ?? 2,
    connections: options.connections ?? 64,
  };
  const inbox: Required<InboxWriterOptions> = {
    maxBatch: 256,
    maxWaitMs: 2,
    maxConcurrent: 2,
    maxBatchBytes: 16 * 1024 * 1024,
    maxQueued: 10_000,
    ...options.inbox,
  };
  const baseUrl = options.databaseUrl ?? process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
  const loadBefore = round(loadavg()[0] ?? 0, 2);
  const startedAt = new Date();
  const scratch = await createScratchDatabase(baseUrl, 'webhooks');
  const database = openDatabase(scratch.url, { max: 10, applicationName: 'webhooks-bench', account: DEFAULT_ACCOUNT });
  const { logger } = createLogger({ level: 'warn', secrets: [SECRET] });
  const app = buildServer({ logger, readiness: [] });
  try {
    const route = registerWebhookRoute(app, {
      path: '/webhooks',
      maxBodyBytes: 1024 * 1024,
      secrets: () => [SECRET],
      pool: database.pool,
      logger,
      inbox,
    });
    registerBaselineRoutes(app);
    await app.listen({ port: 0, host: '127.0.0.1' });
    const port = (app.server.address() as AddressInfo).port;
    const routes = await measureRoutes(port, options.routes ?? (Object.keys(ROUTES) as RouteName[]), load);
    const summary = await summarize(database.pool, route.writer.stats(), routes, { ...load, inbox }, { startedAt, loadBefore });
    const figures: WebhookBenchFigures = { ...summary, result: toBenchResult(summary, startedAt) };
    report(figures, options);
    return figures;
  } finally {
    await app.close();
    await database.close();
    await scratch.drop();
  }
}

/** How hard and how long the generator drives each route. */
type LoadSettings = Pick<GeneratorConfig, 'connections' | 'seconds' | 'warmupSeconds'>;

/** One generator run per route, one after the other, each with the server's CPU share over its wall time. */
async function measureRoutes(port: number, names: readonly RouteName[], load: LoadSettings): Promise<RouteFigures[]> {
  const routes: RouteFigures[] = [];
  for (const name of names) {
    const cpuBefore = process.cpuUsage();
    const wallBefore = performance.now();
    const result = await runLoadGenerator<GeneratorResult>(GENERATOR, {
      port,
      path: ROUTES[name],
      secret: SECRET,
      connections: load.connections,
      seconds: load.seconds,
      warmupSeconds: load.warmupSeconds,
    } satisfies GeneratorConfig);
    const cpu = process.cpuUsage(cpuBefore);
    const wallMs = performance.now() - wallBefore;
    routes.push({ route: name, ...result, serverCpuPct: round(((cpu.user + cpu.system) / 1000 / wallMs) * 100, 0) });
  }
  return routes;
}

/** The figures without the shared JSON shape; reads what the inbox wrote and the settings that govern its commits. */
async function summarize(
  pool: pg.Pool,
  stats: InboxWriterStats,
  routes: RouteFigures[],
  options: WebhookBenchFigures['options'],
  run: { startedAt: Date; loadBefore: number },
): Promise<Omit<WebhookBenchFigures, 'result'>> {
  const { rows } = await pool.query<{ n: number }>('select count(*)::int as n from webhook_deliveries');
  const settings = await readSettings(pool);
  const verifyOnly = routes.find((r) => r.route === 'verify-only');
  const store = routes.find((r) => r.route === 'store');
  return {
    at: run.startedAt.toISOString(),
    machine: {
      cpus: cpus().length,
      node: process.version,
      ...settings,
      loadBefore: run.loadBefore,
      loadAfter: round(loadavg()[0] ?? 0, 2),
    },
    options,
    routes,
    ratio: store && verifyOnly ? round(store.perSecond / verifyOnly.perSecond, 2) : Number.NaN,
    inbox: {
      batches: stats.batches,
      rows: stats.rows,
      avgBatch: round(stats.rows / Math.max(1, stats.batches), 1),
      maxBatch: stats.maxBatchSeen,
      rowsInTable: rows[0]?.n ?? 0,
      acknowledgedTotal: store?.acknowledged ?? 0,
    },
  };
}

/** Prints the table and writes the JSON (default path unless `json` is null). */
function report(figures: WebhookBenchFigures, options: Pick<BenchOptions, 'json' | 'print'>): void {
  if (options.print !== false) printFigures(figures);
  const json = options.json === undefined ? path.join(tmpdir(), 'subscriber-mirror-bench', 'webhooks.json') : options.json;
  if (json !== null) {
    writeJson(json, figures.result);
    if (options.print !== false) console.log(`JSON: ${json}`);
  }
}

/** Same raw-body handling as the real route, minus the inbox: the cost of HTTP + HMAC (+ parsing). */
function registerBaselineRoutes(app: FastifyInstance): void {
  const jsonParser = app.getDefaultJsonParser('error', 'error');
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: 1024 * 1024 }, (_req, body, done) => done(null, body));
    scope.post('/bench/verify', async (request, reply) => {
      const check = verifySignature(request.body as Buffer, request.headers.signature as string | undefined, [SECRET]);
      return reply.code(check.ok ? 200 : 401).send({ ok: check.ok });
    });
    scope.post('/bench/verify-parse', async (request, reply) => {
      const raw = request.body as Buffer;
      const check = verifySignature(raw, request.headers.signature as string | undefined, [SECRET]);
      if (!check.ok) return reply.code(401).send({ ok: false });
      let body: unknown;
      void jsonParser(request, raw.toString('utf8'), (error, value) => {
        body = error ? undefined : value;
      });
      const parsed = parseDelivery(body);
      return reply.code(200).send({ ok: true, events: parsed.events.length });
    });
  });
}

// ---------------------------------------------------------------------------------------------
// Load generator (a separate Node process; plain JS so it needs no TypeScript loader)

interface GeneratorConfig {
  port: number;
  path: string;
  secret: string;
  connections: number;
  seconds: number;
  warmupSeconds: number;
}

type GeneratorResult = Omit<RouteFigures, 'route' | 'serverCpuPct'>;

// node:http's client spends more CPU per request than the server does per delivery, so on 2 cores
// it, not the receiver, would set the pace: the generator speaks minimal HTTP/1.1 over raw sockets
// (one request in flight per connection, keep-alive, Content-Length framing as Fastify answers).
const GENERATOR = String.raw`
const net = require('node:net');
const crypto = require('node:crypto');
const cfg = JSON.parse(process.argv[1]);
const run = crypto.randomBytes(6).toString('hex');
const head = 'POST ' + cfg.path + ' HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n';
const base = 130742518836315811n;
let seq = 0;
function body() {
  seq++;
  return '{"event":"subscriber.updated","id":"' + String(base + BigInt(seq)) + '","email":"bench.' + run + '.' + seq +
    '@example.com","status":"active","source":"api","sent":14,"opens_count":9,"clicks_count":3,"open_rate":64.29,' +
    '"click_rate":21.43,"ip_address":"203.0.113.24","subscribed_at":"2022-04-05T22:39:05.000000Z","unsubscribed_at":null,' +
    '"created_at":"2022-04-05T22:39:05.000000Z","updated_at":"2024-06-11T09:15:42.' + String(seq % 1000000).padStart(6, '0') +
    'Z","deleted_at":null,"forget_at":null,"fields":{"name":"Jonas","last_name":"Weber","company":"","country":"Germany",' +
    '"city":"Berlin","phone":"","state":"","zip":""},"opted_in_at":null,"optin_ip":null,"account_id":412873}';
}
const start = performance.now();
const measureFrom = start + cfg.warmupSeconds * 1000;
const end = measureFrom + cfg.seconds * 1000;
const latencies = [];
let ok = 0, non2xx = 0, errors = 0, open = 0;
const CRLF2 = Buffer.from('\r\n\r\n');
function connection(done) {
  const sock = net.connect(cfg.port, '127.0.0.1');
  sock.setNoDelay(true);
  let buf = Buffer.alloc(0), t0 = 0, busy = false;
  function send() {
    if (performance.now() >= end) { sock.end(); return; }
    const text = body();
    const sig = crypto.createHmac('sha256', cfg.secret).update(text).digest('hex');
    t0 = performance.now(); busy = true;
    sock.write(head + 'Content-Length: ' + Buffer.byteLength(text) + '\r\nSignature: ' + sig + '\r\n\r\n' + text);
  }
  sock.on('connect', send);
  sock.on('data', (chunk) => {
    buf = buf.length === 0 ? chunk : Buffer.concat([buf, chunk]);
    for (;;) {
      const h = buf.indexOf(CRLF2);
      if (h === -1) return;
      const headers = buf.toString('latin1', 0, h);
      const m = /content-length:\s*(\d+)/i.exec(headers);
      const total = h + 4 + (m ? Number(m[1]) : 0);
      if (buf.length < total) return;
      const status = Number(headers.slice(9, 12));
      buf = buf.subarray(total);
      const t1 = performance.now();
      busy = false;
      if (t0 >= measureFrom && t1 <= end) {
        if (status >= 200 && status < 300) { ok++; latencies.push(t1 - t0); } else non2xx++;
      }
      send();
    }
  });
  sock.on('error', () => { if (busy && t0 >= measureFrom) errors++; busy = false; });
  sock.on('close', () => {
    if (busy && t0 >= measureFrom) errors++;
    if (performance.now() < end) connection(done); else done();
  });
}
Promise.all(Array.from({ length: cfg.connections }, () => new Promise((resolve) => connection(resolve)))).then(() => {
  const cpu = process.cpuUsage();
  latencies.sort((a, b) => a - b);
  const q = (p) => latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] : 0;
  const r = (x) => Math.round(x * 100) / 100;
  process.stdout.write(JSON.stringify({ acknowledged: ok, non2xx, errors, seconds: cfg.seconds,
    perSecond: Math.round(ok / cfg.seconds), p50Ms: r(q(0.5)), p90Ms: r(q(0.9)), p99Ms: r(q(0.99)),
    maxMs: r(latencies.length ? latencies[latencies.length - 1] : 0),
    generatorCpuPct: Math.round((cpu.user + cpu.system) / 10 / (performance.now() - start)) }));
});
`;

// ---------------------------------------------------------------------------------------------
// Output

async function readSettings(pool: pg.Pool) {
  const show = async (name: string) => String((await pool.query(`show ${name}`)).rows[0]?.[name] ?? '?');
  return {
    postgres: await show('server_version'),
    synchronousCommit: await show('synchronous_commit'),
    fsync: await show('fsync'),
  };
}

function printFigures(f: WebhookBenchFigures): void {
  const header = ['route', 'ack/s', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms', 'non-2xx', 'errors', 'server CPU%', 'generator CPU%'];
  const rows = f.routes.map((r) => [
    r.route,
    String(r.perSecond),
    r.p50Ms.toFixed(2),
    r.p90Ms.toFixed(2),
    r.p99Ms.toFixed(2),
    r.maxMs.toFixed(1),
    String(r.non2xx),
    String(r.errors),
    String(r.serverCpuPct),
    String(r.generatorCpuPct),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] as string).length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  console.log(
    `\nwebhook receiver, ${f.options.seconds}s per route, ${f.options.connections} connections, ${f.machine.cpus} CPUs, ` +
      `Postgres ${f.machine.postgres} (synchronous_commit=${f.machine.synchronousCommit}, fsync=${f.machine.fsync}), ` +
      `load average ${f.machine.loadBefore} → ${f.machine.loadAfter}`,
  );
  console.log(line(header));
  for (const r of rows) console.log(line(r));
  console.log(
    `store ÷ verify-only: ${f.ratio}   inbox: ${f.inbox.rows} rows in ${f.inbox.batches} statements ` +
      `(avg ${f.inbox.avgBatch}, max ${f.inbox.maxBatch}); rows in table ${f.inbox.rowsInTable} ≥ acknowledged in window ${f.inbox.acknowledgedTotal}\n`,
  );
}

function toBenchResult(f: Omit<WebhookBenchFigures, 'result'>, startedAt: Date): BenchResult {
  const verifyOnly = f.routes.find((r) => r.route === 'verify-only');
  const figures = f.routes.flatMap((r) => [
    figure(`${r.route}: acknowledged/s`, r.perSecond, 'deliveries/s', r.route === 'verify-only' ? null : (verifyOnly?.perSecond ?? null)),
    figure(`${r.route}: p50`, r.p50Ms * 1000, 'µs'),
    figure(`${r.route}: p99`, r.p99Ms * 1000, 'µs', null, r.non2xx + r.errors > 0 ? `${r.non2xx} non-2xx, ${r.errors} errors` : undefined),
  ]);
  figures.push(figure('inbox rows per statement (mean)', f.inbox.avgBatch, 'rows'));
  return {
    bench: 'webhooks',
    rows: f.inbox.rows,
    startedAt: startedAt.toISOString(),
    durationMs: Date.now() - startedAt.getTime(),
    environment: {
      cpus: String(f.machine.cpus),
      node: f.machine.node,
      postgres: f.machine.postgres,
      synchronous_commit: f.machine.synchronousCommit,
      fsync: f.machine.fsync,
      load: `${f.machine.loadBefore} → ${f.machine.loadAfter}`,
      connections: String(f.options.connections),
      seconds_per_route: String(f.options.seconds),
      inbox: JSON.stringify(f.options.inbox),
    },
    figures,
  };
}

if (isMain(import.meta.url)) {
  const jsonArg = process.argv.indexOf('--json');
  const inbox: InboxWriterOptions = {};
  const maxBatch = argNumber('max-batch');
  const maxWaitMs = argNumber('max-wait-ms');
  const maxConcurrent = argNumber('max-concurrent');
  if (maxBatch !== undefined) inbox.maxBatch = maxBatch;
  if (maxWaitMs !== undefined) inbox.maxWaitMs = maxWaitMs;
  if (maxConcurrent !== undefined) inbox.maxConcurrent = maxConcurrent;
  const routesArg = process.argv.indexOf('--routes');
  const routes = routesArg === -1 ? undefined : ((process.argv[routesArg + 1] ?? '').split(',') as RouteName[]);
  if (routes?.some((r) => !(r in ROUTES))) throw new Error(`--routes takes ${Object.keys(ROUTES).join(',')}`);
  benchWebhooks({
    routes,
    seconds: argNumber('seconds') ?? 10,
    connections: argNumber('connections') ?? 64,
    inbox,
    ...(jsonArg === -1 ? {} : { json: process.argv[jsonArg + 1] ?? null }),
  }).catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
}

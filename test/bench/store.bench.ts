/**
 * Throughput of `upsertSubscribers` (docs/architecture.md, "Traps we work around": the drizzle row builder managed ~6k rows/s;
 * the goal is ≥ 40k rows/s and ≥ 0.5× raw COPY) against the fastest ways to put the same rows in
 * the same table:
 *
 * - `COPY … FROM STDIN` of all rows in one stream (baseline for the ratios), and per 1000-row page;
 *   done with a minimal node-postgres submittable (lib/copy.ts) since pg-copy-streams is not installed;
 * - a plain `INSERT … SELECT FROM unnest` without ON CONFLICT, per page.
 *
 * Upsert scenarios, in pages of 1000 on one connection, each page its own transaction: fresh insert,
 * identical re-upsert (nothing written), update (every row newer), older (every row skipped).
 * Timings include building parameters in JS; row objects are built before timing.
 *
 * Run alone: `npx tsx test/bench/store.bench.ts [--rows 100000] [--repeats 3] [--json path]` (uses DATABASE_URL,
 * default postgres://postgres@127.0.0.1:5432/postgres; creates and drops its own database).
 */
import os from 'node:os';
import path from 'node:path';
import type pg from 'pg';
import {
  normalizeLegacySubscriber,
  normalizeWebhookSubscriber,
  SUBSCRIBER_FIELDS,
  type SubscriberRow,
  type SubscriberValues,
} from '../../src/mirror/normalize.js';
import { upsertSubscribers } from '../../src/mirror/store/index.js';
import { configureHistory } from '../../src/mirror/history.js';
import { copyFromStdin, copyRows, subscriberCopyTuple } from './lib/copy.js';
import { SUBSCRIBER_COLUMN_NAMES, SUBSCRIBER_TABLE_COLUMNS } from '../../src/db/subscriber-columns.js';
import { arrayLiteral, jsonbArrayFromParam } from '../../src/mirror/pg-params.js';
import { figure, printTable, timed, writeJson, type BenchFigure, type BenchResult } from './lib/report.js';
import { createScratchDatabase } from './lib/scratch-db.js';
import { argText, isMain } from './lib/cli.js';

export type { BenchFigure, BenchResult } from './lib/report.js';

export interface StoreBenchOptions {
  rows: number;
  /** A server URL; the bench creates (and drops) its own database there. */
  databaseUrl: string;
  pageSize?: number;
  /** Each scenario runs this many times (interleaved); figures are best-of. Default 3. */
  repeats?: number;
  /** Subscribers whose one version each measures the size of history (default 1,000,000; 0 skips). */
  historyRows?: number;
  log?: (line: string) => void;
}

const BASE_TIME = Date.UTC(2024, 0, 1);

function stamp(seconds: number, micros: number): string {
  return `${new Date(BASE_TIME + seconds * 1000).toISOString().slice(0, 19)}.${String(micros).padStart(6, '0')}Z`;
}

/** A webhook-shaped row (every column provided) with realistic sizes. */
function makeRow(i: number, version: number): SubscriberRow {
  const values: SubscriberValues = {
    id: String(1_261_159_647_788_771_324n + BigInt(i)),
    email: `subscriber.${i}@example.com`,
    name: `Name ${i}`,
    status: i % 10 === 0 ? 'unsubscribed' : 'active',
    source: 'api',
    sent: 10 + version,
    opensCount: i % 7,
    clicksCount: i % 3,
    openRate: (i % 7) / 10,
    clickRate: (i % 3) / 10,
    ipAddress: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`,
    subscribedAt: stamp(i, 0),
    unsubscribedAt: i % 10 === 0 ? stamp(i + 60, 0) : null,
    createdAt: stamp(i, 0),
    updatedAt: stamp(i + version * 86_400, (i * 7919) % 1_000_000),
    deletedAt: null,
    forgetAt: null,
    optedInAt: stamp(i + 5, 0),
    optinIp: null,
    fields: {
      name: `Name ${i}`,
      last_name: `Last ${i}`,
      company: 'ACME',
      country: 'LT',
      city: 'Vilnius',
      phone: '',
      state: '',
      zip: '01100',
    },
    extra: { country_id: 49 },
  };
  return { via: 'webhook', values, provided: SUBSCRIBER_FIELDS };
}

function pages<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

const copyTuple = subscriberCopyTuple;

/** Postgres type of each column (the registry). */
function unnestType(column: string): string {
  const c = SUBSCRIBER_TABLE_COLUMNS.find((t) => t.column === column);
  if (!c) throw new Error(`subscribers has no column ${column}`);
  return c.type;
}

/** The columns the unnest variants pass as arrays (mirrored_at is now()), and their typed parameters. */
const UNNEST_COLUMNS = SUBSCRIBER_COLUMN_NAMES.filter((c) => c !== 'mirrored_at');
const UNNEST_ARGS = UNNEST_COLUMNS.map((c, i) =>
  unnestType(c) === 'jsonb' ? jsonbArrayFromParam(`$${i + 1}`) : `$${i + 1}::${unnestType(c)}[]`,
);

/** The plain INSERT … SELECT FROM unnest (no ON CONFLICT, no guard), per page, encoded like the store. */
async function insertUnnest(client: pg.ClientBase, rows: readonly SubscriberRow[]): Promise<void> {
  const text = `insert into subscribers (${UNNEST_COLUMNS.join(', ')}, mirrored_at) select *, now() from unnest(${UNNEST_ARGS.join(', ')})`;
  await client.query({ name: 'bench_insert_unnest', text, values: unnestParams(UNNEST_COLUMNS, rows) });
}

function unnestParams(cols: readonly string[], rows: readonly SubscriberRow[]): string[] {
  const now = new Date().toISOString();
  const tuples = rows.map((r) => subscriberCopyTuple(r, now));
  return cols.map((c) => {
    const i = SUBSCRIBER_COLUMN_NAMES.indexOf(c);
    const column = tuples.map((t) => t[i]);
    return unnestType(c) === 'jsonb' ? JSON.stringify(column) : arrayLiteral(column);
  });
}

/**
 * The plain UPDATE … FROM unnest of every column (no guard, no insert path), per page: what updating
 * rows costs Postgres at all (a new row version plus an entry in every index, since updated_at is
 * indexed and so the update cannot be HOT). The ceiling for "every row newer".
 */
async function updateUnnest(client: pg.ClientBase, rows: readonly SubscriberRow[]): Promise<number> {
  const set = UNNEST_COLUMNS.filter((c) => c !== 'id');
  const text = `update subscribers s set (${set.join(', ')}, mirrored_at) = (${set.map((c) => `t.${c}`).join(', ')}, now())
    from unnest(${UNNEST_ARGS.join(', ')}) as t(${UNNEST_COLUMNS.join(', ')}) where s.id = t.id`;
  const result = await client.query({ name: 'bench_update_unnest', text, values: unnestParams(UNNEST_COLUMNS, rows) });
  return result.rowCount ?? 0;
}

async function countRows(client: pg.ClientBase): Promise<number> {
  const { rows } = await client.query<{ n: number }>('select count(*)::int as n from subscribers');
  return rows[0]?.n ?? 0;
}

async function truncate(client: pg.ClientBase): Promise<void> {
  await client.query('truncate subscribers, subscriber_versions_past');
  await client.query('checkpoint');
}

/**
 * Size of history: one version per subscriber for `rows` subscribers shaped like {@link makeRow}
 * (written set-based, the store's statement is measured by the upsert scenarios), then the table's
 * total size (heap, TOAST, primary key) per version after VACUUM.
 */
async function historyBytesPerVersion(client: pg.ClientBase, rows: number): Promise<number> {
  await client.query('truncate subscriber_versions_past');
  await client.query(
    `insert into subscriber_versions_past (subscriber_id, valid_from, via, email, name, status, source, sent, opens_count,
       clicks_count, subscribed_at, unsubscribed_at, created_at, updated_at, fields)
     select (1261159647788771324 + i)::text, t0 + i * interval '1 second' + (i::bigint * 7919 % 1000000)::int * interval '1 microsecond', 'webhook',
            'subscriber.' || i || '@example.com', 'Name ' || i, case when i % 10 = 0 then 'unsubscribed' else 'active' end,
            'api', 10, i % 7, i % 3, t0 + i * interval '1 second',
            case when i % 10 = 0 then t0 + (i + 60) * interval '1 second' end, t0 + i * interval '1 second',
            t0 + i * interval '1 second' + (i::bigint * 7919 % 1000000)::int * interval '1 microsecond',
            jsonb_build_object('name', 'Name ' || i, 'last_name', 'Last ' || i, 'company', 'ACME', 'country', 'LT',
                               'city', 'Vilnius', 'phone', '', 'state', '', 'zip', '01100')
       from generate_series(0, $1::int - 1) as i, (select timestamptz '2024-01-01 00:00:00+00' as t0) c`,
    [rows],
  );
  await client.query('vacuum analyze subscriber_versions_past');
  const { rows: size } = await client.query<{ bytes: string }>(`select pg_total_relation_size('subscriber_versions_past')::text as bytes`);
  await client.query('truncate subscriber_versions_past');
  return Number(size[0]?.bytes ?? 0) / rows;
}

/**
 * Measures store throughput on a scratch database and returns the figures (rows/s; ratios against
 * one-stream COPY). Throws if a scenario does not write what it should (a broken store must not
 * produce a flattering number).
 */
export async function benchStore(opts: StoreBenchOptions): Promise<BenchResult> {
  const n = opts.rows;
  const pageSize = opts.pageSize ?? 1000;
  const repeats = Math.max(1, opts.repeats ?? 3);
  const log = opts.log ?? (() => {});
  const startedAt = new Date();
  const scratch = await createScratchDatabase(opts.databaseUrl, 'store');
  const client = await scratch.pool.connect();
  try {
    const version = await client.query<{ v: string }>('show server_version');
    const fresh = Array.from({ length: n }, (_, i) => makeRow(i, 0));
    // Warm up: plan caches, prepared statements, table files.
    await upsertSubscribers(client, fresh.slice(0, Math.min(2000, n)));
    await truncate(client);

    const times: Record<string, number[]> = {};
    const run: StoreRun = {
      client,
      n,
      pageSize,
      log,
      fresh,
      newer: Array.from({ length: n }, (_, i) => makeRow(i, 1)),
      newest: Array.from({ length: n }, (_, i) => makeRow(i, 2)),
      now: new Date().toISOString(),
      record: (name, ms) => (times[name] ??= []).push(ms),
    };

    // The store's own scenarios measure the upsert alone; the history pair measures it with HISTORY on and off.
    await configureHistory(client, { enabled: false });
    // Scenarios are interleaved per repeat so that load from other processes spreads over all of them.
    for (let r = 0; r < repeats; r++) {
      const repeat = `repeat ${r + 1}/${repeats}`;
      await timeBaselines(run, repeat);
      await timeUpserts(run, repeat);
      await timeHistory(run, repeat);
    }

    const historyRows = opts.historyRows ?? 1_000_000;
    let bytesPerVersion = 0;
    if (historyRows > 0) {
      log(`history size: one version each for ${historyRows.toLocaleString('en-US')} subscribers…`);
      bytesPerVersion = await historyBytesPerVersion(client, historyRows);
    }
    log('normalize…');
    const normalized = await timeNormalize(fresh.slice(0, Math.min(n, 20_000)));
    return {
      bench: 'store',
      rows: n,
      startedAt: startedAt.toISOString(),
      durationMs: Date.now() - startedAt.getTime(),
      environment: {
        node: process.version,
        postgres: version.rows[0]?.v ?? '?',
        pageSize: String(pageSize),
        repeats: String(repeats),
        cpus: String(os.cpus().length),
        loadavg: os
          .loadavg()
          .map((l) => l.toFixed(2))
          .join(' '),
      },
      figures: storeFigures({ times, n, repeats, historyRows, bytesPerVersion, normalized }),
    };
  } finally {
    client.release();
    await scratch.drop();
  }
}

/** What every scenario of one bench run shares: the connection, the rows, and where times go. */
interface StoreRun {
  client: pg.ClientBase;
  n: number;
  pageSize: number;
  log: (line: string) => void;
  /** The rows at version 0, 1 and 2: fresh, every row newer, newer again. */
  fresh: SubscriberRow[];
  newer: SubscriberRow[];
  newest: SubscriberRow[];
  /** mirrored_at of the COPY rows. */
  now: string;
  record(name: string, ms: number): void;
}

type UpsertCounts = { inserted: number; updated: number; unchanged: number; skipped: number };

/**
 * Upserts every row page by page and checks that all `n` of them were counted as `expect`.
 * `transaction`: each page in BEGIN … COMMIT, as the poll and the consumer write it (history's statement joins it).
 */
async function upsertAll(run: StoreRun, rows: SubscriberRow[], expect: keyof UpsertCounts, transaction = false): Promise<void> {
  const totals: UpsertCounts = { inserted: 0, updated: 0, unchanged: 0, skipped: 0 };
  for (const page of pages(rows, run.pageSize)) {
    if (transaction) await run.client.query('begin');
    const c = await upsertSubscribers(run.client, page);
    if (transaction) await run.client.query('commit');
    for (const k of Object.keys(totals) as Array<keyof UpsertCounts>) totals[k] += c[k];
  }
  if (totals[expect] !== run.n) throw new Error(`upsert expected ${run.n} ${expect}, got ${JSON.stringify(totals)}`);
}

async function countVersions(client: pg.ClientBase): Promise<number> {
  return (await client.query<{ n: number }>('select count(*)::int as n from subscriber_versions_past')).rows[0]?.n ?? 0;
}

/** The fastest ways to put the rows in: COPY in one stream (the baseline), COPY per page, plain INSERT per page. */
async function timeBaselines(run: StoreRun, repeat: string): Promise<void> {
  const { client, n, pageSize, fresh, now, log } = run;
  const copyText = `copy subscribers (${SUBSCRIBER_COLUMN_NAMES.join(', ')}) from stdin`;
  log(`${repeat}: COPY (one stream)…`);
  const encoded = pages(fresh, pageSize).map((p) => copyRows(p.map((row) => copyTuple(row, now))));
  run.record(
    'copy_stream',
    await timed(async () => {
      const copied = await copyFromStdin(client, copyText, encoded);
      if (copied !== n) throw new Error(`COPY wrote ${copied} rows, expected ${n}`);
    }),
  );
  await truncate(client);

  log(`${repeat}: COPY (per page)…`);
  run.record(
    'copy_per_page',
    await timed(async () => {
      for (const page of pages(fresh, pageSize)) await copyFromStdin(client, copyText, [copyRows(page.map((row) => copyTuple(row, now)))]);
    }),
  );
  if ((await countRows(client)) !== n) throw new Error('per-page COPY lost rows');
  await truncate(client);

  log(`${repeat}: INSERT … SELECT unnest…`);
  run.record(
    'insert_unnest_plain',
    await timed(async () => {
      for (const page of pages(fresh, pageSize)) await insertUnnest(client, page);
    }),
  );
  if ((await countRows(client)) !== n) throw new Error('plain insert lost rows');
  await truncate(client);
}

/** The store's four scenarios, then the plain UPDATE that is the ceiling of "every row newer". */
async function timeUpserts(run: StoreRun, repeat: string): Promise<void> {
  const { client, n, pageSize, fresh, newer, newest, log } = run;
  log(`${repeat}: upsertSubscribers insert / identical / update / older…`);
  run.record('upsert_insert', await timed(() => upsertAll(run, fresh, 'inserted')));
  run.record('upsert_identical', await timed(() => upsertAll(run, fresh, 'unchanged')));
  run.record('upsert_update', await timed(() => upsertAll(run, newer, 'updated')));
  run.record('upsert_older', await timed(() => upsertAll(run, fresh, 'skipped')));
  log(`${repeat}: UPDATE … FROM unnest (every row, no guard)…`);
  // Same starting point as upsert_update: a table of n rows, each page version-bumped once.
  run.record(
    'update_unnest_plain',
    await timed(async () => {
      let updated = 0;
      for (const page of pages(newest, pageSize)) updated += await updateUnnest(client, page);
      if (updated !== n) throw new Error(`plain update wrote ${updated} rows, expected ${n}`);
    }),
  );
  await truncate(client);
}

/** HISTORY on against off, same rows, same transactions, back to back. */
async function timeHistory(run: StoreRun, repeat: string): Promise<void> {
  const { client, n, fresh, newer, log } = run;
  for (const mode of ['off', 'on'] as const) {
    log(`${repeat}: upsertSubscribers with HISTORY=${mode}: fresh / every row newer…`);
    await configureHistory(client, { enabled: mode === 'on' });
    run.record(`history_${mode}_insert`, await timed(() => upsertAll(run, fresh, 'inserted', true)));
    run.record(`history_${mode}_update`, await timed(() => upsertAll(run, newer, 'updated', true)));
    const versions = await countVersions(client);
    // The current version is the subscribers row: fresh rows add no past version, each newer row pushes one.
    if (versions !== (mode === 'on' ? n : 0)) throw new Error(`HISTORY=${mode} left ${versions} past versions for ${n} rows written twice`);
    await configureHistory(client, { enabled: false });
    await truncate(client);
  }
}

/** How many payloads each normalizer took and how long, in ms. */
interface NormalizeTimes {
  webhookRows: number;
  legacyRows: number;
  webhookMs: number;
  legacyUtcMs: number;
  legacyZoneMs: number;
}

async function timeNormalize(sample: readonly SubscriberRow[]): Promise<NormalizeTimes> {
  const webhookRaw = sample.map((r, i) => webhookPayload(r, i));
  const legacyRaw = sample.map((r, i) => legacyPayload(r, i));
  const webhookMs = await timed(async () => {
    for (const raw of webhookRaw) normalizeWebhookSubscriber(raw);
  });
  const legacyUtcMs = await timed(async () => {
    for (const raw of legacyRaw) normalizeLegacySubscriber(raw, { sourceTimezone: 'UTC' });
  });
  const legacyZoneMs = await timed(async () => {
    for (const raw of legacyRaw) normalizeLegacySubscriber(raw, { sourceTimezone: 'Europe/Berlin' });
  });
  return { webhookRows: webhookRaw.length, legacyRows: legacyRaw.length, webhookMs, legacyUtcMs, legacyZoneMs };
}

interface StoreMeasures {
  times: Record<string, number[]>;
  n: number;
  repeats: number;
  historyRows: number;
  bytesPerVersion: number;
  normalized: NormalizeTimes;
}

/** The figures: best-of-N rows/s (least disturbed run) with the median in the note. */
function storeFigures(m: StoreMeasures): BenchFigure[] {
  const { times, n, repeats, historyRows, bytesPerVersion, normalized } = m;
  const rate = (ms: number) => (n / ms) * 1000;
  const best = (name: string) => rate(Math.min(...(times[name] ?? [Infinity])));
  const median = (name: string) => {
    const sorted = [...(times[name] ?? [])].sort((a, b) => a - b);
    return rate(sorted[Math.floor(sorted.length / 2)] ?? Infinity);
  };
  const copyRate = best('copy_stream');
  const scenario = (name: string, note: string, baseline: number | null = copyRate) =>
    figure(
      name,
      best(name),
      'rows/s',
      baseline,
      `${note}; best of ${repeats}, median ${Math.round(median(name)).toLocaleString('en-US')} rows/s`,
    );
  return [
    scenario('copy_stream', 'COPY FROM STDIN, all rows in one statement (the baseline)', null),
    scenario('copy_per_page', 'COPY FROM STDIN, one statement per page'),
    scenario('insert_unnest_plain', 'INSERT … SELECT unnest per page, no ON CONFLICT, no guard'),
    scenario('upsert_insert', 'upsertSubscribers, fresh rows'),
    scenario('upsert_identical', 'same rows again: nothing written'),
    scenario('upsert_update', 'every row newer: all updated'),
    scenario('upsert_older', 'every row older: all skipped'),
    scenario('update_unnest_plain', 'UPDATE … FROM unnest per page, every column, no guard: the cost of updating at all'),
    figure(
      'history_off_insert',
      best('history_off_insert'),
      'rows/s',
      null,
      `HISTORY=off, fresh rows, each page in BEGIN … COMMIT; best of ${repeats}`,
    ),
    figure(
      'history_on_insert',
      best('history_on_insert'),
      'rows/s',
      best('history_off_insert'),
      `HISTORY=on, fresh rows: the subscribers row is the current version, nothing more to write; best of ${repeats}`,
    ),
    figure('history_off_update', best('history_off_update'), 'rows/s', null, `HISTORY=off, every row newer; best of ${repeats}`),
    figure(
      'history_on_update',
      best('history_on_update'),
      'rows/s',
      best('history_off_update'),
      `HISTORY=on, every row newer: each replaced row moves to subscriber_versions_past in the same statement; best of ${repeats}`,
    ),
    ...(historyRows > 0
      ? [
          figure(
            'history_bytes_per_version',
            bytesPerVersion,
            'bytes',
            null,
            `subscriber_versions_past total size (heap, TOAST, primary key) / versions, one past version each for ${historyRows.toLocaleString('en-US')} subscribers`,
          ),
        ]
      : []),
    figure('normalize_webhook', (normalized.webhookRows / normalized.webhookMs) * 1000, 'rows/s'),
    figure('normalize_legacy_utc', (normalized.legacyRows / normalized.legacyUtcMs) * 1000, 'rows/s'),
    figure(
      'normalize_legacy_berlin',
      (normalized.legacyRows / normalized.legacyZoneMs) * 1000,
      'rows/s',
      null,
      'zone offsets cached per local day; exact Intl path near transitions',
    ),
  ];
}

function webhookPayload(row: SubscriberRow, i: number): Record<string, unknown> {
  const v = row.values;
  return {
    id: v.id,
    email: v.email,
    status: v.status,
    source: v.source,
    sent: v.sent,
    opens_count: v.opensCount,
    clicks_count: v.clicksCount,
    open_rate: v.openRate,
    click_rate: v.clickRate,
    ip_address: v.ipAddress,
    subscribed_at: v.subscribedAt,
    unsubscribed_at: v.unsubscribedAt,
    created_at: v.createdAt,
    updated_at: v.updatedAt,
    deleted_at: null,
    forget_at: null,
    fields: v.fields,
    opted_in_at: v.optedInAt,
    optin_ip: null,
    ...(i % 2 ? { event: 'subscriber.updated', account_id: 1 } : {}),
  };
}

function legacyPayload(row: SubscriberRow, i: number): Record<string, unknown> {
  const v = row.values;
  const legacyTime = (t: string | null) => (t === null ? null : `${t.slice(0, 10)} ${t.slice(11, 19)}`);
  return {
    id: v.id,
    name: v.name,
    email: v.email,
    sent: v.sent,
    opened: v.opensCount,
    opened_rate: v.openRate,
    clicked: v.clicksCount,
    clicked_rate: v.clickRate,
    type: v.status,
    country_id: 49,
    signup_ip: v.ipAddress,
    signup_timestamp: legacyTime(v.subscribedAt),
    confirmation_ip: null,
    confirmation_timestamp: legacyTime(v.optedInAt),
    fields: Object.entries(v.fields).map(([key, value]) => ({ key, value, type: 'TEXT' })),
    webform_subscribe_date: null,
    date_subscribe: i % 2 ? null : v.subscribedAt?.slice(0, 10),
    date_unsubscribe: legacyTime(v.unsubscribedAt),
    date_created: legacyTime(v.createdAt),
    date_updated: legacyTime(v.updatedAt),
    user_agent: null,
  };
}

async function main(): Promise<void> {
  const rows = Number(argText('--rows') ?? process.env.BENCH_ROWS ?? 100_000);
  const databaseUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
  const jsonPath = argText('--json') ?? path.join(os.tmpdir(), 'subscriber-mirror-bench', 'store.json');
  const repeats = Number(argText('--repeats') ?? 3);
  const historyRows = Number(argText('--history-rows') ?? 1_000_000);
  const result = await benchStore({ rows, databaseUrl, repeats, historyRows, log: (l) => console.error(l) });
  printTable(result);
  writeJson(jsonPath, result);
  console.log(`JSON: ${jsonPath}`);
}

if (isMain(import.meta.url)) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  });
}

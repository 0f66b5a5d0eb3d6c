/**
 * End-to-end full-pass throughput of the poll path (simulator → legacy client → normalize → store),
 * with the limiter off, and where the time goes. All stages read the same pages of the same
 * simulated group (`largeIds`, so every id takes the lossless path of invariant 6):
 *
 * - `fetch only`: GET every page with the global fetch and read the body, nothing parsed. The
 *   simulator's render + loopback HTTP: the upstream's share of the pass.
 * - `fetch + parse`: the legacy client's `pages()` (lossless JSON, validation), nothing written.
 * - `fetch + parse + normalize`: plus `normalizeLegacySubscriber`; keeps the rows for the next stage.
 * - `store only`: those normalized rows written as the pass writes them (one transaction per page:
 *   `upsertSubscribers` + `upsertMemberships` + checkpoint), no HTTP. The baseline of the pass.
 *   `store only, mirror current` writes them again (nothing changes but each membership's
 *   `last_seen_at`): the baseline of the reconcile pass below.
 * - `raw COPY`: the same subscribers and memberships, pre-encoded, in one COPY per table: the ceiling.
 * - `full pass`: `runPass(…, 'full')` for each type into an empty mirror (the end-to-end figure), then
 *   again over the now-current mirror (a reconcile pass: everything read, only `last_seen_at` written).
 * - requests: what the full pass asked of the service against the minimum (per type, the pages its
 *   members fill plus the one request that shows the end of a bare-array list, plus one `/count`),
 *   and what one incremental tick over the unchanged group asks (every type, after the full pass).
 *
 * The pass is sequential (fetch a page, write it, fetch the next), so per 1000 rows its time is
 * roughly fetch + parse + normalize + write; the ratio "full pass ÷ store only" is the share of the
 * store's own speed that survives the read side. The simulator runs in this process: its render time
 * is part of the pass's wall time, as the real service's answer time would be.
 *
 *   npx tsx test/bench/poll.bench.ts [--subscribers 100000] [--types all|active|…] [--page-size 1000]
 *                                     [--repeats 2] [--json path]
 *
 * Uses DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres); creates and drops its own
 * database. Never asserts on timing; throws when a stage does not see or write what it should.
 */
import os from 'node:os';
import path from 'node:path';
import type pg from 'pg';
import { SUBSCRIBER_TYPES, type SubscriberType } from '../../src/db/schema.js';
import { SUBSCRIBER_COLUMN_NAMES } from '../../src/db/subscriber-columns.js';
import { createLogger } from '../../src/ground/log.js';
import { normalizeLegacySubscriber, type SubscriberRow } from '../../src/mirror/normalize.js';
import { upsertMemberships, upsertSubscribers, withTransaction } from '../../src/mirror/store/index.js';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { runPass, type PassDeps } from '../../src/sync/legacy-pass.js';
import { ensureSyncState, saveFullCheckpoint } from '../../src/sync/state.js';
import { createLegacyClient, type LegacyClient } from '../../src/upstream/legacy/client.js';
import { createLimiter } from '../../src/ratelimit/limiter.js';
import { copyFromStdin, copyRows, subscriberCopyTuple } from './lib/copy.js';
import { argText, isMain } from './lib/cli.js';
import { figure, printTable, round, timed, writeJson, type BenchFigure, type BenchResult } from './lib/report.js';
import { createScratchDatabase, type ScratchDatabase } from './lib/scratch-db.js';

export interface PollBenchOptions {
  /** Subscribers seeded in the simulator, all in one group (default 100 000). */
  subscribers?: number;
  /** Types passed, in order (default all five: the whole group). */
  types?: readonly SubscriberType[];
  /** Legacy `limit` (default 1000, SYNC_PAGE_SIZE's default). */
  pageSize?: number;
  /** Every stage runs this many times (interleaved); figures are best-of (default 2). */
  repeats?: number;
  databaseUrl?: string;
  log?: (line: string) => void;
  /** Where the JSON result is written; null (default) to skip. */
  json?: string | null;
  print?: boolean;
}

/** rows/s of each stage (best of the repeats). */
export interface PollStageRates {
  fetchOnly: number;
  fetchParse: number;
  fetchParseNormalize: number;
  storeOnly: number;
  storeOnlyCurrent: number;
  rawCopy: number;
  fullPass: number;
  reconcilePass: number;
}

export interface PollBenchFigures {
  subscribers: number;
  /** Rows one pass reads (members of the group under the selected types). */
  rows: number;
  pages: number;
  types: SubscriberType[];
  pageSize: number;
  repeats: number;
  seedMs: number;
  rates: PollStageRates;
  /** fullPass ÷ storeOnly: the share of the store's own speed the end-to-end pass keeps. */
  ratioToStore: number;
  /** fullPass ÷ rawCopy. */
  ratioToCopy: number;
  /** Requests of one full pass of every type, the minimum, and one incremental tick over the unchanged group. */
  requests: { fullPass: number; minimum: number; ratio: number; incrementalTick: number; incrementalTickRows: number };
  /** Milliseconds per 1000 rows spent in each step of the pass, from the stage differences. */
  msPer1000: { fetch: number; parse: number; normalize: number; write: number; total: number };
  result: BenchResult;
}

const DEFAULT_DB = 'postgres://postgres@127.0.0.1:5432/postgres';

interface Setup {
  sim: Simulator;
  groupId: string;
  scratch: ScratchDatabase;
  types: SubscriberType[];
  pageSize: number;
}

function legacyClient(sim: Simulator): LegacyClient {
  // mode 'off': no spacing and no Redis, so the figures are the code's, not the 60/min budget's.
  const limiter = createLimiter({ mode: 'off', perMinute: 60 });
  return createLegacyClient({ baseUrl: sim.url, apiKey: sim.apiKey, apiKeyHeader: sim.apiKeyHeader, limiter });
}

/** Stage `fetch only`: every page's body read as bytes; returns pages read (empty final pages included). */
async function fetchOnly(s: Setup): Promise<number> {
  let requests = 0;
  for (const type of s.types) {
    for (let offset = 0; ; offset += s.pageSize) {
      const url = `${s.sim.url}/api/v2/groups/${s.groupId}/subscribers/${type}?limit=${s.pageSize}&offset=${offset}`;
      const response = await fetch(url, { headers: { [s.sim.apiKeyHeader]: s.sim.apiKey } });
      const body = await response.arrayBuffer();
      requests++;
      if (!response.ok) throw new Error(`fetch only: HTTP ${response.status} at offset ${offset}`);
      // An empty list is `[]` (maybe with whitespace): far shorter than any subscriber.
      if (body.byteLength < 8) break;
    }
  }
  return requests;
}

/** One normalized page and the type it was listed under. */
interface KeptPage {
  type: SubscriberType;
  rows: SubscriberRow[];
}

/** Stages `fetch + parse` (normalize false) and `fetch + parse + normalize` (pages kept in `keep`). */
async function fetchParse(s: Setup, normalize: boolean, keep: KeptPage[] | null): Promise<number> {
  const legacy = legacyClient(s.sim);
  let rows = 0;
  for (const type of s.types) {
    for await (const page of legacy.pages(s.groupId, { type, limit: s.pageSize, mode: 'full' })) {
      rows += page.rows.length;
      if (!normalize) continue;
      const normalized = page.rows.map((raw) => normalizeLegacySubscriber(raw, { sourceTimezone: 'UTC' }));
      keep?.push({ type, rows: normalized });
    }
  }
  return rows;
}

async function truncateMirror(pool: pg.Pool): Promise<void> {
  await pool.query('truncate subscribers, group_members, sync_state, sync_passes');
  // Start each write stage without the previous one's dirty buffers to flush.
  await pool.query('checkpoint');
}

/** Stage `store only`: the pass's per-page transaction, fed from memory; `expect` says what every row should do. */
async function storeOnly(s: Setup, pages: readonly KeptPage[], expect: 'inserted' | 'unchanged'): Promise<void> {
  const seenAt = new Date().toISOString().replace(/Z$/, '000Z');
  for (const type of s.types) await ensureSyncState(s.scratch.pool, s.groupId, type);
  let matched = 0;
  let total = 0;
  const offsets = new Map<SubscriberType, number>();
  for (const { type, rows } of pages) {
    const nextOffset = (offsets.get(type) ?? 0) + rows.length;
    offsets.set(type, nextOffset);
    total += rows.length;
    matched += await withTransaction(s.scratch.pool, async (client) => {
      const counts = await upsertSubscribers(client, rows);
      await upsertMemberships(
        client,
        s.groupId,
        rows.map((r) => ({ subscriberId: r.values.id, type, at: r.values.updatedAt })),
        { via: 'poll', seenAt },
      );
      await saveFullCheckpoint(client, s.groupId, type, { nextOffset, tailIds: rows.slice(-20).map((r) => r.values.id), continuous: true });
      return counts[expect];
    });
  }
  if (matched !== total) throw new Error(`store only: ${matched} of ${total} rows ${expect}`);
}

const COPY_MEMBER_COLUMNS = [
  'group_id',
  'subscriber_id',
  'type',
  'added_at',
  'source_updated_at',
  'last_seen_at',
  'mirrored_at',
  'mirrored_via',
];

/** Pre-encodes the raw COPY data (outside the timing, as the store bench's baseline does). */
function encodeCopy(s: Setup, pages: readonly KeptPage[]): { subscribers: Buffer[]; members: Buffer[] } {
  const now = new Date().toISOString();
  const subscribers = pages.map(({ rows }) => copyRows(rows.map((r) => subscriberCopyTuple(r, now))));
  const members = pages.map(({ type, rows }) =>
    copyRows(rows.map((r) => [s.groupId, r.values.id, type, r.values.updatedAt, r.values.updatedAt, now, now, 'poll'])),
  );
  return { subscribers, members };
}

async function rawCopy(s: Setup, encoded: { subscribers: Buffer[]; members: Buffer[] }, rows: number): Promise<void> {
  const client = await s.scratch.pool.connect();
  try {
    const a = await copyFromStdin(client, `copy subscribers (${SUBSCRIBER_COLUMN_NAMES.join(', ')}) from stdin`, encoded.subscribers);
    const b = await copyFromStdin(client, `copy group_members (${COPY_MEMBER_COLUMNS.join(', ')}) from stdin`, encoded.members);
    if (a !== rows || b !== rows) throw new Error(`raw COPY wrote ${a} subscribers and ${b} memberships, expected ${rows}`);
  } finally {
    client.release();
  }
}

function passDeps(s: Setup): PassDeps {
  const { logger } = createLogger({ level: 'silent' });
  return {
    pool: s.scratch.pool,
    legacy: legacyClient(s.sim),
    logger,
    sourceTimezone: 'UTC',
    lookbackMs: 86_400_000,
    pageSize: s.pageSize,
    groupTypes: s.types,
  };
}

/** One pass of every type; returns rows seen and written and requests made. */
async function passEveryType(s: Setup, mode: 'full' | 'incremental'): Promise<{ seen: number; written: number; requests: number }> {
  const deps = passDeps(s);
  const sum = { seen: 0, written: 0, requests: 0 };
  for (const type of s.types) {
    const result = await runPass(deps, s.groupId, type, mode);
    sum.seen += result.rowsSeen;
    sum.written += result.rowsWritten;
    sum.requests += result.requests;
  }
  return sum;
}

async function fullPass(s: Setup, expectWritten: number | null): Promise<{ seen: number; requests: number }> {
  const pass = await passEveryType(s, 'full');
  if (expectWritten !== null && pass.written !== expectWritten)
    throw new Error(`full pass wrote ${pass.written} rows, expected ${expectWritten}`);
  return pass;
}

/** One incremental tick of every type over the unchanged group (after a full pass). */
async function incrementalTick(s: Setup): Promise<{ requests: number; rows: number }> {
  const tick = await passEveryType(s, 'incremental');
  if (tick.written !== 0) throw new Error(`an incremental tick over an unchanged group wrote ${tick.written} rows`);
  return { requests: tick.requests, rows: tick.seen };
}

/** The fewest requests a full pass can make: per type the pages its rows fill, one request that shows the end, one count. */
export function minimumFullPassRequests(rowsPerType: readonly number[], pageSize: number): number {
  return rowsPerType.reduce((n, rows) => n + Math.ceil(rows / pageSize) + 1 + 1, 0);
}

export async function benchPoll(options: PollBenchOptions = {}): Promise<PollBenchFigures> {
  const subscribers = options.subscribers ?? 100_000;
  const types = [...(options.types ?? SUBSCRIBER_TYPES)];
  const pageSize = options.pageSize ?? 1000;
  const repeats = Math.max(1, options.repeats ?? 2);
  const log = options.log ?? (() => {});
  const startedAt = new Date();
  const loadBefore = os.loadavg()[0] ?? 0;

  const seedStarted = performance.now();
  const simulator = await startSimulator({ subscribers, groups: 1, largeIds: true, rateLimit: false });
  const seedMs = performance.now() - seedStarted;
  let scratch: ScratchDatabase | undefined;
  try {
    scratch = await createScratchDatabase(options.databaseUrl ?? process.env.DATABASE_URL ?? DEFAULT_DB, 'poll');
    const groupId = simulator.world.groupIds()[0];
    if (!groupId) throw new Error('simulator seeded no group');
    const s: Setup = { sim: simulator, groupId, scratch, types, pageSize };
    const shape = groupShape(s);
    log(
      `poll: ${subscribers.toLocaleString('en-US')} subscribers seeded in ${Math.round(seedMs)} ms; a pass reads ${shape.rows.toLocaleString('en-US')} rows in ${shape.pages} pages (${types.join(', ')})`,
    );
    const measured = await measureStages(s, shape.rows, repeats, log);
    const figures = pollFigures(s, shape, measured, { subscribers, repeats, seedMs, startedAt, loadBefore });
    if (options.print !== false) printTable(figures.result);
    if (options.json) writeJson(options.json, figures.result);
    return figures;
  } finally {
    await simulator.close();
    await scratch?.drop();
  }
}

/** What one pass of the selected types reads: rows, pages, and the fewest requests it can make. */
interface GroupShape {
  rows: number;
  pages: number;
  minimum: number;
}

function groupShape(s: Setup): GroupShape {
  const members = s.types.map((t) => s.sim.world.memberCount(s.groupId, t));
  return {
    rows: members.reduce((n, m) => n + m, 0),
    pages: members.reduce((n, m) => n + Math.ceil(m / s.pageSize), 0),
    minimum: minimumFullPassRequests(members, s.pageSize),
  };
}

/** Milliseconds of every repeat, per stage. */
type StageTimes = Record<keyof PollStageRates, number[]>;

/** Requests of the last repeat's full pass and incremental tick. */
interface RequestCounts {
  fullPass: number;
  incrementalTick: number;
  incrementalTickRows: number;
}

interface Measured {
  times: StageTimes;
  requests: RequestCounts;
}

/** The run as a whole, for the environment of the result. */
interface RunInfo {
  subscribers: number;
  repeats: number;
  seedMs: number;
  startedAt: Date;
  loadBefore: number;
}

function expectRows(stage: string, n: number, rows: number): void {
  if (n !== rows) throw new Error(`${stage} saw ${n} rows, expected ${rows}`);
}

/** Every stage `repeats` times, interleaved (each repeat runs all the stages in order), after a warm-up. */
async function measureStages(s: Setup, rows: number, repeats: number, log: (line: string) => void): Promise<Measured> {
  const times: StageTimes = {
    fetchOnly: [],
    fetchParse: [],
    fetchParseNormalize: [],
    storeOnly: [],
    storeOnlyCurrent: [],
    rawCopy: [],
    fullPass: [],
    reconcilePass: [],
  };
  const requests: RequestCounts = { fullPass: 0, incrementalTick: 0, incrementalTickRows: 0 };

  // Warm-up: JIT, fetch's connection pool, prepared statements (a small pass, then cleared).
  await fetchParse({ ...s, types: [s.types[0] as SubscriberType] }, true, null);
  await truncateMirror(s.scratch.pool);

  for (let r = 1; r <= repeats; r++) {
    const step = (stage: string) => log(`poll: repeat ${r}/${repeats}: ${stage}…`);
    const pages = await measureReads(s, rows, times, step);
    await measureWrites(s, rows, pages, { times, requests }, step);
  }
  return { times, requests };
}

/** The read stages of one repeat; returns the normalized pages the write stages store. */
async function measureReads(s: Setup, rows: number, times: StageTimes, step: (stage: string) => void): Promise<KeptPage[]> {
  step('fetch only');
  times.fetchOnly.push(await timed(() => fetchOnly(s)));
  step('fetch + parse');
  times.fetchParse.push(await timed(async () => expectRows('fetch + parse', await fetchParse(s, false, null), rows)));

  step('fetch + parse + normalize');
  const pages: KeptPage[] = [];
  times.fetchParseNormalize.push(await timed(async () => expectRows('fetch + parse + normalize', await fetchParse(s, true, pages), rows)));
  return pages;
}

/** The write stages of one repeat; empties `pages` once encoded for COPY, so the passes run without them in memory. */
async function measureWrites(s: Setup, rows: number, pages: KeptPage[], into: Measured, step: (stage: string) => void): Promise<void> {
  const { times, requests } = into;
  step('store only');
  await truncateMirror(s.scratch.pool);
  times.storeOnly.push(await timed(() => storeOnly(s, pages, 'inserted')));
  step('store only, mirror current');
  times.storeOnlyCurrent.push(await timed(() => storeOnly(s, pages, 'unchanged')));

  step('raw COPY');
  const encoded = encodeCopy(s, pages);
  pages.length = 0;
  await truncateMirror(s.scratch.pool);
  times.rawCopy.push(await timed(() => rawCopy(s, encoded, rows)));

  step('full pass into an empty mirror');
  await truncateMirror(s.scratch.pool);
  times.fullPass.push(
    await timed(async () => {
      const pass = await fullPass(s, rows);
      expectRows('full pass', pass.seen, rows);
      requests.fullPass = pass.requests;
    }),
  );
  step('full pass over the current mirror');
  times.reconcilePass.push(await timed(async () => expectRows('reconcile pass', (await fullPass(s, 0)).seen, rows)));
  const tick = await incrementalTick(s);
  requests.incrementalTick = tick.requests;
  requests.incrementalTickRows = tick.rows;
}

/** rows/s of each stage's fastest repeat. */
function bestRates(times: StageTimes, rows: number): PollStageRates {
  const best = (stage: keyof PollStageRates) => (rows / Math.min(...times[stage])) * 1000;
  return {
    fetchOnly: best('fetchOnly'),
    fetchParse: best('fetchParse'),
    fetchParseNormalize: best('fetchParseNormalize'),
    storeOnly: best('storeOnly'),
    storeOnlyCurrent: best('storeOnlyCurrent'),
    rawCopy: best('rawCopy'),
    fullPass: best('fullPass'),
    reconcilePass: best('reconcilePass'),
  };
}

/** Each step's share of the pass, as differences between the stages that add it. */
function stepCosts(rates: PollStageRates): PollBenchFigures['msPer1000'] {
  const per1000 = (rate: number) => 1_000_000 / rate;
  return {
    fetch: round(per1000(rates.fetchOnly), 1),
    parse: round(per1000(rates.fetchParse) - per1000(rates.fetchOnly), 1),
    normalize: round(per1000(rates.fetchParseNormalize) - per1000(rates.fetchParse), 1),
    write: round(per1000(rates.fullPass) - per1000(rates.fetchParseNormalize), 1),
    total: round(per1000(rates.fullPass), 1),
  };
}

function pollFigures(s: Setup, shape: GroupShape, measured: Measured, run: RunInfo): PollBenchFigures {
  const { rows, minimum } = shape;
  const { times, requests } = measured;
  const rates = bestRates(times, rows);
  const msPer1000 = stepCosts(rates);
  const median = (stage: keyof PollStageRates) => {
    const sorted = [...times[stage]].sort((a, b) => a - b);
    return (rows / (sorted[Math.floor(sorted.length / 2)] ?? Infinity)) * 1000;
  };
  const note = (stage: keyof PollStageRates, text: string) =>
    `${text}; best of ${run.repeats}, median ${Math.round(median(stage)).toLocaleString('en-US')} rows/s`;
  const result: BenchResult = {
    bench: 'poll',
    rows,
    startedAt: run.startedAt.toISOString(),
    durationMs: Date.now() - run.startedAt.getTime(),
    environment: {
      node: process.version,
      cpus: String(os.cpus().length),
      subscribers: String(run.subscribers),
      types: s.types.join(','),
      pageSize: String(s.pageSize),
      pages: String(shape.pages),
      repeats: String(run.repeats),
      seedMs: String(Math.round(run.seedMs)),
      load: `${round(run.loadBefore, 2)} → ${round(os.loadavg()[0] ?? 0, 2)}`,
    },
    figures: resultFigures(s, shape, rates, requests, msPer1000, note),
  };
  return {
    subscribers: run.subscribers,
    rows,
    pages: shape.pages,
    types: s.types,
    pageSize: s.pageSize,
    repeats: run.repeats,
    seedMs: Math.round(run.seedMs),
    rates: Object.fromEntries(Object.entries(rates).map(([k, v]) => [k, Math.round(v)])) as unknown as PollStageRates,
    ratioToStore: round(rates.fullPass / rates.storeOnly, 3),
    ratioToCopy: round(rates.fullPass / rates.rawCopy, 3),
    requests: { ...requests, minimum, ratio: round(requests.fullPass / minimum, 3) },
    msPer1000,
    result,
  };
}

/** The figures of the shared result shape, each with its baseline measured in the same run. */
function resultFigures(
  s: Setup,
  shape: GroupShape,
  rates: PollStageRates,
  requests: RequestCounts,
  msPer1000: PollBenchFigures['msPer1000'],
  note: (stage: keyof PollStageRates, text: string) => string,
): BenchFigure[] {
  return [
    figure(
      'full pass (end-to-end)',
      rates.fullPass,
      'rows/s',
      rates.storeOnly,
      note('fullPass', 'runPass full into an empty mirror; baseline: store only, same rows and transactions'),
    ),
    figure(
      'full pass, mirror current',
      rates.reconcilePass,
      'rows/s',
      rates.storeOnlyCurrent,
      note('reconcilePass', 'runPass full again: all read, only last_seen_at written; baseline: store only, mirror current'),
    ),
    figure(
      'store only',
      rates.storeOnly,
      'rows/s',
      rates.rawCopy,
      note('storeOnly', 'per-page transactions of the pass, rows from memory; baseline: raw COPY'),
    ),
    figure(
      'store only, mirror current',
      rates.storeOnlyCurrent,
      'rows/s',
      rates.storeOnly,
      note('storeOnlyCurrent', 'the same rows again: nothing changes but last_seen_at; baseline: store only'),
    ),
    figure('raw COPY', rates.rawCopy, 'rows/s', null, note('rawCopy', 'subscribers + memberships, one pre-encoded COPY per table')),
    figure('fetch only', rates.fetchOnly, 'rows/s', null, note('fetchOnly', 'simulator render + HTTP, bodies not parsed')),
    figure(
      'fetch + parse',
      rates.fetchParse,
      'rows/s',
      rates.fetchOnly,
      note('fetchParse', 'legacy client pages(), lossless JSON; baseline: fetch only'),
    ),
    figure(
      'fetch + parse + normalize',
      rates.fetchParseNormalize,
      'rows/s',
      rates.fetchParse,
      note('fetchParseNormalize', 'plus normalizeLegacySubscriber; baseline: fetch + parse'),
    ),
    figure(
      'full pass requests',
      requests.fullPass,
      'requests',
      shape.minimum,
      `all ${s.types.length} types, page size ${s.pageSize}, overlapping pages; baseline: ${shape.pages} pages + 1 end request and 1 count per type`,
    ),
    figure(
      'incremental tick requests',
      requests.incrementalTick,
      'requests',
      s.types.length,
      `every type once over the unchanged group (${requests.incrementalTickRows} rows in the lookback window; unsubscribed also reads date_unsubscribe); baseline: one per type`,
    ),
    figure(
      'ms per 1000 rows',
      msPer1000.total,
      'ms',
      null,
      `fetch ${msPer1000.fetch} + parse ${msPer1000.parse} + normalize ${msPer1000.normalize} + write ${msPer1000.write} (write = pass − read stages)`,
    ),
  ];
}

/** `all` or a comma-separated list of types. */
export function parseTypes(text: string): SubscriberType[] {
  if (text === 'all') return [...SUBSCRIBER_TYPES];
  const types = text.split(',').map((t) => t.trim());
  const bad = types.filter((t) => !(SUBSCRIBER_TYPES as readonly string[]).includes(t));
  if (bad.length > 0 || types.length === 0) throw new Error(`--types takes all or a list of ${SUBSCRIBER_TYPES.join(', ')}; got ${text}`);
  return types as SubscriberType[];
}

if (isMain(import.meta.url)) {
  const types = argText('--types');
  benchPoll({
    subscribers: Number(argText('--subscribers') ?? 100_000),
    ...(types ? { types: parseTypes(types) } : {}),
    pageSize: Number(argText('--page-size') ?? 1000),
    repeats: Number(argText('--repeats') ?? 2),
    json: argText('--json') ?? path.join(os.tmpdir(), 'subscriber-mirror-bench', 'poll.json'),
    log: (line) => console.error(line),
  }).catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
}

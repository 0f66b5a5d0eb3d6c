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
import { createLogger } from '../../src/ground/log.js';
import { normalizeLegacySubscriber, type SubscriberRow } from '../../src/mirror/normalize.js';
import { upsertMemberships, upsertSubscribers, withTransaction } from '../../src/mirror/store.js';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { runPass, type PassDeps } from '../../src/sync/poll.js';
import { markRunStarted, saveFullCheckpoint } from '../../src/sync/state.js';
import { createLegacyClient, type LegacyClient } from '../../src/upstream/legacy.js';
import { createLimiter } from '../../src/upstream/limiter.js';
import { copyFromStdin, copyRows, SUBSCRIBER_COPY_COLUMNS, subscriberCopyTuple } from './lib/copy.js';
import { argText, isMain } from './lib/cli.js';
import { figure, printTable, round, timed, writeJson, type BenchResult } from './lib/report.js';
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
  await pool.query('truncate subscribers, group_members, sync_state');
  // Start each write stage without the previous one's dirty buffers to flush.
  await pool.query('checkpoint');
}

/** Stage `store only`: the pass's per-page transaction, fed from memory; `expect` says what every row should do. */
async function storeOnly(s: Setup, pages: readonly KeptPage[], expect: 'inserted' | 'unchanged'): Promise<void> {
  const seenAt = new Date().toISOString().replace(/Z$/, '000Z');
  for (const type of s.types) await markRunStarted(s.scratch.pool, s.groupId, type, 'full');
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
    const a = await copyFromStdin(client, `copy subscribers (${SUBSCRIBER_COPY_COLUMNS.join(', ')}) from stdin`, encoded.subscribers);
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
    const rows = types.reduce((n, t) => n + simulator.world.memberCount(groupId, t), 0);
    const pageCount = types.reduce((n, t) => n + Math.ceil(simulator.world.memberCount(groupId, t) / pageSize), 0);
    log(
      `poll: ${subscribers.toLocaleString('en-US')} subscribers seeded in ${Math.round(seedMs)} ms; a pass reads ${rows.toLocaleString('en-US')} rows in ${pageCount} pages (${types.join(', ')})`,
    );

    const times: Record<keyof PollStageRates, number[]> = {
      fetchOnly: [],
      fetchParse: [],
      fetchParseNormalize: [],
      storeOnly: [],
      storeOnlyCurrent: [],
      rawCopy: [],
      fullPass: [],
      reconcilePass: [],
    };
    const expectRows = (stage: string, n: number) => {
      if (n !== rows) throw new Error(`${stage} saw ${n} rows, expected ${rows}`);
    };
    const minimum = minimumFullPassRequests(
      types.map((t) => simulator.world.memberCount(groupId, t)),
      pageSize,
    );
    const requestCounts = { fullPass: 0, incrementalTick: 0, incrementalTickRows: 0 };

    // Warm-up: JIT, fetch's connection pool, prepared statements (a small pass, then cleared).
    await fetchParse({ ...s, types: [types[0] as SubscriberType] }, true, null);
    await truncateMirror(scratch.pool);

    for (let r = 1; r <= repeats; r++) {
      log(`poll: repeat ${r}/${repeats}: fetch only…`);
      times.fetchOnly.push(await timed(() => fetchOnly(s)));
      log(`poll: repeat ${r}/${repeats}: fetch + parse…`);
      times.fetchParse.push(await timed(async () => expectRows('fetch + parse', await fetchParse(s, false, null))));

      log(`poll: repeat ${r}/${repeats}: fetch + parse + normalize…`);
      const pages: KeptPage[] = [];
      times.fetchParseNormalize.push(await timed(async () => expectRows('fetch + parse + normalize', await fetchParse(s, true, pages))));

      log(`poll: repeat ${r}/${repeats}: store only…`);
      await truncateMirror(scratch.pool);
      times.storeOnly.push(await timed(() => storeOnly(s, pages, 'inserted')));
      log(`poll: repeat ${r}/${repeats}: store only, mirror current…`);
      times.storeOnlyCurrent.push(await timed(() => storeOnly(s, pages, 'unchanged')));

      log(`poll: repeat ${r}/${repeats}: raw COPY…`);
      const encoded = encodeCopy(s, pages);
      pages.length = 0;
      await truncateMirror(scratch.pool);
      times.rawCopy.push(await timed(() => rawCopy(s, encoded, rows)));

      log(`poll: repeat ${r}/${repeats}: full pass into an empty mirror…`);
      await truncateMirror(scratch.pool);
      times.fullPass.push(
        await timed(async () => {
          const pass = await fullPass(s, rows);
          expectRows('full pass', pass.seen);
          requestCounts.fullPass = pass.requests;
        }),
      );
      log(`poll: repeat ${r}/${repeats}: full pass over the current mirror…`);
      times.reconcilePass.push(await timed(async () => expectRows('reconcile pass', (await fullPass(s, 0)).seen)));
      const tick = await incrementalTick(s);
      requestCounts.incrementalTick = tick.requests;
      requestCounts.incrementalTickRows = tick.rows;
    }

    const best = (stage: keyof PollStageRates) => (rows / Math.min(...times[stage])) * 1000;
    const median = (stage: keyof PollStageRates) => {
      const sorted = [...times[stage]].sort((a, b) => a - b);
      return (rows / (sorted[Math.floor(sorted.length / 2)] ?? Infinity)) * 1000;
    };
    const rates: PollStageRates = {
      fetchOnly: best('fetchOnly'),
      fetchParse: best('fetchParse'),
      fetchParseNormalize: best('fetchParseNormalize'),
      storeOnly: best('storeOnly'),
      storeOnlyCurrent: best('storeOnlyCurrent'),
      rawCopy: best('rawCopy'),
      fullPass: best('fullPass'),
      reconcilePass: best('reconcilePass'),
    };
    const per1000 = (rate: number) => 1_000_000 / rate;
    const msPer1000 = {
      fetch: round(per1000(rates.fetchOnly), 1),
      parse: round(per1000(rates.fetchParse) - per1000(rates.fetchOnly), 1),
      normalize: round(per1000(rates.fetchParseNormalize) - per1000(rates.fetchParse), 1),
      write: round(per1000(rates.fullPass) - per1000(rates.fetchParseNormalize), 1),
      total: round(per1000(rates.fullPass), 1),
    };
    const note = (stage: keyof PollStageRates, text: string) =>
      `${text}; best of ${repeats}, median ${Math.round(median(stage)).toLocaleString('en-US')} rows/s`;
    const result: BenchResult = {
      bench: 'poll',
      rows,
      startedAt: startedAt.toISOString(),
      durationMs: Date.now() - startedAt.getTime(),
      environment: {
        node: process.version,
        cpus: String(os.cpus().length),
        subscribers: String(subscribers),
        types: types.join(','),
        pageSize: String(pageSize),
        pages: String(pageCount),
        repeats: String(repeats),
        seedMs: String(Math.round(seedMs)),
        load: `${round(loadBefore, 2)} → ${round(os.loadavg()[0] ?? 0, 2)}`,
      },
      figures: [
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
          requestCounts.fullPass,
          'requests',
          minimum,
          `all ${types.length} types, page size ${pageSize}, overlapping pages; baseline: ${pageCount} pages + 1 end request and 1 count per type`,
        ),
        figure(
          'incremental tick requests',
          requestCounts.incrementalTick,
          'requests',
          types.length,
          `every type once over the unchanged group (${requestCounts.incrementalTickRows} rows in the lookback window; unsubscribed also reads date_unsubscribe); baseline: one per type`,
        ),
        figure(
          'ms per 1000 rows',
          msPer1000.total,
          'ms',
          null,
          `fetch ${msPer1000.fetch} + parse ${msPer1000.parse} + normalize ${msPer1000.normalize} + write ${msPer1000.write} (write = pass − read stages)`,
        ),
      ],
    };
    const figures: PollBenchFigures = {
      subscribers,
      rows,
      pages: pageCount,
      types,
      pageSize,
      repeats,
      seedMs: Math.round(seedMs),
      rates: Object.fromEntries(Object.entries(rates).map(([k, v]) => [k, Math.round(v)])) as unknown as PollStageRates,
      ratioToStore: round(rates.fullPass / rates.storeOnly, 3),
      ratioToCopy: round(rates.fullPass / rates.rawCopy, 3),
      requests: { ...requestCounts, minimum, ratio: round(requestCounts.fullPass / minimum, 3) },
      msPer1000,
      result,
    };
    if (options.print !== false) printTable(result);
    if (options.json) writeJson(options.json, result);
    return figures;
  } finally {
    await simulator.close();
    await scratch?.drop();
  }
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

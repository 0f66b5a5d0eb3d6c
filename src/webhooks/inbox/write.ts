/**
 * The inbox's hot write path (the inbox is this folder, the only writer of `webhook_deliveries` and
 * `webhook_delivery_hashes`; docs/architecture.md, "Who writes each table"): every signed delivery is made durable in `webhook_deliveries` before the receiver
 * answers 2xx (invariant 1), keyed by the SHA-256 of its raw body, because deliveries carry no id and
 * are retried and duplicated (invariant 5).
 *
 * `createInboxWriter` groups the rows of concurrent requests into one multi-row
 * `INSERT … ON CONFLICT DO NOTHING RETURNING` (group commit): a request is answered only once the
 * statement holding its row has committed, and every request of a failed statement gets the error.
 * One commit (one WAL flush) per batch instead of per request is what lets the receiver go past the
 * ~5.5k rows/s of one INSERT per request.
 *
 * The hot statement is hand-written SQL over `unnest` of array parameters, not drizzle's row builder
 * (docs/architecture.md, "Traps we work around": its per-row JS cost, and the 65,535 bind-parameter limit a VALUES list would
 * hit): eight parameters whatever the batch size, the eighth the account (null: the session's).
 * Duplicate hashes inside one batch are merged before the statement is sent.
 */
import { createHash } from 'node:crypto';
import type { DeliveryStatus } from '../../db/schema.js';
import type { Queryable } from '../../ground/queryable.js';

export type InboxStatus = Extract<DeliveryStatus, 'pending' | 'ignored' | 'failed'>;

export interface DeliveryRecord {
  /** The exact bytes received: the signature and the dedupe key are computed over them. */
  raw: Buffer;
  /** The parsed body, used only when Postgres refuses the raw text as jsonb (see `bodyTextFor`). */
  body: unknown;
  /** Every kind the delivery names, known and unknown. */
  kinds: string[];
  /** Events to apply (0 for `ignored` and `failed`). */
  eventCount: number;
  /** The `webhook_endpoints` row whose secret verified it; null for a WEBHOOK_SECRETS secret. */
  endpointId: string | null;
  status: InboxStatus;
  /** Why a `failed` delivery cannot be applied (never contains payload values or secrets). */
  error?: string | null;
}

export interface StoredDelivery {
  id: string;
  /** True when an identical body was already stored: nothing was written. */
  duplicate: boolean;
  /** Status of the stored row (for a duplicate, the existing row's current status). */
  status: DeliveryStatus;
}

export function bodySha256(raw: Buffer): string {
  return createHash('sha256').update(raw).digest('hex');
}

/**
 * Stores one delivery in its own statement. The receiver uses `createInboxWriter` instead.
 * `account`: the account it is stored under; by default the session's (`mirror_account()`).
 */
export async function storeDelivery(pool: Queryable, delivery: DeliveryRecord, account: string | null = null): Promise<StoredDelivery> {
  const [result] = await writeRows(pool, [toRow(delivery)], account);
  return result as StoredDelivery;
}

export interface EndpointSecret {
  endpointId: string;
  secret: string;
}

/** Secrets of the enabled webhooks this install manages (docs/upstream.md, "Webhook object" `secret`, and "Signature"). */
export async function loadSecrets(pool: Queryable): Promise<EndpointSecret[]> {
  const { rows } = await pool.query(
    "select id, secret from webhook_endpoints where account = mirror_account() and enabled and secret <> '' order by created_at, id",
  );
  return (rows as Array<{ id: string; secret: string }>).map((r) => ({ endpointId: r.id, secret: r.secret }));
}

// ---------------------------------------------------------------------------------------------
// Batched writer

export interface InboxWriterOptions {
  /** Rows per statement at most. */
  maxBatch?: number;
  /**
   * How long the first queued row may wait for others before its batch is written, when a
   * connection is free (0: write at once). While all `maxConcurrent` statements are busy rows queue
   * anyway, so under load batches fill by themselves; this only bounds the extra latency at low load.
   * Default 10 ms: at a few hundred deliveries a second each commit (a WAL flush, and a notification
   * to the workers) then carries several rows (measured at 500/s: Postgres CPU per delivery 294 µs
   * at 2 ms, 162 µs at 10 ms; the service gives up after 3 s, so 10 ms of ack latency costs nothing).
   */
  maxWaitMs?: number;
  /** Statements in flight at once (each holds one pooled connection). */
  maxConcurrent?: number;
  /** Body bytes per statement at most (bodies can be megabytes; bounds one statement's memory). */
  maxBatchBytes?: number;
  /** Rows waiting at most; beyond, `store` fails at once (the database is not keeping up). */
  maxQueued?: number;
}

export interface InboxWriterStats {
  batches: number;
  rows: number;
  failedBatches: number;
  maxBatchSeen: number;
  queued: number;
  inFlight: number;
}

export interface InboxWriter {
  /** Resolves once the row is committed (or found already stored); rejects if it could not be. */
  store(delivery: DeliveryRecord): Promise<StoredDelivery>;
  stats(): InboxWriterStats;
  /** Writes what is queued, waits for statements in flight; later `store` calls reject. */
  close(): Promise<void>;
}

export class InboxClosedError extends Error {
  override name = 'InboxClosedError';
  constructor() {
    super('the inbox writer is closed');
  }
}

export class InboxOverloadedError extends Error {
  override name = 'InboxOverloadedError';
  constructor(queued: number) {
    super(`${queued} deliveries are already waiting for the database`);
  }
}

interface Pending {
  row: Row;
  resolve(result: StoredDelivery): void;
  reject(error: unknown): void;
}

/** How many rows from the head of the queue the next statement takes, and their body bytes. */
function nextBatchSize(queue: readonly Pending[], maxBatch: number, maxBatchBytes: number): { n: number; bytes: number } {
  let bytes = 0;
  let n = 0;
  // Always take at least one row, however large, so a big body cannot block the queue.
  while (n < queue.length && n < maxBatch) {
    const size = (queue[n] as Pending).row.bodyText.length;
    if (n > 0 && bytes + size > maxBatchBytes) break;
    bytes += size;
    n++;
  }
  return { n, bytes };
}

type BatchStats = { batches: number; rows: number; failedBatches: number; maxBatchSeen: number };

/** Writes one batch in one statement and settles each of its requests. */
async function runBatch(pool: Queryable, batch: Pending[], stats: BatchStats, account: string | null): Promise<void> {
  stats.batches++;
  stats.rows += batch.length;
  stats.maxBatchSeen = Math.max(stats.maxBatchSeen, batch.length);
  try {
    const results = await writeRows(
      pool,
      batch.map((p) => p.row),
      account,
    );
    batch.forEach((p, i) => p.resolve(results[i] as StoredDelivery));
  } catch (error) {
    stats.failedBatches++;
    // Durability first (invariant 1): no request of a statement that did not commit gets a 2xx.
    for (const p of batch) p.reject(error);
  }
}

/**
 * `account`: the account every row is stored under, and whose stored hashes make a duplicate; by
 * default the session's (`mirror_account()`, the pool's account).
 */
export function createInboxWriter(pool: Queryable, options: InboxWriterOptions = {}, account: string | null = null): InboxWriter {
  const maxBatch = Math.max(1, options.maxBatch ?? 256);
  const maxWaitMs = Math.max(0, options.maxWaitMs ?? 10);
  const maxConcurrent = Math.max(1, options.maxConcurrent ?? 2);
  const maxBatchBytes = Math.max(1, options.maxBatchBytes ?? 16 * 1024 * 1024);
  const maxQueued = Math.max(1, options.maxQueued ?? 10_000);

  let queue: Pending[] = [];
  let queuedBytes = 0;
  let inFlight = 0;
  let timer: NodeJS.Timeout | undefined;
  let closed = false;
  const idleWaiters: Array<() => void> = [];
  const stats: BatchStats = { batches: 0, rows: 0, failedBatches: 0, maxBatchSeen: 0 };

  function takeBatch(): Pending[] {
    const { n, bytes } = nextBatchSize(queue, maxBatch, maxBatchBytes);
    const batch = queue.slice(0, n);
    queue = queue.slice(n);
    queuedBytes -= bytes;
    return batch;
  }

  function flush(): void {
    if (timer) {
      clearTimeout(timer);
      timer = undefined;
    }
    while (inFlight < maxConcurrent && queue.length > 0) {
      const batch = takeBatch();
      inFlight++;
      void runBatch(pool, batch, stats, account).finally(() => {
        inFlight--;
        // Rows that queued while every connection was busy have waited a whole statement already.
        if (queue.length > 0) flush();
        else if (inFlight === 0) for (const wake of idleWaiters.splice(0)) wake();
      });
    }
  }

  function schedule(): void {
    if (inFlight >= maxConcurrent) return; // a finishing batch flushes the queue
    if (closed || queue.length >= maxBatch || queuedBytes >= maxBatchBytes || maxWaitMs === 0) {
      flush();
      return;
    }
    timer ??= setTimeout(flush, maxWaitMs);
  }

  return {
    store(delivery) {
      if (closed) return Promise.reject(new InboxClosedError());
      // A hung database must not turn into unbounded memory: the service will redeliver (docs/upstream.md, "Delivery and retries").
      if (queue.length >= maxQueued) return Promise.reject(new InboxOverloadedError(queue.length));
      return new Promise<StoredDelivery>((resolve, reject) => {
        const row = toRow(delivery);
        queue.push({ row, resolve, reject });
        queuedBytes += row.bodyText.length;
        schedule();
      });
    },
    stats: () => ({ ...stats, queued: queue.length, inFlight }),
    async close() {
      closed = true;
      flush();
      if (inFlight > 0 || queue.length > 0) await new Promise<void>((resolve) => idleWaiters.push(resolve));
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Statements

interface Row {
  sha: string;
  bodyText: string;
  body: unknown;
  kinds: string[];
  eventCount: number;
  endpointId: string | null;
  status: InboxStatus;
  error: string | null;
}

const MAX_ERROR_CHARS = 2_000;

function toRow(d: DeliveryRecord): Row {
  return {
    sha: bodySha256(d.raw),
    bodyText: stripBom(d.raw.toString('utf8')),
    body: d.body,
    kinds: d.kinds,
    eventCount: d.eventCount,
    endpointId: d.endpointId,
    status: d.status,
    error: d.error ? d.error.slice(0, MAX_ERROR_CHARS) : null,
  };
}

// The account the rows go to: the parameter when given, else the session's. An initplan, so it is
// computed once per statement, not per row, and the hash lookups use it as a plain key.
const ACCOUNT_OF = (param: string) => `(select coalesce(${param}::text, mirror_account()))`;

// The body is sent as the raw text and cast to jsonb by Postgres: jsonb keeps numbers exactly, so
// nothing the service sent is rounded (invariant 6), unlike a JSON.stringify of the parsed value.
// Dedupe is within an account: the same bytes posted for two accounts are two deliveries.
const INSERT_SQL = `
  insert into webhook_deliveries (account, body_sha256, body, kinds, event_count, endpoint_id, status, error)
  select ${ACCOUNT_OF('$8')}, t.sha, t.body::jsonb, array(select jsonb_array_elements_text(t.kinds::jsonb)), t.event_count,
         t.endpoint_id, t.status, t.error
    from unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], $6::text[], $7::text[])
         with ordinality as t(sha, body, kinds, event_count, endpoint_id, status, error, ord)
   where not exists (select 1 from webhook_delivery_hashes h
                      where h.account = ${ACCOUNT_OF('$8')} and h.body_sha256 = decode(t.sha, 'hex'))
   order by t.ord
  on conflict (account, body_sha256) do nothing
  returning id::text as id, body_sha256 as sha, status`;

// A purged delivery's hash answers like its row did (its id and last status; its body is gone).
const EXISTING_SQL = `
  select id::text as id, body_sha256 as sha, status from webhook_deliveries
   where body_sha256 = any($1::text[]) and account = ${ACCOUNT_OF('$2')}
  union all
  select delivery_id::text, encode(body_sha256, 'hex'), status from webhook_delivery_hashes
   where account = ${ACCOUNT_OF('$2')} and body_sha256 = any(array(select decode(x, 'hex') from unnest($1::text[]) x))`;

type ResultRow = { id: string; sha: string; status: DeliveryStatus };

/**
 * One statement for all rows (autocommit: it resolves after COMMIT). Returns one result per input
 * row, in order. Hashes that conflicted are looked up afterwards: a conflict waits for the other
 * transaction, so the row it found is committed, but this statement's snapshot cannot see it.
 */
async function writeRows(pool: Queryable, rows: Row[], account: string | null): Promise<StoredDelivery[]> {
  const unique = new Map<string, Row>();
  for (const row of rows) if (!unique.has(row.sha)) unique.set(row.sha, row);
  // Every statement takes its unique-index entries in hash order: two concurrent batches holding the
  // same duplicates in opposite orders would otherwise deadlock (measured: one batch aborted, 503s).
  const sorted = [...unique.values()].sort((a, b) => (a.sha < b.sha ? -1 : a.sha > b.sha ? 1 : 0));
  const found = await insertUnique(pool, sorted, account);
  const firstOwner = new Set<string>();
  return rows.map((row) => {
    const hit = found.get(row.sha) as { id: string; status: DeliveryStatus; inserted: boolean };
    // A hash repeated inside the batch: its first occurrence wrote the row, the others are duplicates.
    const duplicate = !hit.inserted || firstOwner.has(row.sha);
    firstOwner.add(row.sha);
    return { id: hit.id, duplicate, status: hit.status };
  });
}

const MAX_LOOKUP_ROUNDS = 3;

async function insertUnique(
  pool: Queryable,
  rows: Row[],
  account: string | null,
  round = 1,
): Promise<Map<string, { id: string; status: DeliveryStatus; inserted: boolean }>> {
  let inserted: ResultRow[];
  try {
    inserted = await insertStatement(pool, rows, account);
  } catch (error) {
    if (!isDataError(error)) throw error;
    inserted = await insertOneByOne(pool, rows, account);
  }
  const found = new Map(inserted.map((r) => [r.sha, { id: r.id, status: r.status, inserted: true }]));
  const missing = rows.filter((r) => !found.has(r.sha)).map((r) => r.sha);
  if (missing.length > 0) {
    const { rows: existing } = await pool.query(EXISTING_SQL, [missing, account]);
    for (const r of existing as ResultRow[]) found.set(r.sha, { id: r.id, status: r.status, inserted: false });
  }
  const lost = rows.filter((r) => !found.has(r.sha));
  if (lost.length > 0) {
    // The conflicting row vanished between the two statements (deleted meanwhile): write again.
    if (round >= MAX_LOOKUP_ROUNDS) throw new Error('inbox rows conflicted but could not be found');
    const again = await insertUnique(pool, lost, account, round + 1);
    for (const [sha, hit] of again) found.set(sha, hit);
  }
  return found;
}

/**
 * Postgres refused a value (SQLSTATE class 22): jsonb rejects some valid JSON (`\u0000`, lone
 * surrogate escapes). Rows go one by one so only the offending one is affected, and that one is
 * stored re-serialized with those characters replaced by U+FFFD rather than lost: its hash is still
 * the one of the raw bytes, so redeliveries stay duplicates.
 */
async function insertOneByOne(pool: Queryable, rows: Row[], account: string | null): Promise<ResultRow[]> {
  const out: ResultRow[] = [];
  for (const row of rows) {
    try {
      out.push(...(await insertStatement(pool, [row], account)));
    } catch (error) {
      if (!isDataError(error)) throw error;
      out.push(...(await insertStatement(pool, [sanitizedRow(row)], account)));
    }
  }
  return out;
}

async function insertStatement(pool: Queryable, rows: Row[], account: string | null): Promise<ResultRow[]> {
  // Named: Postgres parses and plans it once per connection, not once per batch (measured: about a
  // fifth of the inbox's Postgres CPU at 500 deliveries/s).
  const { rows: result } = await pool.query({
    name: 'sm_inbox_insert',
    text: INSERT_SQL,
    values: [
      rows.map((r) => r.sha),
      rows.map((r) => r.bodyText),
      rows.map((r) => JSON.stringify(r.kinds)),
      rows.map((r) => r.eventCount),
      rows.map((r) => r.endpointId),
      rows.map((r) => r.status),
      rows.map((r) => r.error),
      account,
    ],
  });
  return result as ResultRow[];
}

function isDataError(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('22');
}

function stripBom(text: string): string {
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
}

const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

function sanitizedRow(row: Row): Row {
  const clean = (text: string) => text.replace(UNSTORABLE, '\ufffd');
  return {
    ...row,
    bodyText: JSON.stringify(sanitizeForJsonb(row.body)),
    kinds: row.kinds.map(clean),
    error: row.error === null ? null : clean(row.error),
  };
}

function sanitizeForJsonb(value: unknown): unknown {
  if (typeof value === 'string') return value.replace(UNSTORABLE, '\ufffd');
  if (Array.isArray(value)) return value.map(sanitizeForJsonb);
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      const key = k.replace(UNSTORABLE, '\ufffd');
      if (key !== '__proto__') out[key] = sanitizeForJsonb(v);
    }
    return out;
  }
  return value;
}

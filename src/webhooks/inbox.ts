/**
 * The inbox: every signed delivery is made durable in `webhook_deliveries` before the receiver
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
 * hit): seven parameters whatever the batch size. Duplicate hashes inside one batch are merged before
 * the statement is sent.
 */
import { createHash } from 'node:crypto';
import type pg from 'pg';
import { canonicalTimestampSql, type RowOf } from '../db/columns.js';
import { DELIVERY_STATUSES, webhookDeliveries, type DeliveryStatus } from '../db/schema.js';
import type { Queryable } from '../ground/queryable.js';
import { canonicalIdSql } from '../mirror/rules.js';

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

// Batched by id so one purge never holds many row locks or one huge transaction; the status index
// (status, received_at) finds the candidates.
// The hash of each purged row stays (`webhook_delivery_hashes`): a replay of the same bytes after the
// retention is still a duplicate, and its personal data is not stored again.
const PURGE_SQL = `
with purged as (
  delete from webhook_deliveries where id in (
    select id from webhook_deliveries
     where (status in ('applied', 'ignored') and received_at < now() - make_interval(secs => $1::float8 / 1000))
        or (status in ('failed', 'pending') and received_at < now() - make_interval(secs => $3::float8 / 1000))
     limit $2)
  returning id, body_sha256, status, received_at
)
insert into webhook_delivery_hashes (body_sha256, delivery_id, status, received_at)
select decode(body_sha256, 'hex'), id, status, received_at from purged
on conflict (body_sha256) do nothing`;

/**
 * Deletes applied and ignored deliveries received more than `olderThanMs` ago, and failed and pending
 * ones received more than `failedOlderThanMs` ago (never, when unset), `batch` rows per statement
 * until none is left; returns how many. Applied rows' effects are in the mirrored tables; what is
 * left in the raw bodies is personal data (of forgotten subscribers too). Failed and pending rows
 * are kept longer for `webhooks replay`, but a row nobody replayed in that time never will be.
 */
export async function purgeDeliveries(
  pool: Queryable,
  olderThanMs: number,
  options: { failedOlderThanMs?: number; batch?: number } = {},
): Promise<number> {
  const batch = options.batch ?? 5_000;
  // Infinity is not a float8 parameter; a century stands for "never".
  const failedMs = options.failedOlderThanMs ?? 100 * 365 * 86_400_000;
  let total = 0;
  for (;;) {
    const deleted = (await pool.query(PURGE_SQL, [olderThanMs, batch, failedMs])).rowCount ?? 0;
    total += deleted;
    if (deleted < batch) return total;
  }
}

/** Stores one delivery in its own statement. The receiver uses `createInboxWriter` instead. */
export async function storeDelivery(pool: Queryable, delivery: DeliveryRecord): Promise<StoredDelivery> {
  const [result] = await writeRows(pool, [toRow(delivery)]);
  return result as StoredDelivery;
}

export interface EndpointSecret {
  endpointId: string;
  secret: string;
}

/** Secrets of the enabled webhooks this install manages (docs/upstream.md, "Webhook object" `secret`, and "Signature"). */
export async function loadSecrets(pool: Queryable): Promise<EndpointSecret[]> {
  const { rows } = await pool.query("select id, secret from webhook_endpoints where enabled and secret <> '' order by created_at, id");
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
async function runBatch(pool: Queryable, batch: Pending[], stats: BatchStats): Promise<void> {
  stats.batches++;
  stats.rows += batch.length;
  stats.maxBatchSeen = Math.max(stats.maxBatchSeen, batch.length);
  try {
    const results = await writeRows(
      pool,
      batch.map((p) => p.row),
    );
    batch.forEach((p, i) => p.resolve(results[i] as StoredDelivery));
  } catch (error) {
    stats.failedBatches++;
    // Durability first (invariant 1): no request of a statement that did not commit gets a 2xx.
    for (const p of batch) p.reject(error);
  }
}

export function createInboxWriter(pool: Queryable, options: InboxWriterOptions = {}): InboxWriter {
  const maxBatch = Math.max(1, options.maxBatch ?? 256);
  const maxWaitMs = Math.max(0, options.maxWaitMs ?? 2);
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
      void runBatch(pool, batch, stats).finally(() => {
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

// The body is sent as the raw text and cast to jsonb by Postgres: jsonb keeps numbers exactly, so
// nothing the service sent is rounded (invariant 6), unlike a JSON.stringify of the parsed value.
const INSERT_SQL = `
  insert into webhook_deliveries (body_sha256, body, kinds, event_count, endpoint_id, status, error)
  select t.sha, t.body::jsonb, array(select jsonb_array_elements_text(t.kinds::jsonb)), t.event_count,
         t.endpoint_id, t.status, t.error
    from unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], $6::text[], $7::text[])
         with ordinality as t(sha, body, kinds, event_count, endpoint_id, status, error, ord)
   where not exists (select 1 from webhook_delivery_hashes h where h.body_sha256 = decode(t.sha, 'hex'))
   order by t.ord
  on conflict (body_sha256) do nothing
  returning id::text as id, body_sha256 as sha, status`;

// A purged delivery's hash answers like its row did (its id and last status; its body is gone).
const EXISTING_SQL = `
  select id::text as id, body_sha256 as sha, status from webhook_deliveries where body_sha256 = any($1::text[])
  union all
  select delivery_id::text, encode(body_sha256, 'hex'), status from webhook_delivery_hashes
   where body_sha256 = any(array(select decode(x, 'hex') from unnest($1::text[]) x))`;

type ResultRow = { id: string; sha: string; status: DeliveryStatus };

/**
 * One statement for all rows (autocommit: it resolves after COMMIT). Returns one result per input
 * row, in order. Hashes that conflicted are looked up afterwards: a conflict waits for the other
 * transaction, so the row it found is committed, but this statement's snapshot cannot see it.
 */
async function writeRows(pool: Queryable, rows: Row[]): Promise<StoredDelivery[]> {
  const unique = new Map<string, Row>();
  for (const row of rows) if (!unique.has(row.sha)) unique.set(row.sha, row);
  // Every statement takes its unique-index entries in hash order: two concurrent batches holding the
  // same duplicates in opposite orders would otherwise deadlock (measured: one batch aborted, 503s).
  const sorted = [...unique.values()].sort((a, b) => (a.sha < b.sha ? -1 : a.sha > b.sha ? 1 : 0));
  const found = await insertUnique(pool, sorted);
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
  round = 1,
): Promise<Map<string, { id: string; status: DeliveryStatus; inserted: boolean }>> {
  let inserted: ResultRow[];
  try {
    inserted = await insertStatement(pool, rows);
  } catch (error) {
    if (!isDataError(error)) throw error;
    inserted = await insertOneByOne(pool, rows);
  }
  const found = new Map(inserted.map((r) => [r.sha, { id: r.id, status: r.status, inserted: true }]));
  const missing = rows.filter((r) => !found.has(r.sha)).map((r) => r.sha);
  if (missing.length > 0) {
    const { rows: existing } = await pool.query(EXISTING_SQL, [missing]);
    for (const r of existing as ResultRow[]) found.set(r.sha, { id: r.id, status: r.status, inserted: false });
  }
  const lost = rows.filter((r) => !found.has(r.sha));
  if (lost.length > 0) {
    // The conflicting row vanished between the two statements (deleted meanwhile): write again.
    if (round >= MAX_LOOKUP_ROUNDS) throw new Error('inbox rows conflicted but could not be found');
    const again = await insertUnique(pool, lost, round + 1);
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
async function insertOneByOne(pool: Queryable, rows: Row[]): Promise<ResultRow[]> {
  const out: ResultRow[] = [];
  for (const row of rows) {
    try {
      out.push(...(await insertStatement(pool, [row])));
    } catch (error) {
      if (!isDataError(error)) throw error;
      out.push(...(await insertStatement(pool, [sanitizedRow(row)])));
    }
  }
  return out;
}

async function insertStatement(pool: Queryable, rows: Row[]): Promise<ResultRow[]> {
  const { rows: result } = await pool.query(INSERT_SQL, [
    rows.map((r) => r.sha),
    rows.map((r) => r.bodyText),
    rows.map((r) => JSON.stringify(r.kinds)),
    rows.map((r) => r.eventCount),
    rows.map((r) => r.endpointId),
    rows.map((r) => r.status),
    rows.map((r) => r.error),
  ]);
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

// ---------------------------------------------------------------------------------------------
// After the receipt: the consumer's, the replay's, the sweeper's and the redaction's statements.
// This module is the only one that writes `webhook_deliveries` (docs/architecture.md, table owners);
// the others call these.

/** An apply's locked row. */
export type LockedDelivery = Pick<RowOf<typeof webhookDeliveries>, 'status' | 'body' | 'receivedAt'>;

/**
 * The `select … for update` that opens an apply, as text to send after `begin` and the
 * transaction's settings in one simple query (the id is a validated string of digits, inlined).
 */
export function lockDeliverySql(id: string): string {
  return `select status, body, ${canonicalTimestampSql('received_at')} as "receivedAt" from webhook_deliveries where id = ${id} for update`;
}

/**
 * Marks the row done and commits, in one simple query (statements after a failing one are not run,
 * so a failed mark never commits). Returns `applied_at − received_at` in ms as `lagMs`. The id is a
 * validated string of digits; texts go through `escapeLiteral`. `beforeCommit`: one more statement
 * (a query whose result the caller reads, second in the results), run in the transaction.
 */
export function finishDeliverySql(
  client: pg.ClientBase,
  id: string,
  status: 'applied' | 'ignored',
  note: string | null,
  kinds: readonly string[],
  eventCount: number,
  beforeCommit: string | null = null,
): string {
  // Postgres text cannot hold NUL; the writer above replaces it the same way.
  const literal = (text: string) => client.escapeLiteral(text.replaceAll('\u0000', '\ufffd'));
  const kindsSql = kinds.length === 0 ? `'{}'::text[]` : `array[${kinds.map(literal).join(', ')}]::text[]`;
  return `
update webhook_deliveries
   set status = '${status}', applied_at = ${status === 'applied' ? 'clock_timestamp()' : 'applied_at'},
       updated_at = clock_timestamp(), attempts = attempts + 1, error = ${note === null ? 'null' : literal(note)},
       kinds = ${kindsSql}, event_count = ${Math.trunc(eventCount)}
 where id = ${id}
returning (extract(epoch from (coalesce(applied_at, clock_timestamp()) - received_at)) * 1000)::float8 as "lagMs";${beforeCommit === null ? '' : `\n${beforeCommit};`}
commit`;
}

const FAILED_SQL = `
update webhook_deliveries
   set attempts = attempts + 1, error = $2, updated_at = clock_timestamp(),
       status = case when $3 then 'failed' else status end
 where id = $1 and status = 'pending'
returning attempts, status`;

/**
 * Records a failed apply on a row still `pending`: one more attempt, its error, and `failed` when
 * `markFailed`. Undefined when the row is no longer pending (another apply finished it).
 */
export async function recordFailedAttempt(
  pool: Queryable,
  id: string,
  error: string,
  markFailed: boolean,
): Promise<{ attempts: number; status: DeliveryStatus } | undefined> {
  const { rows } = await pool.query<{ attempts: number; status: DeliveryStatus }>({
    name: 'sm_consumer_failed',
    text: FAILED_SQL,
    values: [id, error, markFailed],
  });
  return rows[0];
}

export async function deliveryStatus(pool: Queryable, id: string): Promise<DeliveryStatus | 'missing'> {
  const { rows } = await pool.query<{ status: DeliveryStatus }>('select status from webhook_deliveries where id = $1', [id]);
  return rows[0]?.status ?? 'missing';
}

/** Which rows a replay considers: received at or after `since`, and among `ids`; null: no bound. */
export interface ReplayFilter {
  since: string | null;
  ids: string[] | null;
}

const REOPEN_FAILED_SQL = `
update webhook_deliveries set status = 'pending', updated_at = clock_timestamp()
 where status = 'failed'
   and ($1::timestamptz is null or received_at >= $1::timestamptz)
   and ($2::bigint[] is null or id = any($2::bigint[]))
returning id::text as id`;

const IGNORED_SQL = `
select d.id::text as id, d.body from webhook_deliveries d
 where d.status = 'ignored'
   and ($1::timestamptz is null or d.received_at >= $1::timestamptz)
   and ($2::bigint[] is null or d.id = any($2::bigint[]))
 order by d.id`;

const REOPEN_IGNORED_SQL = `
update webhook_deliveries set status = 'pending', updated_at = clock_timestamp()
 where status = 'ignored' and id = any($1::bigint[])
returning id::text as id`;

/** Sets matching `failed` rows back to `pending`; returns their ids (attempts are kept). */
export async function reopenFailed(pool: Queryable, filter: ReplayFilter): Promise<string[]> {
  const { rows } = await pool.query<{ id: string }>(REOPEN_FAILED_SQL, [filter.since, filter.ids]);
  return rows.map((r) => r.id);
}

/** Matching `ignored` rows with their bodies, in id order. */
export async function ignoredDeliveries(pool: Queryable, filter: ReplayFilter): Promise<Array<{ id: string; body: unknown }>> {
  return (await pool.query<{ id: string; body: unknown }>(IGNORED_SQL, [filter.since, filter.ids])).rows;
}

/** Sets these `ignored` rows back to `pending`; returns the ids that were still ignored. */
export async function reopenIgnored(pool: Queryable, ids: readonly string[]): Promise<string[]> {
  if (ids.length === 0) return [];
  const { rows } = await pool.query<{ id: string }>(REOPEN_IGNORED_SQL, [ids]);
  return rows.map((r) => r.id);
}

// Qualified names: a bare id in ORDER BY would be the text output column, and "10" < "5".
const PENDING_SQL = `
select d.id::text as id, d.received_at::text as "receivedAt" from webhook_deliveries d
 where d.status = 'pending' and d.received_at < now() - make_interval(secs => $1::float8 / 1000)
   and ($2::timestamptz is null or (d.received_at, d.id) > ($2::timestamptz, $3::bigint))
 order by d.received_at, d.id
 limit $4`;

/** A position in the pending rows, in (received_at, id) order. */
export interface PendingCursor {
  receivedAt: string;
  id: string;
}

/** Up to `limit` pending rows received more than `graceMs` ago, after `cursor`, in (received_at, id) order. */
export async function pendingDeliveries(
  pool: Queryable,
  graceMs: number,
  cursor: PendingCursor | null,
  limit: number,
): Promise<PendingCursor[]> {
  const { rows } = await pool.query<PendingCursor>(PENDING_SQL, [graceMs, cursor?.receivedAt ?? null, cursor?.id ?? null, limit]);
  return rows;
}

/**
 * An `id` found in a body (a jsonb value `v`) as the normalizer reads it: `007` is subscriber 7. What
 * the normalizer would refuse is compared as it is written (no subscriber has such an id).
 */
const bodyId = (text: string) => `coalesce(${canonicalIdSql(text)}, ${text})`;
const BODY_ID = bodyId(`v #>> '{}'`);

// Any `id` anywhere in the body that is one of the ids (however spelled); pages by delivery id.
const MENTIONING_SQL = `
select id::text, body::text as body from webhook_deliveries d
 where d.id > $2::bigint
   and exists (select 1 from jsonb_path_query(d.body, 'lax $.**.id') v where ${BODY_ID} = any($1::text[]))
 order by d.id
 limit $3`;

/** Up to `limit` deliveries after id `afterId` whose body has an `id` among `ids`, with their bodies as text. */
export async function deliveriesMentioning(
  pool: Queryable,
  ids: readonly string[],
  afterId: string,
  limit: number,
): Promise<Array<{ id: string; body: string }>> {
  return (await pool.query<{ id: string; body: string }>(MENTIONING_SQL, [ids, afterId, limit])).rows;
}

// Deliveries that mention an erased subscriber and were received since its last check (less a margin
// for receipts still in flight then), with the erased ids each mentions; pages by delivery id.
const MENTIONING_ERASED_SQL = `
select d.id::text as id, d.body::text as body, array_agg(distinct e.subscriber_id) as ids
  from webhook_deliveries d
  cross join lateral jsonb_path_query(d.body, 'lax $.**.id') v
  join erasures e on e.subscriber_id = ${BODY_ID}
 where d.id > $3::bigint
   and e.deliveries_redacted_at < $1::timestamptz
   and d.received_at >= e.deliveries_redacted_at - make_interval(secs => $2::float8 / 1000)
 group by d.id
 order by d.id
 limit $4`;

/**
 * Up to `limit` deliveries after id `afterId` that mention a subscriber of `erasures` checked before
 * `checkedBefore` and were received since that check (less `marginMs`), with the ids they mention.
 */
export async function deliveriesMentioningErasedSince(
  pool: Queryable,
  checkedBefore: string,
  marginMs: number,
  afterId: string,
  limit: number,
): Promise<Array<{ id: string; body: string; ids: string[] }>> {
  return (await pool.query<{ id: string; body: string; ids: string[] }>(MENTIONING_ERASED_SQL, [checkedBefore, marginMs, afterId, limit]))
    .rows;
}

// The emails the stored bodies give the subscribers `ids` (objects with an id among them and an
// email), lower-cased: what else an erasure scrubs from the bodies it redacts.
const EMAILS_OF_SQL = `
select distinct lower(o ->> 'email') as email
  from webhook_deliveries d
  cross join lateral jsonb_path_query(d.body, 'strict $.** ? (@.type() == "object" && exists(@.email))') o
 where ${bodyId(`o ->> 'id'`)} = any($1::text[])
   and coalesce(o ->> 'email', '') <> ''`;

/** The emails stored deliveries carry for the subscribers `ids`, lower-cased. */
export async function emailsOfSubscribers(pool: Queryable, ids: readonly string[]): Promise<string[]> {
  if (ids.length === 0) return [];
  return (await pool.query<{ email: string }>(EMAILS_OF_SQL, [ids])).rows.map((r) => r.email);
}

/** One stored body as text, or null when the row is gone. */
export async function deliveryBody(pool: Queryable, id: string): Promise<string | null> {
  const { rows } = await pool.query<{ body: string }>('select body::text as body from webhook_deliveries where id = $1', [id]);
  return rows[0]?.body ?? null;
}

/** Replaces a stored body (redaction); status, hash and attempts stay. */
export async function replaceDeliveryBody(pool: Queryable, id: string, body: string): Promise<void> {
  await pool.query('update webhook_deliveries set body = $2::jsonb, updated_at = now() where id = $1', [id, body]);
}

// ---------------------------------------------------------------------------------------------
// What operators see (status page, metrics)

/** Stored deliveries per status; every status is present (0 when none). */
export async function countDeliveriesByStatus(pool: Queryable): Promise<Record<DeliveryStatus, number>> {
  const { rows } = await pool.query<{ status: DeliveryStatus; n: number }>(
    `select status, count(*)::int as n from webhook_deliveries group by status`,
  );
  const counts = Object.fromEntries(DELIVERY_STATUSES.map((s) => [s, 0])) as Record<DeliveryStatus, number>;
  for (const row of rows) counts[row.status] = row.n;
  return counts;
}

/** `receivedAt` to the second; `id` as text (int8 comes back from node-postgres as a string). */
export type FailedDelivery = { id: string } & Pick<RowOf<typeof webhookDeliveries>, 'kinds' | 'attempts' | 'error' | 'receivedAt'>;

/** The most recent deliveries that could not be applied, newest first (ids and errors, no payload). */
export async function latestFailedDeliveries(pool: Queryable, limit = 10): Promise<FailedDelivery[]> {
  const { rows } = await pool.query<FailedDelivery>(
    `select id::text as id, kinds, attempts, error,
            to_char(received_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') as "receivedAt"
       from webhook_deliveries where status = 'failed' order by received_at desc, id desc limit $1`,
    [limit],
  );
  return rows;
}

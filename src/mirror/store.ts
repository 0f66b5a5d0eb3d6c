/**
 * The only code that writes the mirrored tables (`subscribers`, `groups`, `group_members`,
 * `campaigns`, `automations`, `subscriber_activity`; DESIGN.md "Layout"). Poll and webhook consumer
 * hand it normalized rows (`normalize.ts`) and never write SQL for these tables themselves.
 *
 * Every function takes an {@link Executor} as its first argument: a `pg.Pool`, a `pg.PoolClient` /
 * `pg.Client`, or a drizzle database or transaction. To make several store calls and your own
 * statements atomic (a poll page plus its checkpoint, invariant 3), run them on one transaction:
 * {@link withTransaction} with a pool, or pass the `tx` of `db.transaction(async (tx) => …)`.
 *
 * How writes stay correct (DESIGN.md invariants 2 and 5, STYLE.md "One guarded upsert"):
 * - One statement per call (per payload shape, see {@link upsertSubscribers}), built from `unnest`
 *   of one array parameter per column, so a page costs one round trip and stays far below the
 *   65,535 bind-parameter limit whatever its size (DESIGN.md "Traps": drizzle's row-object insert
 *   builder is ~6k rows/s, and duplicate keys inside one `INSERT … ON CONFLICT` fail, so batches are
 *   deduplicated first).
 * - A newer-than guard on the upstream `updated_at` (never our clock): older versions are skipped,
 *   a tie is written only when the content differs (later arrival wins), and identical content
 *   writes nothing (`IS DISTINCT FROM`), so `mirrored_at` moves only on real changes and re-applying
 *   a page or a delivery is a no-op.
 * - `ON CONFLICT DO UPDATE … WHERE` re-checks the guard against the latest committed version of the
 *   row under its lock, so concurrent writers (poll and consumer) cannot regress a row either.
 */
import { createHash } from 'node:crypto';
import pg from 'pg';
import { sql, type SQL, type SQLChunk } from 'drizzle-orm';
import { isLosslessNumber, stringify as losslessStringify } from 'lossless-json';
import { MIRROR_SOURCES, type MirrorSource } from '../db/schema.js';
import {
  erasePersonalData,
  PERSONAL_FIELDS,
  SUBSCRIBER_FIELDS,
  type ActivityRow,
  type AutomationRow,
  type CampaignRow,
  type GroupRow,
  type SubscriberField,
  type SubscriberRow,
  type SubscriberValues,
} from './normalize.js';
import { isCanonicalTimestamp } from './time.js';
import { arrayLiteral, jsonbArrayFromParam } from './pg-params.js';

export type {
  ActivityRow,
  AutomationRow,
  CampaignRow,
  GroupRow,
  SubscriberField,
  SubscriberRow,
  SubscriberValues,
} from './normalize.js';

// ---------------------------------------------------------------------------------------------
// Executors

/** A drizzle node-postgres database or transaction (anything with drizzle's `execute`). */
export interface DrizzleExecutor {
  execute(query: SQL): PromiseLike<{ rows: unknown[]; rowCount?: number | null }>;
}

/**
 * Where store statements run. A `pg.Pool` runs each statement on any idle connection (each call is
 * then its own transaction); a client or a drizzle transaction runs them inside whatever transaction
 * is open on it.
 */
export type Executor = pg.Pool | pg.ClientBase | DrizzleExecutor;

interface Result<R> {
  rows: R[];
  rowCount: number;
}

function isPg(exec: Executor): exec is pg.Pool | pg.ClientBase {
  // A drizzle database also has a `query` member, but it is the relational query builder object.
  return typeof (exec as { query?: unknown }).query === 'function';
}

/** Named prepared statements: the hot statements are planned once per connection. */
const statementNames = new Map<string, string>();

function statementName(text: string): string {
  let name = statementNames.get(text);
  if (name === undefined) {
    name = `sm_mirror_${createHash('sha1').update(text).digest('hex').slice(0, 16)}`;
    statementNames.set(text, name);
  }
  return name;
}

/** Runs `text` with `$n` parameters on either kind of executor. */
async function run<R>(exec: Executor, text: string, values: unknown[]): Promise<Result<R>> {
  if (isPg(exec)) {
    const res = await exec.query({ name: statementName(text), text, values });
    return { rows: res.rows as R[], rowCount: res.rowCount ?? 0 };
  }
  const res = await exec.execute(toDrizzleSql(text, values));
  return { rows: res.rows as R[], rowCount: res.rowCount ?? 0 };
}

/** The same statement as a drizzle `SQL` (parameters stay parameters). */
function toDrizzleSql(text: string, values: unknown[]): SQL {
  const parts: SQLChunk[] = [];
  let last = 0;
  for (const match of text.matchAll(/\$(\d+)/g)) {
    parts.push(sql.raw(text.slice(last, match.index)));
    // sql.param, not `${value}`: drizzle's template spreads an interpolated array into a list.
    parts.push(sql.param(values[Number(match[1]) - 1]));
    last = match.index + match[0].length;
  }
  parts.push(sql.raw(text.slice(last)));
  return sql.join(parts);
}

/**
 * Runs `fn` in one transaction on a dedicated pool client: `BEGIN`, then `COMMIT` when `fn`
 * resolves, `ROLLBACK` when it throws (the error is rethrown). Pass the client to store calls and
 * to your own statements (e.g. the poll's checkpoint) so they commit together or not at all.
 */
export async function withTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken = false;
  try {
    await client.query('begin');
    const result = await fn(client);
    await client.query('commit');
    return result;
  } catch (err) {
    try {
      await client.query('rollback');
    } catch {
      broken = true; // the connection is unusable: destroy it instead of returning it to the pool
    }
    throw err;
  } finally {
    client.release(broken);
  }
}

// ---------------------------------------------------------------------------------------------
// Values

/**
 * JSON text for a `jsonb` parameter. `extra` may hold lossless-json numbers or bigints (ids above
 * 2^53, invariant 6): those are written with their exact digits, which `jsonb` keeps.
 */
function toJsonText(value: unknown): string {
  return hasExactNumbers(value) ? losslessStringify(value) ?? 'null' : JSON.stringify(value);
}

function hasExactNumbers(value: unknown): boolean {
  if (typeof value === 'bigint') return true;
  if (typeof value !== 'object' || value === null) return false;
  if (isLosslessNumber(value)) return true;
  if (Array.isArray(value)) return value.some(hasExactNumbers);
  for (const v of Object.values(value)) if (hasExactNumbers(v)) return true;
  return false;
}

function assertTimestamp(value: unknown, what: string): void {
  if (!isCanonicalTimestamp(value)) {
    throw new TypeError(`${what}: expected a canonical UTC timestamp like 2024-05-28T10:30:29.000000Z, got ${String(value)}`);
  }
}

function assertTimestampOrNull(value: unknown, what: string): void {
  if (value !== null) assertTimestamp(value, what);
}

function assertId(value: unknown, what: string): asserts value is string {
  if (typeof value !== 'string' || value === '') throw new TypeError(`${what}: expected a non-empty string id`);
}

function assertVia(value: unknown): asserts value is MirrorSource {
  if (!(MIRROR_SOURCES as readonly unknown[]).includes(value)) throw new TypeError(`via: expected poll or webhook, got ${String(value)}`);
}

/** Counts of one bulk upsert; they add up to the number of input rows. */
export interface UpsertCounts {
  /** New rows. */
  inserted: number;
  /** Existing rows changed. */
  updated: number;
  /** Rows already stored with the same version and content: nothing written. */
  unchanged: number;
  /**
   * Rows not applied because the stored version is newer, or because a newer (or, on a tie, later)
   * row for the same key came in the same call.
   */
  skipped: number;
}

// ---------------------------------------------------------------------------------------------
// Subscribers

type PgType = 'text' | 'int4' | 'float8' | 'timestamptz' | 'jsonb';

interface ColumnSpec {
  field: SubscriberField;
  column: string;
  type: PgType;
  /** jsonb merged key by key into the stored object instead of replacing it. */
  merge: boolean;
  /** Erased when the subscriber is forgotten. */
  personal: boolean;
}

const PERSONAL: ReadonlySet<SubscriberField> = new Set(PERSONAL_FIELDS);

function spec(field: SubscriberField, column: string, type: PgType): ColumnSpec {
  return { field, column, type, merge: field === 'fields' || field === 'extra', personal: PERSONAL.has(field) };
}

/** Data columns of `subscribers`, in table order (`src/db/schema.ts`). */
const SUBSCRIBER_SPECS: readonly ColumnSpec[] = [
  spec('email', 'email', 'text'),
  spec('name', 'name', 'text'),
  spec('status', 'status', 'text'),
  spec('source', 'source', 'text'),
  spec('sent', 'sent', 'int4'),
  spec('opensCount', 'opens_count', 'int4'),
  spec('clicksCount', 'clicks_count', 'int4'),
  spec('openRate', 'open_rate', 'float8'),
  spec('clickRate', 'click_rate', 'float8'),
  spec('ipAddress', 'ip_address', 'text'),
  spec('subscribedAt', 'subscribed_at', 'timestamptz'),
  spec('unsubscribedAt', 'unsubscribed_at', 'timestamptz'),
  spec('createdAt', 'created_at', 'timestamptz'),
  spec('updatedAt', 'updated_at', 'timestamptz'),
  spec('deletedAt', 'deleted_at', 'timestamptz'),
  spec('forgetAt', 'forget_at', 'timestamptz'),
  spec('optedInAt', 'opted_in_at', 'timestamptz'),
  spec('optinIp', 'optin_ip', 'text'),
  spec('fields', 'fields', 'jsonb'),
  spec('extra', 'extra', 'jsonb'),
];

/** SQL column of each {@link SubscriberField}. */
export const SUBSCRIBER_COLUMN_OF: Readonly<Record<SubscriberField, string>> = Object.fromEntries(
  SUBSCRIBER_SPECS.map((s) => [s.field, s.column]),
) as Record<SubscriberField, string>;

/** Every column of `subscribers` this module writes, in table order (tests compare it to the table). */
export const SUBSCRIBER_COLUMNS: readonly string[] = ['id', ...SUBSCRIBER_SPECS.map((s) => s.column), 'mirrored_at', 'mirrored_via'];

const FIELD_BIT = new Map<SubscriberField, number>(SUBSCRIBER_FIELDS.map((f, i) => [f, 2 ** i]));
/** `updatedAt` and `extra` are written for every row (see {@link SubscriberRow}). */
const ALWAYS_PROVIDED = (FIELD_BIT.get('updatedAt') ?? 0) | (FIELD_BIT.get('extra') ?? 0);

/** The provided set a row is written with, as a bit mask over {@link SUBSCRIBER_FIELDS}. */
function providedMask(row: SubscriberRow): number {
  let mask = ALWAYS_PROVIDED;
  for (const f of row.provided) {
    const bit = FIELD_BIT.get(f);
    if (bit === undefined) throw new TypeError(`provided: unknown subscriber field ${String(f)}`);
    mask |= bit;
  }
  return mask;
}

function providedFields(mask: number): Set<SubscriberField> {
  return new Set(SUBSCRIBER_FIELDS.filter((f) => (mask & (FIELD_BIT.get(f) ?? 0)) !== 0));
}

const upsertSqlCache = new Map<number, string>();

/**
 * The guarded upsert for one provided set. Non-provided columns are neither inserted (they take
 * their defaults) nor updated (they keep their stored values). Personal columns are erased whenever
 * the resulting `forget_at` (incoming if provided, else stored) is set, so a forgotten subscriber
 * stays erased even if a later row without `forget_at` (a poll row) is newer.
 *
 * Counting: `xmax = 0` marks inserted rows among those returned. Rows not returned are either older
 * than the stored version (`skipped`) or identical (`unchanged`); telling them apart needs the stored
 * `updated_at`, which the main query reads from the statement's snapshot (the state before the
 * write) with one primary-key probe per row, and only when some row was not written (an InitPlan
 * in an untaken CASE branch never runs).
 */
function subscriberUpsertSql(mask: number): string {
  const cached = upsertSqlCache.get(mask);
  if (cached) return cached;
  const provided = providedFields(mask);
  const specs = SUBSCRIBER_SPECS.filter((s) => provided.has(s.field));
  const forgetProvided = provided.has('forgetAt');
  const forgotten = forgetProvided ? 'excluded.forget_at is not null' : 's.forget_at is not null';

  const newValue = (s: ColumnSpec): string => {
    const c = s.column;
    const base = !provided.has(s.field) ? `s.${c}` : s.merge ? `(s.${c} || excluded.${c})` : `excluded.${c}`;
    if (!s.personal) return base;
    return `(case when ${forgotten} then ${s.type === 'jsonb' ? `'{}'::jsonb` : 'null'} else ${base} end)`;
  };
  const setSpecs = SUBSCRIBER_SPECS.filter((s) => provided.has(s.field) || (s.personal && forgetProvided));

  const unnestArgs = [
    '$1::text[]',
    ...specs.map((s, i) => (s.type === 'jsonb' ? jsonbArrayFromParam(`$${i + 2}`) : `$${i + 2}::${s.type}[]`)),
    `$${specs.length + 2}::text[]`,
  ];
  const updatedAtParam = `$${specs.findIndex((s) => s.field === 'updatedAt') + 2}::timestamptz[]`;
  const cols = specs.map((s) => s.column);
  const text = `
with written as (
  insert into subscribers as s (id, ${cols.join(', ')}, mirrored_at, mirrored_via)
  select id, ${cols.join(', ')}, now(), mirrored_via
  from unnest(${unnestArgs.join(', ')}) as t(id, ${cols.join(', ')}, mirrored_via)
  on conflict (id) do update set
    ${setSpecs.map((s) => `${s.column} = ${newValue(s)}`).join(',\n    ')},
    mirrored_at = now(),
    mirrored_via = excluded.mirrored_via
  where s.updated_at is null
     or excluded.updated_at > s.updated_at
     or (excluded.updated_at = s.updated_at
         and row(${setSpecs.map(newValue).join(', ')}) is distinct from row(${setSpecs.map((s) => `s.${s.column}`).join(', ')}))
  returning (s.xmax = 0) as inserted
),
counts as (
  select count(*) filter (where inserted)::int as inserted, count(*) filter (where not inserted)::int as updated from written
)
select c.inserted, c.updated,
  case when c.inserted + c.updated = cardinality($1::text[]) then 0
  else (select count(*)::int from unnest($1::text[], ${updatedAtParam}) as i(id, updated_at)
        where (select p.updated_at from subscribers p where p.id = i.id) > i.updated_at)
  end as skipped
from counts c`;
  upsertSqlCache.set(mask, text);
  return text;
}

const TIMESTAMP_SPECS = SUBSCRIBER_SPECS.filter((s) => s.type === 'timestamptz');

/** Checks a row against the normalizers' contract and returns its provided mask. */
function validateSubscriberRow(row: SubscriberRow, index: number): number {
  const what = `rows[${index}]`;
  assertVia(row.via);
  assertId(row.values.id, `${what}.values.id`);
  assertTimestamp(row.values.updatedAt, `${what}.values.updatedAt`);
  const mask = providedMask(row);
  for (const s of TIMESTAMP_SPECS) {
    if ((mask & (FIELD_BIT.get(s.field) ?? 0)) !== 0) assertTimestampOrNull(row.values[s.field], `${what}.values.${s.field}`);
  }
  return mask;
}

/**
 * Indices of the rows to keep, one per key: the newest by `at`, and on a tie the later one in the
 * array (DESIGN.md "Traps": duplicate keys inside one `INSERT … ON CONFLICT` fail). Canonical
 * timestamps compare as strings. Indices come back in input order.
 */
function newestPerKey<T>(rows: readonly T[], key: (row: T) => string, at: (row: T) => string): number[] {
  const best = new Map<string, number>();
  rows.forEach((row, i) => {
    const k = key(row);
    const j = best.get(k);
    if (j === undefined || at(row) >= at(rows[j] as T)) best.set(k, i);
  });
  const kept = [...best.values()];
  return kept.length === rows.length ? kept : kept.sort((a, b) => a - b);
}

/**
 * Writes subscriber versions with the newer-than guard of invariant 2 and returns what happened.
 *
 * - **Order**: a row replaces the stored one only if its `updatedAt` is newer; on an equal
 *   `updatedAt` only if the resulting row differs (the later arrival wins: legacy timestamps have
 *   whole seconds); identical content writes nothing, so `mirrored_at` does not move. Older rows are
 *   `skipped`. This holds whichever path wrote the stored row and in whatever order rows arrive.
 * - **Provided columns**: only `row.provided` columns are written; others keep their stored values
 *   (a poll row never clears `source`/`deleted_at`/`forget_at`; a webhook never clears the legacy
 *   keys in `extra`). `fields` and `extra` are merged key by key (incoming keys win), so one path's
 *   keys survive the other's writes; a key dropped upstream therefore stays until forgotten.
 * - **Forget**: when the resulting `forget_at` is set, `email`, `name`, `ip_address`, `optin_ip`,
 *   `fields` and `extra` are erased (id, status, counters and timestamps stay). An older row cannot
 *   bring the data back (the guard skips it) and neither can a newer poll row, which does not carry
 *   `forget_at` so the stored one still applies. (The real service stops listing deleted
 *   subscribers anyway.) Deletion alone (`deleted_at`) erases nothing.
 * - **Batch**: rows for the same id are first reduced to the newest (later wins on a tie); the
 *   others count as `skipped`. Rows are grouped by their provided set and each group is ONE
 *   statement (a poll page or a webhook batch is one group). With a `pg.Pool` and several groups the
 *   statements share a transaction; on a client or drizzle transaction they run in the caller's.
 *   When a batch mixes shapes for one id, only the kept row's columns are applied.
 * - `mirrored_via` is the row's `via`; `mirrored_at` is the transaction time of the write.
 *
 * @throws {TypeError} for a row that did not come from the normalizers' contract (empty id,
 *   non-canonical timestamp, unknown field or `via`); nothing is written then.
 */
export async function upsertSubscribers(exec: Executor, rows: readonly SubscriberRow[]): Promise<UpsertCounts> {
  const counts: UpsertCounts = { inserted: 0, updated: 0, unchanged: 0, skipped: 0 };
  if (rows.length === 0) return counts;
  const masks = rows.map(validateSubscriberRow);
  const kept = newestPerKey(rows, (r) => r.values.id, (r) => r.values.updatedAt);
  counts.skipped += rows.length - kept.length;

  const groups = new Map<number, SubscriberRow[]>();
  for (const i of kept) {
    const mask = masks[i] as number;
    const row = rows[i] as SubscriberRow;
    const group = groups.get(mask);
    if (group) group.push(row);
    else groups.set(mask, [row]);
  }

  const apply = async (target: Executor) => {
    for (const [mask, group] of groups) {
      const res = await run<{ inserted: number; updated: number; skipped: number }>(
        target,
        subscriberUpsertSql(mask),
        subscriberParams(mask, group),
      );
      const r = res.rows[0];
      if (!r) throw new Error('upsertSubscribers: statement returned no counts');
      counts.inserted += r.inserted;
      counts.updated += r.updated;
      counts.skipped += r.skipped;
      counts.unchanged += group.length - r.inserted - r.updated - r.skipped;
    }
  };
  if (groups.size > 1 && exec instanceof pg.Pool) await withTransaction(exec, apply);
  else await apply(exec);
  return counts;
}

/**
 * The parameters of the provided set's statement: ids, one array per provided column (jsonb columns
 * as one JSON array), then `mirrored_via`. Rows being forgotten are erased here already, so their
 * personal data is never sent to Postgres.
 */
function subscriberParams(mask: number, rows: readonly SubscriberRow[]): unknown[] {
  const provided = providedFields(mask);
  const specs = SUBSCRIBER_SPECS.filter((s) => provided.has(s.field));
  const forgetProvided = provided.has('forgetAt');
  const values = rows.map((r) => (forgetProvided && r.values.forgetAt !== null ? erasePersonalData(r.values) : r.values));
  const params: unknown[] = [arrayLiteral(values.map((v) => v.id))];
  for (const s of specs) {
    const column = values.map((v) => v[s.field]);
    params.push(s.type === 'jsonb' ? toJsonText(column.map((v) => v ?? {})) : arrayLiteral(column));
  }
  params.push(arrayLiteral(rows.map((r) => r.via)));
  return params;
}

// ---------------------------------------------------------------------------------------------
// Memberships

/** One current member as listed by a poll page or announced by `subscriber.added_to_group`. */
export interface MemberInput {
  subscriberId: string;
  /** The subscriber type it was listed under (poll) or its status (webhook); null = unknown, keeps the stored type. */
  type: string | null;
  /** Upstream time of this fact: the subscriber's `updated_at`. Orders add/remove (invariant 2). */
  at: string;
}

export interface UpsertMembershipsOptions {
  via: MirrorSource;
  /**
   * The start time of the full pass this listing belongs to. Stamps `last_seen_at` (even when the
   * guard skips the rest), which {@link removeMembersNotSeenSince} reads. Omit for incremental
   * pages and webhooks: only a complete full pass may conclude that a membership ended.
   */
  seenAt?: string;
}

/*
 * Counting: the main query reads the statement's snapshot, i.e. the stored facts before the write,
 * with one primary-key probe per row. Rows returned only because `last_seen_at` moved are not
 * counted as updated.
 */
const MEMBERSHIP_UPSERT_SQL = `
with written as (
  insert into group_members as m
    (group_id, subscriber_id, type, added_at, removed_at, source_updated_at, last_seen_at, mirrored_at, mirrored_via)
  select $1, subscriber_id, type, at, null, at, $5::timestamptz, now(), $6
  from unnest($2::text[], $3::text[], $4::timestamptz[]) as t(subscriber_id, type, at)
  on conflict (group_id, subscriber_id) do update set
    type = case when m.source_updated_at is null or excluded.source_updated_at >= m.source_updated_at
                then coalesce(excluded.type, m.type) else m.type end,
    added_at = case when (m.source_updated_at is null or excluded.source_updated_at >= m.source_updated_at)
                         and (m.removed_at is not null or m.added_at is null)
                    then excluded.added_at else m.added_at end,
    removed_at = case when m.source_updated_at is null or excluded.source_updated_at >= m.source_updated_at
                      then null else m.removed_at end,
    source_updated_at = greatest(m.source_updated_at, excluded.source_updated_at),
    last_seen_at = greatest(m.last_seen_at, excluded.last_seen_at),
    mirrored_at = case when m.source_updated_at is null or excluded.source_updated_at >= m.source_updated_at
                       then now() else m.mirrored_at end,
    mirrored_via = case when m.source_updated_at is null or excluded.source_updated_at >= m.source_updated_at
                        then excluded.mirrored_via else m.mirrored_via end
  where ((m.source_updated_at is null or excluded.source_updated_at >= m.source_updated_at)
         and (row(coalesce(excluded.type, m.type), excluded.source_updated_at) is distinct from row(m.type, m.source_updated_at)
              or m.removed_at is not null or m.added_at is null))
     or excluded.last_seen_at > m.last_seen_at
     or (excluded.last_seen_at is not null and m.last_seen_at is null)
  returning m.subscriber_id, (m.xmax = 0) as inserted, m.type, m.removed_at, m.source_updated_at
)
select
  (select count(*) from written where inserted)::int as inserted,
  (select count(*) from written w
    where not w.inserted
      and not exists (select 1 from group_members p
                      where p.group_id = $1 and p.subscriber_id = w.subscriber_id
                        and row(p.type, p.removed_at, p.source_updated_at)
                            is not distinct from row(w.type, w.removed_at, w.source_updated_at)))::int as updated,
  (select count(*) from unnest($2::text[], $4::timestamptz[]) as i(subscriber_id, at)
    where (select p.source_updated_at from group_members p
           where p.group_id = $1 and p.subscriber_id = i.subscriber_id) > i.at)::int as skipped`;

/**
 * Records `members` as current members of `groupId` (`removed_at` null), guarded by the upstream
 * time of the newest membership fact (`source_updated_at`): a fact applies when its `at` is newer
 * than or equal to the stored one, so an older listing never undoes a newer removal (invariant 2).
 * `added_at` is the `at` of the fact that (re)started the membership. Re-applying the same listing
 * writes nothing; `last_seen_at` moves forward when `opts.seenAt` is given, even for a member whose
 * facts are newer than the listing. Duplicates in `members` reduce to the newest (later wins on a
 * tie). `updated` counts members whose type, removal or fact time changed; `skipped` those whose
 * stored fact is newer.
 */
export async function upsertMemberships(
  exec: Executor,
  groupId: string,
  members: readonly MemberInput[],
  opts: UpsertMembershipsOptions,
): Promise<UpsertCounts> {
  const counts: UpsertCounts = { inserted: 0, updated: 0, unchanged: 0, skipped: 0 };
  if (members.length === 0) return counts;
  assertId(groupId, 'groupId');
  assertVia(opts.via);
  if (opts.seenAt !== undefined) assertTimestamp(opts.seenAt, 'seenAt');
  members.forEach((m, i) => {
    assertId(m.subscriberId, `members[${i}].subscriberId`);
    assertTimestamp(m.at, `members[${i}].at`);
  });
  const kept = newestPerKey(members, (m) => m.subscriberId, (m) => m.at).map((i) => members[i] as MemberInput);
  counts.skipped = members.length - kept.length;
  const res = await run<{ inserted: number; updated: number; skipped: number }>(exec, MEMBERSHIP_UPSERT_SQL, [
    groupId,
    kept.map((m) => m.subscriberId),
    kept.map((m) => m.type),
    kept.map((m) => m.at),
    opts.seenAt ?? null,
    opts.via,
  ]);
  const r = res.rows[0];
  if (!r) throw new Error('upsertMemberships: statement returned no counts');
  counts.inserted = r.inserted;
  counts.updated = r.updated;
  counts.skipped += r.skipped;
  counts.unchanged = members.length - counts.inserted - counts.updated - counts.skipped;
  return counts;
}

const MEMBERSHIP_REMOVE_SQL = `
insert into group_members as m
  (group_id, subscriber_id, type, added_at, removed_at, source_updated_at, last_seen_at, mirrored_at, mirrored_via)
values ($1, $2, null, null, $3::timestamptz, $3::timestamptz, null, now(), $4)
on conflict (group_id, subscriber_id) do update set
  removed_at = excluded.removed_at,
  source_updated_at = excluded.source_updated_at,
  mirrored_at = now(),
  mirrored_via = excluded.mirrored_via
where (m.source_updated_at is null or excluded.source_updated_at >= m.source_updated_at)
  and (m.removed_at is null or m.source_updated_at is distinct from excluded.source_updated_at)`;

/**
 * Records that `subscriberId` left `groupId` at upstream time `at` (`subscriber.removed_from_group`):
 * sets `removed_at = at` unless a newer membership fact is stored. When the membership is unknown a
 * removed row is still written, so an add that is older but arrives later cannot resurrect it.
 * Returns true when something changed (false for an older or repeated removal).
 */
export async function removeMembership(
  exec: Executor,
  groupId: string,
  subscriberId: string,
  at: string,
  via: MirrorSource,
): Promise<boolean> {
  assertId(groupId, 'groupId');
  assertId(subscriberId, 'subscriberId');
  assertTimestamp(at, 'at');
  assertVia(via);
  const res = await run(exec, MEMBERSHIP_REMOVE_SQL, [groupId, subscriberId, at, via]);
  return res.rowCount > 0;
}

const MEMBERSHIPS_END_SQL = `
update group_members
   set removed_at = $2::timestamptz, source_updated_at = $2::timestamptz, mirrored_at = now(), mirrored_via = $3
 where subscriber_id = $1 and removed_at is null
   and (source_updated_at is null or source_updated_at <= $2::timestamptz)`;

/**
 * Ends every current membership of `subscriberId` at upstream time `at` (`subscriber.deleted`: a
 * deleted subscriber leaves every list, and the payload names no group). Same guard as
 * {@link removeMembership}: a membership whose newest fact is newer than `at` (re-added after a
 * restore) is kept, and the ended rows take `at` as their fact time, so an older add arriving later
 * cannot resurrect them. Memberships the mirror does not know yet are not written (no group is
 * known); the caller guards late adds against the stored deletion. Returns the number ended.
 */
export async function endMemberships(exec: Executor, subscriberId: string, at: string, via: MirrorSource): Promise<number> {
  assertId(subscriberId, 'subscriberId');
  assertTimestamp(at, 'at');
  assertVia(via);
  const res = await run(exec, MEMBERSHIPS_END_SQL, [subscriberId, at, via]);
  return res.rowCount;
}

/**
 * Ends every current membership of `groupId` that the complete full pass started at `seenBefore`
 * did not list: `last_seen_at` null or older than `seenBefore`, and no membership fact at or after
 * `seenBefore` (so a webhook add that happened during the pass is kept). Sets `removed_at = at`
 * (the pass's completion time) and leaves `source_updated_at` alone: the inference has no upstream
 * time, so any later listing of the member re-adds it. Call it only after every page of the full
 * pass is committed (DESIGN.md: only a full pass may conclude that a membership ended).
 *
 * Passes are per (group × type): give `opts.type` to consider only members last listed under that
 * type, otherwise the `active` pass would end every `unsubscribed` membership. A member whose type
 * changed between two passes is briefly removed until the other type's pass lists it again.
 * Returns the number of memberships ended.
 */
export async function removeMembersNotSeenSince(
  exec: Executor,
  groupId: string,
  seenBefore: string,
  at: string,
  opts: { type?: string } = {},
): Promise<number> {
  assertId(groupId, 'groupId');
  assertTimestamp(seenBefore, 'seenBefore');
  assertTimestamp(at, 'at');
  const res = await run(
    exec,
    `update group_members set removed_at = $3::timestamptz, mirrored_at = now(), mirrored_via = 'poll'
     where group_id = $1 and removed_at is null
       and (last_seen_at is null or last_seen_at < $2::timestamptz)
       and (source_updated_at is null or source_updated_at < $2::timestamptz)
       and ($4::text is null or type = $4::text)`,
    [groupId, seenBefore, at, opts.type ?? null],
  );
  return res.rowCount;
}

// ---------------------------------------------------------------------------------------------
// Groups, automations, campaigns

/**
 * Upserts small reference rows. These objects carry no version time, so the last arrival wins, but
 * a null never erases a known value and identical rows write nothing. Duplicates: the later wins.
 */
async function upsertReference(
  exec: Executor,
  table: 'groups' | 'automations' | 'campaigns',
  ids: string[],
  columns: ReadonlyArray<{ name: string; type: PgType; values: unknown[] }>,
): Promise<UpsertCounts> {
  const params: unknown[] = [ids, ...columns.map((c) => c.values)];
  const names = columns.map((c) => c.name);
  const newValue = (n: string) => `coalesce(excluded.${n}, r.${n})`;
  const text = `
with written as (
  insert into ${table} as r (id, ${names.join(', ')}, mirrored_at)
  select id, ${names.join(', ')}, now()
  from unnest($1::text[], ${columns.map((c, i) => `$${i + 2}::${c.type}[]`).join(', ')}) as t(id, ${names.join(', ')})
  on conflict (id) do update set ${names.map((n) => `${n} = ${newValue(n)}`).join(', ')}, mirrored_at = now()
  where row(${names.map(newValue).join(', ')}) is distinct from row(${names.map((n) => `r.${n}`).join(', ')})
  returning (r.xmax = 0) as inserted
)
select (select count(*) from written where inserted)::int as inserted,
       (select count(*) from written where not inserted)::int as updated`;
  const res = await run<{ inserted: number; updated: number }>(exec, text, params);
  const r = res.rows[0] ?? { inserted: 0, updated: 0 };
  return { inserted: r.inserted, updated: r.updated, unchanged: ids.length - r.inserted - r.updated, skipped: 0 };
}

function lastPerId<T extends { id: string }>(rows: readonly T[], what: string): { kept: T[]; dropped: number } {
  rows.forEach((r, i) => assertId(r.id, `${what}[${i}].id`));
  const last = new Map<string, T>();
  for (const r of rows) {
    last.delete(r.id); // re-insert so the map keeps the later position
    last.set(r.id, r);
  }
  return { kept: [...last.values()], dropped: rows.length - last.size };
}

function withDropped(counts: UpsertCounts, dropped: number): UpsertCounts {
  return { ...counts, skipped: counts.skipped + dropped };
}

const EMPTY_COUNTS: UpsertCounts = { inserted: 0, updated: 0, unchanged: 0, skipped: 0 };

/** Upserts groups `{id, name}` seen in payloads; a later name replaces an earlier one. */
export async function upsertGroups(exec: Executor, rows: readonly GroupRow[]): Promise<UpsertCounts> {
  if (rows.length === 0) return { ...EMPTY_COUNTS };
  const { kept, dropped } = lastPerId(rows, 'groups');
  const counts = await upsertReference(exec, 'groups', kept.map((r) => r.id), [
    { name: 'name', type: 'text', values: kept.map((r) => r.name) },
  ]);
  return withDropped(counts, dropped);
}

/** Upserts automations `{id, name}` seen in payloads; a later name replaces an earlier one. */
export async function upsertAutomations(exec: Executor, rows: readonly AutomationRow[]): Promise<UpsertCounts> {
  if (rows.length === 0) return { ...EMPTY_COUNTS };
  const { kept, dropped } = lastPerId(rows, 'automations');
  const counts = await upsertReference(exec, 'automations', kept.map((r) => r.id), [
    { name: 'name', type: 'text', values: kept.map((r) => r.name) },
  ]);
  return withDropped(counts, dropped);
}

/**
 * Upserts campaigns seen in payloads. Non-null values replace stored ones, so the `sent_at` of a
 * `campaign.sent` event survives later `campaign.open` payloads that do not carry it.
 */
export async function upsertCampaigns(exec: Executor, rows: readonly CampaignRow[]): Promise<UpsertCounts> {
  if (rows.length === 0) return { ...EMPTY_COUNTS };
  const { kept, dropped } = lastPerId(rows, 'campaigns');
  kept.forEach((r, i) => {
    assertTimestampOrNull(r.date, `campaigns[${i}].date`);
    assertTimestampOrNull(r.sentAt, `campaigns[${i}].sentAt`);
  });
  const counts = await upsertReference(exec, 'campaigns', kept.map((r) => r.id), [
    { name: 'name', type: 'text', values: kept.map((r) => r.name) },
    { name: 'total_recipients', type: 'int4', values: kept.map((r) => r.totalRecipients) },
    { name: 'preview_url', type: 'text', values: kept.map((r) => r.previewUrl) },
    { name: 'date', type: 'timestamptz', values: kept.map((r) => r.date) },
    { name: 'sent_at', type: 'timestamptz', values: kept.map((r) => r.sentAt) },
  ]);
  return withDropped(counts, dropped);
}

// ---------------------------------------------------------------------------------------------
// Activity

const ACTIVITY_INSERT_SQL = `
insert into subscriber_activity
  (kind, subscriber_id, group_id, automation_id, campaign_id, link_url, occurred_at, delivery_id, mirrored_at)
select kind, subscriber_id, group_id, automation_id, campaign_id, link_url, occurred_at, delivery_id, now()
from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[], $8::bigint[])
  as t(kind, subscriber_id, group_id, automation_id, campaign_id, link_url, occurred_at, delivery_id)
on conflict on constraint subscriber_activity_natural_key do nothing`;

/**
 * Inserts one row per applied event; a row whose natural key (kind, subscriber, group, automation,
 * campaign, link, occurred_at; nulls equal) is already stored, or repeated in `rows`, is dropped
 * (invariant 5: deliveries are duplicated and carry no id). Returns the number inserted.
 */
export async function recordActivity(exec: Executor, rows: readonly ActivityRow[]): Promise<number> {
  if (rows.length === 0) return 0;
  rows.forEach((r, i) => {
    if (typeof r.kind !== 'string' || r.kind === '') throw new TypeError(`activity[${i}].kind: expected a non-empty string`);
    assertTimestampOrNull(r.occurredAt, `activity[${i}].occurredAt`);
  });
  const res = await run(exec, ACTIVITY_INSERT_SQL, [
    rows.map((r) => r.kind),
    rows.map((r) => r.subscriberId ?? null),
    rows.map((r) => r.groupId ?? null),
    rows.map((r) => r.automationId ?? null),
    rows.map((r) => r.campaignId ?? null),
    rows.map((r) => r.linkUrl ?? null),
    rows.map((r) => r.occurredAt ?? null),
    rows.map((r) => (r.deliveryId === null || r.deliveryId === undefined ? null : String(r.deliveryId))),
  ]);
  return res.rowCount;
}

/**
 * `sync_state`: per (group, type) cursor, full-pass checkpoint and run bookkeeping.
 *
 * Not a mirrored table (the mirror store owns those); this is the poller's own ledger. Every function
 * takes a `Queryable` so the poller can write a page and its checkpoint in one transaction
 * (invariant 3: a cursor or checkpoint never moves ahead of the rows it covers).
 */
import { canonicalTimestampSql as iso, rowSelectSql, type RowOf } from '../db/columns.js';
import { SYNC_STATE_RETIRED, syncState, upstreamPaging, type PassMode } from '../db/schema.js';
import type { Queryable } from '../ground/queryable.js';

export type { PassMode } from '../db/schema.js';

/** A `sync_state` row as drizzle infers it from the table, less its retired columns. */
export type SyncStateRow = Omit<RowOf<typeof syncState>, (typeof SYNC_STATE_RETIRED)[number]>;

// Every column but the retired ones; timestamps rendered by Postgres as canonical strings, never through JS Date.
const SELECT = `select ${rowSelectSql(syncState, { omit: SYNC_STATE_RETIRED })} from sync_state`;

export async function readSyncState(db: Queryable, groupId: string, type: string): Promise<SyncStateRow | null> {
  const { rows } = await db.query<SyncStateRow>(`${SELECT} where group_id = $1 and type = $2`, [groupId, type]);
  return rows[0] ?? null;
}

export async function listSyncStates(db: Queryable): Promise<SyncStateRow[]> {
  return (await db.query<SyncStateRow>(`${SELECT} order by group_id, type`)).rows;
}

export async function markRunStarted(db: Queryable, groupId: string, type: string, mode: PassMode): Promise<void> {
  await db.query(
    `insert into sync_state (group_id, type, last_mode, last_status, last_run_started_at, last_error, updated_at)
     values ($1, $2, $3, 'running', now(), null, now())
     on conflict (group_id, type) do update
       set last_mode = excluded.last_mode, last_status = 'running',
           last_run_started_at = now(), updated_at = now()`,
    [groupId, type, mode],
  );
}

export interface OpenFullPass {
  startedAt: string;
  /** Where to read next (0 for a new pass). */
  offset: number;
  resumed: boolean;
  /** Ids at the end of the last committed page, for joining the first page after a resume. */
  tailIds: string[];
  /** False when an earlier page of this pass could not be joined to the one before. */
  continuous: boolean;
}

/**
 * Which source left an open full-pass checkpoint: the legacy pass saves the ids at the end of each
 * page (`full_tail_ids`, never null after a page), the current pass a cursor and a page count with no
 * tail. A legacy checkpoint past offset 0 with no tail cannot be joined anyway.
 */
const OFFSET_CHECKPOINT = `full_tail_ids is not null`;
const CURSOR_CHECKPOINT = `(full_cursor is not null or (full_offset > 0 and full_tail_ids is null))`;

/** Opens a full pass (or keeps the open one): returns its start time and where to resume. */
export async function openFullPass(db: Queryable, groupId: string, type: string, opts: { restart?: boolean } = {}): Promise<OpenFullPass> {
  // A restart drops an open checkpoint: the pass opened now starts from the top. So does a checkpoint
  // the current source left (SYNC_SOURCE changed mid-pass): its cursor and page count are no row offset.
  await db.query(
    `update sync_state set full_offset = null, full_tail_ids = null, full_cursor = null, updated_at = now()
      where group_id = $1 and type = $2 and full_offset is not null
        and ($3 or ${CURSOR_CHECKPOINT})`,
    [groupId, type, opts.restart ?? false],
  );
  const { rows } = await db.query<{
    startedAt: string;
    offset: number;
    resumed: boolean;
    tailIds: string[] | null;
    continuous: boolean | null;
  }>(
    `update sync_state
        set full_started_at = case when full_offset is null then now() else full_started_at end,
            full_tail_ids = case when full_offset is null then null else full_tail_ids end,
            full_continuous = case when full_offset is null then true else full_continuous end,
            full_offset = coalesce(full_offset, 0), updated_at = now()
      where group_id = $1 and type = $2
      returning ${iso('full_started_at')} as "startedAt", full_offset as "offset",
                (last_full_completed_at is null or full_started_at > last_full_completed_at) and full_offset > 0 as resumed,
                full_tail_ids as "tailIds", full_continuous as continuous`,
    [groupId, type],
  );
  const row = rows[0];
  if (!row) throw new Error(`sync_state row missing for group ${groupId} type ${type}`);
  // A pass opened before continuity was recorded (null) cannot prove it skipped nothing.
  return {
    startedAt: row.startedAt,
    offset: row.offset,
    resumed: row.resumed,
    tailIds: row.tailIds ?? [],
    continuous: row.continuous === true,
  };
}

/**
 * Called inside the page's transaction: the checkpoint commits with the rows it covers, together
 * with the page's tail ids and whether the pass is still free of gaps.
 */
export async function saveFullCheckpoint(
  db: Queryable,
  groupId: string,
  type: string,
  checkpoint: { nextOffset: number; tailIds: readonly string[]; continuous: boolean },
): Promise<void> {
  await db.query(
    `update sync_state
        set full_offset = $3, full_tail_ids = $4::text[], full_continuous = coalesce(full_continuous, false) and $5,
            updated_at = now()
      where group_id = $1 and type = $2`,
    [groupId, type, checkpoint.nextOffset, checkpoint.tailIds, checkpoint.continuous],
  );
}

export interface RunSuccess {
  mode: PassMode;
  /** Max upstream `date_updated` seen by the pass; the cursor never moves backwards. */
  maxUpdatedAt: string | null;
  rowsWritten: number;
  rowsSeen: number;
  requests: number;
  fullCompleted: boolean;
  upstreamCount?: number | null;
  /** The cursor never moves past this (the service's now + the timezone margin); a runaway cursor is pulled back to it. */
  cursorCeiling?: string | null;
  /** Rows dated after the ceiling: stored, but they did not move the cursor. */
  futureRows?: number;
  /** Full pass: requests spent stepping back (the list moved by more than the overlap); kept until the next full pass. */
  stepBacks?: number;
  /** Incremental pass: the earliest change time it certainly read; it is then recorded as a sweep that started with the run. */
  sweptSince?: string | null;
}

export async function markRunSucceeded(db: Queryable, groupId: string, type: string, run: RunSuccess): Promise<void> {
  await db.query(
    `update sync_state
        set cursor = least(case when $3::timestamptz is null then cursor
                                when cursor is null then $3::timestamptz
                                else greatest(cursor, $3::timestamptz) end,
                           coalesce($11::timestamptz, 'infinity'::timestamptz)),
            last_mode = $4, last_status = 'succeeded', last_run_finished_at = now(), last_success_at = now(),
            last_error = null, rows_last_run = $5, rows_seen_last_run = $6, requests_last_run = $7,
            full_offset = case when $8 then null else full_offset end,
            full_tail_ids = case when $8 then null else full_tail_ids end,
            full_cursor = case when $8 then null else full_cursor end,
            last_full_completed_at = case when $8 then now() else last_full_completed_at end,
            prev_proof_started_at = case when $8 and full_continuous then proof_started_at else prev_proof_started_at end,
            proof_started_at = case when $8 and full_continuous then full_started_at else proof_started_at end,
            prev_proof_ended_at = case when $8 and full_continuous then proof_ended_at else prev_proof_ended_at end,
            proof_ended_at = case when $8 and full_continuous then now() else proof_ended_at end,
            swept_at = case when $13::timestamptz is null then swept_at else last_run_started_at end,
            swept_since = coalesce($13::timestamptz, swept_since),
            future_rows_last_run = $9,
            upstream_count = coalesce($10, upstream_count),
            upstream_count_at = case when $10::int is null then upstream_count_at else now() end,
            step_backs_last_full = coalesce($12::int, step_backs_last_full),
            updated_at = now()
      where group_id = $1 and type = $2`,
    [
      groupId,
      type,
      run.maxUpdatedAt,
      run.mode,
      run.rowsWritten,
      run.rowsSeen,
      run.requests,
      run.fullCompleted,
      run.futureRows ?? 0,
      run.upstreamCount ?? null,
      run.cursorCeiling ?? null,
      run.stepBacks ?? null,
      run.sweptSince ?? null,
    ],
  );
}

export interface RunFailure {
  mode: PassMode;
  error: string;
  rowsWritten: number;
  rowsSeen: number;
  requests: number;
}

/** A failed pass is recorded as failed, never as a success; cursor and checkpoint stay where they are. */
export async function markRunFailed(db: Queryable, groupId: string, type: string, run: RunFailure): Promise<void> {
  await db.query(
    `insert into sync_state (group_id, type, last_mode, last_status, last_run_finished_at, last_error,
                             rows_last_run, rows_seen_last_run, requests_last_run, updated_at)
     values ($1, $2, $3, 'failed', now(), $4, $5, $6, $7, now())
     on conflict (group_id, type) do update
       set last_mode = excluded.last_mode, last_status = 'failed', last_run_finished_at = now(),
           last_error = excluded.last_error, rows_last_run = excluded.rows_last_run,
           rows_seen_last_run = excluded.rows_seen_last_run, requests_last_run = excluded.requests_last_run,
           updated_at = now()`,
    [groupId, type, run.mode, run.error.slice(0, 2000), run.rowsWritten, run.rowsSeen, run.requests],
  );
}

export async function saveUpstreamCount(db: Queryable, groupId: string, type: string, count: number): Promise<void> {
  await db.query(
    `update sync_state set upstream_count = $3, upstream_count_at = now(), updated_at = now()
      where group_id = $1 and type = $2`,
    [groupId, type, count],
  );
}

/**
 * The removal cutoff for a group (docs/architecture.md, invariant 11): for every given type, the start of
 * the earlier of its last two complete full passes that skipped nothing; the earliest of those. A
 * member no pass has listed since then was missed by two complete passes in a row of its type.
 * Null while any type lacks two such passes (then nobody may be removed).
 *
 * `sweeps` (a source that reads what changed since a time, in a group of several types): also null
 * until every type had a sweep that started after the first of those passes of every type ended and
 * read every change since the cutoff. A member of the group that the first passes all missed changed
 * type while they read, after the cutoff; such a sweep lists it under its new type with that newer
 * version, which keeps it ("Proof in rounds").
 */
export async function removalCutoff(
  db: Queryable,
  groupId: string,
  types: readonly string[],
  opts: { sweeps: boolean } = { sweeps: true },
): Promise<string | null> {
  const { rows } = await db.query<{ cutoff: string | null; complete: number; swept: number }>(
    `with s as (select * from sync_state where group_id = $1 and type = any($2::text[])),
          r as (select min(prev_proof_started_at) as cutoff, count(prev_proof_started_at) as complete,
                       -- a pass ends before the next of its type starts: the bound for rows older than proof_ended_at
                       max(coalesce(prev_proof_ended_at, proof_started_at)) as first_round_ended
                  from s)
     select ${iso('r.cutoff')} as cutoff, r.complete::int as complete,
            (select count(*) from s
              where s.swept_at >= r.first_round_ended and s.swept_since <= date_trunc('second', r.cutoff))::int as swept
       from r`,
    [groupId, types],
  );
  const row = rows[0];
  if (!row || row.complete < types.length) return null;
  if (opts.sweeps && types.length > 1 && row.swept < types.length) return null;
  return row.cutoff;
}

// ---------------------------------------------------------------------------------------------
// Full passes of the current API: the checkpoint is the service's cursor (docs/upstream-current.md)

export interface OpenCursorPass {
  startedAt: string;
  /** Where to read next: a cursor the service handed out, null for the list's first page. */
  cursor: string | null;
  /** Pages committed so far (kept in `full_offset`, so that an open pass looks open to every reader). */
  pages: number;
}

/** Opens a full pass by cursor (or keeps the open one): its start time and where to resume. */
export async function openCursorPass(
  db: Queryable,
  groupId: string,
  type: string,
  opts: { restart?: boolean } = {},
): Promise<OpenCursorPass> {
  // A restart drops an open checkpoint: the pass opened now starts from the first page. So does one
  // the legacy source left (SYNC_SOURCE changed mid-pass): its row offset is no page count, and read
  // as one with no cursor it would end the pass at once, complete, having listed nobody.
  await db.query(
    `update sync_state set full_offset = null, full_tail_ids = null, full_cursor = null, updated_at = now()
      where group_id = $1 and type = $2 and full_offset is not null
        and ($3 or ${OFFSET_CHECKPOINT})`,
    [groupId, type, opts.restart ?? false],
  );
  const { rows } = await db.query<OpenCursorPass>(
    `update sync_state
        set full_started_at = case when full_offset is null then now() else full_started_at end,
            full_cursor = case when full_offset is null then null else full_cursor end,
            full_tail_ids = null, full_continuous = true,
            full_offset = coalesce(full_offset, 0), updated_at = now()
      where group_id = $1 and type = $2
      returning ${iso('full_started_at')} as "startedAt", full_cursor as cursor, full_offset as pages`,
    [groupId, type],
  );
  const row = rows[0];
  if (!row) throw new Error(`sync_state row missing for group ${groupId} type ${type}`);
  return row;
}

/**
 * Called inside the page's transaction (invariant 3): the next cursor commits with the rows it
 * covers. A cursor pass skips no survivor, so it stays continuous.
 */
export async function saveCursorCheckpoint(
  db: Queryable,
  groupId: string,
  type: string,
  checkpoint: { nextCursor: string | null; pages: number },
): Promise<void> {
  await db.query(`update sync_state set full_cursor = $3, full_offset = $4, updated_at = now() where group_id = $1 and type = $2`, [
    groupId,
    type,
    checkpoint.nextCursor,
    checkpoint.pages,
  ]);
}

// ---------------------------------------------------------------------------------------------
// The service's page cap: one per install (`upstream_paging`)

export interface StoredPaging {
  cap: number | null;
  longestPage: number;
  candidate: { length: number; where: string } | null;
}

/** The columns of `upstream_paging` that hold what was learned (the row's id and time are the table's). */
type PagingRow = Pick<RowOf<typeof upstreamPaging>, 'pageCap' | 'longestPage' | 'candidateLength' | 'candidateList'>;

const SELECT_PAGING = `select ${rowSelectSql(upstreamPaging, { omit: ['id', 'updatedAt'] })} from upstream_paging where id = 1`;

export async function readPaging(db: Queryable): Promise<StoredPaging> {
  const row = (await db.query<PagingRow>(SELECT_PAGING)).rows[0];
  if (!row) return { cap: null, longestPage: 0, candidate: null };
  return {
    cap: row.pageCap,
    longestPage: row.longestPage,
    candidate:
      row.candidateLength !== null && row.candidateList !== null ? { length: row.candidateLength, where: row.candidateList } : null,
  };
}

/**
 * Saves what a pass learned. Concurrent passes merge: the longest page only grows, a cap learned by
 * one pass survives another that started before it was known, and a cap below a page the service
 * has served is dropped (the service sends more than that now).
 */
export async function savePaging(db: Queryable, paging: StoredPaging): Promise<void> {
  await db.query(
    `with merged as (
       select greatest(coalesce(p.longest_page, 0), $2::int) as longest, coalesce($1::int, p.page_cap) as cap
         from (select 1) one left join upstream_paging p on p.id = 1
     )
     insert into upstream_paging as p (id, page_cap, longest_page, candidate_length, candidate_list, updated_at)
     select 1, case when cap < longest then null else cap end, longest, $3, $4, now() from merged
     on conflict (id) do update
       set page_cap = excluded.page_cap, longest_page = excluded.longest_page,
           candidate_length = excluded.candidate_length, candidate_list = excluded.candidate_list, updated_at = now()
     where row(p.page_cap, p.longest_page, p.candidate_length, p.candidate_list)
           is distinct from row(excluded.page_cap, excluded.longest_page, excluded.candidate_length, excluded.candidate_list)`,
    [paging.cap, paging.longestPage, paging.candidate?.length ?? null, paging.candidate?.where ?? null],
  );
}

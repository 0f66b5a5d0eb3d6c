/**
 * `sync_state`: what a pass of one (group, type) resumes from: the incremental cursor and the open
 * full pass's checkpoint (invariant 3). What passes did is the history (`pass-history.ts`); status
 * reads both through the view `sync_status`.
 *
 * Every function takes a `Queryable` so the poller can write a page and its checkpoint in one
 * transaction (invariant 3: a cursor or checkpoint never moves ahead of the rows it covers).
 */
import { canonicalTimestampSql as iso, rowSelectSql, viewSelectSql, type RowOf } from '../db/columns.js';
import { syncState, syncStatus, upstreamPaging } from '../db/schema.js';
import type { Queryable } from '../ground/queryable.js';

export type { PassMode } from '../db/schema.js';

/** What a pair resumes from (its `sync_state` row) and what the history says of its last runs (its `sync_status` row). */
export type SyncStateRow = RowOf<typeof syncState> & Omit<(typeof syncStatus)['$inferSelect'], 'account' | 'groupId' | 'type' | 'cursor'>;

// Timestamps rendered by Postgres as canonical strings, never through JS Date.
const SELECT = `select ${rowSelectSql(syncState, { qualifier: 's' })}, ${viewSelectSql(syncStatus, { qualifier: 'v', omit: ['account', 'groupId', 'type', 'cursor'] })}
  from sync_state s join sync_status v on v.account = s.account and v.group_id = s.group_id and v.type = s.type
 where s.account = mirror_account()`;

export async function readSyncState(db: Queryable, groupId: string, type: string): Promise<SyncStateRow | null> {
  const { rows } = await db.query<SyncStateRow>(`${SELECT} and s.group_id = $1 and s.type = $2`, [groupId, type]);
  return rows[0] ?? null;
}

export async function listSyncStates(db: Queryable): Promise<SyncStateRow[]> {
  return (await db.query<SyncStateRow>(`${SELECT} order by s.group_id, s.type`)).rows;
}

/**
 * Every pair of the accounts named, deployment-wide: the statement names its accounts, so a pool of
 * any account, or of none, reads them all at once (the deployment's status, src/sync/status.ts).
 */
export async function listSyncStatesOf(db: Queryable, accounts: readonly string[]): Promise<SyncStateRow[]> {
  const { rows } = await db.query<SyncStateRow>(
    `select ${rowSelectSql(syncState, { qualifier: 's' })}, ${viewSelectSql(syncStatus, { qualifier: 'v', omit: ['account', 'groupId', 'type', 'cursor'] })}
       from sync_state s join sync_status v on v.account = s.account and v.group_id = s.group_id and v.type = s.type
      where s.account = any($1::text[])
      order by s.account, s.group_id, s.type`,
    [accounts],
  );
  return rows;
}

/** The pair's row, created with nothing to resume from when it has none. */
export async function ensureSyncState(db: Queryable, groupId: string, type: string): Promise<void> {
  await db.query(`insert into sync_state (group_id, type) values ($1, $2) on conflict (account, group_id, type) do nothing`, [
    groupId,
    type,
  ]);
}

/** Where an incremental pass reads from (null before the first pass). */
export async function readCursor(db: Queryable, groupId: string, type: string): Promise<string | null> {
  const { rows } = await db.query<{ cursor: string | null }>(
    `select ${iso('cursor')} as cursor from sync_state where account = mirror_account() and group_id = $1 and type = $2`,
    [groupId, type],
  );
  return rows[0]?.cursor ?? null;
}

/**
 * Moves the cursor to `maxUpdatedAt` after a pass committed everything it covers; it never moves back,
 * nor past `ceiling` (the service's now + the timezone margin), which also pulls a runaway one back.
 */
export async function advanceCursor(
  db: Queryable,
  groupId: string,
  type: string,
  maxUpdatedAt: string | null,
  ceiling: string | null,
): Promise<void> {
  await db.query(
    `update sync_state
        set cursor = least(case when $3::timestamptz is null then cursor
                                when cursor is null then $3::timestamptz
                                else greatest(cursor, $3::timestamptz) end,
                           coalesce($4::timestamptz, 'infinity'::timestamptz)),
            updated_at = now()
      where account = mirror_account() and group_id = $1 and type = $2`,
    [groupId, type, maxUpdatedAt, ceiling],
  );
}

/** A full pass that read its list to the end: nothing is left to resume. */
export async function closeFullPass(db: Queryable, groupId: string, type: string): Promise<void> {
  await db.query(
    `update sync_state
        set full_source = null, full_started_at = null, full_offset = null, full_tail_ids = null,
            full_continuous = null, full_cursor = null, full_pages = null, updated_at = now()
      where account = mirror_account() and group_id = $1 and type = $2`,
    [groupId, type],
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
 * Drops an open checkpoint another source left (SYNC_SOURCE changed mid-pass: its position means
 * nothing to this one), or any open one when `restart`: the pass opened next starts from the top.
 */
async function dropForeignCheckpoint(db: Queryable, groupId: string, type: string, source: 'legacy' | 'current', restart: boolean) {
  await db.query(
    `update sync_state
        set full_source = null, full_started_at = null, full_offset = null, full_tail_ids = null,
            full_continuous = null, full_cursor = null, full_pages = null, updated_at = now()
      where account = mirror_account() and group_id = $1 and type = $2 and full_source is not null and ($3 or full_source <> $4)`,
    [groupId, type, restart, source],
  );
}

/** Opens a legacy full pass (or keeps the open one): returns its start time and where to resume. */
export async function openFullPass(db: Queryable, groupId: string, type: string, opts: { restart?: boolean } = {}): Promise<OpenFullPass> {
  await ensureSyncState(db, groupId, type);
  await dropForeignCheckpoint(db, groupId, type, 'legacy', opts.restart ?? false);
  const { rows } = await db.query<{
    startedAt: string;
    offset: number;
    resumed: boolean;
    tailIds: string[] | null;
    continuous: boolean | null;
  }>(
    `update sync_state
        set full_source = 'legacy', full_started_at = coalesce(full_started_at, now()),
            full_continuous = case when full_source is null then true else full_continuous end,
            full_offset = coalesce(full_offset, 0), updated_at = now()
      where account = mirror_account() and group_id = $1 and type = $2
      returning ${iso('full_started_at')} as "startedAt", full_offset as "offset", full_offset > 0 as resumed,
                full_tail_ids as "tailIds", full_continuous as continuous`,
    [groupId, type],
  );
  const row = rows[0];
  if (!row) throw new Error(`sync_state row missing for group ${groupId} type ${type}`);
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
      where account = mirror_account() and group_id = $1 and type = $2`,
    [groupId, type, checkpoint.nextOffset, checkpoint.tailIds, checkpoint.continuous],
  );
}

/** Whether the open legacy full pass met no page it could not join (read when it ends: the pass is gap-free). */
export async function fullPassContinuous(db: Queryable, groupId: string, type: string): Promise<boolean> {
  const { rows } = await db.query<{ continuous: boolean | null }>(
    `select full_continuous as continuous from sync_state where account = mirror_account() and group_id = $1 and type = $2`,
    [groupId, type],
  );
  return rows[0]?.continuous === true;
}

// ---------------------------------------------------------------------------------------------
// Full passes of the current API: the checkpoint is the service's cursor (docs/upstream-current.md)

export interface OpenCursorPass {
  startedAt: string;
  /** Where to read next: a cursor the service handed out, null for the list's first page. */
  cursor: string | null;
  /** Pages committed so far. */
  pages: number;
}

/** Opens a full pass by cursor (or keeps the open one): its start time and where to resume. */
export async function openCursorPass(
  db: Queryable,
  groupId: string,
  type: string,
  opts: { restart?: boolean } = {},
): Promise<OpenCursorPass> {
  await ensureSyncState(db, groupId, type);
  await dropForeignCheckpoint(db, groupId, type, 'current', opts.restart ?? false);
  const { rows } = await db.query<OpenCursorPass>(
    `update sync_state
        set full_source = 'current', full_started_at = coalesce(full_started_at, now()),
            full_pages = coalesce(full_pages, 0), updated_at = now()
      where account = mirror_account() and group_id = $1 and type = $2
      returning ${iso('full_started_at')} as "startedAt", full_cursor as cursor, full_pages as pages`,
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
  await db.query(
    `update sync_state set full_cursor = $3, full_pages = $4, updated_at = now() where account = mirror_account() and group_id = $1 and type = $2`,
    [groupId, type, checkpoint.nextCursor, checkpoint.pages],
  );
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

const SELECT_PAGING = `select ${rowSelectSql(upstreamPaging, { omit: ['account', 'updatedAt'] })} from upstream_paging where account = mirror_account()`;

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
         from (select 1) one left join upstream_paging p on p.account = mirror_account()
     )
     insert into upstream_paging as p (page_cap, longest_page, candidate_length, candidate_list, updated_at)
     select case when cap < longest then null else cap end, longest, $3, $4, now() from merged
     on conflict (account) do update
       set page_cap = excluded.page_cap, longest_page = excluded.longest_page,
           candidate_length = excluded.candidate_length, candidate_list = excluded.candidate_list, updated_at = now()
     where row(p.page_cap, p.longest_page, p.candidate_length, p.candidate_list)
           is distinct from row(excluded.page_cap, excluded.longest_page, excluded.candidate_length, excluded.candidate_list)`,
    [paging.cap, paging.longestPage, paging.candidate?.length ?? null, paging.candidate?.where ?? null],
  );
}

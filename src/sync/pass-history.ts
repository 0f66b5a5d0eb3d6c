/**
 * `sync_passes`, the pass history (docs/architecture.md, "Pass history and the removal rule"): one
 * row per run of a pass or check of one (group, type), inserted when it starts and closed once when
 * it ends. The only writer of the table. The removal rule is one query over these rows
 * (`removalRule`), and so are the proof's plan (`proofPasses`), status and staleness (the view
 * `sync_status`).
 */
import { canonicalTimestampSql as iso } from '../db/columns.js';
import type { PassKind, PassTrigger, ReadSourceName, SubscriberType, SyncRunStatus } from '../db/schema.js';
import type { Queryable } from '../ground/queryable.js';
import type { TypeProof } from './decide.js';

export interface OpenedRow {
  groupId: string;
  type: SubscriberType;
  kind: PassKind;
  source: ReadSourceName;
  trigger: PassTrigger | null;
}

/**
 * Inserts the row of a run that starts now and returns its id. Rows of the pair a dead process left
 * running are closed first as failed: the pass lock is held, so nothing else runs this pair.
 */
export async function openRow(db: Queryable, row: OpenedRow): Promise<number> {
  await db.query(
    `update sync_passes set status = 'failed', ended_at = now(), error = 'the process running it stopped before it ended'
      where account = mirror_account() and group_id = $1 and type = $2 and status = 'running' and kind <> 'check'`,
    [row.groupId, row.type],
  );
  const { rows } = await db.query<{ id: string }>(
    `insert into sync_passes (group_id, type, kind, source, trigger, status) values ($1, $2, $3, $4, $5, 'running') returning id`,
    [row.groupId, row.type, row.kind, row.source, row.trigger],
  );
  return Number(rows[0]?.id);
}

/** What a run did, written when it ends. */
export interface ClosedRow {
  status: Exclude<SyncRunStatus, 'running'>;
  /** Full pass: when its listing began (a resumed pass: when it was first opened). */
  listedFrom?: string | null;
  complete?: boolean;
  gapFree?: boolean | null;
  /** Incremental pass: the earliest change time it certainly read (then it is a sweep since then). */
  readSince?: string | null;
  rowsSeen: number;
  rowsWritten: number;
  requests: number;
  upstreamCount?: number | null;
  futureRows?: number;
  stepBacks?: number;
  gaps?: number;
  error?: string | null;
}

export async function closeRow(db: Queryable, id: number, row: ClosedRow): Promise<void> {
  await db.query(
    `update sync_passes
        set status = $2, ended_at = now(), listed_from = $3, complete = $4, gap_free = $5, read_since = $6,
            rows_seen = $7, rows_written = $8, requests = $9, upstream_count = coalesce($10, upstream_count),
            future_rows = $11, step_backs = $12, gaps = $13, error = $14
      where id = $1 and account = mirror_account()`,
    [
      id,
      row.status,
      row.listedFrom ?? null,
      row.complete ?? false,
      row.gapFree ?? null,
      row.readSince ?? null,
      row.rowsSeen,
      row.rowsWritten,
      row.requests,
      row.upstreamCount ?? null,
      row.futureRows ?? 0,
      row.stepBacks ?? 0,
      row.gaps ?? 0,
      row.error === undefined || row.error === null ? null : row.error.slice(0, 2000),
    ],
  );
}

/** The service's count of the list, read while the run goes on (status shows drift and progress from it). */
export async function saveUpstreamCount(db: Queryable, id: number, count: number): Promise<void> {
  await db.query(`update sync_passes set upstream_count = $2 where id = $1 and account = mirror_account()`, [id, count]);
}

/** What the removal rule ended, written on the row whose recording settled it (in the same transaction as the close). */
export async function saveRemovals(db: Queryable, id: number, removed: number, proof: readonly number[]): Promise<void> {
  await db.query(`update sync_passes set removed = $2, proof = $3::bigint[] where id = $1 and account = mirror_account()`, [
    id,
    removed,
    proof,
  ]);
}

/** When the removal rule may end members, and the rows that prove it. */
export interface RemovalProof {
  /** Members not listed since this time, with no fact as new as its second, are ended. */
  cutoff: string;
  /** The rows counted: two passes of every type, and each type's sweep where one is needed. */
  proof: number[];
}

/**
 * The removal rule (docs/architecture.md, invariant 11), as one query over the history: for every
 * type of the group, its last two complete, gap-free full passes; the cutoff is the earliest start
 * of the earlier of each type's two. With `sweeps` (a source that reads what changed since a time,
 * in a group of several types), every type also needs a sweep that started after the earlier pass
 * of every type ended and read every change since the cutoff. Null while anything is missing.
 */
export async function removalRule(
  db: Queryable,
  groupId: string,
  types: readonly string[],
  opts: { sweeps: boolean },
): Promise<RemovalProof | null> {
  const { rows } = await db.query<{ cutoff: string | null; types: number; swept: number; proof: string[] }>(
    `with proof as (
       select id, type, listed_from, ended_at,
              row_number() over (partition by type order by listed_from desc, id desc) as n
         from sync_passes
        where account = mirror_account() and group_id = $1 and type = any($2::text[]) and kind = 'full' and status = 'succeeded'
          and complete and gap_free
     ),
     rounds as (
       select min(listed_from) filter (where n = 2) as cutoff,
              max(ended_at) filter (where n = 2) as first_round_ended,
              count(*) filter (where n = 2) as types,
              coalesce(array_agg(id order by n desc, type) filter (where n <= 2), '{}') as passes
         from proof
     ),
     sweeps as (
       select distinct on (s.type) s.id
         from sync_passes s, rounds r
        where s.account = mirror_account() and s.group_id = $1 and s.type = any($2::text[]) and s.kind = 'incremental'
          and s.status = 'succeeded'
          and s.started_at >= r.first_round_ended and s.read_since <= date_trunc('second', r.cutoff)
        order by s.type, s.id
     )
     select ${iso('r.cutoff')} as cutoff, r.types::int as types, (select count(*) from sweeps)::int as swept,
            r.passes || array(select id from sweeps) as proof
       from rounds r`,
    [groupId, types],
  );
  const row = rows[0];
  if (!row || row.cutoff === null || row.types < types.length) return null;
  const needsSweeps = opts.sweeps && types.length > 1;
  if (needsSweeps && row.swept < types.length) return null;
  const proof = row.proof.map(Number);
  return { cutoff: row.cutoff, proof: needsSweeps ? proof : proof.slice(0, 2 * types.length) };
}

/** Each type's last two complete, gap-free full passes (epoch ms of their listing's start), for planning the proof (`TypeProof`, decide.ts). */
export async function proofPasses<T extends string>(db: Queryable, groupId: string, types: readonly T[]): Promise<Array<TypeProof<T>>> {
  const { rows } = await db.query<{ type: string; n: number; at: string }>(
    `select type, n::int as n, ${iso('listed_from')} as at
       from (select type, listed_from, row_number() over (partition by type order by listed_from desc, id desc) as n
               from sync_passes
              where account = mirror_account() and group_id = $1 and type = any($2::text[]) and kind = 'full'
                and status = 'succeeded' and complete and gap_free) p
      where n <= 2`,
    [groupId, types],
  );
  const at = (type: string, n: number) => {
    const found = rows.find((r) => r.type === type && r.n === n);
    return found ? Date.parse(found.at) : null;
  };
  return types.map((type) => ({ type, proofStartedAt: at(type, 1), prevProofStartedAt: at(type, 2) }));
}

/** The last complete, gap-free full pass of each type of the group: what a candidate was missed by. */
export async function lastProvingPasses(
  db: Queryable,
  groupId: string,
  types: readonly string[],
): Promise<Array<{ id: number; type: string; listedFrom: string; requests: number }>> {
  const { rows } = await db.query<{ id: string; type: string; listedFrom: string; requests: number }>(
    `select distinct on (type) id, type, ${iso('listed_from')} as "listedFrom", requests
       from sync_passes
      where account = mirror_account() and group_id = $1 and type = any($2::text[]) and kind = 'full' and status = 'succeeded'
        and complete and gap_free
      order by type, listed_from desc, id desc`,
    [groupId, types],
  );
  return rows.map((r) => ({ ...r, id: Number(r.id) }));
}

/**
 * Drops the pair's rows that ended more than `retentionMs` ago, except what the removal rule and
 * status still read: its last two complete, gap-free full passes and every row after the earlier of
 * them, and its newest row. Per pair, after each of its passes, so it reads one index range.
 * Returns the rows dropped.
 */
export async function pruneHistory(db: Queryable, groupId: string, type: string, retentionMs: number): Promise<number> {
  const result = await db.query(
    `with keep_from as (
       select least(
                (select max(id) from sync_passes where account = mirror_account() and group_id = $1 and type = $2),
                (select min(id) from (select id from sync_passes
                                       where account = mirror_account() and group_id = $1 and type = $2 and kind = 'full'
                                         and status = 'succeeded' and complete and gap_free
                                       order by listed_from desc, id desc limit 2) p)) as id
     )
     delete from sync_passes s using keep_from k
      where s.account = mirror_account() and s.group_id = $1 and s.type = $2 and s.id < k.id
        and s.ended_at < now() - make_interval(secs => $3::float8 / 1000)`,
    [groupId, type, retentionMs],
  );
  return result.rowCount ?? 0;
}

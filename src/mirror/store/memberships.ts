/**
 * `group_members`: membership facts ordered by their upstream time (`source_updated_at`), and the
 * removals only a complete full pass may infer.
 */
import { canonicalTimestampSql } from '../../db/columns.js';
import type { MirrorSource } from '../../db/schema.js';
import { run } from './executor.js';
import type { Queryable } from '../../ground/queryable.js';
import { assertId, assertTimestamp, assertVia, newestPerKey, type UpsertCounts } from './values.js';

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
 * counted as updated. The probe is correlated on the written row's account, not on the session's:
 * on tables without statistics for the account (every new database, an install just upgraded) the
 * planner took the two constant filters for one row and compared the whole group with every row of
 * the page (350 ms a page against 10 ms).
 */
const MEMBERSHIP_UPSERT_SQL = `
with written as (
  insert into group_members as m
    (group_id, subscriber_id, type, added_at, removed_at, source_updated_at, last_seen_at, mirrored_at, mirrored_via)
  select $1, subscriber_id, type, at, null, at, $5::timestamptz, now(), $6
  from unnest($2::text[], $3::text[], $4::timestamptz[]) as t(subscriber_id, type, at)
  on conflict (account, group_id, subscriber_id) do update set
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
                        then excluded.mirrored_via else m.mirrored_via end,
    ended_by = case when m.source_updated_at is null or excluded.source_updated_at >= m.source_updated_at
                    then null else m.ended_by end
  where ((m.source_updated_at is null or excluded.source_updated_at >= m.source_updated_at)
         and (row(coalesce(excluded.type, m.type), excluded.source_updated_at) is distinct from row(m.type, m.source_updated_at)
              or m.removed_at is not null or m.added_at is null))
     or excluded.last_seen_at > m.last_seen_at
     or (excluded.last_seen_at is not null and m.last_seen_at is null)
  returning m.account, m.subscriber_id, (m.xmax = 0) as inserted, m.type, m.removed_at, m.source_updated_at
)
select
  (select count(*) from written where inserted)::int as inserted,
  (select count(*) from written w
    where not w.inserted
      and not exists (select 1 from group_members p
                      where p.account = w.account and p.group_id = $1 and p.subscriber_id = w.subscriber_id
                        and row(p.type, p.removed_at, p.source_updated_at)
                            is not distinct from row(w.type, w.removed_at, w.source_updated_at)))::int as updated,
  (select count(*) from unnest($2::text[], $4::timestamptz[]) as i(subscriber_id, at)
    where (select p.source_updated_at from group_members p
           where p.account = mirror_account() and p.group_id = $1 and p.subscriber_id = i.subscriber_id) > i.at)::int as skipped`;

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
  exec: Queryable,
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
  const kept = newestPerKey(
    members,
    (m) => m.subscriberId,
    (m) => m.at,
  ).map((i) => members[i] as MemberInput);
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
on conflict (account, group_id, subscriber_id) do update set
  removed_at = excluded.removed_at,
  source_updated_at = excluded.source_updated_at,
  mirrored_at = now(),
  mirrored_via = excluded.mirrored_via,
  ended_by = null
where (m.source_updated_at is null or excluded.source_updated_at >= m.source_updated_at)
  and (m.removed_at is null or m.source_updated_at is distinct from excluded.source_updated_at)`;

/**
 * Records that `subscriberId` left `groupId` at upstream time `at` (`subscriber.removed_from_group`):
 * sets `removed_at = at` unless a newer membership fact is stored. When the membership is unknown a
 * removed row is still written, so an add that is older but arrives later cannot resurrect it.
 * Returns true when something changed (false for an older or repeated removal).
 */
export async function removeMembership(
  exec: Queryable,
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
   set removed_at = $2::timestamptz, source_updated_at = $2::timestamptz, mirrored_at = now(), mirrored_via = $3, ended_by = null
 where account = mirror_account() and subscriber_id = $1 and removed_at is null
   and (source_updated_at is null or source_updated_at <= $2::timestamptz)`;

/**
 * Ends every current membership of `subscriberId` at upstream time `at` (`subscriber.deleted`: a
 * deleted subscriber leaves every list, and the payload names no group). Same guard as
 * {@link removeMembership}: a membership whose newest fact is newer than `at` (re-added after a
 * restore) is kept, and the ended rows take `at` as their fact time, so an older add arriving later
 * cannot resurrect them. Memberships the mirror does not know yet are not written (no group is
 * known); the caller guards late adds against the stored deletion. Returns the number ended.
 */
export async function endMemberships(exec: Queryable, subscriberId: string, at: string, via: MirrorSource): Promise<number> {
  assertId(subscriberId, 'subscriberId');
  assertTimestamp(at, 'at');
  assertVia(via);
  const res = await run(exec, MEMBERSHIPS_END_SQL, [subscriberId, at, via]);
  return res.rowCount;
}

/**
 * Ends every current membership of `groupId` (of the given `types`) that no full pass listed since
 * `seenBefore`: `last_seen_at` null or older than `seenBefore`, and no membership fact in or after
 * the second of `seenBefore` (so a webhook add that happened meanwhile is kept; the service stamps
 * changes to the second, so a change made just after `seenBefore` carries a time just before it).
 * Sets `removed_at = at` (the caller's completion time), `ended_by` (the history row whose removal
 * rule proved it: docs/sql.md) and leaves `source_updated_at` alone: the inference has no upstream
 * time, so any later listing of the member re-adds it. The caller chooses `seenBefore` so that it is
 * proof (invariant 11: `removalRule` in src/sync/pass-history.ts).
 *
 * Passes are per (group × type): give `types` (or `type`) to consider only members last listed under
 * them, otherwise the `active` pass would end every `unsubscribed` membership; `ids` narrows it to
 * those members (a check of candidates).
 * Returns the number of memberships ended.
 */
export async function removeMembersNotSeenSince(
  exec: Queryable,
  groupId: string,
  seenBefore: string,
  at: string,
  opts: { types?: readonly string[]; type?: string; via?: MirrorSource; endedBy?: number | null; ids?: readonly string[] } = {},
): Promise<number> {
  assertId(groupId, 'groupId');
  assertTimestamp(seenBefore, 'seenBefore');
  assertTimestamp(at, 'at');
  const via = opts.via ?? 'poll';
  assertVia(via);
  const types = opts.types ?? (opts.type === undefined ? null : [opts.type]);
  opts.ids?.forEach((id, i) => assertId(id, `ids[${i}]`));
  const res = await run(
    exec,
    `update group_members set removed_at = $3::timestamptz, mirrored_at = now(), mirrored_via = $5, ended_by = $6
     where account = mirror_account() and group_id = $1 and removed_at is null
       and (last_seen_at is null or last_seen_at < $2::timestamptz)
       and (source_updated_at is null or source_updated_at < date_trunc('second', $2::timestamptz))
       and ($4::text[] is null or type = any($4::text[]))
       and ($7::text[] is null or subscriber_id = any($7::text[]))`,
    [groupId, seenBefore, at, types, via, opts.endedBy ?? null, opts.ids ?? null],
  );
  return res.rowCount;
}

/** Current members one complete full pass did not list: what a second pass must confirm before they are ended. */
export interface AwaitingProof {
  count: number;
  /** The latest `last_seen_at` among them (null when none, or never seen by a full pass). */
  lastSeenAt: string | null;
}

/**
 * Current memberships of `groupId` (of `type` when given) that no full pass listed since `seenBefore`
 * and no newer fact covers: the same condition as {@link removeMembersNotSeenSince}, counted instead
 * of ended.
 */
export async function membersAwaitingProof(
  exec: Queryable,
  groupId: string,
  seenBefore: string,
  opts: { type?: string } = {},
): Promise<AwaitingProof> {
  assertId(groupId, 'groupId');
  assertTimestamp(seenBefore, 'seenBefore');
  const res = await exec.query<{ count: number; lastSeenAt: string | null }>(
    `select count(*)::int as count,
            ${canonicalTimestampSql('max(last_seen_at)')} as "lastSeenAt"
       from group_members
      where account = mirror_account() and group_id = $1 and removed_at is null
        and (last_seen_at is null or last_seen_at < $2::timestamptz)
        and (source_updated_at is null or source_updated_at < date_trunc('second', $2::timestamptz))
        and ($3::text is null or type = $3::text)`,
    [groupId, seenBefore, opts.type ?? null],
  );
  return res.rows[0] ?? { count: 0, lastSeenAt: null };
}

/**
 * Up to `limit` ids of current members of `groupId` and `type` that no full pass listed since
 * `seenBefore` and no newer fact covers ({@link membersAwaitingProof}'s condition), in id order.
 */
export async function awaitingProofIds(
  exec: Queryable,
  groupId: string,
  type: string,
  seenBefore: string,
  limit: number,
): Promise<string[]> {
  assertId(groupId, 'groupId');
  assertTimestamp(seenBefore, 'seenBefore');
  const res = await exec.query<{ id: string }>(
    `select subscriber_id as id
       from group_members
      where account = mirror_account() and group_id = $1 and removed_at is null and type = $3
        and (last_seen_at is null or last_seen_at < $2::timestamptz)
        and (source_updated_at is null or source_updated_at < date_trunc('second', $2::timestamptz))
      order by subscriber_id
      limit $4`,
    [groupId, seenBefore, type, limit],
  );
  return res.rows.map((r) => r.id);
}

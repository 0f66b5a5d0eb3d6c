/**
 * Erasure that does not depend on one webhook (docs/security.md, "Personal data and erasure").
 *
 * A forgotten subscriber is erased by the store when its `forget_at` arrives (webhook only: the poll
 * never carries it). Two more paths, run by the worker on a timer:
 * - a subscriber that every configured group × type's latest complete reconciliation found in no
 *   configured group, and that has been out of them for longer than the period, has its personal
 *   columns erased (id, status, counters and timestamps stay; `mirrored_at` too);
 * - every erased subscriber (either reason) is logged in `erasures`, so the stored deliveries that
 *   carry its data are redacted once (`src/webhooks/redact.ts`).
 * And one by hand: `subscriber-mirror erase` (an operator answering a data-subject request) erases a
 * subscriber as the service's forget does and logs it with the reason `request` (`eraseOnRequest`);
 * what arrives for it later stays erased (`erasedOnRequestSql`).
 */
import { eraseSetSql, holdsAnySql, SUBSCRIBER_CONTENT, SUBSCRIBER_DATA_COLUMNS } from '../db/subscriber-columns.js';
import type { Queryable } from '../ground/queryable.js';

/**
 * Whether the subscriber `idSql` of the session's account was erased on request
 * (`subscriber-mirror erase`): its personal data stays erased whatever arrives later, whichever path
 * brings it (the store's upsert, history's late versions, an apply's redaction). The ids are read
 * once per statement (an InitPlan) and each row compared with that short list (operators erase by
 * hand); `in (select …)` in a select list is planned as a subplan that scans `erasures` again for
 * every row written.
 */
export function erasedOnRequestSql(idSql: string): string {
  return `(${idSql} = any(array(select e.subscriber_id from erasures e where e.account = mirror_account() and e.reason = 'request')))`;
}

/** The personal columns (the registry, `src/db/schema.ts`): of the current row, and of past versions. */
const PERSONAL = SUBSCRIBER_DATA_COLUMNS.filter((c) => c.personal);
const PERSONAL_CONTENT = SUBSCRIBER_CONTENT.filter((c) => c.personal);
const ERASE_SET = eraseSetSql(PERSONAL);
const HAS_PERSONAL_DATA = holdsAnySql('s', PERSONAL);

/**
 * Who has been out of every configured group for longer than the period, confirmed by a complete
 * reconciliation: each configured group × type has completed a full pass, and the oldest of those
 * completions is not before the subscriber left (its latest `removed_at` there, or when it was last
 * mirrored if it never was a member). A subscriber back in any configured group is never erased.
 */
const OUT_OF_GROUPS_SQL = `
with complete as (
  select min(last_full_completed_at) as at
    from sync_status
   where account = mirror_account() and group_id = any($1::text[]) and type = any($2::text[])
  having count(last_full_completed_at) = cardinality($1::text[]) * cardinality($2::text[])
),
candidates as (
  select s.id
    from subscribers s
    cross join complete c
    cross join lateral (
      select max(gm.removed_at) as left_at, bool_or(gm.removed_at is null) as member
        from group_members gm
       where gm.account = s.account and gm.subscriber_id = s.id and gm.group_id = any($1::text[])
    ) m
   where s.account = mirror_account()
     and ${HAS_PERSONAL_DATA}
     and not coalesce(m.member, false)
     and coalesce(m.left_at, s.mirrored_at) <= c.at
     and coalesce(m.left_at, s.mirrored_at) < now() - make_interval(secs => $3::float8 / 1000)
   limit $4
),
erased as (
  update subscribers s set ${ERASE_SET}
    from candidates where s.account = mirror_account() and s.id = candidates.id
  returning s.id
),
-- History: the same personal columns in every past version (the current one is the
-- subscribers row above).
erased_history as (
  update subscriber_versions_past v set ${eraseSetSql(PERSONAL_CONTENT)}
    from candidates where v.account = mirror_account() and v.subscriber_id = candidates.id
     and ${holdsAnySql('v', PERSONAL_CONTENT)}
  returning 1
)
insert into erasures (subscriber_id, reason)
select id, 'out_of_groups' from erased
on conflict (account, subscriber_id) do update
  set reason = excluded.reason, erased_at = now(), deliveries_redacted_at = null
returning subscriber_id`;

export interface OutOfGroupsOptions {
  groups: readonly string[];
  types: readonly string[];
  /** Out of every configured group for longer than this (ERASE_OUT_OF_GROUPS_AFTER); 0: never. */
  afterMs: number;
  batch?: number;
}

/** Erases the personal data of subscribers out of every configured group past the period; returns their ids. */
export async function eraseOutOfGroups(pool: Queryable, options: OutOfGroupsOptions): Promise<string[]> {
  if (options.afterMs <= 0 || options.groups.length === 0 || options.types.length === 0) return [];
  const batch = options.batch ?? 1_000;
  const ids: string[] = [];
  for (;;) {
    const { rows } = await pool.query(OUT_OF_GROUPS_SQL, [options.groups, options.types, options.afterMs, batch]);
    ids.push(...(rows as Array<{ subscriber_id: string }>).map((r) => r.subscriber_id));
    if (rows.length < batch) return ids;
  }
}

/**
 * Logs forgotten subscribers not logged yet (or logged out of groups, whose deliveries must be
 * redacted again); returns how many. One erased on request is logged already.
 */
export async function logForgotten(pool: Queryable): Promise<number> {
  const { rowCount } = await pool.query(`
insert into erasures (subscriber_id, reason)
select s.id, 'forget' from subscribers s
 where s.account = mirror_account() and s.forget_at is not null
   and not exists (select 1 from erasures e where e.account = s.account and e.subscriber_id = s.id and e.reason in ('forget', 'request'))
on conflict (account, subscriber_id) do update
  set reason = excluded.reason, erased_at = now(), deliveries_redacted_at = null`);
  return rowCount ?? 0;
}

/** Erased subscribers whose stored deliveries are not redacted yet, at most `limit`. */
export async function awaitingRedaction(pool: Queryable, limit: number): Promise<string[]> {
  const { rows } = await pool.query(
    'select subscriber_id from erasures where account = mirror_account() and deliveries_redacted_at is null order by erased_at, subscriber_id limit $1',
    [limit],
  );
  return (rows as Array<{ subscriber_id: string }>).map((r) => r.subscriber_id);
}

/** Marks the deliveries of `ids` redacted as of `at` (the database's time when the run began). */
export async function markRedacted(pool: Queryable, ids: readonly string[], at: string): Promise<void> {
  await pool.query('update erasures set deliveries_redacted_at = $2 where account = mirror_account() and subscriber_id = any($1::text[])', [
    ids,
    at,
  ]);
}

/** Every erased subscriber checked before `at` has been checked again as of `at`. */
export async function markChecked(pool: Queryable, at: string): Promise<number> {
  const { rowCount } = await pool.query(
    'update erasures set deliveries_redacted_at = $1 where account = mirror_account() and deliveries_redacted_at < $1',
    [at],
  );
  return rowCount ?? 0;
}

/** The database's clock, as text that keeps its microseconds. */
export async function databaseNow(pool: Queryable): Promise<string> {
  const { rows } = await pool.query<{ now: string }>('select now()::text as now');
  return (rows[0] as { now: string }).now;
}

/**
 * A query listing which of `ids` are forgotten (`forget_at` set, or erased on request), as SQL text with the ids inlined as
 * literals: an apply runs it inside its final round trip, so the common case (nobody forgotten)
 * costs nothing more. Its one row has `forgotten`, a text array.
 */
export function forgottenAmongSql(literal: (text: string) => string, ids: readonly string[]): string {
  const list = ids.length === 0 ? `'{}'::text[]` : `array[${ids.map(literal).join(', ')}]::text[]`;
  return `select array(select id from subscribers where account = mirror_account() and id = any(${list}) and (forget_at is not null or ${erasedOnRequestSql('id')})) as forgotten`;
}

// ---------------------------------------------------------------------------------------------
// Erasure on request (`subscriber-mirror erase`)

/** The subscribers whose current row or a past version holds `email`, in any case. */
export async function subscribersWithEmail(pool: Queryable, email: string): Promise<string[]> {
  const { rows } = await pool.query<{ id: string }>(
    `select id from subscribers where account = mirror_account() and lower(email) = lower($1)
     union select subscriber_id from subscriber_versions_past where account = mirror_account() and lower(email) = lower($1)
     order by 1`,
    [email],
  );
  return rows.map((r) => r.id);
}

/** Which of `ids` have a row in `subscribers`. */
export async function mirroredSubscribers(pool: Queryable, ids: readonly string[]): Promise<string[]> {
  const { rows } = await pool.query<{ id: string }>(
    'select id from subscribers where account = mirror_account() and id = any($1::text[]) order by id',
    [ids],
  );
  return rows.map((r) => r.id);
}

/**
 * The forget's erasure, by hand: the personal columns of each of `ids` emptied (id, status, counters
 * and timestamps stay), and every id logged in `erasures` with the reason `request` (ids only) unless
 * a forget is logged for it already. From then on its personal data stays erased whatever arrives
 * ({@link erasedOnRequestSql}); `forget_at` stays the service's. Returns the rows that still held
 * personal data and the ids newly logged; a second call changes nothing.
 */
export async function eraseOnRequest(exec: Queryable, ids: readonly string[]): Promise<{ subscribers: number; logged: string[] }> {
  const { rowCount } = await exec.query(
    `update subscribers s set ${ERASE_SET} where s.account = mirror_account() and s.id = any($1::text[]) and ${HAS_PERSONAL_DATA}`,
    [ids],
  );
  const { rows: logged } = await exec.query<{ subscriber_id: string }>(
    `insert into erasures (subscriber_id, reason) select unnest($1::text[]), 'request'
     on conflict (account, subscriber_id) do update set reason = excluded.reason, erased_at = now(), deliveries_redacted_at = null
      where erasures.reason = 'out_of_groups'
     returning subscriber_id`,
    [ids],
  );
  return { subscribers: rowCount ?? 0, logged: logged.map((r) => r.subscriber_id) };
}

/** Marks the stored deliveries of `ids` redacted now, where not marked yet (`eraseOnRequest` redacts them in its transaction). */
export async function markRedactedNow(exec: Queryable, ids: readonly string[]): Promise<void> {
  await exec.query(
    'update erasures set deliveries_redacted_at = now() where account = mirror_account() and subscriber_id = any($1::text[]) and deliveries_redacted_at is null',
    [ids],
  );
}

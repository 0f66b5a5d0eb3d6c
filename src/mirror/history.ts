/**
 * History (docs/sql.md, "History"): every version of a subscriber, kept as the current `subscribers` row plus
 * `subscriber_versions_past` (read together through the `subscriber_versions` view), written from
 * the subscriber upsert in its transaction. Membership periods (`group_membership_periods`) are
 * kept by a trigger on `group_members` (migration `0010_history_functions`), so every path that
 * starts or ends a membership is followed.
 *
 * Why not a trigger on `subscribers`: the guarded upsert skips versions older than the stored one,
 * and history must keep them (a late version goes to its place in the timeline). So the store hands
 * every row it did not write (older than the stored one, or superseded within its batch) to
 * {@link recordVersions}. A row the upsert replaces moves to `subscriber_versions_past` through a
 * statement-level trigger on `subscribers` (migration `0010_history_functions`): its transition
 * table holds the rows exactly as they were replaced, also when a concurrent writer changed them
 * after our statement's snapshot; a fresh subscriber costs no history write at all.
 *
 * The timeline of a subscriber is the set of versions seen, ordered by their time (`version_at`,
 * invariant 2's {@link versionTime}). A late version is inserted only if it differs from the one
 * before it, and the one after it is dropped if it now equals it, so the timeline does not depend
 * on arrival order. Rows are only ever inserted (or deleted): `valid_to` is derived by the view.
 *
 * Poll versions are coarse: legacy times, and the current API's list dates, have whole seconds and a
 * listing shows only the last state of that second (via 'poll' and 'current' alike). So a poll
 * version is not recorded when a webhook version of the same second is known, and a webhook
 * version replaces poll versions of its second that are earlier than it.
 */
import { erasedSql, eraseSetSql, holdsAnySql, SUBSCRIBER_CONTENT } from '../db/subscriber-columns.js';
import type { SubscriberRow } from './normalize.js';
import { jsonbArrayFromParam, arrayLiteral } from './pg-params.js';
import { run } from './store/executor.js';
import type { Queryable } from '../ground/queryable.js';
import { versionTime } from './version.js';
import { erasedOnRequestSql } from './erasure.js';

// ---------------------------------------------------------------------------------------------
// Settings

export interface HistorySettings {
  /** HISTORY: record versions and membership periods (default on). */
  enabled: boolean;
}

let settings: HistorySettings = { enabled: true };

/** Whether the store records versions in this process. */
export function historyEnabled(): boolean {
  return settings.enabled;
}

/**
 * Applies HISTORY: this process's subscriber upserts record versions or not, and the membership
 * trigger (which every writer's transaction runs) reads the same switch from `history_settings`.
 */
export async function configureHistory(exec: Queryable, next: HistorySettings): Promise<void> {
  settings = { ...next };
  await run(exec, `update history_settings set enabled = $1 where id and enabled is distinct from $1`, [next.enabled]);
}

// ---------------------------------------------------------------------------------------------
// Subscriber versions

/** The content columns of `subscriber_versions`, in table order (the registry in `src/db/schema.ts`). */
export const VERSION_CONTENT = SUBSCRIBER_CONTENT;

function contentMask(row: SubscriberRow): number {
  let mask = 0;
  VERSION_CONTENT.forEach((c, i) => {
    if (row.provided.includes(c.field)) mask |= 2 ** i;
  });
  return mask;
}

const versionSqlCache = new Map<number, string>();

/**
 * One statement placing at most one version per subscriber (see the module note). Columns the row
 * did not provide take the previous version's value. `fields` is the payload's object as sent (not
 * merged key by key as in `subscribers`: a merge would make a version depend on arrival order).
 */
function versionSql(mask: number): string {
  const cached = versionSqlCache.get(mask);
  if (cached) return cached;
  const text = versionStatement(mask);
  versionSqlCache.set(mask, text);
  return text;
}

/**
 * The content columns of the version placed (in `versionSql`'s `c`): what the row provided, else the
 * previous version's value; personal data erased when the subscriber is forgotten or being forgotten.
 */
function mergedContent(mask: number): string[] {
  const provided = (i: number) => (mask & (2 ** i)) !== 0;
  const forgetIndex = VERSION_CONTENT.findIndex((c) => c.field === 'forgetAt');
  const forgetExpr = provided(forgetIndex) ? 'coalesce(c.forget_at, c.p_forget_at)' : 'c.p_forget_at';
  return VERSION_CONTENT.map((c, i) => {
    let value: string;
    if (c.type === 'jsonb') value = provided(i) ? `c.${c.column}` : `coalesce(c.p_${c.column}, '{}'::jsonb)`;
    else if (c.field === 'forgetAt') value = forgetExpr;
    else value = provided(i) ? `c.${c.column}` : `c.p_${c.column}`;
    if (c.personal) value = `case when ${forgetExpr} is not null or c.forgotten then ${erasedSql(c)} else ${value} end`;
    return `${value} as ${c.column}`;
  });
}

/** The statement `versionSql` caches: mostly one SQL text, its column lists spelled from the registry. */
function versionStatement(mask: number): string {
  const cols = VERSION_CONTENT.map((c) => c.column);
  const unnest = VERSION_CONTENT.map((c, i) => (c.type === 'jsonb' ? jsonbArrayFromParam(`$${i + 4}`) : `$${i + 4}::${c.type}[]`));
  const merged = mergedContent(mask);
  const row = (prefix: string) => `row(${cols.map((c) => `${prefix}${c}`).join(', ')})`;
  return `
with i as (
  select * from unnest($1::text[], $2::timestamptz[], $3::text[], ${unnest.join(', ')})
    as t(subscriber_id, valid_from, via, ${cols.join(', ')})
),
c as (
  select i.*,
         p.valid_from as p_from, ${cols.map((col) => `p.${col} as p_${col}`).join(', ')},
         n.valid_from as n_from, ${cols.map((col) => `n.${col} as n_${col}`).join(', ')},
         (coalesce((select s.forget_at is not null from subscribers s where s.account = mirror_account() and s.id = i.subscriber_id), false)
           or ${erasedOnRequestSql('i.subscriber_id')}) as forgotten,
         (select s.version_at from subscribers s where s.account = mirror_account() and s.id = i.subscriber_id) as current_from,
         (i.via in ('poll', 'current') and (
           exists (select 1 from subscriber_versions_past w
                    where w.account = mirror_account() and w.subscriber_id = i.subscriber_id and w.via = 'webhook'
                      and w.valid_from >= i.valid_from and w.valid_from < i.valid_from + interval '1 second')
           or exists (select 1 from subscribers w
                       where w.account = mirror_account() and w.id = i.subscriber_id and w.mirrored_via = 'webhook'
                         and w.version_at >= i.valid_from and w.version_at < i.valid_from + interval '1 second'))) as coarse
  from i
  left join lateral (
    select * from subscriber_versions_past v
     where v.account = mirror_account() and v.subscriber_id = i.subscriber_id and v.valid_from <= i.valid_from
       and not (i.via = 'webhook' and v.via in ('poll', 'current')
                and v.valid_from >= date_trunc('second', i.valid_from) and v.valid_from < i.valid_from)
     order by v.valid_from desc limit 1) p on true
  left join lateral (
    select * from subscriber_versions_past v
     where v.account = mirror_account() and v.subscriber_id = i.subscriber_id and v.valid_from > i.valid_from
     order by v.valid_from limit 1) n on true
),
m as (
  select c.subscriber_id, c.valid_from, c.via, c.p_from, c.n_from, c.coarse, c.current_from,
         ${cols.map((col) => `c.p_${col}`).join(', ')}, ${cols.map((col) => `c.n_${col}`).join(', ')},
         ${merged.join(',\n         ')}
  from c
),
f as (
  select m.*,
         (m.p_from is not null and ${row('m.')} is not distinct from ${row('m.p_')}) as p_same,
         (m.n_from is not null and ${row('m.')} is not distinct from ${row('m.n_')}) as n_same
  -- The current version is the subscribers row: a row of its time (or later) is no past version.
  from m where not m.coarse and (m.current_from is null or m.valid_from < m.current_from)
),
tied as (
  update subscriber_versions_past v
     set ${cols.map((col) => `${col} = f.${col}`).join(', ')}, via = f.via, recorded_at = now()
    from f
   where f.p_from = f.valid_from and not f.p_same
     and v.account = mirror_account() and v.subscriber_id = f.subscriber_id and v.valid_from = f.p_from
  returning 1
),
inserted as (
  insert into subscriber_versions_past (subscriber_id, valid_from, via, recorded_at, ${cols.join(', ')})
  select subscriber_id, valid_from, via, now(), ${cols.join(', ')}
  from f where f.p_from is distinct from f.valid_from and not f.p_same
  returning 1
),
dropped as (
  delete from subscriber_versions_past v using f
   where f.n_same and not f.p_same and f.p_from is distinct from f.valid_from
     and v.account = mirror_account() and v.subscriber_id = f.subscriber_id and v.valid_from = f.n_from
  returning 1
),
superseded as (
  delete from subscriber_versions_past v using i
   where i.via = 'webhook' and v.account = mirror_account() and v.subscriber_id = i.subscriber_id and v.via in ('poll', 'current')
     and v.valid_from >= date_trunc('second', i.valid_from) and v.valid_from < i.valid_from
  returning 1
)
select (select count(*) from inserted)::int + (select count(*) from tied)::int as written`;
}

function versionParams(rows: readonly { row: SubscriberRow; at: string }[]): unknown[] {
  const params: unknown[] = [
    arrayLiteral(rows.map((r) => r.row.values.id)),
    arrayLiteral(rows.map((r) => r.at)),
    arrayLiteral(rows.map((r) => r.row.via)),
  ];
  for (const c of VERSION_CONTENT) {
    const column = rows.map((r) => r.row.values[c.field]);
    params.push(c.type === 'jsonb' ? JSON.stringify(column.map((v) => v ?? {})) : arrayLiteral(column));
  }
  return params;
}

/**
 * Places every row as a version in its subscriber's timeline (older ones included), on `exec`'s
 * transaction. Rows of one subscriber are placed in time order, one statement per round; a row with
 * the same subscriber and time as a later one in `rows` is dropped (the later arrival wins, as in
 * the upsert). Returns the number of versions written. Does nothing when HISTORY is off.
 */
export async function recordVersions(exec: Queryable, rows: readonly SubscriberRow[]): Promise<number> {
  if (!settings.enabled || rows.length === 0) return 0;
  const byKey = new Map<string, { row: SubscriberRow; at: string }>();
  for (const row of rows) {
    const at = versionTime(row.values);
    const key = `${row.values.id}\u0000${at}`;
    byKey.delete(key);
    byKey.set(key, { row, at });
  }
  // Round k holds the k-th version (by time) of each subscriber: one per subscriber per statement.
  const perId = new Map<string, { row: SubscriberRow; at: string }[]>();
  for (const v of byKey.values()) {
    const list = perId.get(v.row.values.id);
    if (list) list.push(v);
    else perId.set(v.row.values.id, [v]);
  }
  const rounds: Map<number, { row: SubscriberRow; at: string }[]>[] = [];
  for (const list of perId.values()) {
    if (list.length > 1) list.sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : 0));
    list.forEach((v, k) => {
      const round = (rounds[k] ??= new Map());
      const mask = contentMask(v.row);
      const group = round.get(mask);
      if (group) group.push(v);
      else round.set(mask, [v]);
    });
  }
  let written = 0;
  for (const round of rounds) {
    for (const [mask, group] of round) {
      const res = await run<{ written: number }>(exec, versionSql(mask), versionParams(group));
      written += res.rows[0]?.written ?? 0;
    }
  }
  return written;
}

// ---------------------------------------------------------------------------------------------
// Personal data and retention

/**
 * Erases personal data (the personal content columns) from every version of the given subscribers. The
 * upsert erases new versions of forgotten subscribers itself; this clears the ones recorded before.
 * Returns the number of versions changed.
 */
export async function eraseVersions(exec: Queryable, subscriberIds: readonly string[]): Promise<number> {
  if (subscriberIds.length === 0) return 0;
  const personal = VERSION_CONTENT.filter((c) => c.personal);
  const res = await run(
    exec,
    `update subscriber_versions_past v set ${eraseSetSql(personal)}
      where v.account = mirror_account() and v.subscriber_id = any($1::text[]) and ${holdsAnySql('v', personal)}`,
    [arrayLiteral(subscriberIds)],
  );
  return res.rowCount;
}

/**
 * Erases the personal content of every past version of every erased subscriber (`erasures`) that
 * still holds some: all of a forgotten (or erased on request) one's, and an erased-out-of-groups one's recorded up to its
 * erasure (it may have come back since). Each erasure run checks them all again, whatever HISTORY is
 * now and was when the versions were recorded. Returns the number of versions changed.
 */
export async function eraseVersionsOfErased(exec: Queryable): Promise<number> {
  const personal = VERSION_CONTENT.filter((c) => c.personal);
  const res = await run(
    exec,
    `update subscriber_versions_past v set ${eraseSetSql(personal)}
       from erasures e
      where e.account = mirror_account() and v.account = e.account and v.subscriber_id = e.subscriber_id
        and (e.reason <> 'out_of_groups' or v.recorded_at <= e.erased_at)
        and ${holdsAnySql('v', personal)}`,
    [],
  );
  return res.rowCount;
}

/** Ids in `rows` whose version is being forgotten (`forget_at` provided and set). */
export function forgottenIds(rows: readonly SubscriberRow[]): string[] {
  return [...new Set(rows.filter((r) => r.values.forgetAt !== null && r.provided.includes('forgetAt')).map((r) => r.values.id))];
}

/**
 * HISTORY_RETENTION: deletes versions whose `valid_to` and periods whose `ended_at` are older than
 * `olderThanMs` before the database's now, in batches. Current versions and open periods always stay.
 * Returns the number of rows deleted.
 */
export async function purgeHistory(exec: Queryable, olderThanMs: number, batch = 10_000): Promise<number> {
  const cutoff = `now() - make_interval(secs => $1::float8 / 1000)`;
  // A version's valid_to is the next version's valid_from.
  const versions = `
    delete from subscriber_versions_past where account = mirror_account() and (subscriber_id, valid_from) in (
      select r.subscriber_id, r.valid_from from subscriber_versions_past r
       where r.account = mirror_account() and r.valid_from < ${cutoff}
         and (exists (select 1 from subscriber_versions_past n
                       where n.account = r.account and n.subscriber_id = r.subscriber_id
                         and n.valid_from > r.valid_from and n.valid_from < ${cutoff})
              or exists (select 1 from subscribers s where s.account = r.account and s.id = r.subscriber_id and s.version_at < ${cutoff}))
       limit $2)`;
  const periods = `
    delete from group_membership_periods where account = mirror_account() and (group_id, subscriber_id, started_at) in (
      select group_id, subscriber_id, started_at from group_membership_periods
       where account = mirror_account() and ended_at < ${cutoff} limit $2)`;
  let total = 0;
  for (const text of [versions, periods]) {
    for (;;) {
      const res = await run(exec, text, [olderThanMs, batch]);
      total += res.rowCount;
      if (res.rowCount < batch) break;
    }
  }
  return total;
}

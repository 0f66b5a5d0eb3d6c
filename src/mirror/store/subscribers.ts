/**
 * `subscribers`: the guarded upsert of subscriber versions (docs/architecture.md, invariant 2, docs/architecture.md,
 * "Conventions": one guarded upsert). See `index.ts` for how writes stay correct.
 */
import pg from 'pg';
import {
  erasePersonalData,
  SUBSCRIBER_DATA_COLUMNS,
  SUBSCRIBER_FIELDS,
  type SubscriberColumn,
  type SubscriberField,
} from '../../db/subscriber-columns.js';
import type { SubscriberRow } from '../normalize.js';
import { arrayLiteral, jsonbArrayFromParam } from '../pg-params.js';
import { versionTime } from '../version.js';
import { eraseVersions, forgottenIds, historyEnabled, recordVersions } from '../history.js';
import { erasedOnRequestSql } from '../erasure.js';
import type { Queryable } from '../../ground/queryable.js';
import { run, withTransaction } from './executor.js';
import { assertId, assertTimestamp, assertTimestampOrNull, assertVia, newestPerKey, toJsonText, type UpsertCounts } from './values.js';

/** The data columns of `subscribers` (the registry in `src/db/schema.ts`), in table order. */
type ColumnSpec = SubscriberColumn<SubscriberField>;
const SUBSCRIBER_SPECS: readonly ColumnSpec[] = SUBSCRIBER_DATA_COLUMNS;

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

const upsertSqlCache = new Map<string, string>();

/**
 * The guarded upsert for one provided set. Non-provided columns are neither inserted (they take
 * their defaults) nor updated (they keep their stored values). Personal columns are erased whenever
 * the resulting `forget_at` (incoming if provided, else stored) is set, so a forgotten subscriber
 * stays erased even if a later row without `forget_at` (a poll row) is newer.
 *
 * Counting: `xmax = 0` marks inserted rows among those returned. Rows not returned are either older
 * than the stored version (`skipped`) or identical (`unchanged`); telling them apart needs the stored
 * `version_at`, which the main query reads from the statement's snapshot (the state before the
 * write) with one primary-key probe per row, and only when some row was not written (an InitPlan
 * in an untaken CASE branch never runs).
 *
 * With `history` (HISTORY on) the statement also returns the ids it did not write other than those
 * already stored with the same version time: older ones, and ones a concurrent writer outran after
 * this statement's snapshot (the guard re-checks under the row lock). The caller places them in the
 * timeline (`../history.ts`). The rows it replaces move to the past versions by a trigger.
 */
function subscriberUpsertSql(mask: number, history: boolean): string {
  const key = `${mask}:${history}`;
  const cached = upsertSqlCache.get(key);
  if (cached) return cached;
  const provided = providedFields(mask);
  const specs = SUBSCRIBER_SPECS.filter((s) => provided.has(s.field));
  const forgetProvided = provided.has('forgetAt');
  // Erased on request: its personal data stays erased, whatever this row says about forget_at.
  const forgotten = `(${forgetProvided ? 'excluded.forget_at is not null' : 's.forget_at is not null'} or ${erasedOnRequestSql('s.id')})`;

  const newValue = (s: ColumnSpec): string => {
    const c = s.column;
    const base = !provided.has(s.field) ? `s.${c}` : s.merge ? `(s.${c} || excluded.${c})` : `excluded.${c}`;
    if (!s.personal) return base;
    return `(case when ${forgotten} then ${s.type === 'jsonb' ? `'{}'::jsonb` : 'null'} else ${base} end)`;
  };
  const setSpecs = SUBSCRIBER_SPECS.filter((s) => provided.has(s.field) || (s.personal && forgetProvided));
  const insertValue = (s: ColumnSpec): string =>
    s.personal
      ? `(case when ${erasedOnRequestSql('id')} then ${s.type === 'jsonb' ? `'{}'::jsonb` : 'null'} else ${s.column} end)`
      : s.column;

  const unnestArgs = [
    '$1::text[]',
    ...specs.map((s, i) => (s.type === 'jsonb' ? jsonbArrayFromParam(`$${i + 2}`) : `$${i + 2}::${s.type}[]`)),
    `$${specs.length + 2}::text[]`,
    `$${specs.length + 3}::timestamptz[]`,
  ];
  const versionParam = `$${specs.length + 3}::timestamptz[]`;
  const cols = specs.map((s) => s.column);
  const input = `unnest(${unnestArgs.join(', ')}) as t(id, ${cols.join(', ')}, mirrored_via, version_at)`;
  const olderThanStored = `from unnest($1::text[], ${versionParam}) as i(id, version_at)
        where (select p.version_at from subscribers p where p.account = mirror_account() and p.id = i.id) > i.version_at`;
  const text = `
with written as (
  insert into subscribers as s (id, ${cols.join(', ')}, mirrored_at, mirrored_via, version_at)
  select id, ${specs.map(insertValue).join(', ')}, now(), mirrored_via, version_at
  from ${input}
  on conflict (account, id) do update set
    ${setSpecs.map((s) => `${s.column} = ${newValue(s)}`).join(',\n    ')},
    mirrored_at = now(),
    mirrored_via = excluded.mirrored_via,
    version_at = excluded.version_at
  where excluded.version_at > s.version_at
     or (excluded.version_at = s.version_at
         and row(${setSpecs.map(newValue).join(', ')}) is distinct from row(${setSpecs.map((s) => `s.${s.column}`).join(', ')}))
  returning (s.xmax = 0) as inserted, s.id
),
counts as (
  select count(*) filter (where inserted)::int as inserted, count(*) filter (where not inserted)::int as updated from written
)
select c.inserted, c.updated,
  case when c.inserted + c.updated = cardinality($1::text[]) then 0
  else (select count(*)::int ${olderThanStored})
  end as skipped${
    history
      ? `,
  case when c.inserted + c.updated = cardinality($1::text[]) then null
  else (select array_agg(i.id) from unnest($1::text[], ${versionParam}) as i(id, version_at)
        where not exists (select 1 from written w where w.id = i.id)
          and (select p.version_at from subscribers p where p.account = mirror_account() and p.id = i.id) is distinct from i.version_at)
  end as unwritten_ids`
      : ''
  }
from counts c`;
  upsertSqlCache.set(key, text);
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
 * Writes subscriber versions with the newer-than guard of invariant 2 and returns what happened.
 *
 * - **Order**: rows are ordered by their version time ({@link versionTime}: the latest of
 *   `updatedAt` and the times of the state the row asserts, kept as `version_at`). A row replaces
 *   the stored one only if its version time is newer; on an equal one only if the resulting row
 *   differs (the later arrival wins: legacy timestamps have whole seconds); identical content writes
 *   nothing, so `mirrored_at` does not move. Older rows are `skipped`. This holds whichever path
 *   wrote the stored row and in whatever order rows arrive.
 * - **Provided columns**: only `row.provided` columns are written; others keep their stored values
 *   (a poll row never clears `source`/`deleted_at`/`forget_at`; a webhook never clears the legacy
 *   keys in `extra`). `fields` and `extra` are merged key by key (incoming keys win), so one path's
 *   keys survive the other's writes; a key dropped upstream therefore stays until forgotten.
 * - **Forget**: when the resulting `forget_at` is set, the personal columns (`personal` in the
 *   registry, `src/db/schema.ts`) are erased (id, status, counters and timestamps stay). An older row cannot
 *   bring the data back (the guard skips it) and neither can a newer poll row, which does not carry
 *   `forget_at` so the stored one still applies. (The real service stops listing deleted
 *   subscribers anyway.) Deletion alone (`deleted_at`) erases nothing.
 * - **Batch**: rows for the same id are first reduced to the newest (later wins on a tie); the
 *   others count as `skipped`. Rows are grouped by their provided set and each group is ONE
 *   statement (a poll page or a webhook batch is one group). With a `pg.Pool` and several groups the
 *   statements share a transaction; on a client they run in the caller's transaction.
 *   When a batch mixes shapes for one id, only the kept row's columns are applied.
 * - `mirrored_via` is the row's `via`; `mirrored_at` is the transaction time of the write.
 * - **History** (HISTORY on): the row a write replaces moves to `subscriber_versions_past` (a
 *   trigger on `subscribers`), and every row not written because it is older (or was outrun by a
 *   concurrent writer) is placed there by `../history.ts`, in the same transaction; with a `pg.Pool`
 *   the call then runs in one transaction.
 *
 * @throws {TypeError} for a row that did not come from the normalizers' contract (empty id,
 *   non-canonical timestamp, unknown field or `via`); nothing is written then.
 */
export async function upsertSubscribers(exec: Queryable, rows: readonly SubscriberRow[]): Promise<UpsertCounts> {
  const counts: UpsertCounts = { inserted: 0, updated: 0, unchanged: 0, skipped: 0 };
  if (rows.length === 0) return counts;
  const masks = rows.map(validateSubscriberRow);
  const versions = new Map(rows.map((r) => [r, versionTime(r.values)] as const));
  const kept = newestPerKey(
    rows,
    (r) => r.values.id,
    (r) => versions.get(r) as string,
  );
  counts.skipped += rows.length - kept.length;

  const groups = new Map<number, SubscriberRow[]>();
  for (const i of kept) {
    const mask = masks[i] as number;
    const row = rows[i] as SubscriberRow;
    const group = groups.get(mask);
    if (group) group.push(row);
    else groups.set(mask, [row]);
  }

  const history = historyEnabled();
  const forgotten = forgottenIds(rows);
  const apply = async (target: Queryable) => {
    const late = new Set<string>();
    for (const [mask, group] of groups) {
      const res = await run<{ inserted: number; updated: number; skipped: number; unwritten_ids?: string[] | null }>(
        target,
        subscriberUpsertSql(mask, history),
        subscriberParams(mask, group, versions),
      );
      const r = res.rows[0];
      if (!r) throw new Error('upsertSubscribers: statement returned no counts');
      counts.inserted += r.inserted;
      counts.updated += r.updated;
      counts.skipped += r.skipped;
      counts.unchanged += group.length - r.inserted - r.updated - r.skipped;
      for (const id of r.unwritten_ids ?? []) late.add(id);
    }
    if (history) {
      // A written row is the current version, and the row it replaced moved to the past versions
      // (trigger). Older ones (the stored row was newer, or a newer row for the same id came in this
      // batch) still have their place in the timeline.
      const keptSet = new Set(kept);
      const older = rows.filter((row, i) => !keptSet.has(i) || late.has(row.values.id));
      await recordVersions(target, older);
    }
    // Also with HISTORY off: versions recorded while it was on keep personal data until erased here.
    await eraseVersions(target, forgotten);
  };
  if ((groups.size > 1 || history || forgotten.length > 0) && exec instanceof pg.Pool) await withTransaction(exec, apply);
  else await apply(exec);
  return counts;
}

/**
 * The parameters of the provided set's statement: ids, one array per provided column (jsonb columns
 * as one JSON array), then `mirrored_via` and `version_at`. Rows being forgotten are erased here already, so their
 * personal data is never sent to Postgres.
 */
function subscriberParams(mask: number, rows: readonly SubscriberRow[], versions: ReadonlyMap<SubscriberRow, string>): unknown[] {
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
  params.push(arrayLiteral(rows.map((r) => versions.get(r))));
  return params;
}

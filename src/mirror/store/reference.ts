/** `groups`, `automations`, `campaigns`: reference rows embedded in payloads. */
import { getTableColumns, getTableName, type Column } from '../../db/orm.js';
import type { PgTable } from '../../db/orm.js';
import { paramTypeOf, type RowOf } from '../../db/columns.js';
import { automations, campaigns, groups } from '../../db/schema.js';
import type { AutomationRow, CampaignRow, GroupRow } from '../normalize.js';
import { run } from './executor.js';
import type { Queryable } from '../../ground/queryable.js';
import { assertId, assertTimestampOrNull, EMPTY_COUNTS, type UpsertCounts } from './values.js';

type ReferenceTable = typeof groups | typeof automations | typeof campaigns;
/** A reference row as the normalizers produce it: every column of its table but the account (the session's) and `mirrored_at`. */
type ReferenceRow<T extends ReferenceTable> = Omit<RowOf<T>, 'account' | 'mirroredAt'>;

/**
 * Upserts small reference rows, every column of the table (the schema's, so a column added there is
 * written here too). These objects carry no version time, so the last arrival wins, but a null never
 * erases a known value and identical rows write nothing. Duplicates: the later wins.
 */
async function upsertReference<T extends ReferenceTable>(
  exec: Queryable,
  table: T,
  rows: readonly ReferenceRow<T>[],
): Promise<UpsertCounts> {
  const columns = Object.entries(getTableColumns(table) as Record<string, Column>).filter(
    ([key]) => key !== 'account' && key !== 'id' && key !== 'mirroredAt',
  );
  const params: unknown[] = [rows.map((r) => r.id), ...columns.map(([key]) => rows.map((r) => r[key as keyof ReferenceRow<T>]))];
  const names = columns.map(([, c]) => c.name);
  const types = columns.map(([, c]) => paramTypeOf(c));
  const newValue = (n: string) => `coalesce(excluded.${n}, r.${n})`;
  const text = `
with written as (
  insert into ${getTableName(table as PgTable)} as r (id, ${names.join(', ')}, mirrored_at)
  select id, ${names.join(', ')}, now()
  from unnest($1::text[], ${types.map((type, i) => `$${i + 2}::${type}[]`).join(', ')}) as t(id, ${names.join(', ')})
  on conflict (account, id) do update set ${names.map((n) => `${n} = ${newValue(n)}`).join(', ')}, mirrored_at = now()
  where row(${names.map(newValue).join(', ')}) is distinct from row(${names.map((n) => `r.${n}`).join(', ')})
  returning (r.xmax = 0) as inserted
)
select (select count(*) from written where inserted)::int as inserted,
       (select count(*) from written where not inserted)::int as updated`;
  const res = await run<{ inserted: number; updated: number }>(exec, text, params);
  const r = res.rows[0] ?? { inserted: 0, updated: 0 };
  return { inserted: r.inserted, updated: r.updated, unchanged: rows.length - r.inserted - r.updated, skipped: 0 };
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

/** Upserts groups `{id, name}` seen in payloads; a later name replaces an earlier one. */
export async function upsertGroups(exec: Queryable, rows: readonly GroupRow[]): Promise<UpsertCounts> {
  if (rows.length === 0) return { ...EMPTY_COUNTS };
  const { kept, dropped } = lastPerId(rows, 'groups');
  const counts = await upsertReference(exec, groups, kept);
  return withDropped(counts, dropped);
}

/** Upserts automations `{id, name}` seen in payloads; a later name replaces an earlier one. */
export async function upsertAutomations(exec: Queryable, rows: readonly AutomationRow[]): Promise<UpsertCounts> {
  if (rows.length === 0) return { ...EMPTY_COUNTS };
  const { kept, dropped } = lastPerId(rows, 'automations');
  const counts = await upsertReference(exec, automations, kept);
  return withDropped(counts, dropped);
}

/**
 * Upserts campaigns seen in payloads. Non-null values replace stored ones, so the `sent_at` of a
 * `campaign.sent` event survives later `campaign.open` payloads that do not carry it.
 */
export async function upsertCampaigns(exec: Queryable, rows: readonly CampaignRow[]): Promise<UpsertCounts> {
  if (rows.length === 0) return { ...EMPTY_COUNTS };
  const { kept, dropped } = lastPerId(rows, 'campaigns');
  kept.forEach((r, i) => {
    assertTimestampOrNull(r.date, `campaigns[${i}].date`);
    assertTimestampOrNull(r.sentAt, `campaigns[${i}].sentAt`);
  });
  const counts = await upsertReference(exec, campaigns, kept);
  return withDropped(counts, dropped);
}

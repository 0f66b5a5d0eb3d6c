/**
 * `fields`: the service's custom field definitions, and the view built from them (docs/sql.md,
 * "Custom fields as columns"). The service's list is the whole set, so a refresh replaces it: new
 * keys are added, changed titles and types rewritten, keys it no longer lists removed. When the set
 * of keys or a type changed, `subscriber_fields` is rebuilt in the same transaction (the SQL function
 * `rebuild_subscriber_fields`, migration 0025), so readers see the old view or the new one, never none.
 */
import type { RowOf } from '../../db/columns.js';
import { FIELD_TYPES, type FieldType, type fields } from '../../db/schema.js';
import type pg from 'pg';
import { withTransaction } from './executor.js';

/** A definition as the store writes it: every column of `fields` but our own `mirrored_at`. */
export type FieldDefinitionRow = Omit<RowOf<typeof fields>, 'account' | 'mirroredAt'>;

/** What a refresh changed; `rebuilt`: the view's columns changed with it. */
export interface FieldChanges {
  added: string[];
  retyped: Array<{ key: string; from: FieldType; to: FieldType }>;
  removed: string[];
  retitled: string[];
  rebuilt: boolean;
}

/**
 * Two refreshes at once take turns: two replicas (the second sees the first's rows and changes
 * nothing), and two accounts, whose definitions make the one view `subscriber_fields`.
 */
const FIELDS_LOCK = 0x5f1e1d5;

function checkDefinitions(definitions: readonly FieldDefinitionRow[]): void {
  const seen = new Set<string>();
  for (const d of definitions) {
    if (typeof d.key !== 'string' || d.key.trim() === '') throw new TypeError('a field definition needs a key');
    if (!(FIELD_TYPES as readonly string[]).includes(d.type))
      throw new TypeError(`field ${d.key}: type must be one of ${FIELD_TYPES.join(', ')}`);
    if (seen.has(d.key)) throw new TypeError(`field ${d.key} is defined twice`);
    seen.add(d.key);
  }
}

/** Replaces the stored definitions with `definitions` (the service's whole list) and rebuilds the view when its columns change. */
export async function replaceFieldDefinitions(db: pg.Pool, definitions: readonly FieldDefinitionRow[]): Promise<FieldChanges> {
  checkDefinitions(definitions);
  return withTransaction(db, async (client) => {
    await client.query('select pg_advisory_xact_lock($1)', [FIELDS_LOCK]);
    const { rows: stored } = await client.query<{ key: string; title: string | null; type: FieldType }>(
      'select key, title, type from fields where account = mirror_account()',
    );
    const before = new Map(stored.map((r) => [r.key, r]));
    const after = new Map(definitions.map((d) => [d.key, d]));
    const changes: FieldChanges = { added: [], retyped: [], removed: [], retitled: [], rebuilt: false };
    for (const d of definitions) {
      const old = before.get(d.key);
      if (!old) changes.added.push(d.key);
      else {
        if (old.type !== d.type) changes.retyped.push({ key: d.key, from: old.type, to: d.type });
        if (old.title !== d.title) changes.retitled.push(d.key);
      }
    }
    for (const key of before.keys()) if (!after.has(key)) changes.removed.push(key);
    await client.query('delete from fields where account = mirror_account() and not (key = any($1::text[]))', [
      definitions.map((d) => d.key),
    ]);
    await client.query(
      `insert into fields (key, title, type, upstream_id, mirrored_at)
       select *, now() from unnest($1::text[], $2::text[], $3::text[], $4::text[])
       on conflict (account, key) do update set title = excluded.title, type = excluded.type, upstream_id = excluded.upstream_id,
                                       mirrored_at = excluded.mirrored_at`,
      [
        definitions.map((d) => d.key),
        definitions.map((d) => d.title),
        definitions.map((d) => d.type),
        definitions.map((d) => d.upstreamId),
      ],
    );
    // A view's columns change only with keys and types; a new title alone leaves it as it is.
    if (changes.added.length + changes.retyped.length + changes.removed.length > 0) {
      await client.query('select rebuild_subscriber_fields()');
      changes.rebuilt = true;
    }
    return changes;
  });
}

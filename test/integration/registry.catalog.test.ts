/**
 * The tables of src/db/schema.ts against the catalog of a migrated database (docs/architecture.md,
 * invariant 12): every table has exactly its declared columns, types, nullability and defaults (a
 * column declared without its migration, or a migration without its declaration, fails here naming
 * it), and the analyst role reads exactly the columns `ANALYST_UNREADABLE` does not withhold (the
 * migrations grant some tables column by column).
 *
 * The registry of `subscribers` columns against the SQL that migrations had to spell by hand: the
 * past-versions table, the `subscriber_versions` view, the history trigger (`subscriber_history_push`)
 * and `subscribers_as_of` (drizzle/0009_history.sql, 0010_history_functions.sql), exercised once with
 * a value in every content column, so a column added to the registry but not to one of them (or left
 * there after leaving the registry) fails here, naming it.
 */
import { getTableColumns, getTableName, is } from 'drizzle-orm';
import { PgColumn, PgTable } from 'drizzle-orm/pg-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as schema from '../../src/db/schema.js';
import { SUBSCRIBER_COLUMN_NAMES, SUBSCRIBER_CONTENT, SUBSCRIBER_TABLE_COLUMNS, type PgType } from '../../src/db/subscriber-columns.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const CONTENT = SUBSCRIBER_CONTENT.map((c) => c.column);

async function columnsOf(relation: string): Promise<{ name: string; type: string }[]> {
  const { rows } = await db.pool.query<{ name: string; type: string }>(
    `select column_name as name, data_type as type from information_schema.columns
      where table_schema = 'public' and table_name = $1 order by ordinal_position`,
    [relation],
  );
  return rows;
}

/** The type information_schema reports for a column of `subscribers`, by name. */
async function subscriberTypes(): Promise<Map<string, string>> {
  return new Map((await columnsOf('subscribers')).map((c) => [c.name, c.type]));
}

async function functionSource(name: string): Promise<string> {
  const { rows } = await db.pool.query<{ src: string }>(`select pg_get_functiondef(p.oid) as src from pg_proc p where p.proname = $1`, [
    name,
  ]);
  expect(rows, `function ${name}`).toHaveLength(1);
  return (rows[0] as { src: string }).src;
}

const TABLES = (Object.values(schema) as unknown[]).filter((value): value is PgTable => is(value, PgTable));

interface ColumnShape {
  name: string;
  type: string;
  notNull: boolean;
  hasDefault: boolean;
}

/** drizzle's SQL type as `format_type` spells it (serials are integers with a sequence default). */
function catalogType(sqlType: string): string {
  const type = sqlType.replace(/ \(/g, '(');
  return ({ bigserial: 'bigint', serial: 'integer', smallserial: 'smallint' } as Record<string, string>)[type] ?? type;
}

function declaredShape(table: PgTable): ColumnShape[] {
  return Object.values(getTableColumns(table))
    .map((c) => ({ name: c.name, type: catalogType(c.getSQLType()), notNull: c.notNull, hasDefault: c.hasDefault }))
    .sort((a, b) => a.name.localeCompare(b.name));
}

async function catalogShape(table: string): Promise<ColumnShape[]> {
  const { rows } = await db.pool.query<ColumnShape>(
    `select a.attname as name, format_type(a.atttypid, a.atttypmod) as type, a.attnotnull as "notNull", a.atthasdef as "hasDefault"
       from pg_attribute a
      where a.attrelid = $1::regclass and a.attnum > 0 and not a.attisdropped`,
    [`public.${table}`],
  );
  return rows.sort((a, b) => a.name.localeCompare(b.name));
}

const ANALYST = 'subscriber_mirror_analyst';

/** Whether the analyst may read a column, as `ANALYST_UNREADABLE` says. */
function analystReads(table: PgTable, column: string): boolean {
  return !schema.ANALYST_UNREADABLE.some((entry) =>
    is(entry, PgColumn) ? entry.table === table && entry.name === column : entry === table,
  );
}

describe('every table of src/db/schema.ts and the catalog agree', () => {
  it('finds the tables', () => {
    expect(TABLES.map((t) => getTableName(t))).toEqual(
      expect.arrayContaining(['subscribers', 'sync_state', 'upstream_paging', 'webhook_endpoints']),
    );
  });

  it.each(TABLES.map((t) => [getTableName(t), t] as const))('%s has exactly its declared columns', async (name, table) => {
    expect(await catalogShape(name)).toEqual(declaredShape(table));
  });

  it.each(TABLES.map((t) => [getTableName(t), t] as const))(
    'the analyst reads the columns of %s it may, and no other',
    async (name, table) => {
      const { rows } = await db.pool.query<{ name: string; readable: boolean }>(
        `select a.attname as name, has_column_privilege($1, a.attrelid, a.attnum, 'select') as readable
         from pg_attribute a where a.attrelid = $2::regclass and a.attnum > 0 and not a.attisdropped order by a.attname`,
        [ANALYST, `public.${name}`],
      );
      expect(rows.length).toBeGreaterThan(0);
      expect(rows).toEqual(rows.map((r) => ({ name: r.name, readable: analystReads(table, r.name) })));
    },
  );
});

describe('the registry and the catalog agree', () => {
  it('subscribers has exactly the registry columns, in order', async () => {
    // The account came last, added in place by migration 0029 (no table rewrite on upgrade).
    expect((await columnsOf('subscribers')).map((c) => c.name)).toEqual([...SUBSCRIBER_COLUMN_NAMES, 'account']);
  });

  it('subscriber_versions_past has the account, the version keys and exactly the content columns, typed as in subscribers', async () => {
    const types = await subscriberTypes();
    const past = await columnsOf('subscriber_versions_past');
    expect(past.map((c) => c.name)).toEqual(['subscriber_id', 'valid_from', 'via', 'recorded_at', ...CONTENT, 'account']);
    for (const c of past.slice(4, -1)) expect(c.type, c.name).toBe(types.get(c.name));
  });

  it('the subscriber_versions view has exactly the content columns', async () => {
    const types = await subscriberTypes();
    const view = await columnsOf('subscriber_versions');
    expect(view.map((c) => c.name)).toEqual(['account', 'subscriber_id', 'valid_from', 'valid_to', 'via', 'recorded_at', ...CONTENT]);
    for (const c of view.slice(6)) expect(c.type, c.name).toBe(types.get(c.name));
  });

  it('subscribers_as_of returns the account, the id, exactly the content columns, then the validity', async () => {
    const types = await subscriberTypes();
    const { rows } = await db.pool.query<{ name: string; type: string }>(
      `select p.parameter_name as name, p.data_type as type from information_schema.parameters p
         join information_schema.routines r using (specific_schema, specific_name)
        where r.routine_name = 'subscribers_as_of' and p.parameter_mode = 'OUT' order by p.ordinal_position`,
    );
    expect(rows.map((r) => r.name)).toEqual(['account', 'id', ...CONTENT, 'valid_from', 'valid_to', 'via']);
    for (const c of rows.slice(2, 2 + CONTENT.length)) expect(c.type, c.name).toBe(types.get(c.name));
  });

  it('the history trigger copies exactly the version keys and the content columns', async () => {
    const src = await functionSource('subscriber_history_push');
    const list = /insert into subscriber_versions_past\s*\(([^)]*)\)/i.exec(src)?.[1];
    expect(list, 'insert column list of subscriber_history_push').toBeDefined();
    expect((list as string).split(',').map((c) => c.trim())).toEqual([
      'account',
      'subscriber_id',
      'valid_from',
      'via',
      'recorded_at',
      ...CONTENT,
    ]);
  });
});

/** A value of each type, different per column, that survives a round trip as text. */
function sample(type: PgType, i: number): string {
  switch (type) {
    case 'text':
      return `value-${i}`;
    case 'int4':
      return String(100 + i);
    case 'float8':
      return `${i}.5`;
    case 'timestamptz':
      return `2024-01-${String(1 + i).padStart(2, '0')}T10:00:00.000001Z`;
    case 'jsonb':
      return JSON.stringify({ key: `value-${i}` });
  }
}

describe('every content column reaches every version (the trigger, the view, subscribers_as_of)', () => {
  const id = 'catalog-1';
  const columns = SUBSCRIBER_TABLE_COLUMNS.filter((c) => c.role === 'content' || c.role === 'latest');
  const values = new Map(columns.map((c, i) => [c.column, sample(c.type, i)]));
  const asText = (c: string) => `${c}::text as ${c}`;
  const expected = async () => {
    const { rows } = await db.pool.query(
      `select ${CONTENT.map(asText).join(', ')} from (select ${CONTENT.map((c) => `$${CONTENT.indexOf(c) + 1}::${SUBSCRIBER_CONTENT[CONTENT.indexOf(c)]?.type} as ${c}`).join(', ')}) v`,
      CONTENT.map((c) => values.get(c)),
    );
    return rows[0];
  };

  beforeAll(async () => {
    await db.pool.query(
      `insert into subscribers (id, ${columns.map((c) => c.column).join(', ')}, mirrored_via, version_at)
       values ($1, ${columns.map((c, i) => `$${i + 2}::${c.type}`).join(', ')}, 'webhook', '2024-02-01T00:00:00Z')`,
      [id, ...columns.map((c) => values.get(c.column))],
    );
    // A newer version: the trigger moves the row above to the past versions.
    await db.pool.query(`update subscribers set version_at = '2024-03-01T00:00:00Z' where id = $1`, [id]);
  });

  it('the trigger kept every content column of the replaced row', async () => {
    const { rows } = await db.pool.query(
      `select ${CONTENT.map(asText).join(', ')} from subscriber_versions_past where subscriber_id = $1`,
      [id],
    );
    expect(rows).toEqual([await expected()]);
  });

  it('the view shows every content column of both versions', async () => {
    const { rows } = await db.pool.query(
      `select ${CONTENT.map(asText).join(', ')} from subscriber_versions where subscriber_id = $1 order by valid_from`,
      [id],
    );
    const want = await expected();
    expect(rows).toEqual([want, want]);
  });

  it('subscribers_as_of returns every content column of the past version and of the current one', async () => {
    const want = await expected();
    for (const at of ['2024-02-15T00:00:00Z', '2024-03-15T00:00:00Z']) {
      const { rows } = await db.pool.query(`select ${CONTENT.map(asText).join(', ')} from subscribers_as_of($2) where id = $1`, [id, at]);
      expect(rows, at).toEqual([want]);
    }
  });
});

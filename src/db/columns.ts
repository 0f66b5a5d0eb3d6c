/**
 * What hand-written SQL needs to know about any table of `schema.ts`, derived from the drizzle table
 * itself (docs/architecture.md, invariant 12): its columns' SQL names keyed like its row type
 * (`$inferSelect`), and a select list that reads whole rows as that type. A column added to a table
 * reaches every row type and select list built here without another edit; lists SQL still spells by
 * hand are compared with the tables by `test/unit/tables.test.ts` and, against a migrated database,
 * by `test/integration/registry.catalog.test.ts`.
 */
import { getTableColumns, getViewSelectedFields, type Column } from './orm.js';
import type { PgTable, PgView } from './orm.js';

/** A row of `T` as drizzle infers it: every column, keyed by its drizzle name. */
export type RowOf<T extends PgTable> = T['$inferSelect'];

/** The drizzle keys of a table's columns. */
export type ColumnKey<T extends PgTable> = keyof RowOf<T> & string;

/**
 * SQL text of a `timestamptz` expression in the canonical form `YYYY-MM-DDTHH:MM:SS.ffffffZ`
 * (src/ground/time.ts), rendered by Postgres: never through a JS Date, which drops microseconds
 * (invariant 2).
 */
export function canonicalTimestampSql(expression: string): string {
  return `to_char(${expression} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
}

/** The SQL names of a table's columns, keyed by drizzle key: `sqlNames(syncState).fullOffset` is `full_offset`. */
export function sqlNames<T extends PgTable>(table: T): Readonly<Record<ColumnKey<T>, string>> {
  return Object.fromEntries(Object.entries(getTableColumns(table)).map(([key, column]) => [key, column.name])) as Record<
    ColumnKey<T>,
    string
  >;
}

/** The SQL names of a table's columns, in declaration order. */
export function columnNames(table: PgTable): string[] {
  return Object.values(getTableColumns(table)).map((column) => column.name);
}

// node-postgres returns int8 as a string, which `$inferSelect` would call a bigint: such a table
// needs its own row type, so the select list refuses it rather than lie about the row.
const UNREADABLE_AS_ROW = new Set(['PgBigInt64', 'PgBigSerial64']);

/**
 * A select list reading whole rows of `table` as {@link RowOf} (less `omit`): each column aliased to
 * its drizzle key, timestamps in the canonical form. `qualifier`: the table's alias in the query.
 */
export function rowSelectSql<T extends PgTable>(table: T, options: { omit?: readonly ColumnKey<T>[]; qualifier?: string } = {}): string {
  const omit = new Set<string>(options.omit ?? []);
  const prefix = options.qualifier === undefined ? '' : `${options.qualifier}.`;
  return Object.entries(getTableColumns(table))
    .filter(([key]) => !omit.has(key))
    .map(([key, column]) => {
      if (UNREADABLE_AS_ROW.has(column.columnType)) {
        throw new Error(`${column.name}: ${column.columnType} does not read as its row type (src/db/columns.ts)`);
      }
      const value =
        column.columnType === 'PgTimestampString' ? canonicalTimestampSql(`${prefix}${column.name}`) : `${prefix}${column.name}`;
      return `${value} as "${key}"`;
    })
    .join(', ');
}

/** A select list reading whole rows of a view as its `$inferSelect`: each column aliased to its drizzle key, timestamps canonical. */
export function viewSelectSql(view: PgView, options: { omit?: readonly string[]; qualifier?: string } = {}): string {
  const omit = new Set<string>(options.omit ?? []);
  const prefix = options.qualifier === undefined ? '' : `${options.qualifier}.`;
  return Object.entries(getViewSelectedFields(view) as Record<string, Column>)
    .filter(([key]) => !omit.has(key))
    .map(([key, column]) => {
      const name = `${prefix}${column.name}`;
      return `${column.columnType === 'PgTimestampString' ? canonicalTimestampSql(name) : name} as "${key}"`;
    })
    .join(', ');
}

/** Postgres types of array parameters (`unnest($1::text[], …)`) the store writes columns with. */
export type PgType = 'text' | 'int4' | 'float8' | 'timestamptz' | 'jsonb';

const PG_TYPE_OF_COLUMN_TYPE: Readonly<Record<string, PgType>> = {
  PgText: 'text',
  PgInteger: 'int4',
  PgDoublePrecision: 'float8',
  PgTimestampString: 'timestamptz',
  PgJsonb: 'jsonb',
};

/** The parameter type a column is written with; throws for a column type the store has no parameter for. */
export function paramTypeOf(column: Column): PgType {
  const type = PG_TYPE_OF_COLUMN_TYPE[column.columnType];
  if (!type) throw new Error(`${column.name}: no parameter type for ${column.columnType} (src/db/columns.ts)`);
  return type;
}

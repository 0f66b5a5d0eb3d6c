/**
 * drizzle-orm, loaded through its CommonJS build: the one place the service takes it from (a unit
 * test keeps every other module from importing drizzle-orm itself).
 *
 * Why: under Node 24 the ESM build of drizzle-orm costs about 250 MB of RSS to import, the CommonJS
 * build about 25 MB (docs/benchmarks.md, "memory": measured on this machine, `node` importing
 * drizzle-orm, pg-core and node-postgres each way). That import alone was most of a pass's peak.
 * The types still come from the package's own declarations.
 */
import { createRequire } from 'node:module';
import path from 'node:path';
import type * as Core from 'drizzle-orm';
import type * as NodePg from 'drizzle-orm/node-postgres';
import type * as Migrator from 'drizzle-orm/node-postgres/migrator';
import type * as MigrationFiles from 'drizzle-orm/migrator';
import type * as PgCore from 'drizzle-orm/pg-core';

// drizzle-kit bundles the schema as CommonJS, where import.meta.url is empty: resolve from the project then.
const load = createRequire(import.meta.url || path.join(process.cwd(), 'package.json'));
const core = load('drizzle-orm') as typeof Core;
const pgCore = load('drizzle-orm/pg-core') as typeof PgCore;
const nodePg = load('drizzle-orm/node-postgres') as typeof NodePg;
const migrator = load('drizzle-orm/node-postgres/migrator') as typeof Migrator;
const migrationFiles = load('drizzle-orm/migrator') as typeof MigrationFiles;

export const { sql, getTableColumns, getTableName, getViewSelectedFields, is } = core;
export const {
  bigint,
  bigserial,
  boolean,
  check,
  customType,
  doublePrecision,
  index,
  integer,
  jsonb,
  pgTable,
  pgView,
  primaryKey,
  smallint,
  text,
  timestamp,
  unique,
} = pgCore;
export const { drizzle } = nodePg;
export const { migrate } = migrator;
export const { readMigrationFiles } = migrationFiles;
export type { Column } from 'drizzle-orm';
export type { NodePgDatabase } from 'drizzle-orm/node-postgres';
export type { PgColumn, PgTable, PgView } from 'drizzle-orm/pg-core';

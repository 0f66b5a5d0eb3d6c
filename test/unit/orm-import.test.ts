import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { relativeToSrc, sourceFiles } from '../helpers/source-text.js';

// src/db/orm.ts loads drizzle-orm through its CommonJS build (its ESM build costs ~250 MB of RSS
// under Node 24): one direct import anywhere else would load the ESM build again.
/** A run-time import of drizzle-orm: static (`import … from`, not `import type`) or dynamic (`import(…)`). */
const RUNTIME_IMPORT = /^\s*(import|export)\s+(?!type\b)[^;]*from\s+'drizzle-orm(\/[^']*)?'|\bimport\(\s*'drizzle-orm(\/[^']*)?'\s*\)/m;

describe('drizzle-orm is loaded in one place', () => {
  it('no module but src/db/orm.ts imports drizzle-orm at run time', () => {
    const offenders = sourceFiles()
      .filter((file) => relativeToSrc(file) !== 'db/orm.ts')
      .filter((file) => RUNTIME_IMPORT.test(readFileSync(file, 'utf8')))
      .map(relativeToSrc);
    expect(offenders).toEqual([]);
  });

  it('the check sees an import when there is one', () => {
    const text = "import { sql } from 'drizzle-orm';\nimport type { PgTable } from 'drizzle-orm/pg-core';";
    expect(RUNTIME_IMPORT.test(text)).toBe(true);
    expect(RUNTIME_IMPORT.test("import type { X } from 'drizzle-orm';")).toBe(false);
    expect(RUNTIME_IMPORT.test("const { readMigrationFiles } = await import('drizzle-orm/migrator');")).toBe(true);
  });
});

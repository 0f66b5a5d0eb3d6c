/**
 * The layers of `src/` (docs/architecture.md, modules and table owners), checked from the source
 * text alone (nothing running): every import (static, `import type`, re-exports, `import()` with a
 * literal path) goes downward, no two folders import each other, no file cycle, the simulator uses
 * nothing of the service beyond `ground/`, and each table is written by its owner only.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, test } from 'vitest';
import { literalTexts, relativeToSrc, SRC, sourceFiles } from '../helpers/source-text.js';

// ---------------------------------------------------------------------------------------------
// The layer table: a unit is a folder (`name/`) or one file; the longest matching entry wins.
// A unit may import units of a lower rank only; edges (the entry points) may also import each other.

const EDGE = 5;
const LAYERS: ReadonlyArray<{ unit: string; rank: number }> = [
  { unit: 'ground/', rank: 0 }, // log, time, repeat, wait, Queryable, the metrics registry, UsageError
  { unit: 'db/', rank: 1 }, // schema (the registry of tables and columns), client, migrate
  { unit: 'upstream/', rank: 2 }, // the service's API clients
  { unit: 'mirror/', rank: 2 },
  // The audit's pure decisions and its tables: `sync/status.ts` reads its accuracy and webhook health.
  { unit: 'audit/core.ts', rank: 2 },
  { unit: 'audit/state.ts', rank: 2 },
  { unit: 'ratelimit/', rank: 3 }, // the request gate the clients take (upstream/http.ts), shared through Redis
  { unit: 'sync/', rank: 3 },
  { unit: 'webhooks/', rank: 3 },
  { unit: 'audit/', rank: 4 }, // the third reader: reads through the clients, repairs through the store, yields to passes
  { unit: 'http/', rank: EDGE },
  { unit: 'commands/', rank: EDGE }, // every command: the CLI entry, start and its wiring, demo, healthcheck, webhooks, audit, backfill, status
  { unit: 'config.ts', rank: EDGE }, // read by the commands only; they pass values down
  { unit: 'cli.ts', rank: EDGE }, // dist/cli.js: runs commands/cli.ts
  { unit: 'healthcheck.ts', rank: EDGE }, // dist/healthcheck.js: runs commands/healthcheck.ts (node built-ins only)
];

/** A separate program (the service's adversary): it may import `ground/` only, and only edges start it. */
const SIMULATOR = 'simulator/';
const SIMULATOR_MAY_IMPORT = new Set(['ground/']);

// ---------------------------------------------------------------------------------------------
// Table owners: the one module (a file, or a folder `name/`) that INSERTs, UPDATEs or DELETEs each
// table (history tables are also written by triggers in the migrations).

const TABLE_OWNERS: Readonly<Record<string, string>> = {
  accounts: 'db/accounts.ts',
  analyst_accounts: 'db/analyst-accounts.ts',
  subscribers: 'mirror/store/subscribers.ts',
  groups: 'mirror/store/reference.ts',
  automations: 'mirror/store/reference.ts',
  campaigns: 'mirror/store/reference.ts',
  group_members: 'mirror/store/memberships.ts',
  subscriber_activity: 'mirror/store/activity.ts',
  subscriber_versions_past: 'mirror/history.ts',
  group_membership_periods: 'mirror/history.ts',
  history_settings: 'mirror/history.ts',
  erasures: 'mirror/erasure.ts',
  sync_state: 'sync/state.ts',
  sync_passes: 'sync/pass-history.ts',
  upstream_paging: 'sync/state.ts',
  webhook_deliveries: 'webhooks/inbox/',
  webhook_delivery_hashes: 'webhooks/inbox/',
  webhook_endpoints: 'webhooks/manage.ts',
  audit_state: 'audit/state.ts',
  audit_results: 'audit/state.ts',
  audit_webhooks: 'audit/state.ts',
  fields: 'mirror/store/fields.ts',
};

/** Writes by a module that does not own the table, each with the reason it stays. Keep this short. */
const SHARED_WRITES: ReadonlyArray<{ file: string; table: string; why: string }> = [
  // The out-of-groups erasure empties the personal columns of the row and of its past versions and
  // logs the erasure in ONE statement (atomic: no subscriber erased but not logged for redaction).
  { file: 'mirror/erasure.ts', table: 'subscribers', why: 'one atomic erasure statement' },
  { file: 'mirror/erasure.ts', table: 'subscriber_versions_past', why: 'one atomic erasure statement' },
];

/** Statements whose target table is a parameter (`insert into ${table}`): the tables they may reach. */
const DYNAMIC_WRITERS: Readonly<Record<string, readonly string[]>> = {
  'mirror/store/reference.ts': ['groups', 'automations', 'campaigns'],
};

// ---------------------------------------------------------------------------------------------
// Reading the source

const rel = relativeToSrc;

interface Import {
  from: string;
  /** Relative to `src/`, `.ts`; outside `src/` it starts with `../`. */
  to: string;
}

/** The relative imports of one file: `import`, `import type`, `export … from`, literal `import()`. */
function importsOf(file: string, text: string): Import[] {
  const found = ts.preProcessFile(text, true, true).importedFiles.map((f) => f.fileName);
  return found
    .filter((spec) => spec.startsWith('.'))
    .map((spec) => ({ from: rel(file), to: rel(path.resolve(path.dirname(file), spec)).replace(/\.js$/, '.ts') }));
}

function unitOf(file: string): string | undefined {
  if (file.startsWith(SIMULATOR)) return SIMULATOR;
  let best: string | undefined;
  for (const { unit } of LAYERS) {
    const matches = unit.endsWith('/') ? file.startsWith(unit) : file === unit;
    if (matches && (best === undefined || unit.length > best.length)) best = unit;
  }
  return best;
}

const rankOf = (unit: string) => LAYERS.find((l) => l.unit === unit)?.rank;

/** Why `imp` breaks the direction, or null. */
function directionViolation(imp: Import): string | null {
  const a = unitOf(imp.from);
  const b = unitOf(imp.to);
  if (imp.to.startsWith('../')) return `${imp.from} imports ${imp.to}, outside src/`;
  if (a === undefined) return `${imp.from} is in no layer: add its folder to LAYERS`;
  if (b === undefined) return `${imp.to} is in no layer: add its folder to LAYERS`;
  if (a === b) return null;
  if (a === SIMULATOR) {
    return SIMULATOR_MAY_IMPORT.has(b) ? null : `${imp.from} imports ${imp.to}: the simulator may import only ground/ of the service`;
  }
  const ra = rankOf(a) as number;
  if (b === SIMULATOR) return ra === EDGE ? null : `${imp.from} imports ${imp.to}: only the entry points may start the simulator`;
  const rb = rankOf(b) as number;
  if (rb < ra || (ra === EDGE && rb === EDGE)) return null;
  return `${imp.from} (${a}, rank ${ra}) imports ${imp.to} (${b}, rank ${rb}): imports go to lower ranks only`;
}

/** Cycles' paths (at least one in each group of files that reach each other), e.g. `a.ts -> b.ts -> a.ts`. */
function cycles(edges: ReadonlyArray<readonly [string, string]>): string[] {
  const next = new Map<string, string[]>();
  for (const [a, b] of edges) if (a !== b) next.set(a, [...(next.get(a) ?? []), b]);
  const reported: string[] = [];
  const done = new Set<string>();
  // Depth-first search; a back edge to a node on the stack closes a cycle.
  const visit = (node: string, stack: string[], onStack: Set<string>) => {
    stack.push(node);
    onStack.add(node);
    for (const to of next.get(node) ?? []) {
      if (onStack.has(to)) reported.push([...stack.slice(stack.indexOf(to)), to].join(' -> '));
      else if (!done.has(to)) visit(to, stack, onStack);
    }
    stack.pop();
    onStack.delete(node);
    done.add(node);
  };
  for (const node of [...next.keys()].sort()) if (!done.has(node)) visit(node, [], new Set());
  return [...new Set(reported)];
}

const WRITE_PATTERNS = [
  /\binsert\s+into\s+("?[a-z_][a-z0-9_]*"?|\$\{\})/g,
  /\bupdate\s+(?:only\s+)?("?[a-z_][a-z0-9_]*"?|\$\{\})(?:\s+(?:as\s+)?[a-z_][a-z0-9_]*)?\s+set\b/g,
  /\bdelete\s+from\s+(?:only\s+)?("?[a-z_][a-z0-9_]*"?|\$\{\})/g,
  /\btruncate\s+(?:table\s+)?("?[a-z_][a-z0-9_]*"?|\$\{\})/g,
  /\bcopy\s+("?[a-z_][a-z0-9_]*"?)(?:\s*\([^)]*\))?\s+from\b/g,
];

/** Drizzle tables by exported name (`export const x = pgTable('name', …)` in db/schema.ts). */
function drizzleTables(): Map<string, string> {
  const file = path.join(SRC, 'db/schema.ts');
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
  const tables = new Map<string, string>();
  const walk = (node: ts.Node): void => {
    if (ts.isVariableDeclaration(node) && ts.isIdentifier(node.name) && node.initializer && ts.isCallExpression(node.initializer)) {
      const call = node.initializer;
      const [first] = call.arguments;
      if (ts.isIdentifier(call.expression) && call.expression.text === 'pgTable' && first && ts.isStringLiteral(first)) {
        tables.set(node.name.text, first.text);
      }
    }
    ts.forEachChild(node, walk);
  };
  walk(source);
  return tables;
}

/** The tables a file writes: SQL text, and drizzle `.insert(t)` / `.update(t)` / `.delete(t)` of a schema table. */
function tablesWritten(text: string, drizzle: ReadonlyMap<string, string>): string[] {
  const source = ts.createSourceFile('x.ts', text, ts.ScriptTarget.Latest, true);
  const written: string[] = [];
  for (const literal of literalTexts(source)) {
    const sql = literal.toLowerCase();
    for (const pattern of WRITE_PATTERNS) for (const m of sql.matchAll(pattern)) written.push((m[1] as string).replaceAll('"', ''));
  }
  // Imported under another name: `import { subscribers as s }`.
  const local = new Map<string, string>();
  source.statements.filter(ts.isImportDeclaration).forEach((d) => {
    const bindings = d.importClause?.namedBindings;
    if (bindings && ts.isNamedImports(bindings)) for (const e of bindings.elements) local.set(e.name.text, (e.propertyName ?? e.name).text);
  });
  const walk = (node: ts.Node): void => {
    if (
      ts.isCallExpression(node) &&
      ts.isPropertyAccessExpression(node.expression) &&
      ['insert', 'update', 'delete'].includes(node.expression.name.text)
    ) {
      const [arg] = node.arguments;
      const name = arg && ts.isIdentifier(arg) ? local.get(arg.text) : undefined;
      const table = name === undefined ? undefined : drizzle.get(name);
      if (table !== undefined) written.push(table);
    }
    ts.forEachChild(node, walk);
  };
  walk(source);
  return written;
}

/** Why a file's write to `table` is not allowed, or null. */
function ownershipViolation(file: string, table: string): string | null {
  if (table === '${}') {
    return file in (DYNAMIC_WRITERS as object)
      ? null
      : `${file} writes a table named at run time: list it in DYNAMIC_WRITERS with its tables`;
  }
  const owner = TABLE_OWNERS[table];
  if (owner === undefined) return `${file} writes ${table}, which has no owner in TABLE_OWNERS`;
  if (owner === file || (owner.endsWith('/') && file.startsWith(owner)) || SHARED_WRITES.some((s) => s.file === file && s.table === table))
    return null;
  return `${file} writes ${table}, owned by ${owner}: call the owner instead`;
}

// ---------------------------------------------------------------------------------------------

const files = sourceFiles();
const texts = new Map(files.map((f) => [rel(f), readFileSync(f, 'utf8')]));
const imports = files.flatMap((f) => importsOf(f, texts.get(rel(f)) as string));

describe('layers of src/', () => {
  test('the parser sees every kind of import', () => {
    const file = path.join(SRC, 'mirror/x.ts');
    const text = [
      "import { a } from './a.js';",
      "import type { B } from '../db/b.js';",
      "export { c } from '../ground/c.js';",
      "export * from './d.js';",
      "const e = await import('../http/e.js');",
      "import 'fs';",
    ].join('\n');
    expect(importsOf(file, text).map((i) => i.to)).toEqual(['mirror/a.ts', 'db/b.ts', 'ground/c.ts', 'mirror/d.ts', 'http/e.ts']);
  });

  test('the checks catch what they are for', () => {
    expect(directionViolation({ from: 'mirror/store/index.ts', to: 'http/server.ts' })).toMatch(/rank 2.*rank 5/);
    expect(directionViolation({ from: 'sync/status.ts', to: 'audit/loop.ts' })).toMatch(/rank 3.*rank 4/);
    expect(directionViolation({ from: 'sync/status.ts', to: 'audit/state.ts' })).toBeNull();
    expect(directionViolation({ from: 'sync/worker.ts', to: 'webhooks/inbox.ts' })).toMatch(/lower ranks only/);
    expect(directionViolation({ from: 'simulator/world.ts', to: 'db/schema.ts' })).toMatch(/simulator may import only ground/);
    expect(directionViolation({ from: 'sync/legacy-pass.ts', to: 'simulator/world.ts' })).toMatch(/only the entry points/);
    expect(directionViolation({ from: 'newfolder/x.ts', to: 'ground/log.ts' })).toMatch(/in no layer/);
    expect(
      cycles([
        ['a', 'b'],
        ['b', 'c'],
        ['c', 'a'],
        ['c', 'd'],
      ]),
    ).toEqual(['a -> b -> c -> a']);
    const drizzle = new Map([['webhookDeliveries', 'webhook_deliveries']]);
    expect(
      tablesWritten("// insert into erasures (a comment)\nq('UPDATE sync_state s SET x = 1'); q(`delete from ${t} where`);", drizzle),
    ).toEqual(['sync_state', '${}']);
    expect(tablesWritten("import { webhookDeliveries as d } from '../db/schema.js'; db.update(d).set({});", drizzle)).toEqual([
      'webhook_deliveries',
    ]);
    expect(tablesWritten('q(`select 1 from webhook_deliveries for update`)', drizzle)).toEqual([]);
    expect(ownershipViolation('webhooks/redact.ts', 'webhook_deliveries')).toMatch(/owned by webhooks\/inbox\//);
    expect(ownershipViolation('webhooks/inbox/erasure.ts', 'webhook_deliveries')).toBeNull();
  });

  test('every file is in a layer and every import goes downward', () => {
    const violations = [...new Set(imports.map(directionViolation).filter((v): v is string => v !== null))];
    expect(violations, violations.join('\n')).toEqual([]);
  });

  test('no two folders (units) import each other, directly or around a loop', () => {
    const edges = imports.map((i) => [unitOf(i.from) ?? i.from, unitOf(i.to) ?? i.to] as const).filter(([a, b]) => a !== b);
    const found = cycles(edges);
    expect(found, `folder cycles:\n${found.join('\n')}`).toEqual([]);
  });

  test('no file cycle', () => {
    const found = cycles(imports.map((i) => [i.from, i.to] as const));
    expect(found, `file cycles:\n${found.join('\n')}`).toEqual([]);
  });

  test('each table is written by its owner only', () => {
    const drizzle = drizzleTables();
    expect(Object.keys(TABLE_OWNERS).sort(), 'TABLE_OWNERS must name every table of db/schema.ts').toEqual([...drizzle.values()].sort());
    const violations: string[] = [];
    for (const [file, text] of texts) {
      if (file.startsWith(SIMULATOR)) continue; // its own in-memory world, no database
      for (const table of new Set(tablesWritten(text, drizzle))) {
        const violation = ownershipViolation(file, table);
        if (violation !== null) violations.push(violation);
      }
    }
    expect(violations, violations.join('\n')).toEqual([]);
  });

  test('every owner writes its table (the owner list is not stale)', () => {
    const drizzle = drizzleTables();
    const stale = Object.entries(TABLE_OWNERS)
      .filter(([table, owner]) => {
        const ownText = [...texts].filter(([file]) => file === owner || (owner.endsWith('/') && file.startsWith(owner)));
        const written = ownText.flatMap(([, text]) => tablesWritten(text, drizzle));
        return !written.includes(table) && !(DYNAMIC_WRITERS[owner]?.includes(table) && written.includes('${}'));
      })
      .map(([table, owner]) => `${owner} owns ${table} but does not write it`);
    expect(stale, stale.join('\n')).toEqual([]);
  });
});

/**
 * Every table of `src/db/schema.ts` against the SQL in `src/` that still names its columns by hand
 * (docs/architecture.md, invariant 12: one declaration), read from the source text (nothing running):
 * every column an `insert into t (…)` list, an `on conflict (…)` target or an `update t set …`
 * assignment names exists in the drizzle table; an insert list spelled out in full names every column
 * that has neither a default nor null allowed; a retired column is named by no SQL. Whole-row
 * select lists and row types derive from the tables (`src/db/columns.ts`): no select or returning list
 * in `src/` spells out most of a table's columns, and no interface spells out most of its keys. The
 * catalog of a migrated database is compared with the tables in
 * `test/integration/registry.catalog.test.ts`.
 */
import { readFileSync } from 'node:fs';
import { getTableColumns, getTableName, is } from 'drizzle-orm';
import { PgTable } from 'drizzle-orm/pg-core';
import ts from 'typescript';
import { describe, expect, test } from 'vitest';
import { canonicalTimestampSql, rowSelectSql } from '../../src/db/columns.js';
import * as schema from '../../src/db/schema.js';
import { literalTexts, relativeToSrc, sourceFiles } from '../helpers/source-text.js';

const TABLES = (Object.values(schema) as unknown[]).filter((value): value is PgTable => is(value, PgTable));
const TABLE_BY_NAME = new Map(TABLES.map((t) => [getTableName(t), t]));

/** A column list SQL spells by hand, and where. */
interface NamedColumns {
  table: string;
  names: string[];
  /** What names them: an insert's column list, a conflict target, `set` targets. */
  kind: 'insert' | 'conflict' | 'set';
  /** The list has a `${}` hole (a derived part): it need not be complete. */
  hole: boolean;
}

const IDENT = '[a-z_][a-z0-9_]*';
const INSERT = new RegExp(`\\binsert\\s+into\\s+(${IDENT}|\\$\\{\\})(?:\\s+as\\s+${IDENT})?\\s*\\(([^)]*)\\)`, 'g');
const UPDATE = new RegExp(`\\bupdate\\s+(${IDENT})(?:\\s+(?:as\\s+)?${IDENT})?\\s+set\\b`, 'g');
const CONFLICT = /\bon\s+conflict\s*\(([^)]*)\)(\s*do\s+update\s+set\b)?/g;

function splitNames(list: string): { names: string[]; hole: boolean } {
  const items = list.split(',').map((s) => s.trim());
  return { names: items.filter((s) => s !== '' && s !== '${}'), hole: items.includes('${}') };
}

/** The targets of a `set` clause starting at `from`: it ends at a top-level `where`, `from`, `returning`, `;` or `)`. */
function setTargets(sql: string, from: number): { names: string[]; hole: boolean } {
  const items: string[] = [];
  let depth = 0;
  let start = from;
  let i = from;
  for (; i < sql.length; i++) {
    const ch = sql[i] as string;
    if (ch === "'") i = sql.indexOf("'", i + 1);
    else if (ch === '(') depth++;
    else if (ch === ')' && depth-- === 0) break;
    else if (depth === 0 && ch === ';') break;
    else if (depth === 0 && ch === ',') {
      items.push(sql.slice(start, i));
      start = i + 1;
    } else if (depth === 0 && /\s/.test(ch) && /^\s(where|from|returning)\b/.test(sql.slice(i, i + 12))) break;
    if (i < 0) break;
  }
  items.push(sql.slice(start, i));
  const names = items.map((item) => new RegExp(`^\\s*(${IDENT})\\s*=`).exec(item)?.[1]).filter((n): n is string => n !== undefined);
  return { names, hole: items.some((item) => item.trim().startsWith('${}')) };
}

/** Every hand-written column list of one SQL text (lower-cased). */
function columnLists(text: string): NamedColumns[] {
  const sql = text.toLowerCase();
  const out: NamedColumns[] = [];
  const inserts = [...sql.matchAll(INSERT)];
  for (const m of inserts) out.push({ table: m[1] as string, kind: 'insert', ...splitNames(m[2] as string) });
  for (const m of sql.matchAll(UPDATE)) out.push({ table: m[1] as string, kind: 'set', ...setTargets(sql, (m.index ?? 0) + m[0].length) });
  for (const m of sql.matchAll(CONFLICT)) {
    const insert = inserts.filter((i) => (i.index ?? 0) < (m.index ?? 0)).at(-1);
    if (!insert) continue;
    const table = insert[1] as string;
    out.push({ table, kind: 'conflict', ...splitNames(m[1] as string) });
    if (m[2]) out.push({ table, kind: 'set', ...setTargets(sql, (m.index ?? 0) + m[0].length) });
  }
  return out.filter((list) => list.table !== '${}');
}

/** Columns an insert must name: no default, null not allowed. */
function requiredColumns(table: PgTable): string[] {
  return Object.values(getTableColumns(table))
    .filter((c) => c.notNull && !c.hasDefault)
    .map((c) => c.name);
}

/** What is wrong with one list, each problem a line. */
function listProblems(list: NamedColumns): string[] {
  const table = TABLE_BY_NAME.get(list.table);
  if (!table) return [`${list.kind} names table ${list.table}, which src/db/schema.ts does not declare`];
  const known = new Set(Object.values(getTableColumns(table)).map((c) => c.name));
  const problems = list.names
    .filter((n) => !known.has(n))
    .map((n) => `${list.kind} names ${list.table}.${n}, which the table does not have`);
  if (list.kind === 'insert' && !list.hole) {
    for (const n of requiredColumns(table))
      if (!list.names.includes(n)) problems.push(`insert into ${list.table} leaves out ${n} (not null, no default)`);
  }
  return problems;
}

const SOURCES = sourceFiles()
  .map((file) => ({ file: relativeToSrc(file), text: readFileSync(file, 'utf8') }))
  // The simulator keeps its own world in memory; it has no table.
  .filter((s) => !s.file.startsWith('simulator/'));

function literalsOf(text: string): string[] {
  return literalTexts(ts.createSourceFile('x.ts', text, ts.ScriptTarget.Latest, true));
}

describe('SQL that names columns by hand', () => {
  test('the reader finds what it is for', () => {
    const sql = `with w as (update sync_state s set full_offset = coalesce($1, full_offset), ${'${}'} = 1, lats = case when a then b else c end
      where group_id = $2 returning 1)
      insert into upstream_paging as p (account, page_cap, nonsense) values ('a', 2, 3)
      on conflict (account) do update set page_cap = excluded.page_cap, longest = greatest(p.longest_page, 1) where p.account = 'a'`;
    const problems = columnLists(sql).flatMap(listProblems);
    expect(problems).toEqual([
      'insert names upstream_paging.nonsense, which the table does not have',
      'set names sync_state.lats, which the table does not have',
      'set names upstream_paging.longest, which the table does not have',
    ]);
    expect(listProblems({ table: 'webhook_endpoints', kind: 'insert', names: ['id', 'url'], hole: false })).toEqual([
      'insert into webhook_endpoints leaves out events (not null, no default)',
      'insert into webhook_endpoints leaves out secret (not null, no default)',
    ]);
    expect(listProblems({ table: 'webhook_endpoints', kind: 'insert', names: ['id'], hole: true })).toEqual([]);
    expect(listProblems({ table: 'sync_states', kind: 'set', names: [], hole: false })).toEqual([
      'set names table sync_states, which src/db/schema.ts does not declare',
    ]);
  });

  test('every column named in src/ exists in its drizzle table, and full insert lists leave out no required column', () => {
    const problems: string[] = [];
    let lists = 0;
    for (const { file, text } of SOURCES) {
      for (const literal of literalsOf(text)) {
        for (const list of columnLists(literal)) {
          lists++;
          for (const p of listProblems(list)) problems.push(`${file}: ${p}`);
        }
      }
    }
    expect(problems, problems.join('\n')).toEqual([]);
    // The reader still sees the statements it checks (a broken pattern would check nothing).
    expect(lists).toBeGreaterThan(30);
  });
});

/** A list naming this many columns of one table, and at least {@link MOST} of them, reads (or types) whole rows. */
const AT_LEAST = 4;
const MOST = 0.6;

/** Whether `named` of a table's `all` columns is most of them. */
const isMost = (named: number, all: number): boolean => named >= AT_LEAST && named >= MOST * all;

/**
 * The select and returning lists of one SQL text (lower-cased) and the table each reads: a select's
 * is the table right after its `from` (none for a subquery or `unnest`), a returning list's is its
 * statement's. A text that is no statement (a fragment kept in a constant) may read any table.
 */
function readLists(sql: string): Array<{ list: string; table: string | null }> {
  const lists: Array<{ list: string; table: string | null }> = [];
  for (const m of sql.matchAll(/\b(select|returning)\b/g)) {
    const start = (m.index ?? 0) + m[0].length;
    const from = new RegExp(`\\bfrom\\s+(${IDENT})?`).exec(sql.slice(start));
    const list = from ? sql.slice(start, start + from.index) : sql.slice(start);
    if (m[1] === 'select') lists.push({ list, table: from?.[1] ?? '' });
    else {
      const statement = [
        ...sql.slice(0, m.index).matchAll(new RegExp(`\\b(?:insert\\s+into|update|delete\\s+from)\\s+(${IDENT})`, 'g')),
      ].at(-1);
      lists.push({ list, table: statement?.[1] ?? '' });
    }
  }
  if (lists.length === 0 && !/\b(insert|update|delete|create|alter|with)\b/.test(sql)) lists.push({ list: sql, table: null });
  return lists;
}

/** The tables most of whose columns one read list of `text` names by hand (aliases and string literals aside). */
function handWrittenRowReads(text: string): string[] {
  return readLists(text.toLowerCase()).flatMap(({ list, table: read }) => {
    const tokens = new Set(list.replace(/"[^"]*"|'[^']*'/g, ' ').match(/\b[a-z_][a-z0-9_]*\b/g) ?? []);
    return TABLES.filter((table) => {
      if (read !== null && getTableName(table) !== read) return false;
      const columns = Object.values(getTableColumns(table)).map((c) => c.name);
      return isMost(columns.filter((c) => tokens.has(c)).length, columns.length);
    }).map((table) => getTableName(table));
  });
}

/** `Name ~ table` for each interface or object type of a file whose keys are (mostly) those of a table, and most of them. */
function handWrittenRowTypes(text: string): string[] {
  const out: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isInterfaceDeclaration(node) || ts.isTypeLiteralNode(node)) {
      const keys = node.members.flatMap((m) => (ts.isPropertySignature(m) && ts.isIdentifier(m.name) ? [m.name.text] : []));
      for (const table of TABLES) {
        const tableKeys = Object.keys(getTableColumns(table));
        const shared = keys.filter((k) => tableKeys.includes(k)).length;
        if (isMost(shared, tableKeys.length) && shared >= 0.75 * keys.length) {
          out.push(`${ts.isInterfaceDeclaration(node) ? node.name.text : '{…}'} ~ ${getTableName(table)}`);
        }
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(ts.createSourceFile('x.ts', text, ts.ScriptTarget.Latest, true));
  return out;
}

describe('no hand-written copies of a table in src/', () => {
  test('the readers find what they are for', () => {
    // As the audit's tables module spelled them before its rows were derived.
    expect(
      handWrittenRowReads(`group_id as "groupId", type, sample_offset as "sampleOffset", sample_cursor as "sampleCursor",
      sample_after_id as "sampleAfterId", pending_count as "pendingCount", \${} as "pendingCountAt", pending_extras, last_error`),
    ).toEqual(['audit_state']);
    expect(
      handWrittenRowReads(`select account, id, enabled, problems, missing_events as "missingEvents", \${} as "checkedAt", \${} as "reenabledAt"
       from audit_webhooks order by id`),
    ).toEqual(['audit_webhooks']);
    expect(handWrittenRowReads(`select \${} from audit_webhooks order by id`)).toEqual([]);
    expect(handWrittenRowReads(`select id, url, events from webhook_endpoints order by id`)).toEqual([]);
    expect(handWrittenRowReads(`insert into audit_webhooks (id, enabled, problems, missing_events, checked_at) values ($1)`)).toEqual([]);
    expect(handWrittenRowReads(`insert into t (a) select id, enabled, problems, missing_events from unnest($1::text[])`)).toEqual([]);
    expect(
      handWrittenRowReads(`update audit_webhooks set enabled = true returning id, enabled, problems, missing_events, checked_at`),
    ).toEqual(['audit_webhooks']);
    expect(
      handWrittenRowTypes(`interface AuditTally { rowsChecked: number; inFlight: number; content: number; missing: number; extra: number;
        count: number; repaired: number; unrepaired: number; missedDeliveries: number }`),
    ).toEqual(['AuditTally ~ audit_results']);
    expect(
      handWrittenRowTypes(`type T = Omit<RowOf<typeof auditResults>, 'id'>; interface P { id: string; factAt: string | null }`),
    ).toEqual([]);
  });

  // The clients of the service describe its wire (a webhook as its API has it), not our tables; the
  // simulator keeps its own world and has no table.
  const OWN = SOURCES.filter((s) => !s.file.startsWith('upstream/') && s.file !== 'db/schema.ts');

  test('no select or returning list spells out most columns of a table (use rowSelectSql)', () => {
    const found = OWN.flatMap(({ file, text }) => literalsOf(text).flatMap((l) => handWrittenRowReads(l).map((t) => `${file}: ${t}`)));
    expect(found).toEqual([]);
  });

  test('no interface spells out most keys of a table (use RowOf)', () => {
    const found = OWN.flatMap(({ file, text }) => handWrittenRowTypes(text).map((t) => `${file}: ${t}`));
    expect(found).toEqual([]);
  });
});

describe('whole rows derive from the table', () => {
  test('a row select list reads every column as its drizzle key, timestamps canonical, omitted columns left out', () => {
    const list = rowSelectSql(schema.syncState, { omit: ['updatedAt'] });
    const aliases = [...list.matchAll(/ as "(\w+)"/g)].map((m) => m[1]);
    const keys = Object.keys(getTableColumns(schema.syncState));
    expect(aliases).toEqual(keys.filter((k) => k !== 'updatedAt'));
    expect(list).toContain(`${canonicalTimestampSql('cursor')} as "cursor"`);
    expect(list).toContain(`full_cursor as "fullCursor"`);
    expect(rowSelectSql(schema.webhookEndpoints, { qualifier: 'e' })).toContain(`e.secret as "secret"`);
  });

  test('a table whose int8 columns node-postgres returns as strings is refused as a whole row', () => {
    expect(() => rowSelectSql(schema.webhookDeliveries)).toThrow(/id: PgBigSerial64/);
  });

  test('every table of the schema is seen', () => {
    expect([...TABLE_BY_NAME.keys()]).toEqual(
      expect.arrayContaining(['subscribers', 'sync_state', 'upstream_paging', 'webhook_endpoints']),
    );
    expect(TABLE_BY_NAME.has('current_group_members')).toBe(false);
  });
});

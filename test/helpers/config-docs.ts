/**
 * The configuration table of docs/operations.md is generated from the settings in src/config.ts:
 * `npm run docs:config` (this file run directly) rewrites it between the markers, and
 * test/unit/config.test.ts fails when what is there differs from what the settings generate.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { configTable } from '../../src/config.js';

export const CONFIG_DOCS = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../docs/operations.md');

export const TABLE_START = '<!-- settings table: generated from src/config.ts by `npm run docs:config`; edit the settings there -->';
export const TABLE_END = '<!-- end of settings table -->';

/** The text between the markers (trimmed), or undefined when a marker is missing. */
export function tableIn(markdown: string): string | undefined {
  const start = markdown.indexOf(TABLE_START);
  const end = markdown.indexOf(TABLE_END);
  if (start < 0 || end < start) return undefined;
  return markdown.slice(start + TABLE_START.length, end).trim();
}

/** `markdown` with the text between the markers replaced by `table`. */
export function withTable(markdown: string, table: string): string {
  const start = markdown.indexOf(TABLE_START);
  const end = markdown.indexOf(TABLE_END);
  if (start < 0 || end < start) throw new Error(`${CONFIG_DOCS}: the markers ${TABLE_START} … ${TABLE_END} are missing`);
  return `${markdown.slice(0, start + TABLE_START.length)}\n\n${table}\n\n${markdown.slice(end)}`;
}

function main(): void {
  const before = readFileSync(CONFIG_DOCS, 'utf8');
  const after = withTable(before, configTable());
  if (after === before) {
    process.stdout.write(`${path.relative(process.cwd(), CONFIG_DOCS)}: the settings table is up to date\n`);
    return;
  }
  writeFileSync(CONFIG_DOCS, after);
  process.stdout.write(`${path.relative(process.cwd(), CONFIG_DOCS)}: settings table rewritten\n`);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main();

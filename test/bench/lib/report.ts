/**
 * Shared shapes and output for benchmarks: figures are printed as a table and written as JSON;
 * nothing here asserts on timing (conventions: benchmarks never fail on speed).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';

export interface BenchFigure {
  name: string;
  value: number;
  unit: string;
  /** The figure this one is compared with (same unit), or null. */
  baseline: number | null;
  /** value / baseline, or null. */
  ratio: number | null;
  note?: string;
}

export interface BenchResult {
  bench: string;
  rows: number;
  startedAt: string;
  durationMs: number;
  environment: Record<string, string>;
  figures: BenchFigure[];
}

export function figure(name: string, value: number, unit: string, baseline: number | null = null, note?: string): BenchFigure {
  const f: BenchFigure = {
    name,
    value: round(value),
    unit,
    baseline: baseline === null ? null : round(baseline),
    ratio: baseline ? round(value / baseline, 3) : null,
  };
  if (note) f.note = note;
  return f;
}

export function round(n: number, digits = 0): number {
  const p = 10 ** digits;
  return Math.round(n * p) / p;
}

export function printTable(result: BenchResult, out: (line: string) => void = console.log): void {
  const header = ['figure', 'value', 'unit', 'baseline', 'ratio'];
  const body = result.figures.map((f) => [
    f.name,
    f.value.toLocaleString('en-US'),
    f.unit,
    f.baseline === null ? '' : f.baseline.toLocaleString('en-US'),
    f.ratio === null ? '' : `${f.ratio.toFixed(2)}x`,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  out(`${result.bench}: ${result.rows.toLocaleString('en-US')} rows, ${(result.durationMs / 1000).toFixed(1)} s`);
  out(line(header));
  out(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const r of body) out(line(r));
  for (const f of result.figures) if (f.note) out(`  ${f.name}: ${f.note}`);
}

export function writeJson(file: string, result: BenchResult): void {
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
}

/** Seconds-resolution timer helper: runs `fn`, returns elapsed milliseconds. */
export async function timed(fn: () => Promise<unknown>): Promise<number> {
  const start = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - start) / 1e6;
}

/** Value checks and small helpers shared by the store's table families. */
import { isLosslessNumber, stringify as losslessStringify } from 'lossless-json';
import { MIRROR_SOURCES, type MirrorSource } from '../../db/schema.js';
import { isCanonicalTimestamp } from '../../ground/time.js';

/**
 * JSON text for a `jsonb` parameter. `extra` may hold lossless-json numbers or bigints (ids above
 * 2^53, invariant 6): those are written with their exact digits, which `jsonb` keeps.
 */
export function toJsonText(value: unknown): string {
  return hasExactNumbers(value) ? (losslessStringify(value) ?? 'null') : JSON.stringify(value);
}

export function hasExactNumbers(value: unknown): boolean {
  if (typeof value === 'bigint') return true;
  if (typeof value !== 'object' || value === null) return false;
  if (isLosslessNumber(value)) return true;
  if (Array.isArray(value)) return value.some(hasExactNumbers);
  for (const v of Object.values(value)) if (hasExactNumbers(v)) return true;
  return false;
}

export function assertTimestamp(value: unknown, what: string): void {
  if (!isCanonicalTimestamp(value)) {
    throw new TypeError(`${what}: expected a canonical UTC timestamp like 2024-05-28T10:30:29.000000Z, got ${String(value)}`);
  }
}

export function assertTimestampOrNull(value: unknown, what: string): void {
  if (value !== null) assertTimestamp(value, what);
}

export function assertId(value: unknown, what: string): asserts value is string {
  if (typeof value !== 'string' || value === '') throw new TypeError(`${what}: expected a non-empty string id`);
}

export function assertVia(value: unknown): asserts value is MirrorSource {
  if (!(MIRROR_SOURCES as readonly unknown[]).includes(value))
    throw new TypeError(`via: expected one of ${MIRROR_SOURCES.join(', ')}, got ${String(value)}`);
}

/** Counts of one bulk upsert; they add up to the number of input rows. */
export interface UpsertCounts {
  /** New rows. */
  inserted: number;
  /** Existing rows changed. */
  updated: number;
  /** Rows already stored with the same version and content: nothing written. */
  unchanged: number;
  /**
   * Rows not applied because the stored version is newer, or because a newer (or, on a tie, later)
   * row for the same key came in the same call.
   */
  skipped: number;
}

export const EMPTY_COUNTS: UpsertCounts = { inserted: 0, updated: 0, unchanged: 0, skipped: 0 };

/**
 * Indices of the rows to keep, one per key: the newest by `at`, and on a tie the later one in the
 * array (docs/architecture.md, "Traps we work around": duplicate keys inside one `INSERT … ON CONFLICT` fail). Canonical
 * timestamps compare as strings. Indices come back in input order.
 */
export function newestPerKey<T>(rows: readonly T[], key: (row: T) => string, at: (row: T) => string): number[] {
  const best = new Map<string, number>();
  rows.forEach((row, i) => {
    const k = key(row);
    const j = best.get(k);
    if (j === undefined || at(row) >= at(rows[j] as T)) best.set(k, i);
  });
  const kept = [...best.values()];
  return kept.length === rows.length ? kept : kept.sort((a, b) => a - b);
}

/** Postgres types of the store's array parameters. */
export type { PgType } from '../../db/subscriber-columns.js';

/**
 * Legacy list query parameters: `limit`, `offset` and `filters[<key>][<op>]=YYYY-MM-DD` (docs/upstream.md, "Legacy lists").
 * Fastify's default querystring parser does not nest `filters[a][b]`, so the raw query is read
 * with URLSearchParams here.
 */
import { addDays, parseYmd, startOfLocalDay } from './time.js';
import type { Ymd, Zone } from './time.js';

export const FILTER_KEYS = ['date_subscribe', 'date_unsubscribe', 'date_created', 'date_updated'] as const;
export type FilterKey = (typeof FILTER_KEYS)[number];

export const FILTER_OPS = ['$gt', '$gte', '$lt', '$lte'] as const;
export type FilterOp = (typeof FILTER_OPS)[number];

/**
 * How a day-granular filter meets stored times, both undocumented upstream (docs/architecture.md, invariant 4):
 * `midnight` compares with D 00:00 (`$gt D` = after D 00:00); `whole-day` compares calendar days
 * (`$gt D` = from D+1 00:00 on).
 */
export type Boundary = 'midnight' | 'whole-day';
export const BOUNDARIES: readonly Boundary[] = ['midnight', 'whole-day'];

export interface FilterClause {
  readonly key: FilterKey;
  readonly op: FilterOp;
  readonly date: Ymd;
  readonly text: string;
}

export interface ListQuery {
  readonly filters: readonly FilterClause[];
  readonly limit: number;
  readonly offset: number;
}

/** Half-open range over epoch seconds: a stored time t matches when `fromSec <= t < toSec`. */
export interface SecondsRange {
  readonly key: FilterKey;
  readonly fromSec: number;
  readonly toSec: number;
}

/** A request the legacy API answers with HTTP 400. */
export class QueryError extends Error {
  override readonly name = 'QueryError';
}

export const DEFAULT_LIMIT = 100;
const FILTER_PARAM = /^filters\[([^\]]*)\]\[([^\]]*)\]$/;

export function parseListQuery(rawQuery: string): ListQuery {
  const params = new URLSearchParams(rawQuery);
  const filters: FilterClause[] = [];
  for (const [name, value] of params) {
    if (name.startsWith('filters')) filters.push(parseFilterParam(name, value));
  }
  return {
    filters,
    limit: parseCount(params.get('limit'), 'limit', DEFAULT_LIMIT),
    offset: parseCount(params.get('offset'), 'offset', 0),
  };
}

function parseFilterParam(name: string, value: string): FilterClause {
  const match = FILTER_PARAM.exec(name);
  if (!match) throw new QueryError(`Invalid filter parameter: ${name} (expected filters[<key>][<operator>])`);
  const key = match[1] ?? '';
  const op = match[2] ?? '';
  if (!isFilterKey(key)) throw new QueryError(`Invalid filter key: ${key} (allowed: ${FILTER_KEYS.join(', ')})`);
  if (!isFilterOp(op)) throw new QueryError(`Invalid filter operator: ${op} (allowed: ${FILTER_OPS.join(', ')})`);
  const date = parseYmd(value);
  if (!date) throw new QueryError(`Invalid date for filters[${key}][${op}]: ${value} (expected YYYY-MM-DD)`);
  return { key, op, date, text: value };
}

function parseCount(value: string | null, name: string, fallback: number): number {
  if (value === null || value === '') return fallback;
  if (!/^\d{1,9}$/.test(value)) throw new QueryError(`Invalid ${name}: ${value} (expected a non-negative integer)`);
  return Number(value);
}

export function isFilterKey(value: string): value is FilterKey {
  return (FILTER_KEYS as readonly string[]).includes(value);
}

export function isFilterOp(value: string): value is FilterOp {
  return (FILTER_OPS as readonly string[]).includes(value);
}

export function isBoundary(value: string): value is Boundary {
  return (BOUNDARIES as readonly string[]).includes(value);
}

/** Turns the clauses into one seconds range per key (clauses on one key intersect). */
export function compileFilters(clauses: readonly FilterClause[], boundary: Boundary, zone: Zone): SecondsRange[] {
  const ranges = new Map<FilterKey, { fromSec: number; toSec: number }>();
  for (const clause of clauses) {
    const range = ranges.get(clause.key) ?? { fromSec: -Infinity, toSec: Infinity };
    const bound = clauseBound(clause, boundary, zone);
    if (bound.fromSec !== undefined) range.fromSec = Math.max(range.fromSec, bound.fromSec);
    if (bound.toSec !== undefined) range.toSec = Math.min(range.toSec, bound.toSec);
    ranges.set(clause.key, range);
  }
  return [...ranges].map(([key, range]) => ({ key, ...range }));
}

function clauseBound(clause: FilterClause, boundary: Boundary, zone: Zone): { fromSec?: number; toSec?: number } {
  const dayStart = startOfLocalDay(clause.date, zone) / 1000;
  if (boundary === 'midnight') {
    switch (clause.op) {
      case '$gt':
        return { fromSec: dayStart + 1 };
      case '$gte':
        return { fromSec: dayStart };
      case '$lt':
        return { toSec: dayStart };
      case '$lte':
        return { toSec: dayStart + 1 };
    }
  }
  const nextDayStart = startOfLocalDay(addDays(clause.date, 1), zone) / 1000;
  switch (clause.op) {
    case '$gt':
      return { fromSec: nextDayStart };
    case '$gte':
      return { fromSec: dayStart };
    case '$lt':
      return { toSec: dayStart };
    case '$lte':
      return { toSec: nextDayStart };
  }
}

export function inRange(range: SecondsRange, epochSec: number): boolean {
  return epochSec >= range.fromSec && epochSec < range.toSec;
}

/**
 * The legacy v2 read interface (spec §4.1): group subscribers (all or by type), their count, date
 * filters and offset paging. Every request goes through `http.ts` (timeouts, retries, typed errors,
 * lossless ids: invariant 6) and, when given, the shared rate limiter (invariant 7).
 *
 * Paging follows DESIGN.md "Facts": lists answer a bare array with no total and may silently cap the
 * page size, so a full pass reads until an empty page and learns the cap when a short page is
 * followed by a non-empty one; an incremental pass stops at the first page shorter than the
 * effective limit. One page is held at a time (invariant 8).
 */
import type { Logger } from '../log.js';
import { SUBSCRIBER_TYPES, type SubscriberType } from '../db/schema.js';
import { isRealDate } from '../time.js';
import {
  createHttpClient,
  isPlainObject,
  UpstreamBodyError,
  type HttpClientOptions,
  type HttpStats,
  type RequestGate,
  type RequestTarget,
} from './http.js';

export const LEGACY_LABEL = 'legacy API';
export const DEFAULT_API_KEY_HEADER = 'X-Service-ApiKey';

// ---------------------------------------------------------------------------------------------
// Filters (spec §4.1; day-granular, invariant 4)
// ---------------------------------------------------------------------------------------------

export const FILTER_KEYS = ['date_subscribe', 'date_unsubscribe', 'date_created', 'date_updated'] as const;
export type FilterKey = (typeof FILTER_KEYS)[number];

export const FILTER_OPS = ['$gt', '$gte', '$lt', '$lte'] as const;
export type FilterOp = (typeof FILTER_OPS)[number];

export interface DateFilter {
  key: FilterKey;
  op: FilterOp;
  /** `YYYY-MM-DD`, a real calendar day. */
  date: string;
}

/**
 * Query parameters `filters[<key>][<op>]=<date>` for the given filters. Throws a TypeError naming
 * the bad part (key, operator or date) rather than sending something the service would misread.
 */
export function buildFilters(filters: readonly DateFilter[]): Record<string, string> {
  if (!Array.isArray(filters)) throw new TypeError('filters must be an array of {key, op, date}');
  const params: Record<string, string> = {};
  filters.forEach((filter: unknown, index) => {
    if (!isPlainObject(filter)) throw new TypeError(`filter #${index + 1} must be an object {key, op, date}`);
    const { key, op, date } = filter;
    if (typeof key !== 'string' || !(FILTER_KEYS as readonly string[]).includes(key)) {
      throw new TypeError(`filter key ${JSON.stringify(key)} is not one of ${FILTER_KEYS.join(', ')}`);
    }
    if (typeof op !== 'string' || !(FILTER_OPS as readonly string[]).includes(op)) {
      throw new TypeError(`filter operator ${JSON.stringify(op)} (on ${key}) is not one of ${FILTER_OPS.join(', ')}`);
    }
    if (typeof date !== 'string' || !isRealDate(date)) {
      throw new TypeError(`filter date ${JSON.stringify(date)} (on ${key} ${op}) is not a real YYYY-MM-DD day`);
    }
    const name = `filters[${key}][${op}]`;
    if (name in params) throw new TypeError(`filter ${key} ${op} is given twice`);
    params[name] = date;
  });
  return params;
}

// ---------------------------------------------------------------------------------------------
// Argument checks
// ---------------------------------------------------------------------------------------------

export type GroupId = string | number;

/** Group ids are digits (kept as text: they may exceed 2^53 like subscriber ids). */
export function normalizeGroupId(groupId: GroupId): string {
  if (typeof groupId === 'number') {
    if (!Number.isSafeInteger(groupId) || groupId < 0) throw new TypeError(`group id ${groupId} is not a whole number`);
    return String(groupId);
  }
  if (typeof groupId !== 'string' || !/^\d{1,30}$/.test(groupId)) {
    throw new TypeError(`group id ${JSON.stringify(groupId)} is not numeric`);
  }
  return groupId;
}

export function assertSubscriberType(type: unknown): asserts type is SubscriberType {
  if (typeof type !== 'string' || !(SUBSCRIBER_TYPES as readonly string[]).includes(type)) {
    throw new TypeError(`subscriber type ${JSON.stringify(type)} is not one of ${SUBSCRIBER_TYPES.join(', ')}`);
  }
}

function assertCount(name: string, value: unknown, min: number): asserts value is number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) {
    throw new TypeError(`${name} must be a whole number >= ${min}, got ${JSON.stringify(value)}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Response shapes
// ---------------------------------------------------------------------------------------------

/**
 * One element of a legacy list as received (DESIGN.md "Facts": unknown keys kept). `id` is a number
 * when it fits in 2^53 and a string of digits when it does not (invariant 6); use `String(id)`.
 */
export interface LegacySubscriberRecord {
  id: number | string;
  [key: string]: unknown;
}

function isValidId(id: unknown): id is number | string {
  return (typeof id === 'number' && Number.isSafeInteger(id) && id >= 0) || (typeof id === 'string' && /^\d{1,30}$/.test(id));
}

function validateSubscriberList(body: unknown, target: RequestTarget, status: number): LegacySubscriberRecord[] {
  if (!Array.isArray(body)) {
    const got = body === undefined ? 'an empty body' : isPlainObject(body) ? 'an object' : typeof body;
    throw new UpstreamBodyError(`${target.label} answered ${got} instead of a list of subscribers on ${target.method} ${target.path}`, target, status);
  }
  body.forEach((item: unknown, index) => {
    if (!isPlainObject(item)) {
      throw new UpstreamBodyError(`${target.label} list item #${index} is not an object on ${target.method} ${target.path}`, target, status);
    }
    if (!isValidId(item.id)) {
      throw new UpstreamBodyError(
        `${target.label} list item #${index} has no valid id (got ${JSON.stringify(item.id) ?? 'nothing'}) on ${target.method} ${target.path}`,
        target,
        status,
      );
    }
  });
  return body as LegacySubscriberRecord[];
}

function validateCount(body: unknown, target: RequestTarget, status: number): number {
  const count = isPlainObject(body) ? body.count : undefined;
  if (typeof count === 'number' && Number.isSafeInteger(count) && count >= 0) return count;
  throw new UpstreamBodyError(`${target.label} answered no valid {count} on ${target.method} ${target.path}`, target, status);
}

// ---------------------------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------------------------

export interface ListOptions {
  type?: SubscriberType;
  limit: number;
  offset: number;
  filters?: readonly DateFilter[];
  signal?: AbortSignal;
}

export interface PageOptions {
  type?: SubscriberType;
  /** The `limit` asked for on every request (SYNC_PAGE_SIZE). */
  limit: number;
  /** Resume point; default 0. */
  startOffset?: number;
  filters?: readonly DateFilter[];
  /** `full` reads until an empty page; `incremental` stops at the first short page. */
  mode: 'full' | 'incremental';
  /** A page cap learned earlier (persisted by the caller); default: what this client learned, else `limit`. */
  effectiveLimit?: number;
  /** Called when a pass learns (or revises) the service's page cap. */
  onEffectiveLimit?: (limit: number) => void;
  signal?: AbortSignal;
}

export interface LegacyPage {
  /** Offset this page was read at. */
  offset: number;
  rows: LegacySubscriberRecord[];
  /** Effective page size in force for this page. */
  limit: number;
}

export interface LegacyClient {
  listGroupSubscribers(groupId: GroupId, options: ListOptions): Promise<LegacySubscriberRecord[]>;
  count(groupId: GroupId, type?: SubscriberType, options?: { signal?: AbortSignal }): Promise<number>;
  pages(groupId: GroupId, options: PageOptions): AsyncGenerator<LegacyPage, void, undefined>;
  /** The page cap this client has learned, if any. */
  effectiveLimit(): number | undefined;
  stats(): HttpStats;
}

export interface LegacyClientOptions {
  /** Legacy host without `/api/v2` (MAILER_LEGACY_URL). */
  baseUrl: string;
  apiKey: string;
  /** Default `X-Service-ApiKey` (spec §5). */
  apiKeyHeader?: string;
  limiter?: RequestGate;
  http?: Pick<HttpClientOptions, 'timeoutMs' | 'retry' | 'hooks' | 'defaultRetryAfterMs' | 'maxRetryAfterMs' | 'fetch'>;
  logger?: Logger;
}

function subscribersPath(groupId: string, type: SubscriberType | undefined): string {
  return `/api/v2/groups/${groupId}/subscribers${type ? `/${type}` : ''}`;
}

interface PageFingerprint {
  length: number;
  firstId: string;
  lastId: string;
}

/** Enough to recognise a repeated page without holding the previous page (invariant 8). */
function fingerprint(rows: LegacySubscriberRecord[]): PageFingerprint {
  return { length: rows.length, firstId: String(rows[0]?.id), lastId: String(rows.at(-1)?.id) };
}

function sameFingerprint(a: PageFingerprint, b: PageFingerprint): boolean {
  return a.length === b.length && a.firstId === b.firstId && a.lastId === b.lastId;
}

export function createLegacyClient(options: LegacyClientOptions): LegacyClient {
  if (!options.apiKey) throw new TypeError('legacy client: apiKey is required');
  const header = options.apiKeyHeader ?? DEFAULT_API_KEY_HEADER;
  const http = createHttpClient({
    ...options.http,
    baseUrl: options.baseUrl,
    label: LEGACY_LABEL,
    credentialName: 'API key',
    headers: { [header]: options.apiKey },
    secrets: [options.apiKey],
    gate: options.limiter,
  });
  const logger = options.logger;
  let learnedCap: number | undefined;

  async function listGroupSubscribers(groupId: GroupId, list: ListOptions): Promise<LegacySubscriberRecord[]> {
    const id = normalizeGroupId(groupId);
    if (list.type !== undefined) assertSubscriberType(list.type);
    assertCount('limit', list.limit, 1);
    assertCount('offset', list.offset, 0);
    const filters = list.filters ? Object.entries(buildFilters(list.filters)) : [];
    const query: Array<[string, string]> = [['limit', String(list.limit)], ['offset', String(list.offset)], ...filters];
    const response = await http.request({ method: 'GET', path: subscribersPath(id, list.type), query, signal: list.signal });
    const target: RequestTarget = { label: LEGACY_LABEL, method: 'GET', path: subscribersPath(id, list.type) };
    return validateSubscriberList(response.body, target, response.status);
  }

  async function count(groupId: GroupId, type?: SubscriberType, opts?: { signal?: AbortSignal }): Promise<number> {
    const id = normalizeGroupId(groupId);
    if (type !== undefined) assertSubscriberType(type);
    const path = `${subscribersPath(id, type)}/count`;
    const response = await http.request({ method: 'GET', path, signal: opts?.signal });
    return validateCount(response.body, { label: LEGACY_LABEL, method: 'GET', path }, response.status);
  }

  /** Records a page cap (logged once per change); `limit === page.limit` means no cap. */
  function learn(limit: number, page: PageOptions, groupId: string): void {
    page.onEffectiveLimit?.(limit);
    const cap = limit < page.limit ? limit : undefined;
    if (learnedCap === cap) return;
    learnedCap = cap;
    const context = { groupId, type: page.type, requestedLimit: page.limit, effectiveLimit: limit };
    if (cap === undefined) logger?.info(context, `legacy API no longer caps list pages below ${page.limit} rows`);
    else {
      logger?.warn(context, `legacy API caps list pages at ${cap} rows (asked for ${page.limit}); using ${cap} as the effective page size`);
    }
  }

  async function* pages(groupId: GroupId, page: PageOptions): AsyncGenerator<LegacyPage, void, undefined> {
    const id = normalizeGroupId(groupId);
    if (page.type !== undefined) assertSubscriberType(page.type);
    assertCount('limit', page.limit, 1);
    if (page.mode !== 'full' && page.mode !== 'incremental') throw new TypeError(`page mode must be full or incremental, got ${JSON.stringify(page.mode)}`);
    if (page.effectiveLimit !== undefined) assertCount('effectiveLimit', page.effectiveLimit, 1);
    if (page.filters) buildFilters(page.filters); // fail before the first request
    let offset = page.startOffset ?? 0;
    assertCount('startOffset', offset, 0);
    let effective = Math.min(page.limit, page.effectiveLimit ?? learnedCap ?? page.limit);
    let previous: PageFingerprint | undefined;
    // Full mode: length of the last page shorter than `effective`, until the next page says why.
    let shortPage: number | undefined;

    for (;;) {
      const rows = await listGroupSubscribers(id, { type: page.type, limit: page.limit, offset, filters: page.filters, signal: page.signal });
      if (rows.length === 0) return;
      const current = fingerprint(rows);
      // Only a repeated page of two or more rows means "offset ignored": under concurrent changes
      // the same single row can legitimately sit at two consecutive offsets (seen in the demo with
      // churn), and a service that ignores offset repeats its whole first page anyway.
      if (previous && current.length > 1 && sameFingerprint(previous, current)) {
        const path = subscribersPath(id, page.type);
        throw new UpstreamBodyError(
          `${LEGACY_LABEL} returned the same page at offsets ${offset - previous.length} and ${offset} on GET ${path}; it seems to ignore offset`,
          { label: LEGACY_LABEL, method: 'GET', path },
          200,
        );
      }
      if (shortPage !== undefined) {
        // A short page followed by a non-empty one: the service caps pages (DESIGN.md "Facts"). A
        // longer follow-up contradicts a cap of that size (the set grew meanwhile): no conclusion.
        if (rows.length <= shortPage) {
          effective = shortPage;
          learn(effective, page, id);
        }
        shortPage = undefined;
      }
      if (rows.length > effective && effective < page.limit) {
        // The cap we assumed was lower than what the service now sends.
        effective = Math.min(page.limit, rows.length);
        learn(effective, page, id);
      }
      yield { offset, rows, limit: effective };
      offset += rows.length;
      previous = current;
      if (rows.length < effective) {
        if (page.mode === 'incremental') return;
        shortPage = rows.length;
      }
    }
  }

  return {
    listGroupSubscribers,
    count,
    pages,
    effectiveLimit: () => learnedCap,
    stats: () => http.stats(),
  };
}

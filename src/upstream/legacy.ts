/**
 * The legacy v2 read interface (docs/upstream.md, "Legacy lists"): group subscribers (all or by type), their count, date
 * filters and offset paging. Every request goes through `http.ts` (timeouts, retries, typed errors,
 * lossless ids: invariant 6) and, when given, the shared rate limiter (invariant 7).
 *
 * Paging follows docs/upstream.md, "Legacy lists": lists answer a bare array with no total, may silently cap the
 * page size, and shift under offset paging while members leave. A full pass therefore reads with
 * overlapping pages (each request re-reads the tail of the previous page and steps back when that
 * tail moved away), reports any page it could not join to the previous one, and learns the cap only
 * from evidence churn cannot fake; an incremental pass stops at the first page shorter than any cap
 * the service can have. One page is held at a time (invariant 8).
 */
import type { Logger } from '../ground/log.js';
import { SUBSCRIBER_TYPES, type SubscriberType } from '../db/schema.js';
import { isRealDate } from '../ground/time.js';
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
// Filters (docs/upstream.md, "Legacy lists"; day-granular, invariant 4)
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
 * One element of a legacy list as received (docs/upstream.md, "Legacy Single Subscriber": unknown keys kept). `id` is a number
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

/**
 * What this install knows about the service's silent page cap (docs/upstream.md, "Legacy lists"). The cap belongs
 * to the service, so there is one per install, shared by every (group, type) and every pass.
 */
export interface PageCapKnowledge {
  /** The cap, learned only from evidence churn cannot fake (see `observeShortPage`); null = none known. */
  cap: number | null;
  /** The longest page the service ever served: it caps no lower, so a shorter page is a list's end. */
  longestPage: number;
  /** A short page that was followed by more rows, not yet seen a second time: its length and where it was served. */
  candidate: { length: number; where: string } | null;
}

export function emptyCapKnowledge(): PageCapKnowledge {
  return { cap: null, longestPage: 0, candidate: null };
}

export interface PageOptions {
  type?: SubscriberType;
  /** The `limit` asked for on every request (SYNC_PAGE_SIZE); it never shrinks. */
  limit: number;
  /** Resume point; default 0. */
  startOffset?: number;
  /** Ids of the page read before `startOffset` (a resumed full pass): lets the first page prove it skipped nothing. */
  startTail?: readonly string[];
  filters?: readonly DateFilter[];
  /**
   * `full` reads the whole list with overlapping pages (each request re-reads the tail of the last
   * page, so a shift is seen and undone); `incremental` reads until a page shorter than any cap
   * the service can have.
   */
  mode: 'full' | 'incremental';
  /** Install-wide cap knowledge (persisted by the caller); updated in place as pages arrive. */
  capKnowledge?: PageCapKnowledge;
  /**
   * How long the list was when the pass began (its `/count`). A short page is taken as evidence of a
   * cap only where this says the list went on well beyond it; without it nothing is learned.
   */
  knownLength?: number;
  /** A page cap known for certain (tests, callers without persistence): same as `capKnowledge.cap`. */
  effectiveLimit?: number;
  /** Called when a pass learns (or drops) the service's page cap. */
  onEffectiveLimit?: (limit: number) => void;
  signal?: AbortSignal;
}

export interface LegacyPage {
  /** Offset this page was read at. */
  offset: number;
  /** Rows not already yielded by the previous page (the overlap is left out). */
  rows: LegacySubscriberRecord[];
  /** Effective page size in force for this page (the learned cap, else the requested limit). */
  limit: number;
  /** Where the next request will read: the checkpoint of a full pass. */
  nextOffset: number;
  /** Ids at the end of this page, saved with the checkpoint so a resumed pass can prove continuity. */
  tail: string[];
  /**
   * False when this full-pass page could not be joined to the previous one (the list shifted by
   * more than the overlap and stepping back did not find it again): rows may have been skipped.
   */
  continuous: boolean;
  /** The service's clock when it answered (its `Date` header, ms), null when it sent none. */
  serviceTime: number | null;
}

/**
 * Rows each full-pass request re-reads from the previous page: about 4 % of a page (1 to 20 rows),
 * so up to that many members may leave ahead of the read position between two requests without a
 * skip, for ~4 % more requests. Below the page length, so every request moves on; a page of one
 * row is read again at the same offset (that request also shows whether the list ends there).
 */
export function overlapFor(pageLength: number): number {
  if (pageLength <= 1) return pageLength;
  return Math.min(20, Math.max(1, Math.floor(pageLength / 25)), pageLength - 1);
}

/** An offset past any real list (9 digits, what the service's validation accepts). */
const FAR_OFFSET = 999_999_999;

/** How many pages back a full pass looks for the previous page after a shift larger than the overlap. */
const MAX_STEP_BACKS = 3;

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
  /** Default `X-Service-ApiKey` (docs/upstream.md, "Authentication"). */
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
  // What this client learned, for callers that do not keep the knowledge themselves.
  const ownKnowledge = emptyCapKnowledge();

  async function listGroupSubscribers(groupId: GroupId, list: ListOptions): Promise<LegacySubscriberRecord[]> {
    return (await fetchList(groupId, list)).rows;
  }

  async function fetchList(groupId: GroupId, list: ListOptions): Promise<{ rows: LegacySubscriberRecord[]; serviceTime: number | null }> {
    const id = normalizeGroupId(groupId);
    if (list.type !== undefined) assertSubscriberType(list.type);
    assertCount('limit', list.limit, 1);
    assertCount('offset', list.offset, 0);
    const filters = list.filters ? Object.entries(buildFilters(list.filters)) : [];
    const query: Array<[string, string]> = [['limit', String(list.limit)], ['offset', String(list.offset)], ...filters];
    const response = await http.request({ method: 'GET', path: subscribersPath(id, list.type), query, signal: list.signal });
    const target: RequestTarget = { label: LEGACY_LABEL, method: 'GET', path: subscribersPath(id, list.type) };
    const date = Date.parse(response.headers.get('date') ?? '');
    return { rows: validateSubscriberList(response.body, target, response.status), serviceTime: Number.isNaN(date) ? null : date };
  }

  async function count(groupId: GroupId, type?: SubscriberType, opts?: { signal?: AbortSignal }): Promise<number> {
    const id = normalizeGroupId(groupId);
    if (type !== undefined) assertSubscriberType(type);
    const path = `${subscribersPath(id, type)}/count`;
    const response = await http.request({ method: 'GET', path, signal: opts?.signal });
    return validateCount(response.body, { label: LEGACY_LABEL, method: 'GET', path }, response.status);
  }

  /** Logs a change of the learned cap once and tells the caller. */
  function reportCap(knowledge: PageCapKnowledge, page: PageOptions, groupId: string): void {
    learnedCap = knowledge.cap ?? undefined;
    const context = { groupId, type: page.type, requestedLimit: page.limit, effectiveLimit: knowledge.cap ?? page.limit };
    page.onEffectiveLimit?.(knowledge.cap ?? page.limit);
    if (knowledge.cap === null) logger?.info(context, `legacy API serves pages longer than the cap learned before; no cap assumed`);
    else {
      logger?.warn(context, `legacy API caps list pages at ${knowledge.cap} rows (asked for ${page.limit}); using ${knowledge.cap} as the effective page size`);
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
    const knowledge = page.capKnowledge ?? ownKnowledge;
    if (page.effectiveLimit !== undefined && knowledge.cap === null) {
      knowledge.cap = page.effectiveLimit;
      knowledge.longestPage = Math.max(knowledge.longestPage, page.effectiveLimit);
    }
    const list = `${id}/${page.type ?? 'all'}`;
    const effective = () => Math.min(page.limit, knowledge.cap ?? page.limit);

    // Full mode: the previous page's ids, how many of them the next request re-reads, and the
    // length of the previous page when it was short (a cap, or the list's end for now).
    let previous: Set<string> | null = page.startTail && page.startTail.length > 0 ? new Set(page.startTail) : null;
    let previousPrint: PageFingerprint | undefined;
    let overlap = previous ? Math.min(previous.size, overlapFor(page.limit)) : 0;
    let shortBefore: { length: number; offset: number } | undefined;
    let stepBacks = 0;
    let probed = false;
    let continuous = offset === 0 || previous !== null;

    for (;;) {
      const { rows, serviceTime } = await fetchList(id, { type: page.type, limit: page.limit, offset, filters: page.filters, signal: page.signal });
      if (rows.length > knowledge.longestPage) knowledge.longestPage = rows.length;
      if (knowledge.cap !== null && rows.length > knowledge.cap) {
        // The service now sends more than the cap we knew: it was lifted or raised.
        knowledge.cap = null;
        knowledge.candidate = null;
        reportCap(knowledge, page, id);
      }

      if (page.mode === 'incremental') {
        if (rows.length === 0) return;
        yield { offset, rows, limit: effective(), nextOffset: offset + rows.length, tail: [], continuous: true, serviceTime };
        offset += rows.length;
        // A short page ends the pass only when the service has served longer pages: then it is no
        // cap. Otherwise one more request settles it (never in steady state: full passes serve long pages).
        if (rows.length < page.limit && rows.length < knowledge.longestPage) return;
        if (rows.length < page.limit && knowledge.cap !== null && rows.length < knowledge.cap) return;
        continue;
      }

      const current = fingerprint(rows);
      if (!probed && previousPrint && current.length > 1 && sameFingerprint(previousPrint, current)) {
        // An overlapping page starts inside the previous one, never at its first row. Members joining
        // ahead of the read position can repeat a page (the list shifted down by one step); a
        // service that ignores offset repeats it everywhere. One request far past any list tells.
        probed = true;
        const far = await fetchList(id, { type: page.type, limit: page.limit, offset: FAR_OFFSET, filters: page.filters, signal: page.signal });
        if (far.rows.length > 0 && sameFingerprint(fingerprint(far.rows), current)) {
          const path = subscribersPath(id, page.type);
          throw new UpstreamBodyError(
            `${LEGACY_LABEL} returned the same page at offsets ${offset} and ${FAR_OFFSET} on GET ${path}; it seems to ignore offset`,
            { label: LEGACY_LABEL, method: 'GET', path },
            200,
          );
        }
      }
      const joined = previous === null || rows.some((r) => previous?.has(String(r.id)));
      if (!joined && offset > 0 && stepBacks < MAX_STEP_BACKS) {
        // More members left ahead of the read position than the overlap covers: the previous
        // page's rows moved up. Look for them one page earlier instead of skipping rows.
        stepBacks += 1;
        offset = Math.max(0, offset - Math.max(1, effective() - overlap));
        continue;
      }
      if (!joined && offset > 0) continuous = false;
      if (!joined && offset === 0) continuous = true; // read from the top again: nothing before it can be missed
      stepBacks = 0;
      const fresh = previous ? rows.filter((r) => !previous?.has(String(r.id))) : rows;
      if (shortBefore !== undefined && fresh.length > 0) observeShortPage(knowledge, shortBefore, list, page, id);
      // The end: this page held only rows the request re-read on purpose (or none at all).
      if (rows.length === 0 || (fresh.length === 0 && joined && rows.length <= overlap)) {
        // A gap found on the last request must still reach the caller, who decides what it proves.
        if (!continuous) yield { offset, rows: [], limit: effective(), nextOffset: offset, tail: [], continuous, serviceTime };
        return;
      }
      overlap = overlapFor(rows.length);
      const nextOffset = offset + rows.length - overlap;
      const tail = rows.slice(rows.length - Math.max(overlap, 1)).map((r) => String(r.id));
      yield { offset, rows: fresh, limit: effective(), nextOffset, tail, continuous, serviceTime };
      shortBefore = rows.length < effective() ? { length: rows.length, offset } : undefined;
      previous = new Set(rows.map((r) => String(r.id)));
      previousPrint = current;
      continuous = true;
      offset = nextOffset;
    }
  }

  /**
   * A page shorter than asked was followed by more rows: either the service caps pages at that
   * length, or the list grew between the two requests (churn: the demo "learned" caps of 355, 277
   * and 359, its whole growing lists). Growth cannot fake all of: (a) the list's count at the start
   * of the pass held at least two such pages beyond this offset, (b) the service never served a
   * longer page, (c) the same length was seen so twice. Only then is it the cap.
   */
  function observeShortPage(
    knowledge: PageCapKnowledge,
    short: { length: number; offset: number },
    list: string,
    page: PageOptions,
    groupId: string,
  ): void {
    if (knowledge.cap !== null || short.length < knowledge.longestPage) return;
    if (page.knownLength === undefined || page.knownLength < short.offset + 2 * short.length) return;
    const seen = knowledge.candidate;
    if (seen && seen.length === short.length) {
      knowledge.cap = short.length;
      knowledge.candidate = null;
      reportCap(knowledge, page, groupId);
      return;
    }
    knowledge.candidate = { length: short.length, where: `${list}@${short.offset}` };
  }

  return {
    listGroupSubscribers,
    count,
    pages,
    effectiveLimit: () => learnedCap,
    stats: () => http.stats(),
  };
}

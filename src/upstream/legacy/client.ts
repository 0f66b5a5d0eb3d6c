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
 *
 * The paging decisions are pure steps in `legacy/paging.ts` (and the cap knowledge, a value, in
 * `legacy/cap-knowledge.ts`); `pages()` here only makes the requests they ask for.
 */
import type { Logger } from '../../ground/log.js';
import { SUBSCRIBER_TYPES, type SubscriberType } from '../../db/schema.js';
import { isRealDate } from '../../ground/time.js';
import { UpstreamBodyError, type RequestTarget } from '../errors.js';
import { legacyFieldDefinitions, type FieldDefinition } from '../fields.js';
import { createHttpClient, type HttpClientOptions, type HttpStats, type RequestGate } from '../http.js';
import { isPlainObject } from '../json.js';
import type { PageAdmission, Release } from '../page-gate.js';
import { emptyCapKnowledge, withKnownCap, type PageCapKnowledge } from './cap-knowledge.js';
import {
  fullPassNeedsNoRead,
  fullStep,
  incrementalStep,
  startFullPass,
  startIncrementalPass,
  type PagingContext,
  type PagingStepFunction,
  type PassPosition,
} from './paging.js';

export { emptyCapKnowledge, type PageCapKnowledge } from './cap-knowledge.js';
export { overlapFor } from './paging.js';

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
    throw new UpstreamBodyError(
      `${target.label} answered ${got} instead of a list of subscribers on ${target.method} ${target.path}`,
      target,
      status,
    );
  }
  body.forEach((item: unknown, index) => {
    if (!isPlainObject(item)) {
      throw new UpstreamBodyError(
        `${target.label} list item #${index} is not an object on ${target.method} ${target.path}`,
        target,
        status,
      );
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
  /** Install-wide cap knowledge (persisted by the caller) the pass starts from; never written to. */
  capKnowledge?: PageCapKnowledge;
  /**
   * Called with the new knowledge whenever a response changes it (also when the pass then fails):
   * the caller keeps the latest value and persists it.
   */
  onCapKnowledge?: (knowledge: PageCapKnowledge) => void;
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
  /**
   * Room for the pages in memory (page-gate.ts): each body waits for a room; a yielded page carries
   * its room as `release`, which the consumer calls once it committed the page.
   */
  memory?: Pick<PageAdmission, 'admit' | 'take'>;
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
  /** Step backs made to join this page to the previous one (the list moved by more than the overlap); absent = 0. */
  stepBacks?: number;
  /** The service's clock when it answered (its `Date` header, ms), null when it sent none. */
  serviceTime: number | null;
  /** Frees the page's room in memory (`PageOptions.memory`): called by the consumer once the page is committed. */
  release?: Release;
}

export interface LegacyClient {
  listGroupSubscribers(groupId: GroupId, options: ListOptions): Promise<LegacySubscriberRecord[]>;
  count(groupId: GroupId, type?: SubscriberType, options?: { signal?: AbortSignal }): Promise<number>;
  pages(groupId: GroupId, options: PageOptions): AsyncGenerator<LegacyPage, void, undefined>;
  /** The account's custom field definitions (docs/upstream.md, "Field definitions"): one request. */
  fields(options?: { signal?: AbortSignal }): Promise<FieldDefinition[]>;
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

/** Checks what `pages()` is given before any request; returns the normalized group id. */
function checkPageOptions(groupId: GroupId, page: PageOptions): string {
  const id = normalizeGroupId(groupId);
  if (page.type !== undefined) assertSubscriberType(page.type);
  assertCount('limit', page.limit, 1);
  const mode: unknown = page.mode;
  if (mode !== 'full' && mode !== 'incremental') throw new TypeError(`page mode must be full or incremental, got ${JSON.stringify(mode)}`);
  if (page.effectiveLimit !== undefined) assertCount('effectiveLimit', page.effectiveLimit, 1);
  if (page.filters) buildFilters(page.filters); // fail before the first request
  assertCount('startOffset', page.startOffset ?? 0, 0);
  return id;
}

function ignoresOffset(groupId: string, type: SubscriberType | undefined, offset: number, farOffset: number): UpstreamBodyError {
  const path = subscribersPath(groupId, type);
  return new UpstreamBodyError(
    `${LEGACY_LABEL} returned the same page at offsets ${offset} and ${farOffset} on GET ${path}; it seems to ignore offset`,
    { label: LEGACY_LABEL, method: 'GET', path },
    200,
  );
}

function subscribersPath(groupId: string, type: SubscriberType | undefined): string {
  return `/api/v2/groups/${groupId}/subscribers${type ? `/${type}` : ''}`;
}

/** What a client knows of the cap for callers that keep no knowledge themselves, and where it logs. */
interface ClientCaps {
  own: PageCapKnowledge;
  /** The cap learned last (`effectiveLimit()`). */
  learnedCap: number | undefined;
  logger: Logger | undefined;
}

/** Logs a change of the learned cap once and tells the caller. */
function reportCap(client: ClientCaps, knowledge: PageCapKnowledge, page: PageOptions, groupId: string): void {
  client.learnedCap = knowledge.cap ?? undefined;
  const logger = client.logger;
  const context = { groupId, type: page.type, requestedLimit: page.limit, effectiveLimit: knowledge.cap ?? page.limit };
  page.onEffectiveLimit?.(knowledge.cap ?? page.limit);
  if (knowledge.cap === null) logger?.info(context, `legacy API serves pages longer than the cap learned before; no cap assumed`);
  else {
    logger?.warn(
      context,
      `legacy API caps list pages at ${knowledge.cap} rows (asked for ${page.limit}); using ${knowledge.cap} as the effective page size`,
    );
  }
}

/**
 * Keeps the cap knowledge a pass's steps return: reported to the caller when it keeps its own,
 * else kept by this client; a change of the cap is logged once.
 */
function capKeeper(client: ClientCaps, id: string, page: PageOptions): CapKeeper {
  const store = (next: PageCapKnowledge): void => {
    if (page.capKnowledge) page.onCapKnowledge?.(next);
    else client.own = next;
  };
  let current = page.capKnowledge ?? client.own;
  // A cap given for certain is no news to report.
  const known = withKnownCap(current, page.effectiveLimit);
  if (known !== current) store((current = known));
  return {
    current: () => current,
    keep(next) {
      if (next === current) return;
      const capChanged = next.cap !== current.cap;
      store((current = next));
      if (capChanged) reportCap(client, next, page, id);
    },
  };
}

/** Where a pass keeps the cap knowledge its steps return. */
interface CapKeeper {
  current(): PageCapKnowledge;
  keep(next: PageCapKnowledge): void;
}

/** One list request's answer; `release` frees the room its body took (page-gate.ts), when it took one. */
interface ListAnswer {
  rows: LegacySubscriberRecord[];
  serviceTime: number | null;
  release?: Release;
}

/** How a read gets its room: a probe is read while its page is held, so it takes one without waiting (a pass must not wait on itself). */
function roomFor(memory: PageOptions['memory'], probe: boolean | undefined): ((bytes: number | null) => Promise<Release>) | undefined {
  if (!memory) return undefined;
  return probe ? () => Promise.resolve(memory.take()) : (bytes) => memory.admit(bytes);
}

/** What a pass needs besides its steps: the requests, the knowledge, and the error for a service that ignores offset. */
interface PassIo {
  context: PagingContext;
  /** `probe`: a second read for the same step, made while the first page is held (it must not wait for a room). */
  read(offset: number, probe?: boolean): Promise<ListAnswer>;
  caps: CapKeeper;
  ignoresOffset(offset: number, farOffset: number): Error;
}

/** What one step of a pass came to: the page to hand over (if any), and where the pass goes on (none: it ended). */
interface TakenStep<S> {
  page: LegacyPage | null;
  next: S | null;
}

/**
 * One step: the read at `state.offset` (and a probe if the step asks for one), decided by `step`.
 * Its own function so that the answer's parsed rows die with its frame: a pass waiting for its
 * next page must not still hold the last one (docs/benchmarks.md, "memory").
 */
async function takeStep<S extends PassPosition>(io: PassIo, step: PagingStepFunction<S>, state: S): Promise<TakenStep<S>> {
  const { rows, serviceTime, release } = await io.read(state.offset);
  let handedOver = false;
  try {
    let next = step(state, { rows }, io.caps.current(), io.context);
    io.caps.keep(next.knowledge);
    if (next.kind === 'probe') {
      const probe = await io.read(next.offset, true);
      probe.release?.();
      next = step(state, { rows, probe: probe.rows }, io.caps.current(), io.context);
      io.caps.keep(next.knowledge);
    }
    if (next.kind === 'ignores-offset') throw io.ignoresOffset(next.offset, next.farOffset);
    if (next.kind === 'probe') throw new Error('paging step asked for a second probe of the same page');
    const page = next.kind !== 'back' && next.page ? { ...next.page, serviceTime, release } : null;
    handedOver = page !== null;
    return { page, next: next.kind === 'end' ? null : next.state };
  } finally {
    // A page not handed over (a step back, an end without rows, an error) is not needed any more.
    if (!handedOver) release?.();
  }
}

/**
 * The I/O of a pass: reads the page each step asks for and hands pages to the consumer one at a
 * time (invariant 8). What to read next and when to stop is the step's (legacy/paging.ts).
 */
async function* walkPass<S extends PassPosition>(
  io: PassIo,
  step: PagingStepFunction<S>,
  start: S,
): AsyncGenerator<LegacyPage, void, undefined> {
  for (let state: S | null = start; state !== null;) {
    const taken: TakenStep<S> = await takeStep(io, step, state);
    state = taken.next;
    if (taken.page) yield taken.page;
    // The consumer holds the page it was given; this frame must not (see takeStep).
    taken.page = null;
  }
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
  // What this client learned, for callers that do not keep the knowledge themselves.
  const caps: ClientCaps = { own: emptyCapKnowledge(), learnedCap: undefined, logger: options.logger };

  async function listGroupSubscribers(groupId: GroupId, list: ListOptions): Promise<LegacySubscriberRecord[]> {
    return (await fetchList(groupId, list)).rows;
  }

  async function fetchList(
    groupId: GroupId,
    list: ListOptions,
    beforeBody?: (bytes: number | null) => Promise<Release>,
  ): Promise<ListAnswer> {
    const id = normalizeGroupId(groupId);
    if (list.type !== undefined) assertSubscriberType(list.type);
    assertCount('limit', list.limit, 1);
    assertCount('offset', list.offset, 0);
    const filters = list.filters ? Object.entries(buildFilters(list.filters)) : [];
    const query: Array<[string, string]> = [['limit', String(list.limit)], ['offset', String(list.offset)], ...filters];
    const response = await http.request({ method: 'GET', path: subscribersPath(id, list.type), query, signal: list.signal, beforeBody });
    const target: RequestTarget = { label: LEGACY_LABEL, method: 'GET', path: subscribersPath(id, list.type) };
    const date = Date.parse(response.headers.get('date') ?? '');
    try {
      const rows = validateSubscriberList(response.body, target, response.status);
      return { rows, serviceTime: Number.isNaN(date) ? null : date, release: response.release };
    } catch (error) {
      response.release?.();
      throw error;
    }
  }

  async function count(groupId: GroupId, type?: SubscriberType, opts?: { signal?: AbortSignal }): Promise<number> {
    const id = normalizeGroupId(groupId);
    if (type !== undefined) assertSubscriberType(type);
    const path = `${subscribersPath(id, type)}/count`;
    const response = await http.request({ method: 'GET', path, signal: opts?.signal });
    return validateCount(response.body, { label: LEGACY_LABEL, method: 'GET', path }, response.status);
  }

  // An async generator, so bad options reject the first `next()` like any other failure.
  async function* pages(groupId: GroupId, page: PageOptions): AsyncGenerator<LegacyPage, void, undefined> {
    const id = checkPageOptions(groupId, page);
    const startOffset = page.startOffset ?? 0;
    const pass: PassIo = {
      context: { limit: page.limit, knownLength: page.knownLength, list: `${id}/${page.type ?? 'all'}` },
      read: (offset, probe) =>
        fetchList(
          id,
          { type: page.type, limit: page.limit, offset, filters: page.filters, signal: page.signal },
          roomFor(page.memory, probe),
        ),
      caps: capKeeper(caps, id, page),
      ignoresOffset: (offset, farOffset) => ignoresOffset(id, page.type, offset, farOffset),
    };
    if (page.mode === 'incremental') yield* walkPass(pass, incrementalStep, startIncrementalPass(startOffset));
    else if (!fullPassNeedsNoRead(startOffset, pass.context))
      yield* walkPass(pass, fullStep, startFullPass(startOffset, page.startTail, page.limit));
  }

  async function fields(opts?: { signal?: AbortSignal }): Promise<FieldDefinition[]> {
    const path = '/api/v2/fields';
    const response = await http.request({ method: 'GET', path, signal: opts?.signal });
    return legacyFieldDefinitions(response.body, { label: LEGACY_LABEL, method: 'GET', path }, response.status);
  }

  return {
    listGroupSubscribers,
    count,
    pages,
    fields,
    effectiveLimit: () => caps.learnedCap,
    stats: () => http.stats(),
  };
}

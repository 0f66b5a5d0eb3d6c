/**
 * The service's current platform, read side (docs/upstream-current.md): a group's members by status
 * with cursor paging, and the group's counts by status. Every request goes through `http.ts`
 * (Bearer token, timeouts, retries, typed errors, lossless ids: invariant 6) and, when given, the
 * shared rate limiter (invariant 7); a 401 is an `UpstreamAuthError`, so the auth pause applies.
 *
 * Paging follows the cursor the service hands out (`meta.next_cursor`, else the `cursor` of
 * `links.next`) until it is null. The page size asked for is a wish: the documented maximum differs
 * between pages of the docs, so a page may hold fewer rows and the next cursor still be set. Only a
 * null cursor ends a list. One page is held at a time (invariant 8).
 */
import { SUBSCRIBER_TYPES, type SubscriberType } from '../../db/schema.js';
import type { PageAdmission, Release } from '../page-gate.js';
import { UpstreamBodyError, UpstreamHttpError, type RequestTarget } from '../errors.js';
import { currentFieldPage, type FieldDefinition } from '../fields.js';
import { createHttpClient, type HttpClient, type HttpClientOptions, type HttpStats, type RequestGate } from '../http.js';
import { isPlainObject } from '../json.js';

export const CURRENT_LABEL = 'current API';

/**
 * One member as listed (the subscriber shape of docs/upstream.md, "Subscriber object"; dates as `YYYY-MM-DD HH:MM:SS`). `id` is a string
 * of digits; a number only if the service ever sent one that fits in 2^53. Unknown keys are kept.
 */
export interface CurrentSubscriberRecord {
  id: string | number;
  [key: string]: unknown;
}

export interface CurrentPage {
  /** The cursor this page was read with (null: the first page). */
  cursor: string | null;
  rows: CurrentSubscriberRecord[];
  /** Where the list goes on, or null at its end: the checkpoint of a pass. */
  nextCursor: string | null;
  /** The `limit` asked for; `rows.length` may be smaller whatever the list's length. */
  requestedLimit: number;
  /** The service's clock when it answered (its `Date` header, ms), null when it sent none. */
  serviceTime: number | null;
  /** Frees the page's room in memory (`CurrentListOptions.memory`): called by the consumer once the page is committed. */
  release?: Release;
}

/** Members of one group by status, as `GET /api/groups/{id}` counts them. */
export type GroupCounts = Record<SubscriberType, number>;

export interface CurrentGroup {
  id: string;
  name: string | null;
  counts: GroupCounts;
}

export interface CurrentListOptions {
  status: SubscriberType;
  /** Rows asked for per page (the service may send fewer). */
  limit: number;
  /** Resume point of a pass: a `nextCursor` it returned. */
  cursor?: string | null;
  signal?: AbortSignal;
  /** Room for the pages in memory (page-gate.ts): each body waits for one; the page carries it as `release`. */
  memory?: Pick<PageAdmission, 'admit'>;
}

/**
 * One subscriber as `GET /api/subscribers/{id}` answers it: its record and the ids of the groups it is
 * in (null when the answer lists no `groups`: then it says nothing about membership), or missing (404:
 * deleted, or never there).
 */
export type CurrentSubscriberLookup = { found: true; record: CurrentSubscriberRecord; groupIds: string[] | null } | { found: false };

export interface CurrentClient {
  /** One subscriber and its groups: the exact answer to "is this candidate still a member" (docs/upstream-current.md). */
  subscriber(id: string, options?: { signal?: AbortSignal }): Promise<CurrentSubscriberLookup>;
  /** One page of a group's members with `status`. */
  listPage(groupId: GroupId, options: CurrentListOptions): Promise<CurrentPage>;
  /** Every page of a group's members with `status`, following the cursor from `options.cursor` to its end. */
  pages(groupId: GroupId, options: CurrentListOptions): AsyncGenerator<CurrentPage, void, undefined>;
  group(groupId: GroupId, options?: { signal?: AbortSignal }): Promise<CurrentGroup>;
  /** The account's custom field definitions (docs/upstream-current.md, "Field definitions"), every page. */
  fields(options?: { signal?: AbortSignal }): Promise<FieldDefinition[]>;
  stats(): HttpStats;
}

export interface CurrentClientOptions {
  /** Host of the current API without `/api` (MAILER_API_URL). */
  baseUrl: string;
  /** Bearer token (MAILER_API_TOKEN). */
  token: string;
  limiter?: RequestGate;
  http?: Pick<HttpClientOptions, 'timeoutMs' | 'retry' | 'hooks' | 'defaultRetryAfterMs' | 'maxRetryAfterMs' | 'fetch'>;
}

/** Field definitions per page asked for (the docs' `per_page` is 100), and the most pages read. */
const FIELD_PAGE_SIZE = 100;
const MAX_FIELD_PAGES = 20;

/** Pages in a row that may come back empty with a cursor still set before the list is taken to loop. */
const MAX_EMPTY_PAGES_WITH_CURSOR = 3;

/** The `count` keys of a group object, per status. */
const COUNT_KEYS: Readonly<Record<SubscriberType, string>> = {
  active: 'active_count',
  unsubscribed: 'unsubscribed_count',
  bounced: 'bounced_count',
  junk: 'junk_count',
  unconfirmed: 'unconfirmed_count',
};

/** Group ids are digits, kept as text (they may exceed 2^53 like subscriber ids). */
export type GroupId = string | number;

function normalizeGroupId(groupId: GroupId): string {
  if (typeof groupId === 'number' && Number.isSafeInteger(groupId) && groupId >= 0) return String(groupId);
  if (typeof groupId === 'string' && /^\d{1,30}$/.test(groupId)) return groupId;
  throw new TypeError(`group id ${JSON.stringify(groupId)} is not numeric`);
}

function assertStatus(status: unknown): asserts status is SubscriberType {
  if (typeof status !== 'string' || !(SUBSCRIBER_TYPES as readonly string[]).includes(status)) {
    throw new TypeError(`status ${JSON.stringify(status)} is not one of ${SUBSCRIBER_TYPES.join(', ')}`);
  }
}

function assertLimit(limit: unknown): asserts limit is number {
  if (typeof limit !== 'number' || !Number.isSafeInteger(limit) || limit < 1) {
    throw new TypeError(`limit must be a whole number >= 1, got ${JSON.stringify(limit)}`);
  }
}

function assertCursor(cursor: unknown): asserts cursor is string | null | undefined {
  if (cursor === undefined || cursor === null) return;
  if (typeof cursor !== 'string' || cursor === '' || cursor.length > 2048 || /[\s\u0000-\u001f]/.test(cursor)) {
    throw new TypeError('cursor must be a non-empty string the service returned');
  }
}

function isValidId(id: unknown): id is number | string {
  return (typeof id === 'number' && Number.isSafeInteger(id) && id >= 0) || (typeof id === 'string' && /^\d{1,30}$/.test(id));
}

function bodyError(target: RequestTarget, status: number, what: string): UpstreamBodyError {
  return new UpstreamBodyError(`${target.label} ${what} on ${target.method} ${target.path}`, target, status);
}

/** `meta.next_cursor`, else the `cursor` parameter of `links.next`; null when neither says there is more. */
export function nextCursorOf(body: Record<string, unknown>, target: RequestTarget, status: number): string | null {
  const meta = body.meta;
  if (isPlainObject(meta) && 'next_cursor' in meta) {
    const cursor = meta.next_cursor;
    if (cursor === null || cursor === '') return null;
    if (typeof cursor === 'string') return cursor;
    throw bodyError(target, status, `answered a meta.next_cursor that is not a string (${typeof cursor})`);
  }
  const links = body.links;
  const next = isPlainObject(links) ? links.next : undefined;
  if (next === undefined || next === null || next === '') return null;
  if (typeof next !== 'string' || !URL.canParse(next)) throw bodyError(target, status, 'answered a links.next that is not a URL');
  const cursor = new URL(next).searchParams.get('cursor');
  if (!cursor) throw bodyError(target, status, 'answered a links.next without a cursor');
  return cursor;
}

/** `{data: [subscriber…], links, meta}` → the rows, each with a valid id. */
export function validateMemberPage(
  body: unknown,
  target: RequestTarget,
  status: number,
): { rows: CurrentSubscriberRecord[]; nextCursor: string | null } {
  if (!isPlainObject(body) || !Array.isArray(body.data)) {
    throw bodyError(target, status, 'answered no {data: [...]} list of subscribers');
  }
  body.data.forEach((item: unknown, index) => {
    if (!isPlainObject(item)) throw bodyError(target, status, `list item #${index} is not an object`);
    if (!isValidId(item.id)) {
      throw bodyError(target, status, `list item #${index} has no valid id (got ${JSON.stringify(item.id) ?? 'nothing'})`);
    }
  });
  return { rows: body.data as CurrentSubscriberRecord[], nextCursor: nextCursorOf(body, target, status) };
}

/** `{data: {id, name, active_count, …}}` → the group with its counts by status. */
export function validateGroup(body: unknown, target: RequestTarget, status: number): CurrentGroup {
  const data = isPlainObject(body) ? body.data : undefined;
  if (!isPlainObject(data) || !isValidId(data.id)) throw bodyError(target, status, 'answered no {data: {id, ...}} group');
  const counts = {} as GroupCounts;
  for (const type of SUBSCRIBER_TYPES) {
    const value = data[COUNT_KEYS[type]];
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
      throw bodyError(target, status, `answered no valid ${COUNT_KEYS[type]} (got ${JSON.stringify(value) ?? 'nothing'})`);
    }
    counts[type] = value;
  }
  return { id: String(data.id), name: typeof data.name === 'string' ? data.name : null, counts };
}

/** `{data: {id, …, groups?: [{id, …}]}}` → the record and its group ids (null without a `groups` list). */
export function validateSubscriber(body: unknown, target: RequestTarget, status: number): CurrentSubscriberLookup {
  const data = isPlainObject(body) ? body.data : undefined;
  if (!isPlainObject(data) || !isValidId(data.id)) throw bodyError(target, status, 'answered no {data: {id, ...}} subscriber');
  if (!Array.isArray(data.groups)) return { found: true, record: data as CurrentSubscriberRecord, groupIds: null };
  const groupIds = data.groups.map((group: unknown, index) => {
    const id = isPlainObject(group) ? group.id : undefined;
    if (!isValidId(id)) throw bodyError(target, status, `answered a group #${index} without a valid id`);
    return String(id);
  });
  return { found: true, record: data as CurrentSubscriberRecord, groupIds };
}

function membersPath(groupId: string): string {
  return `/api/groups/${groupId}/subscribers`;
}

/** `GET /api/subscribers/{id}`: the subscriber and its groups, or `found: false` on a 404. */
async function lookUpSubscriber(
  http: ReturnType<typeof createHttpClient>,
  id: string,
  opts?: { signal?: AbortSignal },
): Promise<CurrentSubscriberLookup> {
  if (!/^\d{1,30}$/.test(id)) throw new TypeError(`subscriber id ${JSON.stringify(id)} is not numeric`);
  const path = `/api/subscribers/${id}`;
  try {
    const response = await http.request({ method: 'GET', path, signal: opts?.signal });
    return validateSubscriber(response.body, { label: CURRENT_LABEL, method: 'GET', path }, response.status);
  } catch (error) {
    if (error instanceof UpstreamHttpError && error.status === 404) return { found: false };
    throw error;
  }
}

/** The field definitions, page by page (docs/upstream-current.md, "Field definitions"). */
async function readFields(http: HttpClient, opts?: { signal?: AbortSignal }): Promise<FieldDefinition[]> {
  const path = '/api/fields';
  const out: FieldDefinition[] = [];
  // Pages by number (`links.next` null on the last); an account has at most 100 fields, so the
  // bound only stops a service that never says "last".
  for (let page = 1; page <= MAX_FIELD_PAGES; page++) {
    const query: Array<[string, string]> = [
      ['limit', String(FIELD_PAGE_SIZE)],
      ['page', String(page)],
    ];
    const response = await http.request({ method: 'GET', path, query, signal: opts?.signal });
    const read = currentFieldPage(response.body, { label: CURRENT_LABEL, method: 'GET', path }, response.status);
    out.push(...read.fields);
    if (read.next === null || read.fields.length === 0) return out;
  }
  throw new UpstreamBodyError(
    `${CURRENT_LABEL} answered more than ${MAX_FIELD_PAGES} pages of fields on GET ${path}; the list does not end`,
    { label: CURRENT_LABEL, method: 'GET', path },
    200,
  );
}

/** A member page's query, its options checked first. */
function memberPageQuery(list: CurrentListOptions): { query: Array<[string, string]>; cursor: string | null } {
  assertStatus(list.status);
  assertLimit(list.limit);
  assertCursor(list.cursor);
  const cursor = list.cursor ?? null;
  // The status is always sent: without it the group endpoint lists active members only.
  const query: Array<[string, string]> = [
    ['filter[status]', list.status],
    ['limit', String(list.limit)],
  ];
  if (cursor !== null) query.push(['cursor', cursor]);
  return { query, cursor };
}

export function createCurrentClient(options: CurrentClientOptions): CurrentClient {
  if (!options.token) throw new TypeError('current API client: token is required');
  const http = createHttpClient({
    ...options.http,
    baseUrl: options.baseUrl,
    label: CURRENT_LABEL,
    credentialName: 'API token',
    headers: { authorization: `Bearer ${options.token}` },
    secrets: [options.token],
    gate: options.limiter,
  });

  async function listPage(groupId: GroupId, list: CurrentListOptions): Promise<CurrentPage> {
    const id = normalizeGroupId(groupId);
    const { query, cursor } = memberPageQuery(list);
    const path = membersPath(id);
    const { memory } = list;
    const beforeBody = memory && ((bytes: number | null) => memory.admit(bytes));
    const response = await http.request({ method: 'GET', path, query, signal: list.signal, beforeBody });
    let page: ReturnType<typeof validateMemberPage>;
    try {
      page = validateMemberPage(response.body, { label: CURRENT_LABEL, method: 'GET', path }, response.status);
    } catch (error) {
      response.release?.();
      throw error;
    }
    const date = Date.parse(response.headers.get('date') ?? '');
    return {
      cursor,
      rows: page.rows,
      nextCursor: page.nextCursor,
      requestedLimit: list.limit,
      serviceTime: Number.isNaN(date) ? null : date,
      release: response.release,
    };
  }

  async function* pages(groupId: GroupId, list: CurrentListOptions): AsyncGenerator<CurrentPage, void, undefined> {
    let cursor = list.cursor ?? null;
    let emptyInARow = 0;
    for (;;) {
      let page: CurrentPage | null = await listPage(groupId, { ...list, cursor });
      // Read before the page is handed over: the consumer may empty `rows` once it has them.
      const { nextCursor } = page;
      const empty = page.rows.length === 0;
      yield page;
      // This frame must not keep the page alive while the next one is read.
      // eslint-disable-next-line no-useless-assignment -- it frees the page, which a suspended generator would otherwise hold
      page = null;
      if (nextCursor === null) return;
      emptyInARow = empty ? emptyInARow + 1 : 0;
      if (nextCursor === cursor || emptyInARow >= MAX_EMPTY_PAGES_WITH_CURSOR) {
        // A cursor that does not move on would read the same page for ever.
        const path = membersPath(normalizeGroupId(groupId));
        const why =
          nextCursor === cursor ? 'the same cursor it was read with' : `${emptyInARow} empty pages in a row, each with a next cursor`;
        throw new UpstreamBodyError(
          `${CURRENT_LABEL} answered ${why} on GET ${path}; the list does not advance`,
          { label: CURRENT_LABEL, method: 'GET', path },
          200,
        );
      }
      cursor = nextCursor;
    }
  }

  async function group(groupId: GroupId, opts?: { signal?: AbortSignal }): Promise<CurrentGroup> {
    const path = `/api/groups/${normalizeGroupId(groupId)}`;
    const response = await http.request({ method: 'GET', path, signal: opts?.signal });
    return validateGroup(response.body, { label: CURRENT_LABEL, method: 'GET', path }, response.status);
  }

  return {
    subscriber: (id, opts) => lookUpSubscriber(http, id, opts),
    listPage,
    pages,
    group,
    fields: (opts) => readFields(http, opts),
    stats: () => http.stats(),
  };
}

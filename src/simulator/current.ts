/**
 * The service's current platform, read side (docs/upstream-current.md): a group's members by status with cursor
 * paging, and a group with its counts by status, under a Bearer token and a limit of 120 requests a
 * minute. Served from the same world as the legacy API.
 *
 * Cursors are what Laravel's cursor paginator hands out: base64url of `{"id":<last id>,
 * "_pointsToNextItems":true}` with the id as bare digits (exact above 2^53). The sort key is the
 * subscriber id, which never changes, so members leaving or joining between two pages skip nobody;
 * a member changing status moves to another list, which a pass may already have read.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { SUBSCRIBER_TYPES, isSubscriberType } from './kinds.js';
import type { SubscriberType } from './kinds.js';
import type { RateDecision } from './rate-limit.js';
import type { World } from './world.js';

export const CURRENT_PREFIX = '/api/groups';

/** The account-wide subscriber endpoints (`GET /api/subscribers/{id}`), on the same budget as the group routes. */
export const CURRENT_SUBSCRIBERS_PREFIX = '/api/subscribers';

/** The account's custom field definitions (docs/upstream-current.md, "Field definitions"), on the same budget. */
export const CURRENT_FIELDS_PATH = '/api/fields';

const ROUTES = {
  fields: CURRENT_FIELDS_PATH,
  members: `${CURRENT_PREFIX}/:groupId/subscribers`,
  group: `${CURRENT_PREFIX}/:groupId`,
  subscriber: `${CURRENT_SUBSCRIBERS_PREFIX}/:id`,
} as const;

/** What the list answers when `limit` is not given (docs/upstream-current.md, "Group members"). */
export const CURRENT_DEFAULT_LIMIT = 25;

const JSON_TYPE = 'application/json; charset=utf-8';

export interface CurrentServerConfig {
  world: World;
  /** Read on every request, so tests can change it while the simulator runs. */
  currentPageCap: number | null;
  /** Called after every member page served (the page-churn mode mutates the world here). */
  onCurrentPage?: (served: { groupId: string; type: SubscriberType; offset: number; rows: number; filtered: false; order: 'id' }) => void;
}

/** The headers of the current API's limiter: X-RateLimit-Limit/-Remaining, and on a 429 Retry-After and X-RateLimit-Reset. */
export function currentRateLimitHeaders(decision: RateDecision): Record<string, string> {
  const headers: Record<string, string> = {
    'X-RateLimit-Limit': String(decision.limit),
    'X-RateLimit-Remaining': String(decision.remaining),
  };
  if (!decision.allowed) {
    headers['Retry-After'] = String(Math.max(1, Math.ceil(decision.retryAfterMs / 1000)));
    headers['X-RateLimit-Reset'] = String(Math.ceil(decision.resetAtMs / 1000));
  }
  return headers;
}

export function laravelMessage(message: string): string {
  return JSON.stringify({ message });
}

function validationError(reply: FastifyReply, field: string, message: string): FastifyReply {
  return reply
    .code(422)
    .type(JSON_TYPE)
    .send(JSON.stringify({ message, errors: { [field]: [message] } }));
}

// ------------------------------------------------------------------ cursors

export function encodeCursor(id: string, pointsToNextItems: boolean): string {
  if (!/^\d+$/.test(id)) throw new Error(`cursor id must be digits: ${id}`);
  return Buffer.from(`{"id":${id},"_pointsToNextItems":${pointsToNextItems}}`).toString('base64url');
}

/** The id a cursor points after, or undefined for anything this service did not hand out. */
export function decodeCursor(cursor: string): { id: string; next: boolean } | undefined {
  if (!/^[A-Za-z0-9_-]+={0,2}$/.test(cursor)) return undefined;
  const match = /^\{"id":(\d{1,30}),"_pointsToNextItems":(true|false)\}$/.exec(Buffer.from(cursor, 'base64url').toString('utf8'));
  return match ? { id: match[1] as string, next: match[2] === 'true' } : undefined;
}

// ------------------------------------------------------------------ routes

export function registerCurrentRoutes(app: FastifyInstance, config: CurrentServerConfig): void {
  app.get<{ Params: { groupId: string } }>(ROUTES.members, async (request, reply) => sendMembers(config, request, reply));
  app.get<{ Querystring: Record<string, string | undefined> }>(ROUTES.fields, async (request, reply) => sendFields(config, request, reply));
  app.get<{ Params: { groupId: string } }>(ROUTES.group, async (request, reply) => sendGroup(config, request, reply));
  app.get<{ Params: { id: string } }>(ROUTES.subscriber, async (request, reply) => sendSubscriber(config, request, reply));
}

/**
 * The field definitions in the documented page envelope (`data`, `links`, `meta`), paged by `page`
 * and `limit` (default 25, at most 100), `{id, name, key, type}` each.
 */
function sendFields(
  config: CurrentServerConfig,
  request: FastifyRequest<{ Querystring: Record<string, string | undefined> }>,
  reply: FastifyReply,
): FastifyReply {
  const limit = Math.min(100, Math.max(1, Number.parseInt(request.query.limit ?? '25', 10) || 25));
  const page = Math.max(1, Number.parseInt(request.query.page ?? '1', 10) || 1);
  const all = config.world.fieldDefinitions();
  const lastPage = Math.max(1, Math.ceil(all.length / limit));
  const data = all.slice((page - 1) * limit, page * limit).map((f) => ({ id: f.id, name: f.title, key: f.key, type: f.type }));
  const link = (n: number) => `${CURRENT_FIELDS_PATH}?page=${n}`;
  const body = {
    data,
    links: { first: link(1), last: link(lastPage), prev: page > 1 ? link(page - 1) : null, next: page < lastPage ? link(page + 1) : null },
    meta: { current_page: page, last_page: lastPage, path: CURRENT_FIELDS_PATH, per_page: limit, total: all.length },
  };
  return reply.type(JSON_TYPE).send(JSON.stringify(body));
}

/**
 * One subscriber with the groups it is in (`{id, name}` each), 404 once deleted or never there
 * (docs/upstream-current.md, "One subscriber").
 */
function sendSubscriber(
  config: CurrentServerConfig,
  request: FastifyRequest<{ Params: { id: string } }>,
  reply: FastifyReply,
): FastifyReply {
  const { world } = config;
  const view = world.subscriber(request.params.id);
  if (!view || view.deleted) return notFound(reply);
  const groups = view.groups.flatMap((id) => {
    const group = world.group(id);
    return group ? [{ id: group.id, name: group.name }] : [];
  });
  const data = { ...world.renderCurrent(view.id), groups };
  return reply.type(JSON_TYPE).send(JSON.stringify({ data }));
}

function notFound(reply: FastifyReply): FastifyReply {
  return reply.code(404).type(JSON_TYPE).send(laravelMessage('Resource not found.'));
}

/** First index in `slots` (ascending) holding a slot above `after`. */
function firstAfter(slots: Uint32Array, after: number): number {
  let lo = 0;
  let hi = slots.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((slots[mid] ?? 0) <= after) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

interface MembersQuery {
  status: SubscriberType;
  limit: number;
  cursor: string | null;
}

function parseMembersQuery(
  request: FastifyRequest,
  reply: FastifyReply,
): { ok: true; query: MembersQuery } | { ok: false; reply: FastifyReply } {
  const params = new URLSearchParams(request.url.includes('?') ? request.url.slice(request.url.indexOf('?') + 1) : '');
  // Without a status filter the group endpoint lists active members (the SDKs' documented default).
  const status = params.get('filter[status]') ?? 'active';
  if (!isSubscriberType(status)) {
    return {
      ok: false,
      reply: validationError(reply, 'filter.status', `The selected filter.status is invalid (allowed: ${SUBSCRIBER_TYPES.join(', ')}).`),
    };
  }
  const limitText = params.get('limit');
  const limit = limitText === null ? CURRENT_DEFAULT_LIMIT : Number(limitText);
  if (!/^\d+$/.test(limitText ?? '1') || !Number.isSafeInteger(limit) || limit < 1) {
    return { ok: false, reply: validationError(reply, 'limit', 'The limit must be an integer of at least 1.') };
  }
  const cursor = params.get('cursor');
  return { ok: true, query: { status, limit, cursor: cursor === null || cursor === '' ? null : cursor } };
}

function sendMembers(
  config: CurrentServerConfig,
  request: FastifyRequest<{ Params: { groupId: string } }>,
  reply: FastifyReply,
): FastifyReply {
  const parsed = parseMembersQuery(request, reply);
  if (!parsed.ok) return parsed.reply;
  const query = parsed.query;
  const { world } = config;
  const groupId = request.params.groupId;
  const groupIndex = world.groupIndexOf(groupId);
  if (groupIndex === undefined) return notFound(reply);
  const slots = world.idOrderedSlots(groupIndex, query.status);
  let start = 0;
  if (query.cursor !== null) {
    const decoded = decodeCursor(query.cursor);
    const after = decoded === undefined ? undefined : world.slotOfId(decoded.id);
    if (decoded === undefined || after === undefined || !decoded.next) return validationError(reply, 'cursor', 'The cursor is invalid.');
    start = firstAfter(slots, after);
  }
  // The cap is silent: the client asked for `limit` and simply gets fewer rows, with a next cursor.
  const size = config.currentPageCap === null ? query.limit : Math.min(query.limit, config.currentPageCap);
  const page = slots.subarray(start, start + size);
  const more = start + page.length < slots.length;
  const last = page.length > 0 ? world.idAt(page[page.length - 1] as number) : undefined;
  const first = page.length > 0 ? world.idAt(page[0] as number) : undefined;
  const nextCursor = more && last !== undefined ? encodeCursor(last, true) : null;
  const prevCursor = query.cursor !== null && first !== undefined ? encodeCursor(first, false) : null;
  const path = `${request.protocol}://${request.host}${CURRENT_PREFIX}/${groupId}/subscribers`;
  const link = (cursor: string | null) => (cursor === null ? null : `${path}?cursor=${cursor}`);
  const data = Array.from(page, (slot) => world.currentJsonAt(slot)).join(',');
  const envelope = JSON.stringify({
    links: { first: null, last: null, prev: link(prevCursor), next: link(nextCursor) },
    meta: { path, per_page: query.limit, next_cursor: nextCursor, prev_cursor: prevCursor },
  });
  config.onCurrentPage?.({ groupId, type: query.status, offset: start, rows: page.length, filtered: false, order: 'id' });
  return reply.type(JSON_TYPE).send(`{"data":[${data}],${envelope.slice(1)}`);
}

function sendGroup(
  config: CurrentServerConfig,
  request: FastifyRequest<{ Params: { groupId: string } }>,
  reply: FastifyReply,
): FastifyReply {
  const group = config.world.group(request.params.groupId);
  if (!group) return notFound(reply);
  const count = (type: SubscriberType) => config.world.memberCount(group.id, type);
  const data = {
    id: group.id,
    name: group.name,
    active_count: count('active'),
    sent_count: 0,
    opens_count: 0,
    open_rate: { float: 0, string: '0%' },
    clicks_count: 0,
    click_rate: { float: 0, string: '0%' },
    unsubscribed_count: count('unsubscribed'),
    unconfirmed_count: count('unconfirmed'),
    bounced_count: count('bounced'),
    junk_count: count('junk'),
    created_at: '2022-05-24 11:52:55',
  };
  return reply.type(JSON_TYPE).send(JSON.stringify({ data }));
}

/**
 * HTTP face of the simulator: the legacy `/api/v2` group-subscriber reads and the `/api/webhooks`
 * management endpoints, with the service's auth, rate limit, CORS preflight and error shapes, plus
 * injected faults. Every request is logged before anything else happens to it.
 */
import { STATUS_CODES } from 'node:http';
import type { IncomingMessage } from 'node:http';
import Fastify from 'fastify';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { QueryError, compileFilters, parseListQuery } from './filters.js';
import type { Boundary } from './filters.js';
import type { ServedPage } from './churn.js';
import { HTML_ERROR_PAGE } from './faults.js';
import type { FaultDecision, Faults } from './faults.js';
import { SUBSCRIBER_TYPES, isSubscriberType } from './kinds.js';
import type { SubscriberType } from './kinds.js';
import { rateLimitHeaders } from './rate-limit.js';
import type { RateDecision, RateLimiter } from './rate-limit.js';
import { legacyArrayJson } from './render.js';
import {
  CURRENT_FIELDS_PATH,
  CURRENT_PREFIX,
  CURRENT_SUBSCRIBERS_PREFIX,
  currentRateLimitHeaders,
  laravelMessage,
  registerCurrentRoutes,
} from './current.js';
import type { RequestApi, RequestLog, RequestRecord } from './requests.js';
import { VALIDATION_MESSAGE, pageEnvelope } from './webhooks.js';
import type { WebhookRegistry, WebhookResult } from './webhooks.js';
import type { World } from './world.js';

/**
 * How the legacy budget is counted (docs/upstream.md, "Limits"): `endpoint`, one budget per endpoint
 * (method and path: every group's and type's list and count is its own); `account` (alias `global`),
 * one budget for every legacy request; `mixed`, lists per endpoint while every count shares one
 * budget. Every model answers with honest X-RateLimit-* headers for the budget the request used.
 */
export type RateLimitScope = 'endpoint' | 'account' | 'global' | 'mixed';
export const RATE_LIMIT_MODELS = ['endpoint', 'account', 'mixed'] as const;

export interface ServerConfig {
  world: World;
  registry: WebhookRegistry;
  requests: RequestLog;
  faults: Faults;
  /** null disables the rate limit. */
  limiter: RateLimiter | null;
  rateLimitScope: RateLimitScope;
  apiKey: string;
  apiKeyHeader: string;
  webhooksToken: string;
  boundary: Boundary;
  /** Read on every request, so tests can change it while the simulator runs. */
  pageCap: number | null;
  shiftingOrder: boolean;
  /** Called after every legacy list page is served (the page-churn mode mutates the world here). */
  onListPage?: (served: ServedPage) => void;
  /** The current API's limiter (120 a minute), null for none. */
  currentLimiter: RateLimiter | null;
  /** Silent cap of current-API member pages (read on every request), null for none. */
  currentPageCap: number | null;
  /** Every legacy group endpoint answers 404 without a code, as for an account moved to the current platform. */
  movedAccount: boolean;
  /** Called after every current-API member page is served. */
  onCurrentPage?: (served: ServedPage) => void;
  logger: boolean;
}

export const LEGACY_PREFIX = '/api/v2';
export const WEBHOOKS_PREFIX = '/api/webhooks';

const ROUTES = {
  list: `${LEGACY_PREFIX}/groups/:groupId/subscribers`,
  count: `${LEGACY_PREFIX}/groups/:groupId/subscribers/count`,
  typed: `${LEGACY_PREFIX}/groups/:groupId/subscribers/:type`,
  typedCount: `${LEGACY_PREFIX}/groups/:groupId/subscribers/:type/count`,
  fields: `${LEGACY_PREFIX}/fields`,
  webhooks: WEBHOOKS_PREFIX,
  webhook: `${WEBHOOKS_PREFIX}/:webhookId`,
} as const;

/** docs/upstream.md, "Authentication": the preflight answers, but without the key header, so browsers cannot send it. */
const PREFLIGHT_HEADERS = {
  'Access-Control-Allow-Origin': '*',
  'Access-Control-Allow-Methods': 'GET, POST, PUT, DELETE, OPTIONS',
  'Access-Control-Allow-Headers': 'Accept, Authorization, Content-Type, X-Requested-With',
  'Access-Control-Max-Age': '86400',
};

const JSON_TYPE = 'application/json; charset=utf-8';

type GroupParams = { groupId: string };
type TypedParams = { groupId: string; type: string };
type WebhookParams = { webhookId: string };

export function buildServer(config: ServerConfig): FastifyInstance {
  // Closing drops every connection, hung ones (fault `hang`) included, instead of waiting for them.
  const app = Fastify({ logger: config.logger, forceCloseConnections: true });
  const records = new WeakMap<IncomingMessage, RequestRecord>();
  installLenientJsonParser(app);

  app.addHook('onRequest', async (request, reply) => {
    const record = config.requests.add({
      at: performance.timeOrigin + performance.now(),
      method: request.method,
      url: request.url,
      route: request.routeOptions.url ?? null,
      api: classify(request),
      status: 0,
      durationMs: 0,
      fault: null,
    });
    records.set(request.raw, record);
    if (record.api === 'legacy') return legacyGate(config, request, reply, record);
    if (record.api === 'webhooks') return webhooksGate(config, request, reply, record);
    if (record.api === 'current') return currentGate(config, request, reply, record);
    return undefined;
  });
  app.addHook('onResponse', async (request, reply) => {
    const record = records.get(request.raw);
    if (!record) return;
    record.status = reply.statusCode;
    record.durationMs = performance.timeOrigin + performance.now() - record.at;
  });

  app.options(`${LEGACY_PREFIX}/*`, preflight);
  app.options(`${WEBHOOKS_PREFIX}`, preflight);
  app.options(`${WEBHOOKS_PREFIX}/*`, preflight);
  registerLegacyRoutes(app, config);
  registerWebhookRoutes(app, config);
  registerCurrentRoutes(app, config);
  return app;
}

function classify(request: FastifyRequest): RequestApi {
  const path = request.url.split('?', 1)[0] ?? '';
  if (request.method === 'OPTIONS') return 'preflight';
  if (path === LEGACY_PREFIX || path.startsWith(`${LEGACY_PREFIX}/`)) return 'legacy';
  if (path === WEBHOOKS_PREFIX || path.startsWith(`${WEBHOOKS_PREFIX}/`)) return 'webhooks';
  if (path.startsWith(`${CURRENT_PREFIX}/`) || path.startsWith(`${CURRENT_SUBSCRIBERS_PREFIX}/`) || path === CURRENT_FIELDS_PATH)
    return 'current';
  return 'other';
}

async function preflight(_request: FastifyRequest, reply: FastifyReply): Promise<void> {
  await reply.code(204).headers(PREFLIGHT_HEADERS).send();
}

/**
 * Real Laravel reads an empty or malformed JSON body as "no input" (then answers 422), and clients
 * send `Content-Type: application/json` even on DELETE; Fastify's stock parser would answer 400.
 */
function installLenientJsonParser(app: FastifyInstance): void {
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => {
    const text = typeof body === 'string' ? body : body.toString('utf8');
    if (text.trim() === '') {
      done(null, undefined);
      return;
    }
    try {
      done(null, JSON.parse(text) as unknown);
    } catch {
      done(null, undefined);
    }
  });
}

// ------------------------------------------------------------------ gates (auth, limits, faults)

function legacyError(code: number, message: string): string {
  return JSON.stringify({ error: { code, message } });
}

/** What runs before an API's routes: a reply when it answered the request itself (a limit, a fault, a refusal). */
type Gate = (
  config: ServerConfig,
  request: FastifyRequest,
  reply: FastifyReply,
  record: RequestRecord,
) => Promise<FastifyReply | undefined>;

/** An API's request budget, as its gate applies it. */
interface GateLimit {
  limiter: RateLimiter | null;
  /** What the budget is counted under. */
  key: string;
  headers: (decision: RateDecision) => Record<string, string>;
  /** The 429 body. */
  tooMany: string;
}

/**
 * What every API's gate does first: the service's own clock in `Date` (as a real server's header
 * gives it; the world's clock may be fake), the API's budget, then an injected fault. The reply when
 * one of them answered.
 */
async function limitAndFault(
  config: ServerConfig,
  request: FastifyRequest,
  reply: FastifyReply,
  record: RequestRecord,
  errorBody: (code: number, message: string) => string,
  limit: GateLimit | null,
): Promise<FastifyReply | undefined> {
  reply.header('date', new Date(config.world.now()).toUTCString());
  const decision = limit?.limiter?.consume(limit.key);
  if (decision && limit) reply.headers(limit.headers(decision));
  if (await applyFault(config.faults.decide(record.api), request, reply, record, errorBody)) return reply;
  if (decision && limit && !decision.allowed) return reply.code(429).type(JSON_TYPE).send(limit.tooMany);
  return undefined;
}

const legacyGate: Gate = async (config, request, reply, record) => {
  const limit = {
    limiter: config.limiter,
    key: rateLimitKey(config.rateLimitScope, request.method, request.url),
    headers: rateLimitHeaders,
    tooMany: legacyError(429, 'Too many requests'),
  };
  const answered = await limitAndFault(config, request, reply, record, legacyError, limit);
  if (answered) return answered;
  const key = headerValue(request, config.apiKeyHeader);
  if (key === undefined || key === '') return reply.code(401).type(JSON_TYPE).send(legacyError(1, 'Unauthorized'));
  if (key !== config.apiKey) return reply.code(401).type(JSON_TYPE).send(legacyError(302, 'API-Key Unauthorized'));
  // Captured from real moved accounts: no `code` in the error object, unlike every other legacy error.
  if (config.movedAccount)
    return reply
      .code(404)
      .type(JSON_TYPE)
      .send(JSON.stringify({ error: { message: 'Endpoint not found' } }));
  return undefined;
};

/** The Laravel-style APIs' error body: `{message}`, whatever the code. */
const laravelError = (_code: number, message: string): string => laravelMessage(message);

/** The current API and the management API take the same Bearer token. */
function bearerRefusal(config: ServerConfig, request: FastifyRequest, reply: FastifyReply): FastifyReply | undefined {
  const match = /^Bearer\s+(.+)$/i.exec(headerValue(request, 'authorization') ?? '');
  if (!match || match[1] !== config.webhooksToken) return reply.code(401).type(JSON_TYPE).send(laravelMessage('Unauthenticated.'));
  return undefined;
}

/** The current API: its own limit (one budget for the account), faults, then the Bearer token. */
const currentGate: Gate = async (config, request, reply, record) => {
  const limit = {
    limiter: config.currentLimiter,
    key: 'account',
    headers: currentRateLimitHeaders,
    tooMany: laravelMessage('Too Many Attempts.'),
  };
  return (await limitAndFault(config, request, reply, record, laravelError, limit)) ?? bearerRefusal(config, request, reply);
};

/** The management API: faults, then the Bearer token (no budget of its own here). */
const webhooksGate: Gate = async (config, request, reply, record) => {
  return (await limitAndFault(config, request, reply, record, laravelError, null)) ?? bearerRefusal(config, request, reply);
};

/** The budget a legacy request counts against under the configured model (see RateLimitScope). */
export function rateLimitKey(scope: RateLimitScope, method: string, url: string): string {
  if (scope === 'global' || scope === 'account') return 'account';
  const path = url.split('?')[0] ?? url;
  if (scope === 'mixed' && path.endsWith('/count')) return 'account';
  return `${method} ${path}`;
}

/** Applies an injected fault; true when it answered (or dropped) the request. */
async function applyFault(
  fault: FaultDecision,
  request: FastifyRequest,
  reply: FastifyReply,
  record: RequestRecord,
  errorBody: (code: number, message: string) => string,
): Promise<boolean> {
  if (fault.delayMs > 0) {
    record.fault = 'delay';
    await new Promise((resolve) => setTimeout(resolve, fault.delayMs));
  }
  switch (fault.action.kind) {
    case 'none':
      return false;
    case 'reset':
      record.fault = 'reset';
      reply.hijack();
      request.raw.socket.destroy();
      return true;
    case 'hang': {
      record.fault = 'hang';
      reply.hijack();
      // No answer at all; the client's own timeout is what ends it from its side.
      const socket = request.raw.socket;
      const timer = setTimeout(() => socket.destroy(), fault.action.ms);
      socket.once('close', () => clearTimeout(timer));
      return true;
    }
    case 'html':
      record.fault = 'html';
      await reply.code(200).type('text/html; charset=utf-8').send(HTML_ERROR_PAGE);
      return true;
    case 'status': {
      record.fault = 'status';
      const status = fault.action.status;
      await reply
        .code(status)
        .type(JSON_TYPE)
        .send(errorBody(status, STATUS_CODES[status] ?? 'Error'));
      return true;
    }
  }
}

function headerValue(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name.toLowerCase()];
  return Array.isArray(value) ? value[0] : value;
}

// ------------------------------------------------------------------ legacy routes

function registerLegacyRoutes(app: FastifyInstance, config: ServerConfig): void {
  app.get<{ Params: GroupParams }>(ROUTES.list, async (request, reply) => sendList(config, request, reply, request.params.groupId, null));
  app.get<{ Params: GroupParams }>(ROUTES.count, async (request, reply) => sendCount(config, reply, request.params.groupId, null));
  app.get<{ Params: TypedParams }>(ROUTES.typed, async (request, reply) => {
    const type = checkType(request.params.type, reply);
    return type ? sendList(config, request, reply, request.params.groupId, type) : reply;
  });
  app.get<{ Params: TypedParams }>(ROUTES.typedCount, async (request, reply) => {
    const type = checkType(request.params.type, reply);
    return type ? sendCount(config, reply, request.params.groupId, type) : reply;
  });
  app.get(ROUTES.fields, async (_request, reply) => sendLegacyFields(config, reply));
}

/**
 * The account's field definitions as the legacy API lists them: a bare array of `{id, title, key,
 * type}`, the type in capitals as in a subscriber's `fields` (docs/upstream.md, "Field definitions").
 */
function sendLegacyFields(config: ServerConfig, reply: FastifyReply): FastifyReply {
  const now = new Date(config.world.now()).toISOString().slice(0, 19).replace('T', ' ');
  const body = config.world.fieldDefinitions().map((f) => ({
    id: Number(f.id),
    title: f.title,
    key: f.key,
    type: f.type.toUpperCase(),
    date_created: now,
    date_updated: now,
  }));
  return reply.type(JSON_TYPE).send(JSON.stringify(body));
}

function checkType(type: string, reply: FastifyReply): SubscriberType | undefined {
  if (isSubscriberType(type)) return type;
  void reply
    .code(400)
    .type(JSON_TYPE)
    .send(legacyError(400, `Invalid subscriber type: ${type} (allowed: ${SUBSCRIBER_TYPES.join(', ')})`));
  return undefined;
}

function sendList(
  config: ServerConfig,
  request: FastifyRequest,
  reply: FastifyReply,
  groupId: string,
  type: SubscriberType | null,
): FastifyReply {
  const rawQuery = request.url.includes('?') ? request.url.slice(request.url.indexOf('?') + 1) : '';
  let query;
  try {
    query = parseListQuery(rawQuery);
  } catch (error) {
    if (error instanceof QueryError) return reply.code(400).type(JSON_TYPE).send(legacyError(400, error.message));
    throw error;
  }
  const groupIndex = config.world.groupIndexOf(groupId);
  if (groupIndex === undefined) return reply.type(JSON_TYPE).send('[]');
  const ranges = compileFilters(query.filters, config.boundary, config.world.zone);
  const slots = config.world.listSlots(groupIndex, type, ranges, config.shiftingOrder);
  // The cap is silent, as upstream: the client asked for `limit` and simply gets fewer rows.
  const limit = config.pageCap === null ? query.limit : Math.min(query.limit, config.pageCap);
  const page = slots.subarray(query.offset, query.offset + limit);
  const body = legacyArrayJson(Array.from(page, (slot) => config.world.legacyJsonAt(slot)));
  config.onListPage?.({ groupId, type, offset: query.offset, rows: page.length, filtered: query.filters.length > 0 });
  return reply.type(JSON_TYPE).send(body);
}

function sendCount(config: ServerConfig, reply: FastifyReply, groupId: string, type: SubscriberType | null): FastifyReply {
  return reply.type(JSON_TYPE).send(JSON.stringify({ count: config.world.memberCount(groupId, type ?? undefined) }));
}

// ------------------------------------------------------------------ webhook management routes

function registerWebhookRoutes(app: FastifyInstance, config: ServerConfig): void {
  const { registry } = config;
  app.get(ROUTES.webhooks, async (request, reply) => {
    const params = new URLSearchParams(request.url.includes('?') ? request.url.slice(request.url.indexOf('?') + 1) : '');
    const page = parsePage(params.get('page'));
    const path = `${request.protocol}://${request.host}${WEBHOOKS_PREFIX}`;
    return reply.type(JSON_TYPE).send(JSON.stringify(pageEnvelope(registry.list(), page, path)));
  });
  app.get<{ Params: WebhookParams }>(ROUTES.webhook, async (request, reply) => {
    const hook = registry.get(request.params.webhookId);
    return hook ? reply.type(JSON_TYPE).send(JSON.stringify({ data: hook })) : reply.code(404).send();
  });
  app.post(ROUTES.webhooks, async (request, reply) => sendResult(reply, registry.create(request.body)));
  app.put<{ Params: WebhookParams }>(ROUTES.webhook, async (request, reply) => {
    const result = registry.update(request.params.webhookId, request.body);
    return result ? sendResult(reply, result) : reply.code(404).send();
  });
  app.delete<{ Params: WebhookParams }>(ROUTES.webhook, async (request, reply) =>
    reply.code(registry.delete(request.params.webhookId) ? 204 : 404).send(),
  );
}

function parsePage(value: string | null): number {
  const page = Number(value);
  return Number.isInteger(page) && page >= 1 ? page : 1;
}

function sendResult(reply: FastifyReply, result: WebhookResult): FastifyReply {
  if (!result.ok) {
    return reply
      .code(422)
      .type(JSON_TYPE)
      .send(JSON.stringify({ message: VALIDATION_MESSAGE, errors: result.errors }));
  }
  return reply
    .code(200)
    .type(JSON_TYPE)
    .send(JSON.stringify({ data: result.webhook }));
}

/**
 * The webhook route: raw bytes → verify `Signature` → safe JSON parse → `parseDelivery` → durable
 * inbox row → 2xx. Nothing is stored before the signature verifies, and nothing is answered 2xx before
 * its row has committed (invariant 1).
 *
 * Answers (invariant 9): missing signature 401 before the body is read, forged 401, malformed JSON or a non-object body 400,
 * oversized 413, inbox unavailable 503. Everything signed and well-formed gets 200, including a
 * delivery we cannot apply (stored `failed` with the reason) or do not know (stored `ignored`): a
 * 4xx/5xx for a business reason would only make the service redeliver it (docs/upstream.md, "Delivery and retries").
 *
 * One receiver serves every account (docs/operations.md, "Several accounts"): each route stores under
 * its account and verifies with that account's secrets only, so a delivery signed for one account and
 * posted to another's path is refused 401. The routes share one inbox writer (one statement may hold
 * rows of several accounts), one endpoint-secret cache, one body budget and one rejection log, and
 * name their account in every statement: connections do not grow with the number of accounts.
 */
import { isUtf8 } from 'node:buffer';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { parseContentLength } from '../ground/content-length.js';
import type { Logger } from '../ground/log.js';
import type { Queryable } from '../ground/queryable.js';
import {
  AccountNotDeclaredError,
  createInboxWriter,
  loadAccountSecrets,
  loadSecrets,
  type DeliveryRecord,
  type EndpointSecret,
  type InboxWriter,
  type InboxWriterOptions,
  type StoredDelivery,
} from './inbox/write.js';
import { BodyError, createBodyBudget, readBody, type BodyBudget } from './body.js';
import { answerBeforeBody } from './early-answer.js';
import { deliveryKinds, parseDelivery, PayloadError, peekKinds } from './payloads.js';
import { createRejectionLog, type RejectionLog, type RejectionLogOptions } from './rejections.js';
import { verifySignature } from './signature.js';

export type ReceiverOutcome = 'stored' | 'duplicate' | 'ignored' | 'failed' | 'unauthorized' | 'bad_request' | 'too_large' | 'unavailable';

/** What every route of a receiver shares. */
export interface ReceiverOptions {
  /** Largest accepted body (WEBHOOK_MAX_BODY); larger → 413 before it is read. */
  maxBodyBytes: number;
  /** Body bytes buffered at once across requests, every route's (WEBHOOK_BODY_MEMORY); default 64 MiB or one largest body. */
  bodyMemoryBytes?: number;
  pool: Queryable;
  logger: Logger;
  /**
   * Called after a new `pending` row committed, and again when a duplicate arrives while the row is
   * still pending. Not how the workers learn of it: the inbox notifies them when the row commits
   * (drizzle/0028_inbox_notify.sql), so the receiver needs nothing but Postgres.
   */
  onStored?: (id: string) => void | Promise<void>;
  /** Optional metrics hook, called once per request; `account` is the route's (null: the pool's). */
  onOutcome?: (outcome: ReceiverOutcome, durationMs: number, account: string | null) => void;
  /** Inbox batching (see `createInboxWriter`). */
  inbox?: InboxWriterOptions;
  /** The service gives up after 3 s (docs/upstream.md, "Delivery and retries"): answer 503 before that rather than time out. */
  storeTimeoutMs?: number;
  /** How long loaded endpoint secrets are trusted before a background reload. */
  secretsTtlMs?: number;
  /** Least time between two reloads caused by a signature that matched no secret. */
  secretsMissRefreshMs?: number;
  /** Longest wait for loading endpoint secrets. */
  secretsLoadTimeoutMs?: number;
  /** How rejections are logged: a few samples and a summary per period (see rejections.ts). */
  rejections?: RejectionLogOptions;
}

/** One path deliveries arrive at. */
export interface ReceiverRoute {
  path: string;
  /**
   * The account its deliveries are stored under and whose `webhook_endpoints` secrets verify them;
   * null: the pool's session account (a receiver of one account). Every route of a receiver names
   * one, or none does.
   */
  account: string | null;
  /** That account's static secrets (WEBHOOK_SECRETS), read per request; its endpoint secrets are added. */
  secrets: () => readonly string[];
}

/** A receiver of one route, for the pool's account. */
export interface ReceiverDeps extends ReceiverOptions {
  /** Route path (WEBHOOK_PATH). */
  path: string;
  /** Static secrets (WEBHOOK_SECRETS), read per request; `webhook_endpoints` secrets are added. */
  secrets: () => readonly string[];
}

export interface WebhookRoute {
  writer: InboxWriter;
  secrets: SecretCache;
  /** The shared body budget (its `used()` is what bodies being read hold now). */
  bodies: BodyBudget;
  /** Where rejections are logged (sampled, with a periodic summary). */
  rejections: RejectionLog;
}

/** One route for the pool's account: {@link registerWebhookRoutes} with a single route. */
export function registerWebhookRoute(app: FastifyInstance, deps: ReceiverDeps): WebhookRoute {
  const { path, secrets, ...options } = deps;
  return registerWebhookRoutes(app, options, [{ path, account: null, secrets }]);
}

/**
 * Registers the routes in one encapsulated context, so its catch-all raw-body parser and error
 * handler apply to these routes only (docs/architecture.md, "Traps we work around": take the body as a Buffer, verify, then parse
 * with Fastify's safe JSON parser). Call before `listen()`/`ready()`.
 */
export function registerWebhookRoutes(app: FastifyInstance, deps: ReceiverOptions, routes: readonly ReceiverRoute[]): WebhookRoute {
  const accounts = routes.map((r) => r.account).filter((a): a is string => a !== null);
  if (accounts.length > 0 && accounts.length < routes.length) {
    throw new TypeError('every webhook route names its account, or none does');
  }
  const byPath = new Map(routes.map((route) => [route.path, route]));
  if (byPath.size < routes.length) throw new TypeError('two webhook routes share a path');
  const writer = createInboxWriter(deps.pool, deps.inbox);
  const secrets = createSecretCache({
    // Bounded: an unreachable database must not hold a delivery past the service's 3 s timeout.
    load: () => withDeadline(loadEndpointSecrets(deps.pool, accounts), deps.secretsLoadTimeoutMs ?? 1_000),
    ttlMs: deps.secretsTtlMs ?? 5_000,
    missRefreshMs: deps.secretsMissRefreshMs ?? 1_000,
  });
  const log = deps.logger.child({ component: 'webhook-receiver' });
  // Rejects `__proto__` / `constructor.prototype` keys instead of silently dropping them.
  const jsonParser = app.getDefaultJsonParser('error', 'error');
  const rejections = createRejectionLog(log, deps.rejections);
  const ctx: HandlerContext = {
    deps,
    routes,
    routeOf: (request) => byPath.get(request.routeOptions.url ?? '') ?? null,
    writer,
    secrets,
    log,
    rejections,
    parseJson: (req, text) => runParser(jsonParser, req, text),
  };
  const bodies = createBodyBudget(deps.bodyMemoryBytes ?? Math.max(64 * 1024 * 1024, deps.maxBodyBytes));
  const releases = new WeakMap<FastifyRequest, () => void>();
  const release = (request: FastifyRequest) => {
    releases.get(request)?.();
    releases.delete(request);
  };

  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    // Our own reader instead of `parseAs: 'buffer'`: it counts every body against one shared budget.
    scope.addContentTypeParser('*', (request, payload, done) => {
      readBody(payload, { maxBytes: deps.maxBodyBytes, budget: bodies, announced: announcedLength(request) }).then(
        ({ body, release: give }) => {
          releases.set(request, give);
          done(null, body);
        },
        (error: unknown) => done(error as Error, undefined),
      );
    });
    // No Signature: nothing in the body could verify, so none of it is read (early-answer.ts). The
    // size is checked first, as for every request (413 from Content-Length, also unread).
    scope.addHook('onRequest', async (request, reply) => {
      if (request.headers.signature !== undefined && request.headers.signature !== '') return;
      if ((announcedLength(request) ?? 0) > deps.maxBodyBytes) return;
      answerBeforeBody(request, reply);
      return reject(ctx, request, reply, performance.now(), 401, SIGNATURE_PROBLEMS.missing);
    });
    scope.setErrorHandler((error: FastifyError, request, reply) => onRouteError(ctx, error, request, reply));
    for (const route of routes) {
      scope.post(route.path, { bodyLimit: deps.maxBodyBytes }, async (request, reply) => {
        try {
          return await handleDelivery(ctx, route, request, reply);
        } finally {
          release(request);
        }
      });
    }
    scope.addHook('onResponse', async (request) => release(request));
    // Load endpoint secrets at start rather than on the first delivery (never blocks startup).
    scope.addHook('onReady', async () => void secrets.current());
    scope.addHook('onClose', async () => {
      rejections.close();
      await writer.close();
    });
  });

  return { writer, secrets, bodies, rejections };
}

/** The routes' endpoint secrets: every named account's in one statement, or the session account's. */
async function loadEndpointSecrets(pool: Queryable, accounts: readonly string[]): Promise<EndpointSecret[]> {
  return accounts.length > 0 ? loadAccountSecrets(pool, accounts) : loadSecrets(pool);
}

function announcedLength(request: FastifyRequest): number | undefined {
  return parseContentLength(request.headers['content-length']) ?? undefined;
}

// ---------------------------------------------------------------------------------------------
// The handler

interface HandlerContext {
  deps: ReceiverOptions;
  routes: readonly ReceiverRoute[];
  /** The route a request matched (null before routing, or for none of ours). */
  routeOf(request: FastifyRequest): ReceiverRoute | null;
  writer: InboxWriter;
  secrets: SecretCache;
  log: Logger;
  rejections: RejectionLog;
  parseJson(request: FastifyRequest, text: string): { ok: true; value: unknown } | { ok: false };
}

const EMPTY = Buffer.alloc(0);

async function handleDelivery(
  ctx: HandlerContext,
  route: ReceiverRoute,
  request: FastifyRequest,
  reply: FastifyReply,
): Promise<FastifyReply> {
  const started = performance.now();
  const raw = Buffer.isBuffer(request.body) ? request.body : EMPTY;
  // A repeated header is joined with ", " by Node, which then fails as malformed.
  const header = request.headers.signature;
  const signature = Array.isArray(header) ? header.join(', ') : header;
  const verified = await verify(ctx, route, raw, signature);
  if (!verified.ok) {
    const status = verified.reason === 'unavailable' ? 503 : 401;
    const signedFor = verified.reason === 'mismatch' ? () => accountThatSigned(ctx, route, raw, signature) : undefined;
    return reject(ctx, request, reply, started, status, SIGNATURE_PROBLEMS[verified.reason], undefined, signedFor);
  }

  // JSON is UTF-8 (RFC 8259); decoding other bytes would store and apply a lossy copy.
  if (!isUtf8(raw)) return reject(ctx, request, reply, started, 400, 'body is not valid UTF-8');
  const text = raw.toString('utf8');
  const parsed = ctx.parseJson(request, text);
  if (!parsed.ok) return reject(ctx, request, reply, started, 400, 'malformed JSON');
  const body = parsed.value;
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return reject(ctx, request, reply, started, 400, 'body is not a JSON object');
  }
  if (deeperThan(body, MAX_JSON_DEPTH)) {
    return reject(ctx, request, reply, started, 400, `body nested deeper than ${MAX_JSON_DEPTH} levels`);
  }

  const record = toRecord(raw, body, verified.endpointId);
  let stored: StoredDelivery;
  try {
    const budget = (ctx.deps.storeTimeoutMs ?? 2_500) - (performance.now() - started);
    stored = await withDeadline(ctx.writer.store(record, route.account), Math.max(0, budget));
  } catch (error) {
    // Not the inbox's fault: the account's row is missing until a worker starts (the service retries).
    if (error instanceof AccountNotDeclaredError)
      return reject(ctx, request, reply, started, 503, 'account not declared yet: start a worker, it declares the accounts');
    return reject(ctx, request, reply, started, 503, 'inbox unavailable', error);
  }

  if (stored.status === 'pending') notifyStored(ctx, stored.id);
  const outcome: ReceiverOutcome = stored.duplicate ? 'duplicate' : record.status === 'pending' ? 'stored' : record.status;
  if (record.error && !stored.duplicate) {
    // Reported once, when first stored (invariant 9); the row keeps the reason.
    ctx.log.warn(
      {
        ...(route.account === null ? {} : { account: route.account }),
        deliveryId: stored.id,
        status: record.status,
        kinds: record.kinds,
        error: record.error,
      },
      STORED_WITH_PROBLEM[record.status],
    );
  }
  ctx.deps.onOutcome?.(outcome, performance.now() - started, route.account);
  return reply.code(200).send({ status: outcome, id: stored.id });
}

const STORED_WITH_PROBLEM: Record<DeliveryRecord['status'], string> = {
  pending: 'webhook delivery has unknown event kinds; stored, the known events will be applied',
  ignored: 'webhook delivery has no known event kind; stored, not applied',
  failed: 'webhook delivery cannot be applied; stored as failed',
};

function toRecord(raw: Buffer, body: object, endpointId: string | null): DeliveryRecord {
  try {
    const parsed = parseDelivery(body);
    const eventCount = parsed.events.length;
    return {
      raw,
      body,
      kinds: deliveryKinds(parsed),
      eventCount,
      endpointId,
      // Unknown kinds are stored and reported, never applied (invariant 9); the known events of a
      // mixed batch still are.
      status: eventCount > 0 ? 'pending' : 'ignored',
      error: parsed.unknownKinds.length > 0 ? `unknown event kind(s): ${parsed.unknownKinds.join(', ')}` : null,
    };
  } catch (error) {
    if (!(error instanceof PayloadError)) throw error;
    return { raw, body, kinds: peekKinds(body), eventCount: 0, endpointId, status: 'failed', error: error.message };
  }
}

function notifyStored(ctx: HandlerContext, id: string): void {
  // The row is durable whatever happens here.
  const failed = (error: unknown) => ctx.log.error({ err: error, deliveryId: id }, 'the onStored hook failed');
  try {
    const result = ctx.deps.onStored?.(id);
    if (result) result.catch(failed);
  } catch (error) {
    failed(error);
  }
}

const SIGNATURE_PROBLEMS = {
  missing: 'no Signature header',
  malformed: 'Signature is not a hex digest',
  mismatch: 'Signature matches no known secret',
  unavailable: 'Signature matches no cached secret and webhook endpoints cannot be loaded',
} as const;

type VerifyResult = { ok: true; endpointId: string | null } | { ok: false; reason: 'missing' | 'malformed' | 'mismatch' | 'unavailable' };

/**
 * Static secrets first, then the cached endpoint secrets, the route's account's only; on a mismatch
 * the endpoint secrets are reloaded once (rate-limited) so a webhook registered a moment ago verifies
 * at once. When they cannot be loaded, a mismatch is answered 503, not 401: the signature may be good.
 */
async function verify(ctx: HandlerContext, route: ReceiverRoute, raw: Buffer, header: string | undefined): Promise<VerifyResult> {
  const staticSecrets = route.secrets();
  let endpoints = endpointsOf(await ctx.secrets.current(), route.account);
  let check = verifyAgainst(raw, header, staticSecrets, endpoints);
  if (check.ok || check.reason !== 'mismatch') return check;
  const refresh = await ctx.secrets.refreshAfterMiss();
  if (refresh === 'reloaded') {
    endpoints = endpointsOf(await ctx.secrets.current(), route.account);
    check = verifyAgainst(raw, header, staticSecrets, endpoints);
    if (check.ok) return check;
  }
  return ctx.secrets.healthy() ? check : { ok: false, reason: 'unavailable' };
}

/** The cached endpoint secrets of one account (all of them for a route of the pool's account). */
function endpointsOf(all: readonly EndpointSecret[], account: string | null): readonly EndpointSecret[] {
  if (account === null) return all;
  return all.filter((e) => e.account === account);
}

/**
 * For the log of a refused delivery only (a few lines per period: rejections.ts): which other
 * account's secrets, static or cached, verify it. Names the account, never the secret.
 */
function accountThatSigned(ctx: HandlerContext, route: ReceiverRoute, raw: Buffer, header: string | undefined): string | undefined {
  const cached = ctx.secrets.cached();
  for (const other of ctx.routes) {
    if (other.account === null || other.account === route.account) continue;
    const endpoints = endpointsOf(cached, other.account);
    if (verifyAgainst(raw, header, other.secrets(), endpoints).ok) return other.account;
  }
  return undefined;
}

function verifyAgainst(
  raw: Buffer,
  header: string | undefined,
  staticSecrets: readonly string[],
  endpoints: readonly EndpointSecret[],
): VerifyResult {
  const all = endpoints.length === 0 ? staticSecrets : [...staticSecrets, ...endpoints.map((e) => e.secret)];
  const result = verifySignature(raw, header, all);
  if (!result.ok) return result;
  const endpoint = endpoints[result.secretIndex - staticSecrets.length];
  return { ok: true, endpointId: result.secretIndex < staticSecrets.length ? null : (endpoint?.endpointId ?? null) };
}

// ---------------------------------------------------------------------------------------------
// Rejections (sampled lines and a periodic summary, invariant 10: never the signature nor a secret)

function reject(
  ctx: HandlerContext,
  request: FastifyRequest,
  reply: FastifyReply,
  started: number,
  status: 400 | 401 | 413 | 503,
  reason: string,
  error?: unknown,
  signedFor?: () => string | undefined,
): FastifyReply {
  const outcome: ReceiverOutcome =
    status === 401 ? 'unauthorized' : status === 400 ? 'bad_request' : status === 413 ? 'too_large' : 'unavailable';
  const announced = Number(request.headers['content-length'] ?? 0);
  const route = ctx.routeOf(request);
  ctx.rejections.record({
    status,
    reason,
    ...(route && route.account !== null ? { account: route.account, path: route.path } : {}),
    ip: request.ip,
    bytes: Buffer.isBuffer(request.body) ? request.body.length : Number.isFinite(announced) ? announced : 0,
    contentType: request.headers['content-type'],
    // The message only: at a high rate of failures (database down) stacks would drown the log.
    // eslint-disable-next-line @typescript-eslint/no-base-to-string -- whatever was thrown, if not an Error
    ...(error ? { error: error instanceof Error ? `${error.name}: ${error.message}` : String(error) } : {}),
    ...(signedFor ? { signedFor } : {}),
  });
  ctx.deps.onOutcome?.(outcome, performance.now() - started, route?.account ?? null);
  return reply.code(status).send({ error: PUBLIC_REASONS[status] });
}

const PUBLIC_REASONS = {
  400: 'malformed payload',
  401: 'invalid signature',
  413: 'payload too large',
  503: 'temporarily unavailable, retry later',
} as const;

/** Errors raised before the handler runs: the body parser (size, aborted upload, bad length). */
function onRouteError(ctx: HandlerContext, error: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const started = performance.now();
  if (error instanceof BodyError) {
    answerBeforeBody(request, reply);
    return reject(ctx, request, reply, started, error.status, error.message);
  }
  if (error.statusCode === 413 || error.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
    answerBeforeBody(request, reply);
    return reject(ctx, request, reply, started, 413, 'body larger than the limit');
  }
  if (error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 500) {
    return reject(ctx, request, reply, started, 400, error.code ?? 'bad request');
  }
  return reject(ctx, request, reply, started, 503, 'unexpected error', error);
}

// ---------------------------------------------------------------------------------------------
// Endpoint secrets cache

export interface SecretCache {
  /** The cached secrets; the first call waits for a load, later ones reload in the background. */
  current(): Promise<readonly EndpointSecret[]>;
  /** What is cached now, without loading. */
  cached(): readonly EndpointSecret[];
  /**
   * Reloads after a signature matched nothing: at most once per `missRefreshMs`, unless the last
   * load found a secret the one before it did not have.
   */
  refreshAfterMiss(): Promise<'reloaded' | 'skipped' | 'failed'>;
  /** False while the last load attempt failed (the cached list may be incomplete). */
  healthy(): boolean;
}

export interface SecretCacheOptions {
  load: () => Promise<EndpointSecret[]>;
  ttlMs: number;
  missRefreshMs: number;
  now?: () => number;
}

/**
 * Verification must not query the database per request, yet a newly registered endpoint must verify
 * within seconds: serve the cached list, reload it in the background after `ttlMs`, and reload at
 * once when a signature matches nothing, rate-limited so forged requests cannot hammer Postgres.
 *
 * The limit applies once a load found nothing new. Webhooks registered one after another (one per
 * group) each send a first delivery that misses; had the first miss's load, finding the first
 * secret, held back the second's, that delivery would be refused 401 until the service retried.
 * Forged requests cannot add secrets, so they still get one load per `missRefreshMs`, plus one per
 * secret actually added.
 */
export function createSecretCache(options: SecretCacheOptions): SecretCache {
  const now = options.now ?? Date.now;
  let secrets: readonly EndpointSecret[] = [];
  let loadedAt = -Infinity;
  let attemptedAt = -Infinity;
  let lastFailed = false;
  let inFlight: Promise<boolean> | undefined;
  let inFlightForMiss = false;
  // Only reloads caused by misses are rate-limited: a load at start or on TTL that ran a moment
  // before a webhook was registered must not hold back the reload its first delivery needs.
  let missAttemptAt = -Infinity;
  let lastLoadGained = false;

  function reload(forMiss = false): Promise<boolean> {
    if (!inFlight) inFlightForMiss = forMiss;
    inFlight ??= (async () => {
      attemptedAt = now();
      try {
        const loaded = await options.load();
        lastLoadGained = gainsSecret(secrets, loaded);
        secrets = loaded;
        loadedAt = now();
        lastFailed = false;
        return true;
      } catch {
        lastFailed = true;
        lastLoadGained = false;
        return false;
      } finally {
        inFlight = undefined;
      }
    })();
    return inFlight;
  }

  return {
    async current() {
      if (loadedAt === -Infinity && attemptedAt === -Infinity) await reload();
      else if (now() - attemptedAt >= options.ttlMs && now() - loadedAt >= options.ttlMs) void reload();
      return secrets;
    },
    async refreshAfterMiss() {
      // A background load may have started before the missing secret was stored: let it finish, then
      // load again (within the miss budget). Concurrent misses share one miss-triggered load.
      while (inFlight && !inFlightForMiss) await inFlight;
      if (inFlight) return (await inFlight) ? 'reloaded' : 'failed';
      if (now() - missAttemptAt < options.missRefreshMs && !lastLoadGained) return lastFailed ? 'failed' : 'skipped';
      missAttemptAt = now();
      return (await reload(true)) ? 'reloaded' : 'failed';
    },
    cached: () => secrets,
    healthy: () => !lastFailed,
  };
}

/** Whether `next` holds a secret `previous` did not (a removal verifies nothing new). */
function gainsSecret(previous: readonly EndpointSecret[], next: readonly EndpointSecret[]): boolean {
  const keyOf = (e: EndpointSecret) => `${e.account ?? ''}\u0000${e.endpointId}\u0000${e.secret}`;
  const known = new Set(previous.map(keyOf));
  return next.some((e) => !known.has(keyOf(e)));
}

// ---------------------------------------------------------------------------------------------
// Helpers

type BodyParser = ReturnType<FastifyInstance['getDefaultJsonParser']>;

/** Fastify's default JSON parser is callback-shaped but synchronous; run it as a function. */
function runParser(parser: BodyParser, request: FastifyRequest, text: string): { ok: true; value: unknown } | { ok: false } {
  let result: { ok: true; value: unknown } | { ok: false } = { ok: false };
  void parser(request, text, (error: Error | null, value?: unknown) => {
    result = error ? { ok: false } : { ok: true, value };
  });
  return result;
}

class DeadlineError extends Error {
  override name = 'DeadlineError';
}

function withDeadline<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, rejectDeadline) => {
    timer = setTimeout(() => rejectDeadline(new DeadlineError(`no answer from the database within ${Math.round(ms)} ms`)), ms);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

/**
 * Real payloads nest a few levels; Postgres refuses jsonb nested thousands deep (stack depth limit),
 * which would fail the inbox write on every retry. Refused up front with a 400 instead of a 503.
 */
export const MAX_JSON_DEPTH = 256;

function deeperThan(value: unknown, limit: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 1]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop() as [unknown, number];
    if (typeof v !== 'object' || v === null) continue;
    if (depth > limit) return true;
    for (const child of Array.isArray(v) ? v : Object.values(v)) stack.push([child, depth + 1]);
  }
  return false;
}

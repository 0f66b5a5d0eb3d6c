/**
 * The webhook management interface (docs/upstream.md, "Webhook management"): list (every page), get, create, update, delete.
 *
 * Requests go through `http.ts` (timeouts, retries, lossless JSON, typed errors) with
 * `Authorization: Bearer <token>` (docs/upstream.md, "Webhook management"); the token is scrubbed from every message
 * (invariant 10). POST is retried only on 429 (http.ts), so a create is never sent twice after an
 * unclear failure.
 *
 * Answers are validated (docs/upstream.md, "Webhook object" and "Page envelope") so a changed service fails with a
 * message naming the field, not later with `undefined`. The service's error answers become one-line
 * errors a person can act on: 401 → the token was rejected, 404 → that webhook does not exist,
 * 422 → each field error (docs/upstream.md, "Webhook management": `{message, errors: {field: [...]}}`).
 */
import { z } from 'zod';
import type { Logger } from '../ground/log.js';
import { UpstreamAuthError, UpstreamBodyError, UpstreamHttpError, type RequestTarget } from './errors.js';
import { createHttpClient, type HttpClient, type HttpClientOptions, type HttpStats } from './http.js';
import { isPlainObject } from './json.js';

export const WEBHOOKS_LABEL = 'webhook API';
export const WEBHOOKS_PATH = '/api/webhooks';

/** A webhook as the service describes it (docs/upstream.md, "Webhook object"), field names as on the wire. */
export interface Webhook {
  id: string;
  /** Optional label upstream; '' when absent. */
  name: string;
  url: string;
  /** Event kinds as sent by the service (kept as strings: a kind newer than our table must not break `list`). */
  events: string[];
  enabled: boolean;
  batchable: boolean;
  /** Signs deliveries (docs/upstream.md, "Signature"). Absent when an answer leaves it out; never print it. */
  secret: string | undefined;
  created_at: string | null;
  updated_at: string | null;
}

/** A webhook just created: the service always returns its secret then (docs/upstream.md, "Webhook management"). */
export interface CreatedWebhook extends Webhook {
  secret: string;
}

/** Create body (docs/upstream.md, "Webhook management"). `events` are plain strings so callers (and tests) can send what they like. */
export interface WebhookCreateBody {
  name?: string;
  url: string;
  events: readonly string[];
  enabled?: boolean;
  batchable?: boolean;
}

/** Update body: the same parameters, all optional (docs/upstream.md, "Webhook management"). */
export type WebhookUpdateBody = Partial<WebhookCreateBody>;

export interface WebhooksApi {
  /** Every webhook of the account, following `links.next` page by page (docs/upstream.md, "Page envelope"); deduplicated by id. */
  list(options?: { signal?: AbortSignal }): Promise<Webhook[]>;
  /** Throws WebhookNotFoundError on 404. */
  get(id: string, options?: { signal?: AbortSignal }): Promise<Webhook>;
  /** Like `get`, but null when the webhook does not exist. */
  find(id: string, options?: { signal?: AbortSignal }): Promise<Webhook | null>;
  create(body: WebhookCreateBody, options?: { signal?: AbortSignal }): Promise<CreatedWebhook>;
  /** Throws WebhookNotFoundError on 404, WebhookValidationError on 422. */
  update(id: string, body: WebhookUpdateBody, options?: { signal?: AbortSignal }): Promise<Webhook>;
  /** Throws WebhookNotFoundError on 404. */
  delete(id: string, options?: { signal?: AbortSignal }): Promise<void>;
  stats(): HttpStats;
}

export interface WebhooksApiOptions {
  /** Management host without `/api/webhooks` (MAILER_WEBHOOKS_URL). */
  baseUrl: string;
  /** Bearer token (MAILER_WEBHOOKS_TOKEN). */
  token: string;
  /** `gate`: the shared rate limiter, for callers whose requests count against the read budget (the audit). */
  http?: Pick<HttpClientOptions, 'timeoutMs' | 'retry' | 'hooks' | 'defaultRetryAfterMs' | 'maxRetryAfterMs' | 'fetch' | 'gate'>;
  logger?: Logger;
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/** The service refused the bearer token (HTTP 401/403). */
export class WebhookAuthError extends UpstreamAuthError {}

/** HTTP 404 for a webhook id (docs/upstream.md, "Errors": no body). */
export class WebhookNotFoundError extends UpstreamHttpError {
  constructor(
    readonly webhookId: string,
    target: RequestTarget,
  ) {
    super(`webhook ${webhookId} does not exist`, target, 404);
  }
}

/** HTTP 422: the service refused a create or update; `fieldErrors` as the service sent them. */
export class WebhookValidationError extends UpstreamHttpError {
  constructor(
    message: string,
    target: RequestTarget,
    readonly fieldErrors: Record<string, string[]>,
    body: unknown,
  ) {
    super(message, target, 422, body);
  }
}

const MAX_ERROR_TEXT = 300;

function oneLine(text: string): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > MAX_ERROR_TEXT ? `${flat.slice(0, MAX_ERROR_TEXT)}…` : flat;
}

/** `{errors: {field: [messages]}}` of a 422 body; messages that are not strings are dropped. */
export function readFieldErrors(body: unknown): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  if (!isPlainObject(body) || !isPlainObject(body.errors)) return out;
  for (const [field, value] of Object.entries(body.errors)) {
    const messages = (Array.isArray(value) ? value : [value]).filter((m): m is string => typeof m === 'string');
    if (messages.length > 0) out[field] = messages.map(oneLine);
  }
  return out;
}

/**
 * One line for a 422 (docs/upstream.md, "Webhook management"): each field with its messages, e.g.
 * `webhook API refused the request: events.0: The selected events.0 is invalid.; url: The url field is required.`
 * The generic top-level message ("The given data was invalid.") is used only when no field says more.
 */
export function formatValidationError(body: unknown): string {
  const fields = Object.entries(readFieldErrors(body));
  const prefix = `${WEBHOOKS_LABEL} refused the request`;
  if (fields.length > 0) return `${prefix}: ${fields.map(([field, messages]) => `${field}: ${messages.join(' ')}`).join('; ')}`;
  if (isPlainObject(body) && typeof body.message === 'string' && body.message.trim() !== '') {
    return `${prefix}: ${oneLine(body.message)}`;
  }
  return `${prefix} (HTTP 422 without details)`;
}

function targetOf(error: UpstreamHttpError): RequestTarget {
  return { label: error.label, method: error.method, path: error.path };
}

/**
 * Turns http.ts errors into the messages of this interface. `webhookId` is set for calls on one
 * webhook, where a 404 means that webhook is missing rather than a wrong base URL.
 */
export function translateError(error: unknown, webhookId?: string): unknown {
  if (error instanceof WebhookAuthError || error instanceof WebhookNotFoundError || error instanceof WebhookValidationError) {
    return error;
  }
  if (error instanceof UpstreamAuthError) {
    // http.ts already scrubbed the service's text; the token itself is never in it.
    const said = error.serviceMessage ? ` ${error.serviceMessage}` : '';
    return new WebhookAuthError(
      `${WEBHOOKS_LABEL} rejected the token (${error.status}${said})`,
      targetOf(error),
      error.status,
      error.code,
      error.serviceMessage,
      error.body,
    );
  }
  if (error instanceof UpstreamHttpError && error.status === 404 && webhookId !== undefined) {
    return new WebhookNotFoundError(webhookId, targetOf(error));
  }
  if (error instanceof UpstreamHttpError && error.status === 422) {
    return new WebhookValidationError(formatValidationError(error.body), targetOf(error), readFieldErrors(error.body), error.body);
  }
  if (error instanceof UpstreamHttpError && error.status === 404) {
    return new UpstreamHttpError(
      `${error.message}; check MAILER_WEBHOOKS_URL (the host only, without ${WEBHOOKS_PATH})`,
      targetOf(error),
      404,
      error.body,
    );
  }
  return error;
}

// ---------------------------------------------------------------------------------------------
// Response shapes (docs/upstream.md, "Webhook object" and "Page envelope")
// ---------------------------------------------------------------------------------------------

/** Ids are numeric-looking strings (docs/upstream.md, "Webhook object"); a number is accepted while exact (invariant 6). */
const ID_TEXT = /^[A-Za-z0-9_-]{1,64}$/;

export function isWebhookId(value: string): boolean {
  return ID_TEXT.test(value);
}

const idSchema = z.union([
  z.string().regex(ID_TEXT, { error: 'expected an id of letters, digits, "-" or "_"' }),
  z
    .number()
    .int()
    .nonnegative()
    .refine((n) => Number.isSafeInteger(n), { error: 'a numeric id beyond 2^53 has lost digits' })
    .transform(String),
]);

/** Laravel's boolean casts may serialise as 0/1. */
const flag = z.union([z.boolean(), z.literal(0).transform(() => false), z.literal(1).transform(() => true)], {
  error: 'expected true or false',
});

const webhookSchema = z.object({
  id: idSchema,
  name: z
    .string()
    .nullish()
    .transform((v) => v ?? ''),
  url: z.string(),
  events: z.array(z.string()),
  enabled: flag,
  batchable: flag,
  secret: z
    .string()
    .nullish()
    .transform((v) => (v === null || v === undefined || v === '' ? undefined : v)),
  created_at: z
    .string()
    .nullish()
    .transform((v) => v ?? null),
  updated_at: z
    .string()
    .nullish()
    .transform((v) => v ?? null),
});

const singleSchema = z.object({ data: webhookSchema });

const envelopeSchema = z.object({
  data: z.array(webhookSchema),
  links: z.object({
    next: z.union([z.string(), z.null()], { error: 'expected the URL of the next page or null' }),
  }),
});

export type PageEnvelope = z.infer<typeof envelopeSchema>;

const MAX_ISSUES = 3;

function describeIssues(error: z.ZodError): string {
  const shown = error.issues.slice(0, MAX_ISSUES).map((issue) => {
    const path = issue.path.map(String).join('.');
    return path === '' ? issue.message : `${path}: ${issue.message}`;
  });
  const more = error.issues.length > MAX_ISSUES ? ` (and ${error.issues.length - MAX_ISSUES} more)` : '';
  return `${shown.join('; ')}${more}`;
}

function parseBody<T>(schema: z.ZodType<T>, body: unknown, what: string, target: RequestTarget, status: number): T {
  const result = schema.safeParse(body);
  if (result.success) return result.data;
  const got = body === undefined ? ' (empty body)' : '';
  throw new UpstreamBodyError(
    `${target.label} answered an unexpected ${what}${got} on ${target.method} ${target.path}: ${describeIssues(result.error)}`,
    target,
    status,
  );
}

/** Validates one page of the list (docs/upstream.md, "Page envelope"). Exported for unit tests. */
export function parseEnvelope(
  body: unknown,
  target: RequestTarget = { label: WEBHOOKS_LABEL, method: 'GET', path: WEBHOOKS_PATH },
): PageEnvelope {
  return parseBody(envelopeSchema, body, 'page of webhooks', target, 200);
}

/** Validates `{data: Webhook}`. Exported for unit tests. */
export function parseSingle(body: unknown, target: RequestTarget = { label: WEBHOOKS_LABEL, method: 'GET', path: WEBHOOKS_PATH }): Webhook {
  return parseBody(singleSchema, body, 'webhook', target, 200).data;
}

// ---------------------------------------------------------------------------------------------
// Paging
// ---------------------------------------------------------------------------------------------

/** 50 per page (docs/upstream.md, "Limits"): 10 000 pages is half a million webhooks, far beyond any account. */
export const MAX_LIST_PAGES = 10_000;

/**
 * Path and query to request for `links.next`, relative to our base URL. Only the path and query
 * are taken: the token goes only to the configured host, whatever host the link names (a service
 * behind a proxy may name its internal one). Throws when the link leaves the base path.
 */
export function nextPagePath(next: string, baseUrl: string, current: string): string {
  const base = baseUrl.replace(/\/+$/, '');
  const resolved = new URL(next, `${base}${current}`);
  const prefix = new URL(base).pathname.replace(/\/+$/, '');
  if (prefix !== '' && !resolved.pathname.startsWith(`${prefix}/`)) {
    throw new TypeError(`links.next ${JSON.stringify(next)} is outside the configured base URL`);
  }
  const path = resolved.pathname.slice(prefix.length);
  return `${path}${resolved.search}`;
}

// ---------------------------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------------------------

function checkId(id: string): string {
  if (typeof id !== 'string' || !ID_TEXT.test(id)) throw new TypeError(`webhook id ${JSON.stringify(id)} is not a valid id`);
  return id;
}

export function createWebhooksApi(options: WebhooksApiOptions): WebhooksApi {
  if (typeof options.token !== 'string' || options.token.trim() === '') throw new TypeError(`${WEBHOOKS_LABEL}: token is required`);
  const baseUrl = options.baseUrl.replace(/\/+$/, '');
  const http = webhooksHttpClient(options, baseUrl);
  const get = (id: string, opts?: { signal?: AbortSignal }): Promise<Webhook> => getWebhook(http, id, opts);
  return {
    list: (opts) => listWebhooks(http, baseUrl, opts),
    get,
    async find(id, opts) {
      try {
        return await get(id, opts);
      } catch (error) {
        if (error instanceof WebhookNotFoundError) return null;
        throw error;
      }
    },
    create: (body, opts) => createWebhook(http, body, opts),
    update: (id, body, opts) => updateWebhook(http, id, body, opts),
    async delete(id, opts) {
      await call(http, { method: 'DELETE', path: itemPath(id), signal: opts?.signal }, id);
    },
    stats: () => http.stats(),
  };
}

/** The HTTP client with the bearer token (scrubbed from messages) and a warning logged per retry. */
function webhooksHttpClient(options: WebhooksApiOptions, baseUrl: string): HttpClient {
  const logger = options.logger;
  const userHooks = options.http?.hooks;
  return createHttpClient({
    ...options.http,
    baseUrl,
    label: WEBHOOKS_LABEL,
    credentialName: 'token',
    headers: { Authorization: `Bearer ${options.token}` },
    secrets: [options.token],
    hooks: {
      ...userHooks,
      onRetry(info) {
        userHooks?.onRetry?.(info);
        logger?.warn(
          { method: info.method, path: info.path, attempt: info.attempt, err: info.error.message },
          'webhook API call failed; retrying',
        );
      },
    },
  });
}

/** One request; the service's error answers become the webhook errors (`translateError`). */
async function call(
  http: HttpClient,
  request: { method: 'GET' | 'POST' | 'PUT' | 'DELETE'; path: string; body?: unknown; signal?: AbortSignal | undefined },
  webhookId?: string,
): Promise<{ status: number; body: unknown; target: RequestTarget }> {
  try {
    const response = await http.request(request);
    return { status: response.status, body: response.body, target: { label: WEBHOOKS_LABEL, method: request.method, path: request.path } };
  } catch (error) {
    throw translateError(error, webhookId);
  }
}

function itemPath(id: string): string {
  return `${WEBHOOKS_PATH}/${encodeURIComponent(checkId(id))}`;
}

async function listWebhooks(http: HttpClient, baseUrl: string, opts?: { signal?: AbortSignal }): Promise<Webhook[]> {
  const byId = new Map<string, Webhook>();
  const seen = new Set<string>();
  let path: string | null = WEBHOOKS_PATH;
  while (path !== null) {
    if (seen.size >= MAX_LIST_PAGES) {
      throw new UpstreamBodyError(
        `${WEBHOOKS_LABEL} list did not end after ${MAX_LIST_PAGES} pages`,
        { label: WEBHOOKS_LABEL, method: 'GET', path },
        200,
      );
    }
    seen.add(path);
    const { status, body, target } = await call(http, { method: 'GET', path, signal: opts?.signal });
    const page = parseBody(envelopeSchema, body, 'page of webhooks', target, status);
    // Pages can shift while we read (a webhook created or deleted meanwhile): keep each id once.
    for (const hook of page.data) if (!byId.has(hook.id)) byId.set(hook.id, hook);
    const next = page.links.next;
    if (next === null || next.trim() === '') break;
    path = followNext(next, baseUrl, path, seen, { status, target });
  }
  return [...byId.values()];
}

/** The path `links.next` names, or an error when it is malformed or leads back to a page already read. */
function followNext(
  next: string,
  baseUrl: string,
  path: string,
  seen: ReadonlySet<string>,
  answer: { status: number; target: RequestTarget },
): string {
  const { status, target } = answer;
  let nextPath: string;
  try {
    nextPath = nextPagePath(next, baseUrl, path);
  } catch (error) {
    throw new UpstreamBodyError(`${WEBHOOKS_LABEL} answered a bad links.next on GET ${path}: ${(error as Error).message}`, target, status);
  }
  if (seen.has(nextPath)) {
    throw new UpstreamBodyError(
      `${WEBHOOKS_LABEL} links.next on GET ${path} points back to a page already read (${nextPath}); stopping instead of looping`,
      target,
      status,
    );
  }
  return nextPath;
}

async function getWebhook(http: HttpClient, id: string, opts?: { signal?: AbortSignal }): Promise<Webhook> {
  const { status, body, target } = await call(http, { method: 'GET', path: itemPath(id), signal: opts?.signal }, id);
  return parseBody(singleSchema, body, 'webhook', target, status).data;
}

async function createWebhook(http: HttpClient, body: WebhookCreateBody, opts?: { signal?: AbortSignal }): Promise<CreatedWebhook> {
  const response = await call(http, { method: 'POST', path: WEBHOOKS_PATH, body, signal: opts?.signal });
  const hook = parseBody(singleSchema, response.body, 'webhook', response.target, response.status).data;
  if (hook.secret === undefined) {
    // Without it no delivery to this webhook can be verified; say so with the id so it can be deleted.
    throw new UpstreamBodyError(
      `${WEBHOOKS_LABEL} created webhook ${hook.id} but returned no secret (POST ${WEBHOOKS_PATH})`,
      response.target,
      response.status,
    );
  }
  return { ...hook, secret: hook.secret };
}

async function updateWebhook(http: HttpClient, id: string, body: WebhookUpdateBody, opts?: { signal?: AbortSignal }): Promise<Webhook> {
  const response = await call(http, { method: 'PUT', path: itemPath(id), body, signal: opts?.signal }, id);
  return parseBody(singleSchema, response.body, 'webhook', response.target, response.status).data;
}

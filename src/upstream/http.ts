/**
 * JSON over HTTP for both upstream interfaces: Node's global fetch with a per-attempt timeout,
 * p-retry with exponential backoff and jitter, lossless JSON parsing and typed errors.
 *
 * Shared by `legacy/client.ts` (API key in a custom header), `current/client.ts` and `webhooks-api.ts` (bearer tokens): the caller
 * passes its credential as a header and names its secrets; this module never puts a request header
 * into an error or a log (invariant 10), and scrubs the secret values out of any text the server
 * sends back before it becomes an error message.
 *
 * Every attempt (not every call) passes through the optional `gate` (the shared rate limiter,
 * `limiter.ts`), because the service counts attempts (invariant 7). A 429 pauses the gate for every
 * replica and the retry waits at least what the service asked for, never less.
 */
import { parse as parseLossless } from 'lossless-json';
import pRetry from 'p-retry';
import { createScrubber, type SecretScrubber } from '../ground/log.js';
import { sleep } from '../ground/wait.js';
import type { Release } from './page-gate.js';

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/** Where an error happened; never includes headers (they carry the credential). */
export interface RequestTarget {
  /** e.g. "legacy API" */
  readonly label: string;
  readonly method: string;
  /** Path and query, e.g. `/api/v2/groups/1/subscribers/active?limit=100&offset=0`. No secrets: the key is a header. */
  readonly path: string;
}

/** Base class: every failure of an upstream call is one of its subclasses. */
export abstract class UpstreamError extends Error {
  /** Whether trying the same request again may succeed. */
  abstract readonly retryable: boolean;
  readonly label: string;
  readonly method: string;
  readonly path: string;

  constructor(message: string, target: RequestTarget, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.label = target.label;
    this.method = target.method;
    this.path = target.path;
  }
}

/** A non-2xx answer without a more specific meaning. 5xx and 408 are retryable; other 4xx are not. */
export class UpstreamHttpError extends UpstreamError {
  readonly retryable: boolean;
  constructor(
    message: string,
    target: RequestTarget,
    readonly status: number,
    /** Parsed JSON body when there was one (e.g. a 422's `{message, errors}`), else undefined. */
    readonly body?: unknown,
    /** What the service asked us to wait (Retry-After on a 503, say), if anything. */
    readonly retryAfterMs?: number,
  ) {
    super(message, target);
    this.retryable = status >= 500 || status === 408;
  }
}

/**
 * The service rejected our credential: legacy error codes 1 / 302 (docs/upstream.md, "Errors"; with any status, since
 * the body is authoritative), or HTTP 401/403. Never retried (invariant 9): the same key fails again.
 */
export class UpstreamAuthError extends UpstreamHttpError {
  override readonly retryable = false;
  constructor(
    message: string,
    target: RequestTarget,
    status: number,
    /** Legacy error code (1 or 302) when the body carried one. */
    readonly code: number | undefined,
    /** The service's own message (scrubbed, truncated). */
    readonly serviceMessage: string | undefined,
    body?: unknown,
  ) {
    super(message, target, status, body);
  }
}

/**
 * A legacy group endpoint answered 404 `{"error":{"message":"Endpoint not found"}}` without a `code`:
 * what an account moved to the service's current platform gets for every legacy request
 * (docs/upstream-current.md, "Moved accounts"). The same key fails the same way every time, so it is
 * an auth error (polling with that key pauses, invariant 9) with a message naming what to configure.
 */
export class UpstreamMovedAccountError extends UpstreamAuthError {
  constructor(target: RequestTarget, serviceMessage: string | undefined, body?: unknown) {
    const said = serviceMessage === undefined ? '' : `: ${serviceMessage}`;
    super(
      `${target.label} answered HTTP 404${said} on ${target.method} ${target.path}: this account has moved to the ` +
        `service's current platform, which has no legacy interface. Read it from the current API instead: set ` +
        `MAILER_API_URL and MAILER_API_TOKEN (an API token of the current platform) and SYNC_SOURCE=current`,
      target,
      404,
      undefined,
      serviceMessage,
      body,
    );
  }
}

/** HTTP 429. `retryAfterMs` is what the service asked for (or the configured default without a header). */
export class UpstreamRateLimitError extends UpstreamHttpError {
  override readonly retryable = true;
  declare readonly retryAfterMs: number;
  constructor(message: string, target: RequestTarget, retryAfterMs: number, body?: unknown) {
    super(message, target, 429, body, retryAfterMs);
  }
}

/** A 2xx body carrying `{error:{code,message}}` with a code that is not an auth code. Not retried. */
export class UpstreamApiError extends UpstreamHttpError {
  override readonly retryable = false;
  constructor(
    message: string,
    target: RequestTarget,
    status: number,
    readonly code: number,
    body?: unknown,
  ) {
    super(message, target, status, body);
  }
}

/** The connection failed or broke (refused, reset, DNS, TLS). Retryable. */
export class UpstreamNetworkError extends UpstreamError {
  readonly retryable: boolean = true;
  constructor(
    message: string,
    target: RequestTarget,
    /** System error code such as ECONNRESET when known. */
    readonly code: string | undefined,
    options?: { cause?: unknown },
  ) {
    super(message, target, options);
  }
}

/** No complete answer within the per-attempt timeout. Retryable. */
export class UpstreamTimeoutError extends UpstreamNetworkError {
  constructor(
    message: string,
    target: RequestTarget,
    readonly timeoutMs: number,
  ) {
    super(message, target, 'ETIMEDOUT');
  }
}

/** A 2xx body that is not JSON or not the expected shape: an error, never data. Not retried. */
export class UpstreamBodyError extends UpstreamError {
  readonly retryable = false;
  constructor(
    message: string,
    target: RequestTarget,
    readonly status: number,
  ) {
    super(message, target);
  }
}

/** p-retry's and our own classification: only UpstreamErrors that say so are retried. */
export function isRetryable(error: unknown): boolean {
  return error instanceof UpstreamError && error.retryable;
}

// ---------------------------------------------------------------------------------------------
// Lossless JSON (invariant 6)
// ---------------------------------------------------------------------------------------------

const INTEGER_TEXT = /^-?\d+$/;

/**
 * lossless-json number parser: integers beyond Number.MAX_SAFE_INTEGER stay strings of digits
 * (legacy ids such as 1261159647788771324; `JSON.parse` would corrupt them, docs/architecture.md, "Traps we work around");
 * every other number becomes a JS number.
 */
export function parseJsonNumber(text: string): number | string {
  const value = Number(text);
  if (INTEGER_TEXT.test(text) && !Number.isSafeInteger(value)) return text;
  return value;
}

/** Sixteen digits in a row: the shortest integer that can be past 2^53. Without one, JSON.parse is exact. */
const LONG_DIGITS = /\d{16}/;
/**
 * A bare integer of 16 or more digits where a value starts (the text's start, or after `:`, `[` or
 * `,`), not a fraction, exponent or key. The same digits inside a string can match too: quoting them there always breaks
 * the text (a digit right after a closing quote), so JSON.parse throws and the slow parser decides.
 */
const BARE_LONG_INTEGER = /(?<=(?:^|[:[,])\s*)-?[1-9]\d{15,}(?![\d.eE]|\s*:)/g;

function quoteUnsafeInteger(digits: string): string {
  return Number.isSafeInteger(Number(digits)) ? digits : `"${digits}"`;
}

/** A later duplicate key wins, as with JSON.parse, so both paths below give the same value. */
const LOSSLESS_OPTIONS = { parseNumber: parseJsonNumber, onDuplicateKey: ({ newValue }: { newValue: unknown }) => newValue };

/**
 * Parses JSON losslessly; throws SyntaxError on anything that is not exactly one JSON value.
 *
 * The fast path is the engine's JSON.parse with every unsafe integer quoted first: a page of 1,000
 * members in about 6 ms against 14 ms for lossless-json's parser, and without the substrings it
 * allocates per token (in a pass, garbage collection was a quarter of the worker's CPU). Text the fast
 * path cannot read goes to lossless-json, which returns the same value or the error.
 */
export function parseJsonLossless(text: string): unknown {
  if (!LONG_DIGITS.test(text)) {
    try {
      return JSON.parse(text);
    } catch {
      return parseLossless(text, null, LOSSLESS_OPTIONS);
    }
  }
  try {
    return JSON.parse(text.replace(BARE_LONG_INTEGER, quoteUnsafeInteger));
  } catch {
    return parseLossless(text, null, LOSSLESS_OPTIONS);
  }
}

// ---------------------------------------------------------------------------------------------
// Retry-After
// ---------------------------------------------------------------------------------------------

/** Values above this are epoch seconds, not a delay (nobody asks to wait 31 years). */
const EPOCH_SECONDS_THRESHOLD = 1e9;

function secondsHeaderToMs(raw: string, nowMs: number): number | undefined {
  const text = raw.trim();
  if (!/^\d+(\.\d+)?$/.test(text)) return undefined;
  const seconds = Number(text);
  if (seconds > EPOCH_SECONDS_THRESHOLD) return Math.max(0, Math.ceil(seconds * 1000 - nowMs));
  return Math.ceil(seconds * 1000);
}

function retryAfterHeaderToMs(raw: string, nowMs: number): number | undefined {
  const seconds = secondsHeaderToMs(raw, nowMs);
  if (seconds !== undefined) return seconds;
  // RFC 9110 also allows an HTTP-date.
  const at = Date.parse(raw);
  if (Number.isNaN(at) || !/[a-z]/i.test(raw)) return undefined;
  return Math.max(0, Math.ceil(at - nowMs));
}

/**
 * How long the service asked us to wait, in ms, or undefined when it did not say.
 * Reads `X-RateLimit-Retry-After` (seconds; docs/upstream.md, "Limits") and `Retry-After` (seconds or an
 * HTTP-date) and takes the larger, so we never wait less than either says. `X-RateLimit-Reset` is a
 * fallback only when neither is present, and only when the remaining count is 0.
 */
export function parseRetryAfter(headers: Headers, nowMs: number = Date.now()): number | undefined {
  const candidates: number[] = [];
  const legacy = headers.get('x-ratelimit-retry-after');
  if (legacy !== null) {
    const ms = secondsHeaderToMs(legacy, nowMs);
    if (ms !== undefined) candidates.push(ms);
  }
  const standard = headers.get('retry-after');
  if (standard !== null) {
    const ms = retryAfterHeaderToMs(standard, nowMs);
    if (ms !== undefined) candidates.push(ms);
  }
  if (candidates.length === 0) {
    const reset = headers.get('x-ratelimit-reset');
    const remaining = headers.get('x-ratelimit-remaining');
    if (reset !== null && (remaining === null || remaining.trim() === '0')) {
      const ms = secondsHeaderToMs(reset, nowMs);
      if (ms !== undefined) candidates.push(ms);
    }
  }
  return candidates.length === 0 ? undefined : Math.max(...candidates);
}

// ---------------------------------------------------------------------------------------------
// Response classification (pure, unit-tested)
// ---------------------------------------------------------------------------------------------

/** Legacy auth error codes (docs/upstream.md, "Errors"): 1 `Unauthorized`, 302 `API-Key Unauthorized`. */
export const AUTH_ERROR_CODES: ReadonlySet<number> = new Set([1, 302]);

export interface ClassifyContext extends RequestTarget {
  /** What the credential is called in messages: "API key", "token". */
  readonly credentialName: string;
  /** Replaces secret values in any text that came from the server. */
  readonly scrub: (text: string) => string;
  /** Wait to assume for a 429 without any wait header. */
  readonly defaultRetryAfterMs: number;
  readonly nowMs?: number;
}

export type Classified = { readonly ok: true; readonly body: unknown } | { readonly ok: false; readonly error: UpstreamError };

const MAX_SERVER_TEXT = 200;

/** Server text made safe for a message: secrets removed, whitespace collapsed, length bounded. */
function serverText(text: string, scrub: (t: string) => string): string {
  const flat = scrub(text).replace(/\s+/g, ' ').trim();
  return flat.length > MAX_SERVER_TEXT ? `${flat.slice(0, MAX_SERVER_TEXT)}…` : flat;
}

interface ErrorBody {
  code: number;
  message: string | undefined;
}

/** `{error: {code: <integer>, message: <string>}}` (docs/upstream.md, "Errors"). */
function readErrorBody(body: unknown): ErrorBody | undefined {
  if (!isPlainObject(body)) return undefined;
  const error = body.error;
  if (!isPlainObject(error)) return undefined;
  const code = typeof error.code === 'string' && /^\d+$/.test(error.code) ? Number(error.code) : error.code;
  if (typeof code !== 'number' || !Number.isInteger(code)) return undefined;
  return { code, message: typeof error.message === 'string' ? error.message : undefined };
}

/** Legacy group endpoints (docs/upstream.md, "Legacy lists"): a 404 there without an error code means the account moved. */
const LEGACY_GROUP_PATH = /^\/api\/v2\/groups\//;

/** `{error: {message}}` with no `code` key: the body a moved account's legacy requests get. */
function readCodelessError(body: unknown): { message: string | undefined } | undefined {
  if (!isPlainObject(body) || !isPlainObject(body.error) || 'code' in body.error) return undefined;
  return { message: typeof body.error.message === 'string' ? body.error.message : undefined };
}

/** `{message: "..."}` as the webhook interface answers errors (docs/upstream.md, "Errors"). */
function readMessage(body: unknown): string | undefined {
  if (isPlainObject(body) && typeof body.message === 'string') return body.message;
  return undefined;
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Copy of a parsed body with secrets removed from every string in it. */
function scrubValue(value: unknown, scrub: (t: string) => string, depth = 0): unknown {
  if (typeof value === 'string') return scrub(value);
  if (depth > 20 || typeof value !== 'object' || value === null) return value;
  if (Array.isArray(value)) return value.map((v) => scrubValue(v, scrub, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k] = scrubValue(v, scrub, depth + 1);
  return out;
}

function where(ctx: RequestTarget): string {
  return `${ctx.method} ${ctx.path}`;
}

/**
 * Decides what an answer means. The body is authoritative for auth errors: the legacy API may send
 * `{error:{code:302}}` with 200 or 401 alike (docs/upstream.md, "Errors": the status is undocumented).
 */
export function classifyResponse(ctx: ClassifyContext, status: number, headers: Headers, text: string): Classified {
  let body: unknown;
  let parseFailed = false;
  if (text.trim() !== '') {
    try {
      body = parseJsonLossless(text);
    } catch {
      parseFailed = true;
    }
  }

  const apiError = parseFailed ? undefined : readErrorBody(body);
  if (apiError && AUTH_ERROR_CODES.has(apiError.code)) {
    const said = apiError.message === undefined ? '' : `: ${serverText(apiError.message, ctx.scrub)}`;
    const message = `${ctx.label} rejected the ${ctx.credentialName} (code ${apiError.code}${said}; HTTP ${status} on ${where(ctx)})`;
    const serviceMessage = apiError.message === undefined ? undefined : serverText(apiError.message, ctx.scrub);
    return { ok: false, error: new UpstreamAuthError(message, ctx, status, apiError.code, serviceMessage, scrubValue(body, ctx.scrub)) };
  }

  const detail = (): string => {
    if (parseFailed || body === undefined) return text.trim() === '' ? '' : `: ${serverText(text, ctx.scrub)}`;
    const said = apiError?.message ?? readMessage(body);
    return said === undefined ? '' : `: ${serverText(said, ctx.scrub)}`;
  };
  // Error bodies travel on the error (a 422's field errors); secrets echoed in them are removed.
  // Built only on the error paths: copying every successful page cost ~20% of a pass's read side.
  const errorBody = (): unknown => (parseFailed ? undefined : scrubValue(body, ctx.scrub));

  if (status === 429) {
    const retryAfterMs = parseRetryAfter(headers, ctx.nowMs) ?? ctx.defaultRetryAfterMs;
    const message = `${ctx.label} rate limit exceeded (HTTP 429 on ${where(ctx)}); retry after ${retryAfterMs} ms`;
    return { ok: false, error: new UpstreamRateLimitError(message, ctx, retryAfterMs, errorBody()) };
  }
  if (status === 401 || status === 403) {
    const said = serverText(apiError?.message ?? readMessage(body) ?? '', ctx.scrub);
    const message = `${ctx.label} rejected the ${ctx.credentialName} (HTTP ${status}${said ? `: ${said}` : ''} on ${where(ctx)})`;
    return { ok: false, error: new UpstreamAuthError(message, ctx, status, apiError?.code, said || undefined, errorBody()) };
  }
  const codeless = status === 404 && LEGACY_GROUP_PATH.test(ctx.path) ? readCodelessError(body) : undefined;
  if (codeless) {
    const said = codeless.message === undefined ? undefined : serverText(codeless.message, ctx.scrub);
    return { ok: false, error: new UpstreamMovedAccountError(ctx, said, errorBody()) };
  }
  if (status >= 300 && status < 400) {
    // Redirects are not followed: fetch would resend our credential header to wherever it points.
    const message = `${ctx.label} answered HTTP ${status} (a redirect) on ${where(ctx)}; check the configured base URL`;
    return { ok: false, error: new UpstreamHttpError(message, ctx, status, errorBody()) };
  }
  if (status >= 400 || status < 200) {
    const message = `${ctx.label} answered HTTP ${status} on ${where(ctx)}${detail()}`;
    return { ok: false, error: new UpstreamHttpError(message, ctx, status, errorBody(), parseRetryAfter(headers, ctx.nowMs)) };
  }

  // 2xx from here on.
  if (parseFailed) {
    const message = `${ctx.label} answered HTTP ${status} with a body that is not JSON on ${where(ctx)}${detail()}`;
    return { ok: false, error: new UpstreamBodyError(message, ctx, status) };
  }
  if (apiError) {
    const message = `${ctx.label} answered error code ${apiError.code}${detail()} (HTTP ${status} on ${where(ctx)})`;
    return { ok: false, error: new UpstreamApiError(message, ctx, status, apiError.code, errorBody()) };
  }
  return { ok: true, body };
}

// ---------------------------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------------------------

export interface GateScheduleOptions {
  signal?: AbortSignal;
  endpoint?: string;
}

/** Where an attempt reports what the service answered (its rate-limit headers teach the gate). */
export interface GateSlot {
  answered(status: number, headers: Headers): void;
}

/** What the client needs from a rate limiter (`limiter.ts` implements it). */
export interface RequestGate {
  /**
   * Runs `fn` (one attempt) when the budget allows. `endpoint` (method and path, no query) names the
   * budget a gate that learns per-endpoint budgets schedules it on; such a gate hands `fn` a slot
   * to report the answer's status and headers on.
   */
  schedule<T>(fn: (slot?: GateSlot) => Promise<T>, options?: GateScheduleOptions): Promise<T>;
  /** Tells every replica to send nothing for `ms` (a 429 names how long). */
  pauseFor?(ms: number): Promise<void>;
}

export interface RetryOptions {
  /** Retries after the first attempt (so `retries + 1` attempts at most). */
  retries: number;
  /** First backoff delay; doubles each retry. */
  minDelayMs: number;
  /** Cap of the backoff delay. */
  maxDelayMs: number;
  /** Multiply each delay by a random factor in [1, 2) so replicas do not retry in lockstep. */
  jitter: boolean;
}

export const DEFAULT_RETRY: RetryOptions = { retries: 5, minDelayMs: 500, maxDelayMs: 30_000, jitter: true };

export interface RequestInfo {
  readonly label: string;
  readonly method: string;
  readonly path: string;
  /** 1 for the first attempt. */
  readonly attempt: number;
}

export interface ResponseInfo extends RequestInfo {
  readonly status: number;
  readonly durationMs: number;
}

export interface RetryInfo extends RequestInfo {
  readonly error: UpstreamError;
  /** Time waited because the service asked (429 / Retry-After), before p-retry's own backoff. */
  readonly waitedMs: number;
}

export interface HttpHooks {
  onRequest?(info: RequestInfo): void;
  onResponse?(info: ResponseInfo): void;
  onRetry?(info: RetryInfo): void;
}

export interface HttpClientOptions {
  /** Scheme and host (and optional path prefix), no trailing slash needed. */
  baseUrl: string;
  /** Names the service in messages, e.g. "legacy API". */
  label: string;
  /** Names the credential in messages, e.g. "API key", "token". */
  credentialName?: string;
  /** Sent with every request; the credential goes here. Never appears in an error or log. */
  headers?: Record<string, string>;
  /** Values scrubbed from any server text in messages; header values are added automatically. */
  secrets?: Iterable<string>;
  /** Per-attempt timeout covering connect, headers and body. Default 30 s. */
  timeoutMs?: number;
  retry?: Partial<RetryOptions>;
  /** Rate limiter each attempt passes through. */
  gate?: RequestGate;
  /** A 429 without any wait header waits this long. Default 60 s (the legacy limit is per minute). */
  defaultRetryAfterMs?: number;
  /** A 429 asking for more than this is not waited out in-process: the error goes to the caller. Default 5 min. */
  maxRetryAfterMs?: number;
  hooks?: HttpHooks;
  /** For tests; defaults to the global fetch. */
  fetch?: typeof fetch;
}

export type QueryValue = string | number | boolean | undefined;

export interface HttpRequest {
  method?: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  /** Path under baseUrl, starting with `/`. */
  path: string;
  query?: Record<string, QueryValue> | Iterable<readonly [string, string]>;
  /** JSON-serialised. */
  body?: unknown;
  signal?: AbortSignal;
  /**
   * Whether a retry after an unclear failure is safe. Defaults to true except for POST: a POST is
   * then retried only on 429 (the service refused it without acting on it).
   */
  idempotent?: boolean;
  /**
   * Called once the headers are in, before the body is read: waits for room for it in memory
   * (page-gate.ts). The room goes with the response (`release`); a failed attempt frees it.
   */
  beforeBody?: () => Promise<Release>;
}

export interface HttpResponse {
  status: number;
  headers: Headers;
  /** Parsed losslessly; undefined for an empty body (e.g. 204). */
  body: unknown;
  /** The room `beforeBody` gave this body: the caller frees it once done with the body. */
  release?: Release;
}

export interface HttpStats {
  /** Attempts actually sent. */
  requests: number;
  /** Retries scheduled (each is also counted in `requests` when sent). */
  retries: number;
  /** 429 answers received. */
  rateLimited: number;
  /** Calls that failed for good. */
  failures: number;
  /** Time spent waiting because the service asked (Retry-After), summed. */
  retryAfterWaitMs: number;
}

export interface HttpClient {
  request(request: HttpRequest): Promise<HttpResponse>;
  /** GET and return the parsed body. */
  getJson(path: string, query?: HttpRequest['query'], options?: { signal?: AbortSignal }): Promise<unknown>;
  stats(): HttpStats;
  readonly label: string;
}

function buildPath(path: string, query: HttpRequest['query']): string {
  if (!path.startsWith('/')) throw new TypeError(`request path must start with "/", got "${path}"`);
  if (query === undefined) return path;
  const params = new URLSearchParams();
  if (Symbol.iterator in query) {
    for (const [k, v] of query) params.append(k, v);
  } else {
    for (const [k, v] of Object.entries(query)) if (v !== undefined) params.append(k, String(v));
  }
  const qs = params.toString();
  return qs === '' ? path : `${path}?${qs}`;
}

/** Maps what fetch threw to an UpstreamError; an abort the caller asked for is passed through untouched. */
function fetchFailure(error: unknown, target: RequestTarget, timeoutMs: number, timeoutSignal: AbortSignal): unknown {
  if (timeoutSignal.aborted && isAbortLike(error)) {
    return new UpstreamTimeoutError(`${target.label} did not answer within ${timeoutMs} ms (${where(target)})`, target, timeoutMs);
  }
  if (isAbortLike(error)) return error;
  const code = systemCode(error);
  const reason = code ?? (error instanceof Error ? describeCause(error) : String(error));
  return new UpstreamNetworkError(`${target.label} connection failed on ${where(target)}: ${reason}`, target, code, {
    cause: error,
  });
}

function isAbortLike(error: unknown): boolean {
  return error instanceof Error && (error.name === 'AbortError' || error.name === 'TimeoutError');
}

/** undici wraps socket errors: TypeError('fetch failed', {cause: {code: 'ECONNRESET'}}). */
function systemCode(error: unknown): string | undefined {
  let current: unknown = error;
  for (let depth = 0; depth < 4 && current; depth++) {
    if (typeof current === 'object' && current !== null && 'code' in current && typeof current.code === 'string') {
      return current.code;
    }
    current = current instanceof Error ? current.cause : undefined;
  }
  return undefined;
}

function describeCause(error: Error): string {
  const cause = error.cause instanceof Error ? error.cause.message : undefined;
  return cause ? `${error.message} (${cause})` : error.message;
}

export function createHttpClient(options: HttpClientOptions): HttpClient {
  const client: ClientState = {
    settings: clientSettings(options),
    counters: { requests: 0, retries: 0, rateLimited: 0, failures: 0, retryAfterWaitMs: 0 },
  };
  const request = (req: HttpRequest): Promise<HttpResponse> => sendWithRetry(client, req);
  return {
    label: client.settings.label,
    request,
    async getJson(path, query, opts) {
      const response = await request({ method: 'GET', path, query, signal: opts?.signal });
      return response.body;
    },
    stats: () => ({ ...client.counters }),
  };
}

/** What a client is built from: the options checked, with their defaults. */
interface ClientSettings {
  readonly baseUrl: string;
  readonly label: string;
  readonly credentialName: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly scrub: SecretScrubber;
  readonly timeoutMs: number;
  readonly retry: RetryOptions;
  readonly defaultRetryAfterMs: number;
  readonly maxRetryAfterMs: number;
  readonly doFetch: typeof fetch;
  readonly hooks: HttpHooks;
  readonly gate: RequestGate | undefined;
}

/** One client: its settings and the counters its calls update. */
interface ClientState {
  readonly settings: ClientSettings;
  readonly counters: HttpStats;
}

function clientSettings(options: HttpClientOptions): ClientSettings {
  const baseUrl = options.baseUrl.replace(/\/+$/, '');
  if (!URL.canParse(baseUrl)) throw new TypeError(`${options.label}: base URL is not a valid URL`);
  const headers = { ...(options.headers ?? {}) };
  const scrub: SecretScrubber = createScrubber([...(options.secrets ?? []), ...Object.values(headers)]);
  // Header values like "Bearer <token>": the token alone must be scrubbed too.
  for (const value of Object.values(headers)) {
    const bearer = /^Bearer\s+(.+)$/i.exec(value);
    if (bearer?.[1]) scrub.add(bearer[1]);
  }
  return {
    baseUrl,
    label: options.label,
    credentialName: options.credentialName ?? 'credentials',
    headers,
    scrub,
    timeoutMs: options.timeoutMs ?? 30_000,
    retry: { ...DEFAULT_RETRY, ...options.retry },
    defaultRetryAfterMs: options.defaultRetryAfterMs ?? 60_000,
    maxRetryAfterMs: options.maxRetryAfterMs ?? 5 * 60_000,
    doFetch: options.fetch ?? globalThis.fetch,
    hooks: options.hooks ?? {},
    gate: options.gate,
  };
}

/** One call: every attempt through the gate, retried by p-retry as `beforeRetry` allows. */
async function sendWithRetry(client: ClientState, req: HttpRequest): Promise<HttpResponse> {
  const { label, gate, retry } = client.settings;
  const target: RequestTarget = { label, method: req.method ?? 'GET', path: buildPath(req.path, req.query) };
  const endpoint = `${target.method} ${req.path}`;
  const runAttempt = (attempt: number): Promise<HttpResponse> =>
    gate
      ? gate.schedule((slot) => attemptOnce(client, req, target, attempt, slot), { signal: req.signal, endpoint })
      : attemptOnce(client, req, target, attempt);
  try {
    return await pRetry(runAttempt, {
      retries: retry.retries,
      minTimeout: retry.minDelayMs,
      maxTimeout: retry.maxDelayMs,
      factor: 2,
      randomize: retry.jitter,
      signal: req.signal,
      shouldRetry: ({ error, attemptNumber }) => beforeRetry(client, error, req, target, attemptNumber),
    });
  } catch (error) {
    client.counters.failures += 1;
    throw error;
  }
}

async function attemptOnce(
  client: ClientState,
  request: HttpRequest,
  target: RequestTarget,
  attempt: number,
  slot?: GateSlot,
): Promise<HttpResponse> {
  const { settings, counters } = client;
  request.signal?.throwIfAborted();
  // The timeout starts when the attempt is sent, not while it queues in the limiter.
  const timeoutSignal = AbortSignal.timeout(settings.timeoutMs);
  const signal = request.signal ? AbortSignal.any([timeoutSignal, request.signal]) : timeoutSignal;
  const init: RequestInit = {
    method: target.method,
    headers: { accept: 'application/json', 'content-type': 'application/json', ...settings.headers },
    redirect: 'manual',
    signal,
  };
  if (request.body !== undefined) init.body = JSON.stringify(request.body);
  counters.requests += 1;
  settings.hooks.onRequest?.({ ...target, attempt });
  const started = performance.now();
  let status: number;
  let responseHeaders: Headers;
  let text: string;
  let release: Release | undefined;
  try {
    const response = await settings.doFetch(`${settings.baseUrl}${target.path}`, init);
    status = response.status;
    responseHeaders = response.headers;
    release = await request.beforeBody?.();
    text = await response.text();
  } catch (error) {
    release?.();
    throw fetchFailure(error, target, settings.timeoutMs, timeoutSignal);
  }
  slot?.answered(status, responseHeaders);
  settings.hooks.onResponse?.({ ...target, attempt, status, durationMs: performance.now() - started });
  const { credentialName, scrub, defaultRetryAfterMs } = settings;
  const classified = classifyResponse({ ...target, credentialName, scrub, defaultRetryAfterMs }, status, responseHeaders, text);
  if (!classified.ok) {
    release?.();
    if (classified.error instanceof UpstreamRateLimitError) counters.rateLimited += 1;
    throw classified.error;
  }
  return { status, headers: responseHeaders, body: classified.body, release };
}

/**
 * Tells the other replicas to hold off. A failure here (Redis down) must not replace the 429 the
 * caller should see, and this process still waits locally, so it is ignored.
 */
async function sharePause(gate: RequestGate | undefined, ms: number): Promise<void> {
  try {
    await gate?.pauseFor?.(ms);
  } catch {
    // see above
  }
}

/** Called by p-retry only when a retry is still allowed; waits out what the service asked for. */
async function beforeRetry(
  client: ClientState,
  error: Error,
  request: HttpRequest,
  target: RequestTarget,
  attempt: number,
): Promise<boolean> {
  const { settings, counters } = client;
  if (!(error instanceof UpstreamError) || !error.retryable) return false;
  const idempotent = request.idempotent ?? target.method !== 'POST';
  if (!idempotent && !(error instanceof UpstreamRateLimitError)) return false;
  const askedMs = error instanceof UpstreamHttpError ? (error.retryAfterMs ?? 0) : 0;
  if (askedMs > settings.maxRetryAfterMs) {
    // Invariant 7: still honour it for every replica, but do not block this caller for that long.
    await sharePause(settings.gate, askedMs);
    return false;
  }
  if (askedMs > 0) {
    await sharePause(settings.gate, askedMs);
    await sleep(askedMs, request.signal);
    counters.retryAfterWaitMs += askedMs;
  }
  counters.retries += 1;
  settings.hooks.onRetry?.({ ...target, attempt, error, waitedMs: askedMs });
  return true;
}

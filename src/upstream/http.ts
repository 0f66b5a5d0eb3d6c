/**
 * JSON over HTTP for every upstream interface: Node's global fetch with a per-attempt timeout and
 * p-retry with exponential backoff and jitter; what an answer means is `classify.ts` (lossless JSON,
 * `json.ts`; typed errors, `errors.ts`; the wait a 429 asks for, `retry-after.ts`).
 *
 * Shared by `legacy/client.ts` (API key in a custom header), `current/client.ts` and `webhooks-api.ts` (bearer tokens): the caller
 * passes its credential as a header and names its secrets; this module never puts a request header
 * into an error or a log (invariant 10), and scrubs the secret values out of any text the server
 * sends back before it becomes an error message.
 *
 * Every attempt (not every call) passes through the optional `gate` (the shared rate limiter,
 * `ratelimit/limiter.ts`), because the service counts attempts (invariant 7). A 429 pauses the gate for every
 * replica and the retry waits at least what the service asked for, never less.
 */
import pRetry from 'p-retry';
import { parseContentLength } from '../ground/content-length.js';
import { createScrubber, type SecretScrubber } from '../ground/log.js';
import { sleep } from '../ground/wait.js';
import { classifyResponse } from './classify.js';
import {
  UpstreamError,
  UpstreamHttpError,
  UpstreamNetworkError,
  UpstreamRateLimitError,
  UpstreamTimeoutError,
  where,
  type RequestTarget,
} from './errors.js';
import type { Release } from './page-gate.js';

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

/** What the client needs from a rate limiter (`ratelimit/limiter.ts` implements it). */
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
  /** The service's time: from the send to the headers, and reading the body; not the wait for its room. */
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
  /**
   * How long the service may take, per attempt: to answer with its headers after the request is
   * sent, and to send the body once it is read. Default 30 s. A body waiting for room
   * (`beforeBody`) is not timed: that wait is ours, not the service's.
   */
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
   * Called once the headers are in, before the body is read, with its `Content-Length` (null when
   * the answer sent none): waits for room for it in memory (page-gate.ts). The room goes with the
   * response (`release`); a failed attempt frees it. The wait runs after the attempt's budget slot
   * has ended and while no timeout runs, so a long line at the gate neither holds the limiter nor
   * turns a page already answered into a timeout and a second request.
   */
  beforeBody?: (bytes: number | null) => Promise<Release>;
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
  // The budget slot covers the request and its headers only; the body is read after it (readBody).
  const runAttempt = async (attempt: number): Promise<HttpResponse> => {
    const answered = gate
      ? await gate.schedule((slot) => sendOnce(client, req, target, attempt, slot), { signal: req.signal, endpoint })
      : await sendOnce(client, req, target, attempt);
    return readBody(client, req, target, answered);
  };
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

/**
 * The deadline of one attempt, run in two stretches: from the send to the headers, and from the
 * body's room to its last byte. Between them the body waits for room (`beforeBody`) untimed: with
 * the deadline running across that wait, a page that waited longer than the timeout at a busy gate
 * was aborted as it got its room and asked for again, at the back of the line.
 */
interface AttemptDeadline {
  /** Aborts the attempt's fetch, and with it its body, when a stretch runs out. */
  readonly signal: AbortSignal;
  run(): void;
  pause(): void;
}

function attemptDeadline(timeoutMs: number): AttemptDeadline {
  const controller = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  return {
    signal: controller.signal,
    run() {
      clearTimeout(timer);
      timer = setTimeout(() => controller.abort(new DOMException(`timed out after ${timeoutMs} ms`, 'TimeoutError')), timeoutMs);
    },
    pause: () => clearTimeout(timer),
  };
}

/** An attempt whose headers are in and whose body is not read yet. */
interface Answered {
  response: Response;
  deadline: AttemptDeadline;
  attempt: number;
  /** From the send to the headers. */
  headersMs: number;
}

/** Sends one attempt and waits for its headers: the part of an attempt that runs in its budget slot. */
async function sendOnce(
  client: ClientState,
  request: HttpRequest,
  target: RequestTarget,
  attempt: number,
  slot?: GateSlot,
): Promise<Answered> {
  const { settings, counters } = client;
  request.signal?.throwIfAborted();
  // The deadline starts when the attempt is sent, not while it queues in the limiter.
  const deadline = attemptDeadline(settings.timeoutMs);
  const signal = request.signal ? AbortSignal.any([deadline.signal, request.signal]) : deadline.signal;
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
  deadline.run();
  let response: Response;
  try {
    response = await settings.doFetch(`${settings.baseUrl}${target.path}`, init);
  } catch (error) {
    throw fetchFailure(error, target, settings.timeoutMs, deadline.signal);
  } finally {
    deadline.pause();
  }
  slot?.answered(response.status, response.headers);
  return { response, deadline, attempt, headersMs: performance.now() - started };
}

/** Reads and classifies the body of an attempt whose headers are in, once it has room (`beforeBody`). */
async function readBody(client: ClientState, request: HttpRequest, target: RequestTarget, answered: Answered): Promise<HttpResponse> {
  const { settings, counters } = client;
  const { response, deadline, attempt, headersMs } = answered;
  const { status, headers } = response;
  let text: string;
  let release: Release | undefined;
  let bodyFrom: number;
  try {
    release = await request.beforeBody?.(parseContentLength(headers.get('content-length')));
    bodyFrom = performance.now();
    deadline.run();
    text = await response.text();
  } catch (error) {
    release?.();
    // A body left unread would keep its connection until the deadline or the collector.
    response.body?.cancel().catch(() => {});
    throw fetchFailure(error, target, settings.timeoutMs, deadline.signal);
  } finally {
    deadline.pause();
  }
  // The service's time: its headers and its body, not the wait for room.
  const durationMs = headersMs + (performance.now() - bodyFrom);
  settings.hooks.onResponse?.({ ...target, attempt, status, durationMs });
  const { credentialName, scrub, defaultRetryAfterMs } = settings;
  const classified = classifyResponse({ ...target, credentialName, scrub, defaultRetryAfterMs }, status, headers, text);
  if (!classified.ok) {
    release?.();
    if (classified.error instanceof UpstreamRateLimitError) counters.rateLimited += 1;
    throw classified.error;
  }
  return { status, headers, body: classified.body, release };
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

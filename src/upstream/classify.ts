/**
 * What an answer of the service means (pure, unit-tested): the body, or the typed error it is. The
 * body is authoritative for auth errors; server text in a message is scrubbed of secrets first.
 */
import {
  UpstreamApiError,
  UpstreamAuthError,
  UpstreamBodyError,
  UpstreamError,
  UpstreamHttpError,
  UpstreamMovedAccountError,
  UpstreamRateLimitError,
  where,
  type RequestTarget,
} from './errors.js';
import { isPlainObject, parseJsonLossless } from './json.js';
import { parseRetryAfter } from './retry-after.js';

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

/** Copy of a parsed body with secrets removed from every string in it. */
function scrubValue(value: unknown, scrub: (t: string) => string, depth = 0): unknown {
  if (typeof value === 'string') return scrub(value);
  if (depth > 20 || typeof value !== 'object' || value === null) return value;
  if (Array.isArray(value)) return value.map((v) => scrubValue(v, scrub, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k] = scrubValue(v, scrub, depth + 1);
  return out;
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

/**
 * The errors of an upstream call, for every client of the service (invariant 10: none carries a
 * request header or a secret): one class per kind of failure, each saying whether trying again may
 * succeed.
 */
/** Where an error happened; never includes headers (they carry the credential). */
export interface RequestTarget {
  /** e.g. "legacy API" */
  readonly label: string;
  readonly method: string;
  /** Path and query, e.g. `/api/v2/groups/1/subscribers/active?limit=100&offset=0`. No secrets: the key is a header. */
  readonly path: string;
}

/** `METHOD path` of a target, as messages name it. */
export function where(ctx: RequestTarget): string {
  return `${ctx.method} ${ctx.path}`;
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

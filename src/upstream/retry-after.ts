/** How long a 429 asks the caller to wait (`X-RateLimit-Retry-After`, `Retry-After`; invariant 7). */

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

/**
 * A `Content-Length` header's value as a count of bytes: the client's bodies (their room at the page
 * gate) and the receiver's (its limits) read it the same way.
 */

/** The count the header announces; null when absent or not a plain count of bytes (a list, a sign, garbage). */
export function parseContentLength(value: string | null | undefined): number | null {
  return value !== null && value !== undefined && /^\d+$/.test(value) ? Number(value) : null;
}

/** How the commands print a database or Redis failure: one line, no stack, no credentials. */

/** Turns pg/network errors into one line without stack, host credentials or internals. */
export function describeConnectionError(error: unknown): string {
  const e = error as { message?: string; code?: string; errors?: Array<{ message?: string }>; cause?: unknown };
  // drizzle wraps a failed statement as "Failed query: <the whole SQL>" with Postgres's own error
  // (which says what to do, e.g. the missing role) as its cause: print the cause, not the SQL.
  if (e.code === undefined && e.cause instanceof Error) return describeConnectionError(e.cause);
  // AggregateError (both IPv4 and IPv6 refused) has an empty message; its children say why.
  const message = e.message || e.errors?.map((x) => x.message).join('; ') || String(error);
  return e.code && !message.includes(e.code) ? `${message} (${e.code})` : message;
}

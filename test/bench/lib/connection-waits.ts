/**
 * How long a worker replica's accounts waited for its shared Postgres connections, from its own
 * `/metrics` (`subscriber_mirror_db_checkout_wait_seconds`, `…_db_checkout_failures_total`): whether
 * the replica's 16 connections held its accounts back (docs/benchmarks.md, "accounts").
 */

/** A replica's checkouts over its run, every account together. */
export interface ConnectionWaits {
  checkouts: number;
  /** Seconds waited for a connection, every checkout together. */
  waitedSeconds: number;
  /** Checkouts that waited more than a second. */
  overOneSecond: number;
  /** Checkouts that got no connection within 10 s. */
  timeouts: number;
}

/** `name{labels} value` lines of a Prometheus text exposition, labels as a record. */
function samples(text: string, name: string): Array<{ labels: Record<string, string>; value: number }> {
  const out: Array<{ labels: Record<string, string>; value: number }> = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const match = /^[^{\s]+(?:\{(.*)\})?\s+(\S+)$/.exec(line);
    if (!match) continue;
    const labels: Record<string, string> = {};
    for (const [, key, value] of (match[1] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[key as string] = value as string;
    out.push({ labels, value: Number(match[2]) });
  }
  return out;
}

const total = (values: ReadonlyArray<{ value: number }>): number => values.reduce((n, s) => n + s.value, 0);

/** What a worker's `/metrics` says of its checkouts; zeros when it says nothing of them. */
export function parseConnectionWaits(text: string): ConnectionWaits {
  const name = 'subscriber_mirror_db_checkout_wait_seconds';
  const checkouts = total(samples(text, `${name}_count`));
  const withinOneSecond = total(samples(text, `${name}_bucket`).filter((s) => s.labels.le === '1'));
  return {
    checkouts,
    waitedSeconds: total(samples(text, `${name}_sum`)),
    overOneSecond: checkouts - withinOneSecond,
    timeouts: total(samples(text, 'subscriber_mirror_db_checkout_failures_total').filter((s) => s.labels.reason === 'timeout')),
  };
}

/** The replica's figures now, from its ops port; null when it does not answer. */
export async function scrapeConnectionWaits(opsPort: number): Promise<ConnectionWaits | null> {
  try {
    const response = await fetch(`http://127.0.0.1:${opsPort}/metrics`, { signal: AbortSignal.timeout(5_000) });
    return response.ok ? parseConnectionWaits(await response.text()) : null;
  } catch {
    return null;
  }
}

/** "12,345 checkouts waited 3.2 s in all, 0 over 1 s, 0 timed out". */
export function describeConnectionWaits(waits: ConnectionWaits | null): string {
  if (!waits) return 'no metrics';
  return (
    `${waits.checkouts.toLocaleString('en-US')} checkouts waited ${waits.waitedSeconds.toFixed(1)} s in all, ` +
    `${waits.overOneSecond} over 1 s, ${waits.timeouts} timed out`
  );
}

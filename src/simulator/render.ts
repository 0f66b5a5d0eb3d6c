/**
 * Wire renderings of a subscriber: the legacy Single Subscriber (JSON text written by hand so that
 * ids above 2^53 appear as exact digits) and the webhook subscriber object (docs/upstream.md, "Subscriber object").
 */
import type { LegacySubscriber } from './kinds.js';

const DIGITS = /^\d+$/;

/**
 * JSON text of a legacy subscriber with `id` as a bare number. JSON.stringify cannot do this: the
 * id would have to be a JS number first, and 1261159647788771324 is not representable as one.
 */
export function legacyJson(subscriber: LegacySubscriber): string {
  const { id, ...rest } = subscriber;
  if (!DIGITS.test(id)) throw new Error(`legacy id must be digits: ${id}`);
  return `{"id":${id},${JSON.stringify(rest).slice(1)}`;
}

export function legacyArrayJson(items: readonly string[]): string {
  return `[${items.join(',')}]`;
}

/** Percentage with two decimals, as the service shows open and click rates. */
export function rate(part: number, whole: number): number {
  if (whole === 0) return 0;
  return Math.round((part / whole) * 10_000) / 100;
}

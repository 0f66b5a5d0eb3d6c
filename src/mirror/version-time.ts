/**
 * The version order (issue #12 "One version order for both paths") as history needs it: a version's
 * time is the latest of `updated_at` and the times of the state it asserts (`unsubscribed_at` when
 * unsubscribed, `deleted_at` / `forget_at` when set).
 *
 * Stand-in until issue #12 lands its own `versionTime`: history imports it from here only, so the
 * switch is this one module.
 */
import type { SubscriberValues } from './normalize.js';

export type VersionTimeInput = Pick<SubscriberValues, 'updatedAt' | 'status' | 'unsubscribedAt' | 'deletedAt' | 'forgetAt'>;

/** Canonical UTC timestamps (same width, `Z`) compare as strings. */
export function versionTime(values: VersionTimeInput): string {
  let at = values.updatedAt;
  const asserted = [values.status === 'unsubscribed' ? values.unsubscribedAt : null, values.deletedAt, values.forgetAt];
  for (const t of asserted) if (t !== null && t > at) at = t;
  return at;
}

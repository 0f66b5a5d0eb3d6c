/**
 * Where a subscriber version stands in the order of versions (docs/architecture.md, invariant 2).
 *
 * A version asserts a state, and a state carries its own time: the service does not always move
 * `updated_at` when a status changes (a real `subscriber.unsubscribed` payload keeps the `updated_at`
 * of the earlier `subscriber.created` and sets `unsubscribed_at` minutes later). So a version's time
 * is the latest of its `updated_at` and the times of the states it asserts:
 * - `unsubscribed_at`, when its status says `unsubscribed` (poll: `date_unsubscribe` of a row whose
 *   `type` is `unsubscribed`);
 * - `deleted_at`, when it says deleted (webhook only: the legacy listing never carries it).
 * A time of a state the version does not assert (an `unsubscribed_at` left on an active subscriber
 * that re-subscribed) does not count: it says nothing about this version.
 *
 * `forget_at` does not count: the service sends it with the deletion as the time the data WILL be
 * erased (the deletion time plus 30 days in every captured payload), a schedule rather than the time
 * of a state. Counting it would make a deletion outrank every later version for a month, so a
 * subscriber restored and updated in between could not be mirrored.
 *
 * Pure and path-independent: both paths' rows are normalized first, and the store keeps this value
 * as `subscribers.version_at`, the column its newer-than guard compares.
 */
import { latestTimestamp } from '../ground/time.js';
import type { SubscriberValues } from './normalize.js';

/** The values a version time is computed from (a normalized subscriber; columns not carried are null). */
export type VersionValues = Pick<SubscriberValues, 'updatedAt' | 'status' | 'unsubscribedAt' | 'deletedAt'>;

/** The version time of a normalized subscriber: a canonical UTC timestamp, never before `updatedAt`. */
export function versionTime(values: VersionValues): string {
  const unsubscribed = values.status === 'unsubscribed' ? values.unsubscribedAt : null;
  return latestTimestamp(values.updatedAt, unsubscribed, values.deletedAt) ?? values.updatedAt;
}

/**
 * The only code that writes the mirrored tables (`subscribers`, `groups`, `group_members`,
 * `campaigns`, `automations`, `subscriber_activity`; docs/architecture.md, "Modules and what they may import"). Poll and webhook consumer
 * hand it normalized rows (`normalize.ts`) and never write SQL for these tables themselves.
 *
 * One module per table family under `store/`: `subscribers`, `memberships`, `reference` (groups,
 * automations, campaigns), `activity`; `executor` (where statements run) and `values` (shared checks).
 * Every function takes a {@link Queryable} (a `pg.Pool` or a client) as its first argument. To make
 * several store calls and your own statements atomic (a poll page plus its checkpoint, invariant 3),
 * run them on one transaction: {@link withTransaction}.
 *
 * How writes stay correct (docs/architecture.md, invariants 2 and 5, docs/architecture.md, "Conventions": one guarded upsert):
 * - One statement per call (per payload shape, see {@link upsertSubscribers}), built from `unnest`
 *   of one array parameter per column, so a page costs one round trip and stays far below the
 *   65,535 bind-parameter limit whatever its size (docs/architecture.md, "Traps we work around": drizzle's row-object insert
 *   builder is ~6k rows/s, and duplicate keys inside one `INSERT … ON CONFLICT` fail, so batches are
 *   deduplicated first).
 * - A newer-than guard on the upstream version time (`version_at`, never our clock: `versionTime` in
 *   `version.ts`, the latest of `updated_at` and the times of the state a version asserts): older
 *   versions are skipped,
 *   a tie is written only when the content differs (later arrival wins), and identical content
 *   writes nothing (`IS DISTINCT FROM`), so `mirrored_at` moves only on real changes and re-applying
 *   a page or a delivery is a no-op.
 * - `ON CONFLICT DO UPDATE … WHERE` re-checks the guard against the latest committed version of the
 *   row under its lock, so concurrent writers (poll and consumer) cannot regress a row either.
 * - Within one account: rows take the account of the connection (the column default
 *   `mirror_account()`), and every statement that reads, updates or deletes filters on it, so the
 *   same ids in another account are never read, counted or changed, and lookups use the keys, which
 *   lead with the account.
 */
export { keepingPlans, rollbackOrBroken, withRetriedTransaction, withTransaction } from './executor.js';
export type { UpsertCounts } from './values.js';
export { upsertSubscribers } from './subscribers.js';
export {
  awaitingProofIds,
  endMemberships,
  membersAwaitingProof,
  removeMembersNotSeenSince,
  removeMembership,
  upsertMemberships,
  type AwaitingProof,
  type MemberInput,
  type UpsertMembershipsOptions,
} from './memberships.js';
export { upsertAutomations, upsertCampaigns, upsertGroups } from './reference.js';
export { recordActivity } from './activity.js';
export { replaceFieldDefinitions, type FieldChanges, type FieldDefinitionRow } from './fields.js';
export type { ActivityRow, AutomationRow, CampaignRow, GroupRow, SubscriberField, SubscriberRow, SubscriberValues } from '../normalize.js';

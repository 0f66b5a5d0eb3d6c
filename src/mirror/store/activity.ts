/** `subscriber_activity`: one row per applied event. */
import type { ActivityRow } from '../normalize.js';
import { run, type Queryable } from './executor.js';
import { assertTimestampOrNull } from './values.js';

const ACTIVITY_INSERT_SQL = `
insert into subscriber_activity
  (kind, subscriber_id, group_id, automation_id, campaign_id, link_url, occurred_at, delivery_id, mirrored_at)
select kind, subscriber_id, group_id, automation_id, campaign_id, link_url, occurred_at, delivery_id, now()
from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[], $8::bigint[])
  as t(kind, subscriber_id, group_id, automation_id, campaign_id, link_url, occurred_at, delivery_id)
on conflict on constraint subscriber_activity_natural_key do nothing`;

/**
 * Inserts one row per applied event; a row whose natural key (kind, subscriber, group, automation,
 * campaign, link, occurred_at; nulls equal) is already stored, or repeated in `rows`, is dropped
 * (invariant 5: deliveries are duplicated and carry no id). Returns the number inserted.
 */
export async function recordActivity(exec: Queryable, rows: readonly ActivityRow[]): Promise<number> {
  if (rows.length === 0) return 0;
  rows.forEach((r, i) => {
    if (typeof r.kind !== 'string' || r.kind === '') throw new TypeError(`activity[${i}].kind: expected a non-empty string`);
    assertTimestampOrNull(r.occurredAt, `activity[${i}].occurredAt`);
  });
  const res = await run(exec, ACTIVITY_INSERT_SQL, [
    rows.map((r) => r.kind),
    rows.map((r) => r.subscriberId ?? null),
    rows.map((r) => r.groupId ?? null),
    rows.map((r) => r.automationId ?? null),
    rows.map((r) => r.campaignId ?? null),
    rows.map((r) => r.linkUrl ?? null),
    rows.map((r) => r.occurredAt ?? null),
    rows.map((r) => (r.deliveryId === null || r.deliveryId === undefined ? null : String(r.deliveryId))),
  ]);
  return res.rowCount;
}

/** `subscriber_activity`: one row per applied event. */
import type { ActivityRow } from '../normalize.js';
import { run } from './executor.js';
import type { Queryable } from '../../ground/queryable.js';
import { assertTimestampOrNull } from './values.js';
import { ACTIVITY_LINK_COLUMNS, linkWithoutPersonalDataSql } from '../personal-data.js';

const ACTIVITY_INSERT_SQL = `
insert into subscriber_activity
  (kind, subscriber_id, group_id, automation_id, campaign_id, link_url, occurred_at, subscriber_updated_at,
   delivery_id, item_index, mirrored_at)
select kind, subscriber_id, group_id, automation_id, campaign_id, link_url, occurred_at, subscriber_updated_at,
       delivery_id, item_index, now()
from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[],
            $8::timestamptz[], $9::bigint[], $10::int4[])
  as t(kind, subscriber_id, group_id, automation_id, campaign_id, link_url, occurred_at, subscriber_updated_at,
       delivery_id, item_index)
on conflict do nothing`;

/**
 * Inserts one row per applied event (invariant 5). Two keys drop a row already stored or repeated in
 * `rows` (a delivery applied again, a retry, a replay):
 * - every row: (`deliveryId`, `itemIndex`). So each item of each distinct delivery is its own row:
 *   two opens of one campaign in two deliveries, or two identical open items of one batch, are two
 *   opens (the inbox stores the same delivery bytes once, so a re-sent delivery is one delivery).
 * - subscriber facts (every kind but `campaign.open` / `campaign.click`): also their natural key
 *   (kind, subscriber, group, automation, campaign, link, `subscriberUpdatedAt`; nulls equal). A
 *   fact names the subscriber version it produced, so the same fact delivered to two webhooks is
 *   one row; an open or a click does not move `updated_at`, so for them that key proves nothing.
 * Returns the number inserted.
 */
export async function recordActivity(exec: Queryable, rows: readonly ActivityRow[]): Promise<number> {
  if (rows.length === 0) return 0;
  rows.forEach((r, i) => {
    if (typeof r.kind !== 'string' || r.kind === '') throw new TypeError(`activity[${i}].kind: expected a non-empty string`);
    assertTimestampOrNull(r.occurredAt, `activity[${i}].occurredAt`);
    assertTimestampOrNull(r.subscriberUpdatedAt ?? null, `activity[${i}].subscriberUpdatedAt`);
    const item = r.itemIndex ?? null;
    if (item !== null && !(Number.isInteger(item) && item >= 0))
      throw new TypeError(`activity[${i}].itemIndex: expected a non-negative integer`);
  });
  const res = await run(exec, ACTIVITY_INSERT_SQL, [
    rows.map((r) => r.kind),
    rows.map((r) => r.subscriberId ?? null),
    rows.map((r) => r.groupId ?? null),
    rows.map((r) => r.automationId ?? null),
    rows.map((r) => r.campaignId ?? null),
    rows.map((r) => r.linkUrl ?? null),
    rows.map((r) => r.occurredAt ?? null),
    rows.map((r) => r.subscriberUpdatedAt ?? null),
    rows.map((r) => (r.deliveryId === null || r.deliveryId === undefined ? null : String(r.deliveryId))),
    rows.map((r) => r.itemIndex ?? null),
  ]);
  return res.rowCount;
}

// ---------------------------------------------------------------------------------------------
// Erasure: links lose their query strings and the path segments holding an email (the registry's
// `link-query` columns, src/db/schema.ts)

const LINK_SET = ACTIVITY_LINK_COLUMNS.map((c) => `${c} = ${linkWithoutPersonalDataSql(c)}`).join(', ');
const LINK_HOLDS_QUERY = `(${ACTIVITY_LINK_COLUMNS.map((c) => `${c} is distinct from ${linkWithoutPersonalDataSql(c)}`).join(' or ')})`;

/** Strips the links of the activity rows of `subscriberIds` (a forgotten subscriber's delivery just applied). */
export async function eraseActivityLinks(exec: Queryable, subscriberIds: readonly string[]): Promise<number> {
  if (subscriberIds.length === 0) return 0;
  const res = await run(
    exec,
    `update subscriber_activity set ${LINK_SET} where account = mirror_account() and subscriber_id = any($1::text[]) and ${LINK_HOLDS_QUERY}`,
    [[...subscriberIds]],
  );
  return res.rowCount;
}

/**
 * Strips the links of every erased subscriber's activity (`erasures`): all of a forgotten (or erased on request) one's, and an
 * erased-out-of-groups one's recorded up to its erasure (it may have come back since). Each erasure
 * run checks them all again, so a row recorded after the erasure (a late delivery) is caught too.
 */
export async function eraseActivityLinksOfErased(exec: Queryable): Promise<number> {
  const res = await run(
    exec,
    `update subscriber_activity a set ${LINK_SET}
       from erasures e
      where e.account = mirror_account() and a.account = e.account and a.subscriber_id = e.subscriber_id
        and (e.reason <> 'out_of_groups' or a.mirrored_at <= e.erased_at)
        and ${LINK_HOLDS_QUERY}`,
    [],
  );
  return res.rowCount;
}

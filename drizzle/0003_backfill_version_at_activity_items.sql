-- Issue 12, data migration for 0002 (hand-written; 0004 then makes version_at NOT NULL).
--
-- subscribers.version_at: the version time of each stored version, as versionTime() in
-- src/mirror/version.ts computes it for new ones: the latest of updated_at and the times of the
-- state the version asserts. A row without any time (never written by the store) sorts first.
update subscribers
   set version_at = coalesce(
         greatest(updated_at, case when status = 'unsubscribed' then unsubscribed_at end, deleted_at),
         '-infinity'::timestamptz);
--> statement-breakpoint
-- subscriber_activity: occurred_at held the subscriber's updated_at, which an open or a click does
-- not move. It moves to subscriber_updated_at, and occurred_at becomes the receipt time of the
-- delivery the row came from while the inbox still holds it (a row whose delivery was purged keeps
-- the old value: no better time is left).
update subscriber_activity a
   set subscriber_updated_at = a.occurred_at,
       occurred_at = coalesce((select d.received_at from webhook_deliveries d where d.id = a.delivery_id), a.occurred_at);
--> statement-breakpoint
-- subscriber_activity.item_index: rows written before this migration collapsed identical events of a
-- delivery into one row, and their item positions were not kept. Each such row gets a distinct
-- position within its delivery (in row order), so the new key (delivery_id, item_index) holds; the
-- events that collapsed are not recoverable from the table.
update subscriber_activity a
   set item_index = n.i
  from (select id, (row_number() over (partition by delivery_id order by id) - 1)::int as i
          from subscriber_activity
         where delivery_id is not null) n
 where n.id = a.id;
--> statement-breakpoint
-- A subscriber fact (every kind but campaign.open / campaign.click) names the subscriber version it
-- produced: the same fact arriving in two deliveries (two webhooks registered for one kind, e.g.
-- during a secret rotation) is one row. Opens and clicks carry nothing that tells two of them apart,
-- so they are keyed by (delivery_id, item_index) only. Hand-written: drizzle cannot declare a
-- partial unique index with NULLS NOT DISTINCT (src/db/schema.ts names it in a comment).
create unique index subscriber_activity_fact_key
    on subscriber_activity (kind, subscriber_id, group_id, automation_id, campaign_id, link_url, subscriber_updated_at)
    nulls not distinct
 where kind not in ('campaign.open', 'campaign.click');

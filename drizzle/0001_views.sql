CREATE VIEW "public"."campaign_engagement" AS (
select c.id as campaign_id,
       c.name as campaign_name,
       coalesce(c.sent_at, c.date) as sent_at,
       c.total_recipients,
       coalesce(a.unique_openers, 0) as unique_openers,
       coalesce(a.unique_clickers, 0) as unique_clickers,
       coalesce(a.open_events, 0) as open_events,
       coalesce(a.click_events, 0) as click_events,
       round(100.0 * coalesce(a.unique_openers, 0) / nullif(c.total_recipients, 0), 2)::float8 as open_rate,
       round(100.0 * coalesce(a.unique_clickers, 0) / nullif(c.total_recipients, 0), 2)::float8 as click_rate
from campaigns c
left join (
  select campaign_id,
         (count(distinct subscriber_id) filter (where kind = 'campaign.open'))::int as unique_openers,
         (count(distinct subscriber_id) filter (where kind = 'campaign.click'))::int as unique_clickers,
         (count(*) filter (where kind = 'campaign.open'))::int as open_events,
         (count(*) filter (where kind = 'campaign.click'))::int as click_events
  from subscriber_activity
  where campaign_id is not null and kind in ('campaign.open', 'campaign.click')
  group by campaign_id
) a on a.campaign_id = c.id);--> statement-breakpoint
CREATE VIEW "public"."current_group_members" AS (
select gm.group_id, g.name as group_name, gm.subscriber_id, s.email, s.name, s.status, gm.type, gm.added_at
from group_members gm
left join groups g on g.id = gm.group_id
left join subscribers s on s.id = gm.subscriber_id
where gm.removed_at is null
  and s.deleted_at is null);--> statement-breakpoint
CREATE VIEW "public"."recently_changed_subscribers" AS (
select id, email, status, updated_at, mirrored_via
from subscribers
where updated_at >= now() - interval '1 day');
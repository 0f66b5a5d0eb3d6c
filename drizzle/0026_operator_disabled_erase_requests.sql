DROP VIEW "public"."suppressions";--> statement-breakpoint
ALTER TABLE "webhook_endpoints" ADD COLUMN "disabled_by_operator" boolean DEFAULT false NOT NULL;--> statement-breakpoint
CREATE INDEX "erasures_request_idx" ON "erasures" USING btree ("subscriber_id") WHERE reason = 'request';--> statement-breakpoint
CREATE VIEW "public"."suppressions" AS (
select distinct on (coalesce(lower(r.email), r.subscriber_id))
       r.email, r.subscriber_id, r.reason, r.since, r.learned_via
from (
  select null::text as email, e.subscriber_id, 'forgotten'::text as reason, e.erased_at as since,
         case e.reason when 'request' then 'erase' else coalesce(s.mirrored_via, 'webhook') end as learned_via, 1 as strength
    from erasures e
    left join subscribers s on s.id = e.subscriber_id
   where e.reason in ('forget', 'request')
  union all
  select s.email, a.subscriber_id, 'spam_complaint', min(a.occurred_at), 'webhook', 2
    from subscriber_activity a
    join subscribers s on s.id = a.subscriber_id
   where a.kind = 'subscriber.spam_reported'
     and not exists (select 1 from erasures e where e.subscriber_id = a.subscriber_id and e.reason in ('forget', 'request'))
   group by s.email, a.subscriber_id
  union all
  select s.email, s.id, s.status,
         coalesce(case when s.status = 'unsubscribed' then s.unsubscribed_at end, run.since, s.version_at),
         coalesce(run.via, s.mirrored_via), case s.status when 'bounced' then 3 when 'junk' then 4 else 5 end
    from subscribers s
    left join lateral (
      select min(v.valid_from) as since, (array_agg(v.via order by v.valid_from))[1] as via
        from subscriber_versions v
       where v.subscriber_id = s.id and v.status = s.status
         and v.valid_from > coalesce((select max(w.valid_from) from subscriber_versions w
                                       where w.subscriber_id = s.id and w.status is distinct from s.status), '-infinity')
    ) run on true
   where s.status in ('unsubscribed', 'bounced', 'junk')
     and not exists (select 1 from erasures e where e.subscriber_id = s.id and e.reason in ('forget', 'request'))
) r
order by coalesce(lower(r.email), r.subscriber_id), r.strength, r.since);--> statement-breakpoint
-- Hand-written: the analyst reads what it read before. Dropping the view dropped its grant (0025), and
-- the metadata columns of webhook_endpoints are granted by name (0006, 0016), as `adopted` is.
GRANT SELECT ON suppressions TO subscriber_mirror_analyst;--> statement-breakpoint
GRANT SELECT (disabled_by_operator) ON webhook_endpoints TO subscriber_mirror_analyst;

CREATE TABLE "fields" (
	"key" text PRIMARY KEY NOT NULL,
	"title" text,
	"type" text NOT NULL,
	"upstream_id" text,
	"mirrored_at" timestamp(6) with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE VIEW "public"."group_stats" AS (
select k.group_id, g.name as group_name, k.type,
       coalesce(m.members, 0) as mirror_members,
       c.count as service_count, c.at as service_count_at,
       c.count - coalesce(m.members, 0) as difference,
       r.at as last_audit_at, r.rows_checked as last_audit_rows_checked,
       case when r.rows_checked > 0
            then greatest(0, (r.rows_checked - r.content - r.missing - r.extra)::float8 / r.rows_checked) end as last_audit_accuracy
from (select group_id, type from sync_state
      union select group_id, type from audit_state
      union select group_id, type from group_members where removed_at is null and type is not null) k
left join groups g on g.id = k.group_id
left join lateral (
  select count(*)::int as members from group_members gm
   where gm.group_id = k.group_id and gm.type = k.type and gm.removed_at is null) m on true
left join lateral (
  select n.count, n.at from (
    select p.upstream_count as count, p.started_at as at from sync_passes p
     where p.group_id = k.group_id and p.type = k.type and p.upstream_count is not null
    union all
    select a.pending_count, a.pending_count_at from audit_state a
     where a.group_id = k.group_id and a.type = k.type and a.pending_count is not null
  ) n order by n.at desc limit 1) c on true
left join lateral (
  select ar.at, ar.rows_checked, ar.content, ar.missing, ar.extra from audit_results ar
   where ar.group_id = k.group_id and ar.type = k.type
   order by ar.at desc, ar.id desc limit 1) r on true);--> statement-breakpoint
CREATE VIEW "public"."suppressions" AS (
select distinct on (coalesce(lower(r.email), r.subscriber_id))
       r.email, r.subscriber_id, r.reason, r.since, r.learned_via
from (
  select null::text as email, e.subscriber_id, 'forgotten'::text as reason, e.erased_at as since,
         coalesce(s.mirrored_via, 'webhook') as learned_via, 1 as strength
    from erasures e
    left join subscribers s on s.id = e.subscriber_id
   where e.reason = 'forget'
  union all
  select s.email, a.subscriber_id, 'spam_complaint', min(a.occurred_at), 'webhook', 2
    from subscriber_activity a
    join subscribers s on s.id = a.subscriber_id
   where a.kind = 'subscriber.spam_reported'
     and not exists (select 1 from erasures e where e.subscriber_id = a.subscriber_id and e.reason = 'forget')
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
     and not exists (select 1 from erasures e where e.subscriber_id = s.id and e.reason = 'forget')
) r
order by coalesce(lower(r.email), r.subscriber_id), r.strength, r.since);
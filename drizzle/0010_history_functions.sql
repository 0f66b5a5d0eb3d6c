-- History (issue #13): the membership-period trigger, the as-of functions, and one version per
-- current row for installs that already hold data. Hand-written: drizzle-kit does not model these.

insert into history_settings (id, enabled) values (true, true) on conflict (id) do nothing;
--> statement-breakpoint

-- Periods follow every write to group_members, whichever path (poll listing, removal event, deletion,
-- full pass inference) started or ended the membership.
create function group_membership_history() returns trigger
language plpgsql as $$
begin
  if not coalesce((select h.enabled from history_settings h where h.id), true) then
    return null;
  end if;
  if new.removed_at is null and new.added_at is not null
     and (tg_op = 'INSERT' or old.removed_at is not null or old.added_at is null) then
    -- A period never starts before the previous one ended: a re-add inferred late (a full pass
    -- ends a membership at its own completion time) would otherwise overlap it.
    insert into group_membership_periods (group_id, subscriber_id, type, started_at)
    select new.group_id, new.subscriber_id, new.type,
           greatest(new.added_at, (select max(p.ended_at) from group_membership_periods p
                                    where p.group_id = new.group_id and p.subscriber_id = new.subscriber_id))
    on conflict (group_id, subscriber_id, started_at) do update set ended_at = null, type = excluded.type;
  elsif tg_op = 'UPDATE' and new.removed_at is not null and old.removed_at is null then
    update group_membership_periods
       set ended_at = greatest(new.removed_at, started_at)
     where group_id = new.group_id and subscriber_id = new.subscriber_id and ended_at is null;
  elsif tg_op = 'UPDATE' and new.removed_at is null and new.type is distinct from old.type then
    update group_membership_periods set type = new.type
     where group_id = new.group_id and subscriber_id = new.subscriber_id and ended_at is null;
  end if;
  return null;
end $$;
--> statement-breakpoint
create trigger group_members_history_insert after insert on group_members
  for each row when (new.removed_at is null)
  execute function group_membership_history();
--> statement-breakpoint
create trigger group_members_history_update after update on group_members
  for each row when (new.removed_at is distinct from old.removed_at
                     or new.added_at is distinct from old.added_at
                     or new.type is distinct from old.type)
  execute function group_membership_history();
--> statement-breakpoint

-- A row the subscriber upsert replaces by a newer version becomes a past version. Statement level,
-- from the transition tables: set-based, and the old rows are the rows actually replaced (after
-- the upsert's row lock), also when a concurrent writer changed them after the statement began.
-- Not kept: a version replaced by one of the same time (a tie the upsert resolved for the later
-- arrival), and a poll version replaced by a webhook version of its own second (the same change,
-- coarsely dated). Late versions, which the upsert skips, are placed by src/mirror/history.ts.
-- No nested loop: the planner may take the transition tables for one row each and join them with
-- one (seen: a million comparisons, 200 ms, for a 1000-row page instead of 1 ms by hash or merge).
create function subscriber_history_push() returns trigger
language plpgsql
set enable_nestloop = off
as $$
begin
  if not coalesce((select h.enabled from history_settings h where h.id), true) then
    return null;
  end if;
  insert into subscriber_versions_past
    (subscriber_id, valid_from, via, recorded_at, email, name, status, source, sent, opens_count,
     clicks_count, subscribed_at, unsubscribed_at, created_at, updated_at, deleted_at, forget_at, fields)
  select o.id, o.version_at, o.mirrored_via, o.mirrored_at, o.email, o.name, o.status, o.source, o.sent,
         o.opens_count, o.clicks_count, o.subscribed_at, o.unsubscribed_at, o.created_at, o.updated_at,
         o.deleted_at, o.forget_at, o.fields
    from replaced_old o
    join replaced_new n on n.id = o.id
   where o.version_at < n.version_at
     and not (o.mirrored_via = 'poll' and n.mirrored_via = 'webhook'
              and o.version_at >= date_trunc('second', n.version_at))
  on conflict (subscriber_id, valid_from) do nothing;
  return null;
end $$;
--> statement-breakpoint
create trigger subscribers_history after update on subscribers
  referencing old table as replaced_old new table as replaced_new
  for each statement execute function subscriber_history_push();
--> statement-breakpoint

-- Every subscriber as it was at `at`, with the columns of `subscribers` that history keeps: its
-- current row if that version had started by then, else its latest past version that had.
create function subscribers_as_of("at" timestamptz)
returns table (
  id text, email text, name text, status text, source text, sent integer, opens_count integer,
  clicks_count integer, subscribed_at timestamptz, unsubscribed_at timestamptz, created_at timestamptz,
  updated_at timestamptz, deleted_at timestamptz, forget_at timestamptz, fields jsonb,
  valid_from timestamptz, valid_to timestamptz, via text
)
language sql stable as $$
  select s.id, s.email, s.name, s.status, s.source, s.sent, s.opens_count, s.clicks_count,
         s.subscribed_at, s.unsubscribed_at, s.created_at, s.updated_at, s.deleted_at, s.forget_at, s.fields,
         s.version_at, null::timestamptz, s.mirrored_via
    from subscribers s
   where s.version_at <= subscribers_as_of."at"
  union all
  select v.subscriber_id, v.email, v.name, v.status, v.source, v.sent, v.opens_count, v.clicks_count,
         v.subscribed_at, v.unsubscribed_at, v.created_at, v.updated_at, v.deleted_at, v.forget_at, v.fields,
         v.valid_from,
         coalesce((select min(n.valid_from) from subscriber_versions_past n
                    where n.subscriber_id = v.subscriber_id and n.valid_from > v.valid_from), v.current_from),
         v.via
    from (select distinct on (p.subscriber_id) p.*, c.version_at as current_from
            from subscriber_versions_past p
            join subscribers c on c.id = p.subscriber_id
           where p.valid_from <= subscribers_as_of."at" and c.version_at > subscribers_as_of."at"
           order by p.subscriber_id, p.valid_from desc) v
$$;
--> statement-breakpoint

-- current_group_members as it was at `at`: open periods of subscribers not deleted at that time.
create function group_members_as_of("at" timestamptz)
returns table (
  group_id text, group_name text, subscriber_id text, email text, name text, status text, type text,
  added_at timestamptz
)
language sql stable as $$
  select p.group_id, g.name, p.subscriber_id, s.email, s.name, s.status, p.type, p.started_at
    from group_membership_periods p
    left join groups g on g.id = p.group_id
    left join subscribers_as_of(group_members_as_of."at") s on s.id = p.subscriber_id
   where p.started_at <= group_members_as_of."at"
     and (p.ended_at is null or p.ended_at > group_members_as_of."at")
     and s.deleted_at is null
$$;
--> statement-breakpoint

-- Existing installs: every current row already is its subscriber's current version (the view
-- reads `subscribers`); memberships get one period each.
insert into group_membership_periods (group_id, subscriber_id, type, started_at, ended_at)
select group_id, subscriber_id, type, added_at, case when removed_at is not null then greatest(removed_at, added_at) end
  from group_members
 where added_at is not null
on conflict do nothing;

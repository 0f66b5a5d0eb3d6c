-- Issue 22: versions read from the current API's lists are dated to the second, like the legacy
-- poll's (docs/upstream-current.md, "Subscriber objects"). A webhook version replacing one of its own
-- second is the same change, coarsely dated: not kept as a past version, whichever list path read it.
-- Same function as 0010_history_functions with `mirrored_via in ('poll', 'current')`.
create or replace function subscriber_history_push() returns trigger
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
     and not (o.mirrored_via in ('poll', 'current') and n.mirrored_via = 'webhook'
              and o.version_at >= date_trunc('second', n.version_at))
  on conflict (subscriber_id, valid_from) do nothing;
  return null;
end $$;

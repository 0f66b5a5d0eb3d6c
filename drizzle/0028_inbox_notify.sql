-- The worker learns of new deliveries from Postgres, not from a queue the receiver fills.
-- Every statement that adds pending deliveries to the inbox, and every update that makes one pending
-- again (a replay), notifies the channel `subscriber_mirror_inbox` when it commits; the workers
-- LISTEN on it and claim what is due (src/webhooks/consumer.ts). Written by triggers, so no writer
-- can forget it and the receiver's role needs no grant for it (pg_notify needs no privilege).
-- Notifications of one transaction with the same payload are delivered once: one per inbox batch.
create function webhook_deliveries_notify_added() returns trigger
language plpgsql as $$
begin
  if exists (select 1 from added where status = 'pending') then
    perform pg_notify('subscriber_mirror_inbox', '');
  end if;
  return null;
end $$;
--> statement-breakpoint
create trigger webhook_deliveries_notify_insert after insert on webhook_deliveries
  referencing new table as added
  for each statement execute function webhook_deliveries_notify_added();
--> statement-breakpoint
create function webhook_deliveries_notify_reopened() returns trigger
language plpgsql as $$
begin
  perform pg_notify('subscriber_mirror_inbox', '');
  return null;
end $$;
--> statement-breakpoint
create trigger webhook_deliveries_notify_reopen after update of status on webhook_deliveries
  for each row when (new.status = 'pending' and old.status <> 'pending')
  execute function webhook_deliveries_notify_reopened();
--> statement-breakpoint
-- The new bookkeeping columns (0027) are metadata, like `attempts`: analysts read them (0006 granted
-- the metadata columns by name, so new ones are private until granted).
grant select (next_attempt_at, tries) on webhook_deliveries to subscriber_mirror_analyst;

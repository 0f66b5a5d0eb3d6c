CREATE TABLE "analyst_accounts" (
	"role" text NOT NULL,
	"account" text NOT NULL,
	CONSTRAINT "analyst_accounts_role_account_pk" PRIMARY KEY("role","account")
);
--> statement-breakpoint
ALTER TABLE "analyst_accounts" ADD CONSTRAINT "analyst_accounts_account_accounts_name_fk" FOREIGN KEY ("account") REFERENCES "public"."accounts"("name") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
-- Hand-written: row-level security, which drizzle-kit does not model here. An analyst login listed in
-- `analyst_accounts` reads rows of its accounts only; one not listed reads every account. Views are
-- `security_invoker` (0029) and functions run as their caller, so the same rule holds through every
-- table, view and function. The owner (the worker) and superusers are not subject to it; the receiver
-- gets a policy of its own for the three tables it touches.
--
-- Both functions read `analyst_accounts` as the caller, whose policy shows only the caller's own rows:
-- no policy reads a table whose policy calls them back. Each is evaluated once per statement (the
-- policies wrap them in a subquery), not once per row.
CREATE FUNCTION mirror_analyst_unlimited() RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  select not exists (select 1 from analyst_accounts r where r.role = current_user)
$$;
--> statement-breakpoint
CREATE FUNCTION mirror_analyst_accounts() RETURNS text[]
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  select coalesce(array_agg(r.account), '{}') from analyst_accounts r where r.role = current_user
$$;
--> statement-breakpoint
ALTER TABLE analyst_accounts ENABLE ROW LEVEL SECURITY;
--> statement-breakpoint
CREATE POLICY analyst_own_limits ON analyst_accounts FOR SELECT TO subscriber_mirror_analyst USING (role = current_user);
--> statement-breakpoint
GRANT SELECT ON analyst_accounts TO subscriber_mirror_analyst;
--> statement-breakpoint
DO $$
declare
  t text;
begin
  foreach t in array array['accounts', 'subscribers', 'subscriber_versions_past', 'group_membership_periods', 'groups',
                           'group_members', 'campaigns', 'automations', 'subscriber_activity', 'sync_passes', 'sync_state',
                           'upstream_paging', 'audit_state', 'audit_results', 'audit_webhooks', 'webhook_deliveries',
                           'webhook_delivery_hashes', 'webhook_endpoints', 'fields', 'erasures'] loop
    execute format('alter table %I enable row level security', t);
    execute format(
      'create policy analyst_accounts on %I for select to subscriber_mirror_analyst using ((select mirror_analyst_unlimited()) or %I = any ((select mirror_analyst_accounts())::text[]))',
      t, case t when 'accounts' then 'name' else 'account' end);
  end loop;
end $$;
--> statement-breakpoint
-- The receiver stores every account's deliveries and reads every account's secrets and hashes.
CREATE POLICY receiver_inbox ON webhook_deliveries TO subscriber_mirror_receiver USING (true) WITH CHECK (true);
--> statement-breakpoint
CREATE POLICY receiver_hashes ON webhook_delivery_hashes FOR SELECT TO subscriber_mirror_receiver USING (true);
--> statement-breakpoint
CREATE POLICY receiver_secrets ON webhook_endpoints FOR SELECT TO subscriber_mirror_receiver USING (true);
--> statement-breakpoint
CREATE POLICY receiver_accounts ON accounts FOR SELECT TO subscriber_mirror_receiver USING (true);

-- Removing an account (`subscriber-mirror accounts remove`) removes every row keyed by it: each
-- mirrored table's reference to `accounts` now cascades. analyst_accounts' does not (a login limited to
-- a removed account alone would read every account), so the database refuses that removal.
ALTER TABLE "audit_results" DROP CONSTRAINT "audit_results_account_accounts_name_fk";
--> statement-breakpoint
ALTER TABLE "audit_state" DROP CONSTRAINT "audit_state_account_accounts_name_fk";
--> statement-breakpoint
ALTER TABLE "audit_webhooks" DROP CONSTRAINT "audit_webhooks_account_accounts_name_fk";
--> statement-breakpoint
ALTER TABLE "automations" DROP CONSTRAINT "automations_account_accounts_name_fk";
--> statement-breakpoint
ALTER TABLE "campaigns" DROP CONSTRAINT "campaigns_account_accounts_name_fk";
--> statement-breakpoint
ALTER TABLE "erasures" DROP CONSTRAINT "erasures_account_accounts_name_fk";
--> statement-breakpoint
ALTER TABLE "fields" DROP CONSTRAINT "fields_account_accounts_name_fk";
--> statement-breakpoint
ALTER TABLE "group_members" DROP CONSTRAINT "group_members_account_accounts_name_fk";
--> statement-breakpoint
ALTER TABLE "group_membership_periods" DROP CONSTRAINT "group_membership_periods_account_accounts_name_fk";
--> statement-breakpoint
ALTER TABLE "groups" DROP CONSTRAINT "groups_account_accounts_name_fk";
--> statement-breakpoint
ALTER TABLE "subscriber_activity" DROP CONSTRAINT "subscriber_activity_account_accounts_name_fk";
--> statement-breakpoint
ALTER TABLE "subscriber_versions_past" DROP CONSTRAINT "subscriber_versions_past_account_accounts_name_fk";
--> statement-breakpoint
ALTER TABLE "subscribers" DROP CONSTRAINT "subscribers_account_accounts_name_fk";
--> statement-breakpoint
ALTER TABLE "sync_passes" DROP CONSTRAINT "sync_passes_account_accounts_name_fk";
--> statement-breakpoint
ALTER TABLE "sync_state" DROP CONSTRAINT "sync_state_account_accounts_name_fk";
--> statement-breakpoint
ALTER TABLE "upstream_paging" DROP CONSTRAINT "upstream_paging_account_accounts_name_fk";
--> statement-breakpoint
ALTER TABLE "webhook_deliveries" DROP CONSTRAINT "webhook_deliveries_account_accounts_name_fk";
--> statement-breakpoint
ALTER TABLE "webhook_delivery_hashes" DROP CONSTRAINT "webhook_delivery_hashes_account_accounts_name_fk";
--> statement-breakpoint
ALTER TABLE "webhook_endpoints" DROP CONSTRAINT "webhook_endpoints_account_accounts_name_fk";
--> statement-breakpoint
ALTER TABLE "audit_results" ADD CONSTRAINT "audit_results_account_accounts_name_fk" FOREIGN KEY ("account") REFERENCES "public"."accounts"("name") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "audit_state" ADD CONSTRAINT "audit_state_account_accounts_name_fk" FOREIGN KEY ("account") REFERENCES "public"."accounts"("name") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "audit_webhooks" ADD CONSTRAINT "audit_webhooks_account_accounts_name_fk" FOREIGN KEY ("account") REFERENCES "public"."accounts"("name") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "automations" ADD CONSTRAINT "automations_account_accounts_name_fk" FOREIGN KEY ("account") REFERENCES "public"."accounts"("name") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "campaigns" ADD CONSTRAINT "campaigns_account_accounts_name_fk" FOREIGN KEY ("account") REFERENCES "public"."accounts"("name") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "erasures" ADD CONSTRAINT "erasures_account_accounts_name_fk" FOREIGN KEY ("account") REFERENCES "public"."accounts"("name") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "fields" ADD CONSTRAINT "fields_account_accounts_name_fk" FOREIGN KEY ("account") REFERENCES "public"."accounts"("name") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "group_members" ADD CONSTRAINT "group_members_account_accounts_name_fk" FOREIGN KEY ("account") REFERENCES "public"."accounts"("name") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "group_membership_periods" ADD CONSTRAINT "group_membership_periods_account_accounts_name_fk" FOREIGN KEY ("account") REFERENCES "public"."accounts"("name") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "groups" ADD CONSTRAINT "groups_account_accounts_name_fk" FOREIGN KEY ("account") REFERENCES "public"."accounts"("name") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "subscriber_activity" ADD CONSTRAINT "subscriber_activity_account_accounts_name_fk" FOREIGN KEY ("account") REFERENCES "public"."accounts"("name") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "subscriber_versions_past" ADD CONSTRAINT "subscriber_versions_past_account_accounts_name_fk" FOREIGN KEY ("account") REFERENCES "public"."accounts"("name") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "subscribers" ADD CONSTRAINT "subscribers_account_accounts_name_fk" FOREIGN KEY ("account") REFERENCES "public"."accounts"("name") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sync_passes" ADD CONSTRAINT "sync_passes_account_accounts_name_fk" FOREIGN KEY ("account") REFERENCES "public"."accounts"("name") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sync_state" ADD CONSTRAINT "sync_state_account_accounts_name_fk" FOREIGN KEY ("account") REFERENCES "public"."accounts"("name") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "upstream_paging" ADD CONSTRAINT "upstream_paging_account_accounts_name_fk" FOREIGN KEY ("account") REFERENCES "public"."accounts"("name") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ADD CONSTRAINT "webhook_deliveries_account_accounts_name_fk" FOREIGN KEY ("account") REFERENCES "public"."accounts"("name") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhook_delivery_hashes" ADD CONSTRAINT "webhook_delivery_hashes_account_accounts_name_fk" FOREIGN KEY ("account") REFERENCES "public"."accounts"("name") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhook_endpoints" ADD CONSTRAINT "webhook_endpoints_account_accounts_name_fk" FOREIGN KEY ("account") REFERENCES "public"."accounts"("name") ON DELETE cascade ON UPDATE no action;
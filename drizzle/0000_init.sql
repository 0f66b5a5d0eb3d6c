CREATE TABLE "automations" (
	"id" text PRIMARY KEY NOT NULL,
	"name" text,
	"mirrored_at" timestamp (6) with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "campaigns" (
	"id" text PRIMARY KEY NOT NULL,
	"name" text,
	"total_recipients" integer,
	"preview_url" text,
	"date" timestamp (6) with time zone,
	"sent_at" timestamp (6) with time zone,
	"mirrored_at" timestamp (6) with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "group_members" (
	"group_id" text NOT NULL,
	"subscriber_id" text NOT NULL,
	"type" text,
	"added_at" timestamp (6) with time zone,
	"removed_at" timestamp (6) with time zone,
	"source_updated_at" timestamp (6) with time zone,
	"last_seen_at" timestamp (6) with time zone,
	"mirrored_at" timestamp (6) with time zone DEFAULT now() NOT NULL,
	"mirrored_via" text NOT NULL,
	CONSTRAINT "group_members_group_id_subscriber_id_pk" PRIMARY KEY("group_id","subscriber_id")
);
--> statement-breakpoint
CREATE TABLE "groups" (
	"id" text PRIMARY KEY NOT NULL,
	"name" text,
	"mirrored_at" timestamp (6) with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "subscriber_activity" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"kind" text NOT NULL,
	"subscriber_id" text,
	"group_id" text,
	"automation_id" text,
	"campaign_id" text,
	"link_url" text,
	"occurred_at" timestamp (6) with time zone,
	"delivery_id" bigint,
	"mirrored_at" timestamp (6) with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "subscriber_activity_natural_key" UNIQUE NULLS NOT DISTINCT("kind","subscriber_id","group_id","automation_id","campaign_id","link_url","occurred_at")
);
--> statement-breakpoint
CREATE TABLE "subscribers" (
	"id" text PRIMARY KEY NOT NULL,
	"email" text,
	"name" text,
	"status" text,
	"source" text,
	"sent" integer,
	"opens_count" integer,
	"clicks_count" integer,
	"open_rate" double precision,
	"click_rate" double precision,
	"ip_address" text,
	"subscribed_at" timestamp (6) with time zone,
	"unsubscribed_at" timestamp (6) with time zone,
	"created_at" timestamp (6) with time zone,
	"updated_at" timestamp (6) with time zone,
	"deleted_at" timestamp (6) with time zone,
	"forget_at" timestamp (6) with time zone,
	"opted_in_at" timestamp (6) with time zone,
	"optin_ip" text,
	"fields" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"extra" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"mirrored_at" timestamp (6) with time zone DEFAULT now() NOT NULL,
	"mirrored_via" text NOT NULL
);
--> statement-breakpoint
CREATE TABLE "sync_state" (
	"group_id" text NOT NULL,
	"type" text NOT NULL,
	"cursor" timestamp (6) with time zone,
	"last_mode" text,
	"last_status" text,
	"last_run_started_at" timestamp (6) with time zone,
	"last_run_finished_at" timestamp (6) with time zone,
	"last_success_at" timestamp (6) with time zone,
	"last_error" text,
	"rows_last_run" integer,
	"rows_seen_last_run" integer,
	"requests_last_run" integer,
	"full_offset" integer,
	"full_started_at" timestamp (6) with time zone,
	"last_full_completed_at" timestamp (6) with time zone,
	"effective_limit" integer,
	"upstream_count" integer,
	"upstream_count_at" timestamp (6) with time zone,
	"updated_at" timestamp (6) with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "sync_state_group_id_type_pk" PRIMARY KEY("group_id","type")
);
--> statement-breakpoint
CREATE TABLE "webhook_deliveries" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"body_sha256" text NOT NULL,
	"body" jsonb NOT NULL,
	"kinds" text[] DEFAULT '{}'::text[] NOT NULL,
	"event_count" integer DEFAULT 0 NOT NULL,
	"endpoint_id" text,
	"status" text DEFAULT 'pending' NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"error" text,
	"received_at" timestamp (6) with time zone DEFAULT now() NOT NULL,
	"applied_at" timestamp (6) with time zone,
	"updated_at" timestamp (6) with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "webhook_deliveries_body_sha256_key" UNIQUE("body_sha256")
);
--> statement-breakpoint
CREATE TABLE "webhook_endpoints" (
	"id" text PRIMARY KEY NOT NULL,
	"name" text,
	"url" text NOT NULL,
	"events" text[] NOT NULL,
	"enabled" boolean DEFAULT true NOT NULL,
	"batchable" boolean DEFAULT false NOT NULL,
	"secret" text NOT NULL,
	"created_at" timestamp (6) with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp (6) with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE INDEX "group_members_subscriber_idx" ON "group_members" USING btree ("subscriber_id");--> statement-breakpoint
CREATE INDEX "group_members_current_idx" ON "group_members" USING btree ("group_id","type") WHERE "group_members"."removed_at" is null;--> statement-breakpoint
CREATE INDEX "subscriber_activity_subscriber_idx" ON "subscriber_activity" USING btree ("subscriber_id","occurred_at");--> statement-breakpoint
CREATE INDEX "subscriber_activity_campaign_idx" ON "subscriber_activity" USING btree ("campaign_id","kind");--> statement-breakpoint
CREATE INDEX "subscribers_email_idx" ON "subscribers" USING btree (lower("email"));--> statement-breakpoint
CREATE INDEX "subscribers_status_idx" ON "subscribers" USING btree ("status");--> statement-breakpoint
CREATE INDEX "subscribers_updated_at_idx" ON "subscribers" USING btree ("updated_at");--> statement-breakpoint
CREATE INDEX "webhook_deliveries_status_idx" ON "webhook_deliveries" USING btree ("status","received_at");
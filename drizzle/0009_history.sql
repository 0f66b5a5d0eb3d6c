CREATE TABLE "group_membership_periods" (
	"group_id" text NOT NULL,
	"subscriber_id" text NOT NULL,
	"type" text,
	"started_at" timestamp(6) with time zone NOT NULL,
	"ended_at" timestamp(6) with time zone,
	CONSTRAINT "group_membership_periods_group_id_subscriber_id_started_at_pk" PRIMARY KEY("group_id","subscriber_id","started_at")
);
--> statement-breakpoint
CREATE TABLE "history_settings" (
	"id" boolean PRIMARY KEY DEFAULT true NOT NULL,
	"enabled" boolean DEFAULT true NOT NULL
);
--> statement-breakpoint
CREATE TABLE "subscriber_versions_past" (
	"subscriber_id" text NOT NULL,
	"valid_from" timestamp(6) with time zone NOT NULL,
	"via" text NOT NULL,
	"recorded_at" timestamp(6) with time zone DEFAULT now() NOT NULL,
	"email" text,
	"name" text,
	"status" text,
	"source" text,
	"sent" integer,
	"opens_count" integer,
	"clicks_count" integer,
	"subscribed_at" timestamp(6) with time zone,
	"unsubscribed_at" timestamp(6) with time zone,
	"created_at" timestamp(6) with time zone,
	"updated_at" timestamp(6) with time zone,
	"deleted_at" timestamp(6) with time zone,
	"forget_at" timestamp(6) with time zone,
	"fields" jsonb DEFAULT '{}'::jsonb NOT NULL,
	CONSTRAINT "subscriber_versions_past_subscriber_id_valid_from_pk" PRIMARY KEY("subscriber_id","valid_from")
);
--> statement-breakpoint
CREATE INDEX "group_membership_periods_subscriber_idx" ON "group_membership_periods" USING btree ("subscriber_id");--> statement-breakpoint
CREATE VIEW "public"."subscriber_versions" AS (
select subscriber_id, valid_from,
       lead(valid_from) over (partition by subscriber_id order by valid_from) as valid_to,
       via, recorded_at, email, name, status, source, sent, opens_count, clicks_count,
       subscribed_at, unsubscribed_at, created_at, updated_at, deleted_at, forget_at, fields
from (
  select subscriber_id, valid_from, via, recorded_at, email, name, status, source, sent, opens_count, clicks_count,
         subscribed_at, unsubscribed_at, created_at, updated_at, deleted_at, forget_at, fields
    from subscriber_versions_past
  union all
  select id, version_at, mirrored_via, mirrored_at, email, name, status, source, sent, opens_count, clicks_count,
         subscribed_at, unsubscribed_at, created_at, updated_at, deleted_at, forget_at, fields
    from subscribers
) v);
CREATE TABLE "sync_passes" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"group_id" text NOT NULL,
	"type" text NOT NULL,
	"kind" text NOT NULL,
	"source" text NOT NULL,
	"trigger" text,
	"started_at" timestamp(6) with time zone DEFAULT now() NOT NULL,
	"listed_from" timestamp(6) with time zone,
	"ended_at" timestamp(6) with time zone,
	"status" text NOT NULL,
	"complete" boolean DEFAULT false NOT NULL,
	"gap_free" boolean,
	"read_since" timestamp(6) with time zone,
	"rows_seen" integer DEFAULT 0 NOT NULL,
	"rows_written" integer DEFAULT 0 NOT NULL,
	"requests" integer DEFAULT 0 NOT NULL,
	"removed" integer DEFAULT 0 NOT NULL,
	"proof" bigint[],
	"upstream_count" integer,
	"future_rows" integer DEFAULT 0 NOT NULL,
	"step_backs" integer DEFAULT 0 NOT NULL,
	"gaps" integer DEFAULT 0 NOT NULL,
	"error" text
);
--> statement-breakpoint
ALTER TABLE "group_members" ADD COLUMN "ended_by" bigint;--> statement-breakpoint
ALTER TABLE "sync_state" ADD COLUMN "full_source" text;--> statement-breakpoint
ALTER TABLE "sync_state" ADD COLUMN "full_pages" integer;--> statement-breakpoint
CREATE INDEX "sync_passes_pair_idx" ON "sync_passes" USING btree ("group_id","type","id");
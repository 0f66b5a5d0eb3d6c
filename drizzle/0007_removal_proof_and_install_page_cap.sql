CREATE TABLE "upstream_paging" (
	"id" smallint PRIMARY KEY DEFAULT 1 NOT NULL,
	"page_cap" integer,
	"longest_page" integer DEFAULT 0 NOT NULL,
	"candidate_length" integer,
	"candidate_list" text,
	"updated_at" timestamp(6) with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "upstream_paging_single_row" CHECK ("upstream_paging"."id" = 1)
);
--> statement-breakpoint
ALTER TABLE "sync_state" ADD COLUMN "full_tail_ids" text[];--> statement-breakpoint
ALTER TABLE "sync_state" ADD COLUMN "full_continuous" boolean;--> statement-breakpoint
ALTER TABLE "sync_state" ADD COLUMN "proof_started_at" timestamp(6) with time zone;--> statement-breakpoint
ALTER TABLE "sync_state" ADD COLUMN "prev_proof_started_at" timestamp(6) with time zone;--> statement-breakpoint
ALTER TABLE "sync_state" ADD COLUMN "future_rows_last_run" integer;
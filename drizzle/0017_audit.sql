CREATE TABLE "audit_results" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"group_id" text NOT NULL,
	"type" text NOT NULL,
	"at" timestamp(6) with time zone DEFAULT now() NOT NULL,
	"rows_checked" integer NOT NULL,
	"in_flight" integer NOT NULL,
	"content" integer NOT NULL,
	"missing" integer NOT NULL,
	"extra" integer NOT NULL,
	"count" integer NOT NULL,
	"repaired" integer NOT NULL,
	"unrepaired" integer NOT NULL,
	"missed_deliveries" integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE "audit_state" (
	"group_id" text NOT NULL,
	"type" text NOT NULL,
	"sample_offset" integer DEFAULT 0 NOT NULL,
	"sample_cursor" text,
	"sample_after_id" text,
	"pending_count" integer,
	"pending_count_at" timestamp(6) with time zone,
	"pending_extras" jsonb,
	"last_audit_at" timestamp(6) with time zone,
	"last_error" text,
	"full_pass_asked_at" timestamp(6) with time zone,
	"updated_at" timestamp(6) with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "audit_state_group_id_type_pk" PRIMARY KEY("group_id","type")
);
--> statement-breakpoint
CREATE TABLE "audit_webhooks" (
	"id" text PRIMARY KEY NOT NULL,
	"enabled" boolean,
	"problems" text[] NOT NULL,
	"missing_events" text[] NOT NULL,
	"checked_at" timestamp(6) with time zone NOT NULL,
	"reenabled_at" timestamp(6) with time zone
);
--> statement-breakpoint
CREATE INDEX "audit_results_at_idx" ON "audit_results" USING btree ("at");--> statement-breakpoint
CREATE INDEX "audit_results_pair_idx" ON "audit_results" USING btree ("group_id","type","at");
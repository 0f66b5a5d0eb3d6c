ALTER TABLE "sync_state" ADD COLUMN "proof_ended_at" timestamp(6) with time zone;--> statement-breakpoint
ALTER TABLE "sync_state" ADD COLUMN "prev_proof_ended_at" timestamp(6) with time zone;--> statement-breakpoint
ALTER TABLE "sync_state" ADD COLUMN "swept_at" timestamp(6) with time zone;--> statement-breakpoint
ALTER TABLE "sync_state" ADD COLUMN "swept_since" timestamp(6) with time zone;
ALTER TABLE "webhook_deliveries" ADD COLUMN "next_attempt_at" timestamp(6) with time zone;--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ADD COLUMN "tries" integer DEFAULT 0 NOT NULL;
CREATE TABLE "erasures" (
	"subscriber_id" text PRIMARY KEY NOT NULL,
	"reason" text NOT NULL,
	"erased_at" timestamp(6) with time zone DEFAULT now() NOT NULL,
	"deliveries_redacted_at" timestamp(6) with time zone
);

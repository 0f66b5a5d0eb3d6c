CREATE TABLE "webhook_delivery_hashes" (
	"body_sha256" "bytea" PRIMARY KEY NOT NULL,
	"delivery_id" bigint NOT NULL,
	"status" text NOT NULL,
	"received_at" timestamp(6) with time zone NOT NULL,
	"purged_at" timestamp(6) with time zone DEFAULT now() NOT NULL
);

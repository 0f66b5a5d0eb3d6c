ALTER TABLE "subscriber_activity" DROP CONSTRAINT "subscriber_activity_natural_key";--> statement-breakpoint
ALTER TABLE "subscriber_activity" ADD COLUMN "subscriber_updated_at" timestamp(6) with time zone;--> statement-breakpoint
ALTER TABLE "subscriber_activity" ADD COLUMN "item_index" integer;--> statement-breakpoint
ALTER TABLE "subscribers" ADD COLUMN "version_at" timestamp(6) with time zone;--> statement-breakpoint
ALTER TABLE "subscriber_activity" ADD CONSTRAINT "subscriber_activity_delivery_item" UNIQUE("delivery_id","item_index");
ALTER TABLE "webhook_endpoints" ADD COLUMN "disabled_by_operator" boolean DEFAULT false NOT NULL;--> statement-breakpoint
-- Analysts read the metadata columns of webhook_endpoints by name (0006, 0016): granted like adopted.
GRANT SELECT (disabled_by_operator) ON webhook_endpoints TO subscriber_mirror_analyst;

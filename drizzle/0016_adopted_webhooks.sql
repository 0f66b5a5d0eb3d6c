ALTER TABLE "webhook_endpoints" ADD COLUMN "adopted" boolean DEFAULT false NOT NULL;--> statement-breakpoint
-- Analysts read the metadata columns of webhook_endpoints by name (0006), so a new one is private until
-- granted: whether a webhook was adopted is metadata, not a secret. The receiver's role keeps reading
-- only what verifying needs (0012).
GRANT SELECT (adopted) ON webhook_endpoints TO subscriber_mirror_analyst;

-- The read-only analyst role (README "Querying the mirror"). NOLOGIN: analysts log in with their own
-- roles made members of it. Roles belong to the cluster, not the database: it is created once and
-- granted in every database migrated. A service role without CREATEROLE needs it created beforehand
-- (the compose file's init script does).
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'subscriber_mirror_analyst') THEN
    CREATE ROLE subscriber_mirror_analyst NOLOGIN;
  END IF;
EXCEPTION
  WHEN duplicate_object OR unique_violation THEN NULL; -- created meanwhile by a migration in another database
  WHEN insufficient_privilege THEN
    RAISE EXCEPTION 'role subscriber_mirror_analyst does not exist and % may not create it: as a superuser, run CREATE ROLE subscriber_mirror_analyst NOLOGIN; then migrate again', current_user;
END $$;
--> statement-breakpoint
GRANT USAGE ON SCHEMA public TO subscriber_mirror_analyst;
--> statement-breakpoint
-- Every table and view of the mirror, and those later migrations create (default privileges of the
-- role that migrates), so a new mirrored table is readable without a grant of its own...
GRANT SELECT ON ALL TABLES IN SCHEMA public TO subscriber_mirror_analyst;
--> statement-breakpoint
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO subscriber_mirror_analyst;
--> statement-breakpoint
-- ...except two columns: the raw bodies hold personal data (of forgotten subscribers too until
-- redacted), and the secrets sign deliveries (whoever reads them can forge one). Column privileges:
-- the other columns of both tables stay readable.
REVOKE SELECT ON webhook_deliveries, webhook_endpoints FROM subscriber_mirror_analyst;
--> statement-breakpoint
GRANT SELECT (id, body_sha256, kinds, event_count, endpoint_id, status, attempts, error, received_at, applied_at, updated_at)
  ON webhook_deliveries TO subscriber_mirror_analyst;
--> statement-breakpoint
GRANT SELECT (id, name, url, events, enabled, batchable, created_at, updated_at)
  ON webhook_endpoints TO subscriber_mirror_analyst;

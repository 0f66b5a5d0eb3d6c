-- Least privilege (issue 19; docs/security.md "Who can read what", docs/sql.md "Roles").
--
-- 1. Nobody but the database owner creates objects in the schema: the migration itself, not only the
--    compose init script (an install on its own Postgres never ran that). Only when PUBLIC still has
--    CREATE, so a role that may not revoke it (not the schema's owner, e.g. Postgres 14 or older
--    where the bootstrap superuser owns `public`) is told what to do instead of failing silently.
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_namespace n, aclexplode(n.nspacl) a
              WHERE n.nspname = 'public' AND a.grantee = 0 AND a.privilege_type = 'CREATE') THEN
    REVOKE CREATE ON SCHEMA public FROM PUBLIC;
  END IF;
EXCEPTION
  WHEN insufficient_privilege THEN
    RAISE EXCEPTION '% may not revoke CREATE on schema public from PUBLIC: as a superuser, run REVOKE CREATE ON SCHEMA public FROM PUBLIC; in this database, then migrate again', current_user;
END $$;
--> statement-breakpoint
-- 2. Analysts get tables one by one: no default privileges any more (0006 gave them every future
--    table), so a table a later migration creates is private until that migration grants it. The
--    grants of 0006 on the tables and views that exist stay; the table of dedupe hashes (0011, made
--    readable by those default privileges) is the service's own business.
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE SELECT ON TABLES FROM subscriber_mirror_analyst;
--> statement-breakpoint
REVOKE ALL ON webhook_delivery_hashes FROM subscriber_mirror_analyst;
--> statement-breakpoint
-- 3. The webhook receiver's own role: the one process on the internet. It stores deliveries and reads
--    the secrets that verify them, nothing else: no subscriber, no stored body, no update or delete.
--    NOLOGIN here; the compose init script (deploy/postgres/init-roles.sh) creates it with LOGIN and
--    RECEIVER_DB_PASSWORD. A service role without CREATEROLE needs it created beforehand.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'subscriber_mirror_receiver') THEN
    CREATE ROLE subscriber_mirror_receiver NOLOGIN;
  END IF;
EXCEPTION
  WHEN duplicate_object OR unique_violation THEN NULL; -- created meanwhile by a migration in another database
  WHEN insufficient_privilege THEN
    RAISE EXCEPTION 'role subscriber_mirror_receiver does not exist and % may not create it: as a superuser, run CREATE ROLE subscriber_mirror_receiver LOGIN PASSWORD ''…''; then migrate again', current_user;
END $$;
--> statement-breakpoint
GRANT USAGE ON SCHEMA public TO subscriber_mirror_receiver;
--> statement-breakpoint
-- The inbox writer's insert (`src/webhooks/inbox.ts`): the columns it writes, the id sequence, and the
-- columns its `returning` and its duplicate lookup read. Not `body`: a receiver taken over reads no
-- stored delivery.
GRANT INSERT (body_sha256, body, kinds, event_count, endpoint_id, status, error) ON webhook_deliveries TO subscriber_mirror_receiver;
--> statement-breakpoint
GRANT SELECT (id, body_sha256, status, received_at) ON webhook_deliveries TO subscriber_mirror_receiver;
--> statement-breakpoint
GRANT USAGE ON SEQUENCE webhook_deliveries_id_seq TO subscriber_mirror_receiver;
--> statement-breakpoint
-- Duplicates of purged deliveries (0011).
GRANT SELECT ON webhook_delivery_hashes TO subscriber_mirror_receiver;
--> statement-breakpoint
-- The secrets that verify signatures (`loadSecrets`): the columns that query reads.
GRANT SELECT (id, secret, enabled, created_at) ON webhook_endpoints TO subscriber_mirror_receiver;
--> statement-breakpoint
-- Readiness: whether every migration is applied (the receiver never migrates; a worker does).
GRANT USAGE ON SCHEMA drizzle TO subscriber_mirror_receiver;
--> statement-breakpoint
GRANT SELECT ON drizzle.__drizzle_migrations TO subscriber_mirror_receiver;

#!/bin/sh
# The demo's (docker-compose.demo.yml; production's roles are deploy/setup/setup.sh's, at every start).
# Runs once, when the Postgres volume is first initialised (docker-entrypoint-initdb.d), as the
# superuser. Creates the service's own role, which owns the `mirror` database and everything the
# migrations create in it but is no superuser; the webhook receiver's role, which the migrations
# grant only the inbox and the webhook secrets (0012_least_privilege); and the analyst group role the
# migrations grant to. The migrations create the last two themselves when they may (the service role
# may not create roles), but NOLOGIN: the receiver's login and password are set here.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres -v pw="$MIRROR_DB_PASSWORD" <<'SQL'
CREATE ROLE mirror LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'pw';
CREATE DATABASE mirror OWNER mirror;
CREATE ROLE subscriber_mirror_analyst NOLOGIN;
SQL
# Without RECEIVER_DB_PASSWORD (the demo, which runs everything as `mirror`) the role exists for the
# migrations to grant to, but nobody logs in with it.
if [ -n "${RECEIVER_DB_PASSWORD:-}" ]; then
  psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres -v rpw="$RECEIVER_DB_PASSWORD" <<'SQL'
CREATE ROLE subscriber_mirror_receiver LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'rpw';
SQL
else
  psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres -c 'CREATE ROLE subscriber_mirror_receiver NOLOGIN;'
fi
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname mirror <<'SQL'
-- Nobody but the owner (and roles it grants to) creates objects in the mirror's schema (the
-- migration 0012_least_privilege revokes it too, for installs without this script).
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
SQL

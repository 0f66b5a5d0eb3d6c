#!/bin/sh
# Runs once, when the Postgres volume is first initialised (docker-entrypoint-initdb.d), as the
# superuser. Creates the service's own role, which owns the `mirror` database and everything the
# migrations create in it but is no superuser, and the analyst group role the migrations grant to
# (they create it themselves when they may; the service role may not create roles).
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres -v pw="$MIRROR_DB_PASSWORD" <<'SQL'
CREATE ROLE mirror LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'pw';
CREATE DATABASE mirror OWNER mirror;
CREATE ROLE subscriber_mirror_analyst NOLOGIN;
SQL
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname mirror <<'SQL'
-- Nobody but the owner (and roles it grants to) creates objects in the mirror's schema.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
SQL

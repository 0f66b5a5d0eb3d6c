#!/bin/sh
# The `setup` service of docker-compose.yml: runs to completion on every `up`, after Postgres is healthy
# and before Redis and the services (docs/compose.md, "Setup on every start"). Idempotent: it brings
# any volume, new or from an earlier release, to what this release needs, so an upgrade is
# `git pull && docker compose up -d --build --wait` and a password changed in .env just works.
#   1. Passwords: each one the services use is taken from .env, else the one generated at an earlier
#      start, else generated now (a release that adds a password needs no manual step), and written
#      where only its users read it: /run/subscriber-mirror/worker (the worker), .../receiver and
#      .../redis (Redis's password only: Redis never sees the database's).
#   2. Roles: created when missing and altered to those passwords; the `mirror` database and its
#      objects owned by `mirror` (earlier releases may have created some as the superuser).
#   3. Settings still in the per-service files of earlier releases (mirror.env, worker.env,
#      receiver.env), which Compose hands to this container as variables (env_file, never the files
#      nor the project directory): each service's allow list of them copied for it to read, one
#      release long, with a warning.
#   4. Redis's data of a release that ran Redis as root, given to the redis user it now runs as.
# It connects over the Postgres unix socket (a volume shared with the postgres service), where the
# image trusts the superuser without a password: so a changed POSTGRES_PASSWORD is reconciled too.
set -eu
umask 077
out=/run/subscriber-mirror
worker=$out/worker
receiver=$out/receiver
redis=$out/redis
redis_data=/redis-data
NODE_UID=1000 # the image's `node` user, which the services run as
REDIS_UID=999 # the redis image's `redis` user, which Redis runs as

# The settings each service may take from an earlier release's files: its own, and no credential of
# another (the receiver never gets the API key, a token nor the admin token, whatever file held them).
# test/unit/compose.test.ts keeps each list equal to the service's `environment:` in docker-compose.yml
# (less the passwords, which come from .env or step 1, and OPS_*, which compose sets).
WORKER_SETTINGS="REDIS_PREFIX ACCOUNTS MAILER_LEGACY_URL MAILER_API_KEY MAILER_API_KEY_HEADER MAILER_SOURCE_TZ
  MAILER_API_URL MAILER_API_TOKEN MAILER_WEBHOOKS_URL MAILER_WEBHOOKS_TOKEN SYNC_SOURCE SYNC_GROUPS
  SYNC_TYPES SYNC_EVERY SYNC_LOOKBACK RECONCILE_EVERY SYNC_PAGE_SIZE PASS_HISTORY_RETENTION
  API_RATE_LIMIT MAILER_TIMEOUT WEBHOOK_RETENTION WEBHOOK_FAILED_RETENTION ERASE_OUT_OF_GROUPS_AFTER
  HISTORY HISTORY_RETENTION ADMIN_TOKEN DASHBOARD_WRITE ADMIN_COOKIE_INSECURE TRUST_PROXY AUDIT_EVERY
  AUDIT_BUDGET AUDIT_SAMPLE AUDIT_SETTLE WEBHOOKS_REENABLE METRICS_REFRESH_EVERY LOG_LEVEL LOG_FORMAT SHUTDOWN_TIMEOUT"
RECEIVER_SETTINGS="ACCOUNTS WEBHOOK_SECRETS WEBHOOK_PATH WEBHOOK_MAX_BODY WEBHOOK_BODY_MEMORY
  HTTP_HEADERS_TIMEOUT HTTP_REQUEST_TIMEOUT HTTP_IDLE_TIMEOUT HTTP_MAX_CONNECTIONS HTTP_MAX_CONNECTIONS_PER_CLIENT HTTP_REQUEST_RATE_PER_CLIENT TRUST_PROXY
  METRICS_REFRESH_EVERY LOG_LEVEL LOG_FORMAT SHUTDOWN_TIMEOUT"

say() { printf 'setup: %s\n' "$*"; }

new_password() { od -An -N24 -tx1 /dev/urandom | tr -d ' \n'; }

# keep DIR NAME: the password NAME from .env, else the one kept at an earlier start, else a new one.
keep() {
  dir=$1 name=$2
  eval "value=\${$name:-}"
  if [ -z "$value" ] && [ -s "$dir/$name" ]; then
    value=$(cat "$dir/$name")
  elif [ -z "$value" ]; then
    value=$(new_password)
    say "$name is not in .env: generated one (kept in the volume; set it in .env to choose your own)"
  fi
  case $value in *[!A-Za-z0-9._~-]*) say "$name: use URL-safe characters only (letters, digits, . _ ~ -)"; exit 2 ;; esac
  printf '%s' "$value" >"$dir/$name"
  eval "$name=\$value"
}

mkdir -p "$worker" "$receiver" "$redis"
# A directory this script left read-only to its owner at an earlier start is written again.
chmod 0700 "$worker" "$receiver" "$redis"
# Redis's password was the worker's file before Redis had a volume of its own.
[ -s "$redis/REDIS_PASSWORD" ] || [ ! -s "$worker/REDIS_PASSWORD" ] || cp "$worker/REDIS_PASSWORD" "$redis/"
keep "$worker" MIRROR_DB_PASSWORD
keep "$redis" REDIS_PASSWORD
keep "$receiver" RECEIVER_DB_PASSWORD
# The worker's copy of the password it logs in to Redis with.
printf '%s' "$REDIS_PASSWORD" >"$worker/REDIS_PASSWORD"
# Releases before this one gave the receiver a Redis user of its own: its password goes, everywhere.
rm -f "$receiver/RECEIVER_REDIS_PASSWORD" "$redis/RECEIVER_REDIS_PASSWORD"

psql_super() { psql -v ON_ERROR_STOP=1 -qAt -h /var/run/postgresql -U postgres "$@"; }

for _ in $(seq 1 30); do psql_super -d postgres -c 'select 1' >/dev/null 2>&1 && break; sleep 1; done

psql_super -d postgres \
  -v mpw="$MIRROR_DB_PASSWORD" -v rpw="$RECEIVER_DB_PASSWORD" -v spw="${POSTGRES_PASSWORD:-}" <<'SQL'
SELECT 'CREATE ROLE mirror' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'mirror') \gexec
ALTER ROLE mirror LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'mpw';
SELECT 'CREATE ROLE subscriber_mirror_receiver' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'subscriber_mirror_receiver') \gexec
ALTER ROLE subscriber_mirror_receiver LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'rpw';
SELECT 'CREATE ROLE subscriber_mirror_analyst NOLOGIN' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'subscriber_mirror_analyst') \gexec
SELECT 'CREATE DATABASE mirror OWNER mirror' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'mirror') \gexec
ALTER DATABASE mirror OWNER TO mirror;
-- The superuser's password too, when .env names one (it is used for administration only).
SELECT format('ALTER ROLE postgres PASSWORD %L', :'spw') WHERE :'spw' <> '' \gexec
SQL

psql_super -d mirror <<'SQL'
-- Nobody but the owner (and the roles the migrations grant to) creates objects in the schema.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
-- Everything the migrations created belongs to `mirror`, whoever ran them (an earlier release may
-- have migrated as the superuser): the worker migrates as `mirror` and must own what it alters.
DO $$
DECLARE o record;
BEGIN
  FOR o IN
    SELECT n.nspname AS schema, c.relname AS name,
           CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END AS kind
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname IN ('public', 'drizzle') AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
      AND pg_get_userbyid(c.relowner) <> 'mirror'
      -- A sequence owned by a table column follows its table.
      AND NOT (c.relkind = 'S' AND EXISTS (SELECT FROM pg_depend d WHERE d.objid = c.oid AND d.deptype IN ('a', 'i')))
  LOOP
    EXECUTE format('ALTER %s %I.%I OWNER TO mirror', o.kind, o.schema, o.name);
  END LOOP;
  FOR o IN
    SELECT p.oid::regprocedure AS signature, CASE p.prokind WHEN 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END AS kind
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = 'public' AND pg_get_userbyid(p.proowner) <> 'mirror'
  LOOP
    EXECUTE format('ALTER %s %s OWNER TO mirror', o.kind, o.signature);
  END LOOP;
  IF EXISTS (SELECT FROM pg_namespace WHERE nspname = 'drizzle' AND pg_get_userbyid(nspowner) <> 'mirror') THEN
    ALTER SCHEMA drizzle OWNER TO mirror;
  END IF;
END $$;
SQL
say "roles mirror, subscriber_mirror_receiver and subscriber_mirror_analyst and their passwords are as .env says"

# allowed NAME... : NAME=value for each NAME this container has (from an earlier release's files:
# Compose's env_file; this service's own environment holds passwords only), one per line.
allowed() {
  for name in "$@"; do
    eval "given=\${$name+set} value=\${$name-}"
    [ -n "$given" ] || continue
    case $value in *'
'*) say "WARNING: $name spans lines in an earlier release's settings file: not passed on"; continue ;; esac
    printf '%s=%s\n' "$name" "$value"
  done
}
# shellcheck disable=SC2086 # the lists split into names on purpose
allowed $WORKER_SETTINGS >"$worker/old-settings.env"
# shellcheck disable=SC2086
allowed $RECEIVER_SETTINGS >"$receiver/old-settings.env"
if [ -s "$worker/old-settings.env" ] || [ -s "$receiver/old-settings.env" ]; then
  names=$(cut -d= -f1 "$worker/old-settings.env" "$receiver/old-settings.env" | sort -u | tr '\n' ' ')
  say "WARNING: mirror.env, worker.env, receiver.env: settings files of an earlier release, read for this release only (${names% }). Move their lines into .env (the one settings file; values already in .env win) and delete them."
fi

# An earlier release ran Redis as root: its data files are root's, and Redis now runs as redis.
find "$redis_data" ! -user "$REDIS_UID" -exec chown "$REDIS_UID" {} +

chown -R "$NODE_UID:$NODE_UID" "$worker" "$receiver"
chown -R "$REDIS_UID" "$redis"
chmod 0500 "$worker" "$receiver" "$redis"
chmod 0400 "$worker"/* "$receiver"/* "$redis"/*
say "done"

#!/bin/sh
# Starts Redis for docker-compose.yml with the password of the default user, the worker's (the
# receiver has no Redis credential: docs/security.md, "Redis"). From .env, else the one the setup
# service generated (deploy/setup/setup.sh). The configuration goes in on stdin, so no password is on
# a command line (which `ps` shows).
set -eu
dir=/run/subscriber-mirror
REDIS_PASSWORD="${REDIS_PASSWORD:-$(cat "$dir/worker/REDIS_PASSWORD" 2>/dev/null || true)}"
: "${REDIS_PASSWORD:?the default user's password (REDIS_PASSWORD)}"
printf 'requirepass "%s"\n' "$REDIS_PASSWORD" |
  exec redis-server - --appendonly yes "$@"

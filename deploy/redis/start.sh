#!/bin/sh
# Starts Redis for docker-compose.yml: the password of the default user (the worker's), and the
# receiver's own user with the rules of deploy/redis/receiver.acl (docs/security.md, "Redis").
# Each password from .env, else the one the setup service generated (deploy/setup/setup.sh).
# The configuration goes in on stdin, so no password is on a command line (which `ps` shows).
set -eu
dir=/run/subscriber-mirror
REDIS_PASSWORD="${REDIS_PASSWORD:-$(cat "$dir/worker/REDIS_PASSWORD" 2>/dev/null || true)}"
RECEIVER_REDIS_PASSWORD="${RECEIVER_REDIS_PASSWORD:-$(cat "$dir/receiver/RECEIVER_REDIS_PASSWORD" 2>/dev/null || true)}"
: "${REDIS_PASSWORD:?the default user's password (REDIS_PASSWORD)}"
: "${RECEIVER_REDIS_PASSWORD:?the receiver user's password (RECEIVER_REDIS_PASSWORD)}"
prefix="${REDIS_PREFIX:-subscriber-mirror}"
case "$prefix" in *[!A-Za-z0-9_-]*) echo "REDIS_PREFIX: letters, digits, - or _ only" >&2; exit 2 ;; esac
rules=$(grep -v '^[[:space:]]*#' "${RECEIVER_ACL_FILE:-/etc/redis/receiver.acl}" | tr '\n' ' ' | sed "s/{prefix}/$prefix/g")
printf 'requirepass "%s"\nuser receiver on >%s %s\n' "$REDIS_PASSWORD" "$RECEIVER_REDIS_PASSWORD" "$rules" |
  exec redis-server - --appendonly yes "$@"

#!/bin/sh
# Starts Redis for docker-compose.yml: the password of the default user (the worker's), and the
# receiver's own user with the rules of deploy/redis/receiver.acl (docs/security.md, "Redis").
# The configuration goes in on stdin, so no password is on a command line (which `ps` shows).
set -eu
: "${REDISCLI_AUTH:?the default user's password (REDIS_PASSWORD)}"
: "${RECEIVER_REDIS_PASSWORD:?the receiver user's password}"
prefix="${REDIS_PREFIX:-subscriber-mirror}"
case "$prefix" in *[!A-Za-z0-9_-]*) echo "REDIS_PREFIX: letters, digits, - or _ only" >&2; exit 2 ;; esac
rules=$(grep -v '^[[:space:]]*#' "${RECEIVER_ACL_FILE:-/etc/redis/receiver.acl}" | tr '\n' ' ' | sed "s/{prefix}/$prefix/g")
printf 'requirepass "%s"\nuser receiver on >%s %s\n' "$REDISCLI_AUTH" "$RECEIVER_REDIS_PASSWORD" "$rules" |
  exec redis-server - --appendonly yes "$@"

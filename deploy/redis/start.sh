#!/bin/sh
# Starts Redis for docker-compose.yml, as the redis user, with the password of the default user, the
# worker's (the receiver has no Redis credential: docs/security.md, "Redis"). From .env, else the one
# the setup service generated into Redis's own volume (deploy/setup/setup.sh), which holds nothing else.
# maxmemory: half of the container's memory limit (REDIS_MEMORY_LIMIT), leaving the other half for what
# Redis holds besides its data (client buffers, and the copy-on-write pages of the fork that rewrites
# the append-only file); noeviction, because BullMQ must never lose a key: a full Redis refuses
# writes, and the RedisMemoryNearlyFull alert fires at 80 % (docs/compose.md, "Redis").
# The configuration goes in on stdin, so no password is on a command line (which `ps` shows).
set -eu
dir=/run/subscriber-mirror/redis
REDIS_PASSWORD="${REDIS_PASSWORD:-$(cat "$dir/REDIS_PASSWORD" 2>/dev/null || true)}"
: "${REDIS_PASSWORD:?the default user's password (REDIS_PASSWORD)}"

# bytes SIZE: a compose memory size (256m, 1g, 512k, 1073741824) in bytes.
bytes() {
  case $1 in
    *[gG]) n=${1%?}; unit=1073741824 ;;
    *[mM]) n=${1%?}; unit=1048576 ;;
    *[kK]) n=${1%?}; unit=1024 ;;
    *[bB]) n=${1%?}; unit=1 ;;
    *) n=$1; unit=1 ;;
  esac
  case $n in '' | *[!0-9]*) echo "REDIS_MEMORY_LIMIT: a size such as 256m or 1g, got \"$1\"" >&2; exit 2 ;; esac
  echo $((n * unit))
}
maxmemory=$(($(bytes "${REDIS_MEMORY_LIMIT:-256m}") / 2))

printf 'requirepass "%s"\nmaxmemory %s\nmaxmemory-policy noeviction\n' "$REDIS_PASSWORD" "$maxmemory" |
  exec redis-server - --appendonly yes "$@"

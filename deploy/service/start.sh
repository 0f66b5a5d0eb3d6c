#!/bin/sh
# Entry point of the worker and the receiver in docker-compose.yml (`start.sh worker|receiver CMD…`).
# Builds DATABASE_URL (and, for the worker, REDIS_URL) from the service's own passwords: from .env when given there, else
# the ones the setup service generated (deploy/setup/setup.sh; files only this service's volume holds).
# Settings still in an earlier release's per-service files are read for one release, never over a
# value from .env; their names (never their values) are logged as a warning.
set -eu
who=$1
shift
dir=/run/subscriber-mirror

# secret NAME: the password from the environment (.env), else the generated one.
secret() {
  eval "value=\${$1:-}"
  [ -n "$value" ] || value=$(cat "$dir/$1" 2>/dev/null || true)
  [ -n "$value" ] || { echo "start.sh: $1 is neither in .env nor generated: run \`docker compose up\` (the setup service makes it)" >&2; exit 2; }
  printf '%s' "$value"
}

case $who in
  worker)
    DATABASE_URL="postgres://mirror:$(secret MIRROR_DB_PASSWORD)@postgres:5432/mirror"
    REDIS_URL="redis://:$(secret REDIS_PASSWORD)@redis:6379"
    unset MIRROR_DB_PASSWORD REDIS_PASSWORD ;;
  receiver)
    # No Redis credential: the receiver only adds deliveries to the inbox (docs/security.md).
    DATABASE_URL="postgres://subscriber_mirror_receiver:$(secret RECEIVER_DB_PASSWORD)@postgres:5432/mirror"
    REDIS_URL=""
    unset RECEIVER_DB_PASSWORD RECEIVER_REDIS_PASSWORD ;;
  *) echo "start.sh: worker or receiver, got \"$who\"" >&2; exit 2 ;;
esac
export DATABASE_URL
if [ -n "$REDIS_URL" ]; then export REDIS_URL; else unset REDIS_URL; fi

# Each account's own variables (ACCOUNT_<NAME>__<SETTING>, docs/operations.md "Several accounts"):
# this service's share of them, written from .env by the accounts service (deploy/setup/accounts.sh).
if [ -s "$dir/accounts.env" ]; then
  while IFS= read -r line; do
    name=${line%%=*}
    case $name in ACCOUNT_*__*) ;; *) continue ;; esac
    case $name in *[!A-Z0-9_]*) continue ;; esac
    export "$name=${line#*=}"
  done <"$dir/accounts.env"
fi

if [ -s "$dir/old-settings.env" ]; then
  used=""
  while IFS= read -r line; do
    name=${line%%=*}
    value=${line#*=}
    eval "given=\${$name+set}"
    [ -z "$given" ] || continue
    case $value in
      \"*\") value=${value#\"}; value=${value%\"} ;;
      \'*\') value=${value#\'}; value=${value%\'} ;;
      *) value=$(printf '%s' "$value" | sed 's/[[:space:]]\{1,\}#.*$//; s/[[:space:]]*$//') ;;
    esac
    export "$name=$value"
    used="$used $name"
  done <"$dir/old-settings.env"
  if [ -n "$used" ]; then
    printf '{"level":"warn","msg":"settings read from mirror.env, worker.env or receiver.env (an earlier release'"'"'s files), for this release only: move them into .env","settings":"%s"}\n' "${used# }" >&2
  fi
fi
# The node flags and the malloc setting are the image's environment (Dockerfile, NODE_OPTIONS): none here.
exec node dist/cli.js "$@"

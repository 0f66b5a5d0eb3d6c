#!/bin/sh
# The `accounts` service of docker-compose.yml: one-shot, on every `up`, after `setup` and before the
# services (docs/compose.md, "Accounts"). Each account's own variables, ACCOUNT_<NAME>__<SETTING>
# (docs/operations.md, "Several accounts"), have names the operator chooses, which a service's
# `environment:` list cannot name: Compose hands this container .env (env_file), and it writes each
# service's share into that service's volume, /run/subscriber-mirror/worker/accounts.env and
# .../receiver/accounts.env, which deploy/service/start.sh reads. The receiver, the one container on
# the internet, gets the accounts' webhook secrets only, never an API key or token; the worker every
# other ACCOUNT_ variable, so that a misspelt or misplaced one stops it with a message naming it. As
# unprefixed: each per-account setting goes where the service's `environment:` takes it. It runs as
# the services' user (the volumes are theirs, left read-only by setup), with no network or capability.
set -eu
umask 077
out=/run/subscriber-mirror

# test/unit/compose.test.ts keeps them equal to the per-account settings the worker's `environment:`
# lacks, and those the receiver's has.
WORKER_ALL_BUT="WEBHOOK_SECRETS"
RECEIVER_ONLY="WEBHOOK_SECRETS"

say() { printf 'accounts: %s\n' "$*" >&2; }

# share only|all-but SETTING...: NAME=value, one a line, for each variable ACCOUNT_<NAME>__<SETTING>
# of this container whose SETTING is listed (only) or not (all-but). The last `__` ends the account's
# part: no setting's name holds one.
share() {
  mode=$1
  shift
  env | sed -n 's/^\(ACCOUNT_[A-Z0-9_]*__[A-Z0-9_]*\)=.*/\1/p' | sort -u | while IFS= read -r name; do
    case " $* " in *" ${name##ACCOUNT_*__} "*) listed=only ;; *) listed=all-but ;; esac
    [ "$listed" = "$mode" ] || continue
    eval "given=\${$name+set} value=\${$name-}"
    [ -n "$given" ] || continue
    case $value in *'
'*) say "WARNING: $name spans lines: not passed on"; continue ;; esac
    printf '%s=%s\n' "$name" "$value"
  done
}

# write DIR only|all-but SETTING...: DIR/accounts.env, replaced whole (an account removed from .env goes too).
write() {
  dir=$1
  shift
  chmod 0700 "$dir"
  share "$@" >"$dir/accounts.env.new"
  chmod 0400 "$dir/accounts.env.new"
  mv -f "$dir/accounts.env.new" "$dir/accounts.env"
  chmod 0500 "$dir"
}

# shellcheck disable=SC2086 # the lists split into names on purpose
write "$out/worker" all-but $WORKER_ALL_BUT
# shellcheck disable=SC2086
write "$out/receiver" only $RECEIVER_ONLY
say "accounts (ACCOUNTS=${ACCOUNTS:-default}): $(wc -l <"$out/worker/accounts.env") per-account variables for the worker, $(wc -l <"$out/receiver/accounts.env") for the receiver"

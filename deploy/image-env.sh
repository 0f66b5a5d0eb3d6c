#!/bin/sh
# Runs a command with the image's runtime settings outside Docker (`npm start`): the Dockerfile's
# `ENV NODE_OPTIONS=…` line, the one place the node flags and the malloc setting are written
# (docs/benchmarks.md, "memory"). Flags already in NODE_OPTIONS come after the image's, so they win.
#   sh deploy/image-env.sh node dist/cli.js start
set -eu
dockerfile="$(dirname "$0")/../Dockerfile"
line=$(sed -n 's/^ENV \(NODE_OPTIONS=.*\)$/\1/p' "$dockerfile")
[ -n "$line" ] || { echo "image-env.sh: no \`ENV NODE_OPTIONS=…\` line in $dockerfile" >&2; exit 2; }
own=${NODE_OPTIONS:-}
eval "export $line"
[ -z "$own" ] || NODE_OPTIONS="$NODE_OPTIONS $own"
exec "$@"

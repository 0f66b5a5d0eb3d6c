#!/bin/sh
# The demo container's start (docker-compose.demo.yml): migrate, register the two webhooks with the
# simulator as an operator would, print where to look with a freshly generated admin token, then run
# the service (role all). The token changes at every start unless ADMIN_TOKEN is set.
set -eu
if [ -z "${ADMIN_TOKEN:-}" ]; then
  ADMIN_TOKEN=$(node -e "process.stdout.write(require('node:crypto').randomBytes(18).toString('base64url'))")
  export ADMIN_TOKEN
fi
node dist/cli.js migrate
node dist/cli.js webhooks register --url "$DEMO_WEBHOOK_URL" --name demo --allow-http
cat <<TEXT

subscriber-mirror demo is running (Ctrl-C, or docker compose -f docker-compose.demo.yml down)
  service: ${DEMO_PUBLIC_URL}  (/readyz, /metrics)
  status:  ${DEMO_PUBLIC_URL}/admin/  (log in with the admin token ${ADMIN_TOKEN})
  SQL:     docker compose -f docker-compose.demo.yml exec demo-postgres psql -U postgres -d mirror -c "select status, count(*) from subscribers group by status"

TEXT
# The node flags (source maps, the heap cap) are the image's NODE_OPTIONS (Dockerfile).
exec node dist/cli.js start --role all

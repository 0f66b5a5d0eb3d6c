#!/bin/sh
# The proxy's start (docker-compose.yml, profile `https`): writes the Caddyfile for PUBLIC_DOMAIN and
# runs Caddy. TLS from Let's Encrypt/ZeroSSL by ACME (the default: ports 80 and 443 of the host must
# reach this container and PUBLIC_DOMAIN resolve to the host), or `PROXY_TLS=internal`: Caddy's own CA
# (tests, or a private network whose clients trust that CA, /data/caddy/pki/authorities/local/root.crt).
# Requests go to the receiver on the compose network, which reads the client from X-Forwarded-For
# (TRUST_PROXY=1, set by ./configure --domain); Caddy sets that header itself and ignores the client's.
set -eu
domain=${PUBLIC_DOMAIN:-}
case $domain in
  '') echo "proxy: set PUBLIC_DOMAIN in .env (./configure --domain HOST): the host name the service delivers to" >&2; exit 2 ;;
  *[!A-Za-z0-9.-]* | .* | *..* | -*) echo "proxy: PUBLIC_DOMAIN must be a host name (letters, digits, dots, hyphens), got \"$domain\"" >&2; exit 2 ;;
esac
case ${PROXY_TLS:-acme} in
  acme) tls="" ;;
  internal) tls="tls internal" ;;
  *) echo "proxy: PROXY_TLS is acme (default) or internal, got \"$PROXY_TLS\"" >&2; exit 2 ;;
esac
email=${ACME_EMAIL:-}
case $email in
  '') ;;
  *[!A-Za-z0-9.@+_-]* | *@*@* | @* | *@) echo "proxy: ACME_EMAIL must be an email address, got \"$email\"" >&2; exit 2 ;;
  *@*) ;;
  *) echo "proxy: ACME_EMAIL must be an email address, got \"$email\"" >&2; exit 2 ;;
esac
config=/tmp/Caddyfile
{
  printf '{\n'
  # No admin API (nothing changes the config at run time); HTTP/1.1 only (see the Dockerfile: port 80
  # only redirects, in plain HTTP/1.1, as HTTP/2 needs TLS); the internal CA's root is never installed
  # into a trust store (the container has none to change).
  printf '\tadmin off\n\tskip_install_trust\n\tservers {\n\t\tprotocols h1\n\t}\n'
  [ -z "$email" ] || printf '\temail %s\n' "$email"
  printf '}\n\n%s {\n' "$domain"
  [ -z "$tls" ] || printf '\t%s\n' "$tls"
  # Deliveries are bounded by the receiver (WEBHOOK_MAX_BODY); the proxy adds no limit of its own.
  printf '\treverse_proxy receiver:8080\n}\n'
} >"$config"
exec caddy run --adapter caddyfile --config "$config"

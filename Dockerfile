# Production image. No `# syntax=` line: BuildKit uses its built-in Dockerfile frontend, so a build
# needs only the base image below (no frontend image fetched from a registry). Node is pinned to the
# exact release CI runs the test suite on (.ci/run reads NODE_VERSION from this line and fetches the
# same binary from the npm registry): Node 24, an LTS line (README "Test it").
ARG NODE_VERSION=24.21.0

FROM node:${NODE_VERSION}-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts
COPY tsconfig.json ./
COPY src ./src
RUN npm run build

# What the runtime stage gets: the production dependencies only. TypeScript and the @types packages are
# "devOptional" in the lockfile (a peerOptional of valibot, under @bull-board), so --omit=dev keeps
# them (26 MB); nothing loads them at run time.
FROM node:${NODE_VERSION}-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts && rm -rf node_modules/typescript node_modules/@types node_modules/.bin/tsc node_modules/.bin/tsserver

FROM node:${NODE_VERSION}-bookworm-slim
# The ops port (admin, /metrics, detailed /readyz) on every interface of the container: it is never
# published, and Prometheus scrapes it over the compose network (docs/security.md).
ENV NODE_ENV=production OPS_PORT=9090 OPS_HOST=0.0.0.0
# The runtime settings of every node process in the image, written here only: deploy/service/start.sh
# and the demo's start inherit them, `npm start` and the benchmarks read this line (test/unit/compose.test.ts
# checks), so raise the heap cap here (docs/compose.md, "Memory limits"). Each is measured
# (docs/benchmarks.md, "memory"); nothing calls gc().
#   --max-old-space-size=128: the heap cap. A worker's passes hold two pages between them (the page gate),
#     and its heap peaked at 43 MB live, 71 MB committed, at 100k and 1M alike: this is 3x the live peak, and
#     it stays below the compose limits by what is not heap (~110 MB: the node binary, buffers, sockets).
#     Past it the process stops with "heap out of memory" instead of growing. Under 256 MB it also caps V8's
#     heap growing factor at 1.3 (what --heap-growing-percent=30 did; that flag is no longer needed).
#   --max-semi-space-size=4: 4 MB semi-spaces (Node 24's grow to 64 MB), which a pass's short-lived page
#     objects never need: without it the young generation alone held ~150 MB more.
#   --enable-source-maps: stack traces point at src/*.ts.
#   MALLOC_MMAP_THRESHOLD_=131072: glibc returns buffers above 128 kB (a page of members) to the system at
#     once instead of raising its threshold and keeping them in its heap (30-40 MB less at peak).
ENV NODE_OPTIONS="--enable-source-maps --max-old-space-size=128 --max-semi-space-size=4" MALLOC_MMAP_THRESHOLD_=131072
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY drizzle ./drizzle
USER node
# 8080: the public webhook port. 9090: the ops port, never to be published.
EXPOSE 8080 9090
# dist/healthcheck.js asks /readyz on OPS_PORT when set, on PORT otherwise, and loads nothing of the
# application (docs/compose.md, "Health checks").
HEALTHCHECK --interval=10s --timeout=10s --start-period=60s --retries=3 CMD ["node", "dist/healthcheck.js"]
# `docker run` without --init: node is PID 1, and the CLI installs its SIGTERM/SIGINT handlers before
# any start-up work, so a stop is never ignored. Compose adds an init (`init: true`) all the same.
# The node flags are NODE_OPTIONS above.
ENTRYPOINT ["node", "dist/cli.js"]
CMD ["start", "--role", "all"]

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
# Flat memory (docs/benchmarks.md, "memory"): glibc returns buffers above 128 kB (a page of members)
# to the system at once instead of raising its threshold and keeping them in the heap.
ENV MALLOC_MMAP_THRESHOLD_=131072
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
# --max-semi-space-size=4: a young generation of 4 MB semi-spaces (Node 24 grows them to 32 MB+),
# which a pass's short-lived page objects never need. --heap-growing-percent=30: the old space grows
# by 30 % of what a GC left live instead of V8's default factor (up to 4x), so the garbage of a pass's
# pages is collected before it swells the heap. Nothing calls gc() (docs/benchmarks.md, "memory").
# test/bench/lib/service-run.ts starts the same way.
ENTRYPOINT ["node", "--enable-source-maps", "--max-semi-space-size=4", "--heap-growing-percent=30", "dist/cli.js"]
CMD ["start", "--role", "all"]

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
# The runtime settings of every node process in the image, written here only: the entry point,
# deploy/service/start.sh and the demo's start inherit them, `npm start` (deploy/image-env.sh) and the
# benchmarks read this line, test/unit/compose.test.ts checks that. Each is measured
# (docs/benchmarks.md, "memory"); no collection is ever forced. To raise the cap: docs/compose.md, "Memory limits".
#   --max-old-space-size=256: the heap cap, below every compose memory limit by what is not heap. Past
#     it node stops ("heap out of memory") instead of growing. The worker's heap peaked at 58 MB live
#     (its passes share two pages: the page gate); the receiver parsing one signed 9.7 MiB delivery
#     needs more than 128. At 256 or less V8 grows the old space by at most 1.3x what a collection left
#     live (--trace-gc-verbose), which --heap-growing-percent=30 did (a flag NODE_OPTIONS refuses).
#   --max-semi-space-size=4: 4 MB semi-spaces instead of Node 24's 64 MB, which a pass's short-lived
#     page objects never need (100k at full speed: 309 MB peak without it, 192 MB with it).
#   --enable-source-maps: stack traces point at src/*.ts (~4 MB).
#   MALLOC_MMAP_THRESHOLD_=131072: glibc returns buffers above 128 kB (a page of members) to the
#     system at once instead of raising its threshold and keeping them (192 MB peak without, 152-180 with).
ENV NODE_OPTIONS="--enable-source-maps --max-old-space-size=256 --max-semi-space-size=4" MALLOC_MMAP_THRESHOLD_=131072
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

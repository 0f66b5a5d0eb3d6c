# syntax=docker/dockerfile:1
# Production image. Node is pinned to the exact release CI runs the test suite on (.ci/run reads
# NODE_VERSION from this line and fetches the same binary from the npm registry): Node 24, an LTS
# line (README "Test it").
ARG NODE_VERSION=24.21.0

FROM node:${NODE_VERSION}-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts
COPY tsconfig.json ./
COPY src ./src
RUN npm run build && npm prune --omit=dev

FROM node:${NODE_VERSION}-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY drizzle ./drizzle
USER node
# 8080: the public webhook port. 9090: the ops port (set OPS_PORT=9090 to use it), never published.
EXPOSE 8080 9090
# Asks /readyz on OPS_PORT when set, on PORT otherwise.
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=5 CMD ["node", "dist/cli.js", "healthcheck"]
# `docker run` without --init: node is PID 1, and the CLI installs its SIGTERM/SIGINT handlers before
# any start-up work, so a stop is never ignored. Compose adds an init (`init: true`) all the same.
ENTRYPOINT ["node", "--enable-source-maps", "dist/cli.js"]
CMD ["start", "--role", "all"]

# syntax=docker/dockerfile:1
# Production image. The code and tests target Node 20+, the image runs the current LTS.
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts
COPY tsconfig.json ./
COPY src ./src
RUN npm run build && npm prune --omit=dev

FROM node:24-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY drizzle ./drizzle
USER node
EXPOSE 8080
ENTRYPOINT ["node", "--enable-source-maps", "dist/cli.js"]
CMD ["start", "--role", "all"]

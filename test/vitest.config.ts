import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

/**
 * `npm test` runs both projects; `npm run test:unit` (`--project unit`) runs the unit tests alone,
 * with nothing started: only the integration project has the global setup that finds (or starts)
 * Postgres and Redis and migrates the template database.
 */
export default defineConfig({
  // Paths below are relative to the repository root, wherever vitest is started from.
  root: fileURLToPath(new URL('..', import.meta.url)),
  test: {
    // Integration files each get their own database and BullMQ prefix, so files run in parallel.
    fileParallelism: true,
    maxWorkers: 4,
    testTimeout: 60_000,
    hookTimeout: 120_000,
    teardownTimeout: 30_000,
    reporters: ['default'],
    projects: [
      { extends: true, test: { name: 'unit', include: ['test/unit/**/*.test.ts'] } },
      {
        extends: true,
        test: { name: 'integration', include: ['test/integration/**/*.test.ts'], globalSetup: ['test/helpers/global-setup.ts'] },
      },
    ],
  },
});

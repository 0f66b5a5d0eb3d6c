import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

/**
 * The fault suite (`npm run test:faults`): every scenario starts real service processes against the
 * simulator, Postgres and Redis, and breaks something. Heavy on this 2-core machine, so files run one
 * at a time and tests get minutes, not seconds.
 */
export default defineConfig({
  // Paths below are relative to the repository root, wherever vitest is started from.
  root: fileURLToPath(new URL('..', import.meta.url)),
  test: {
    include: ['test/faults/**/*.test.ts'],
    globalSetup: ['test/helpers/global-setup.ts'],
    fileParallelism: false,
    maxWorkers: 1,
    testTimeout: 300_000,
    hookTimeout: 120_000,
    teardownTimeout: 30_000,
    reporters: ['default'],
  },
});

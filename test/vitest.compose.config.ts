import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

/**
 * `npm run test:compose`: the compose stacks on a real Docker engine (test/compose), run by
 * .ci/compose after the engine and the base images are there; not part of `npm test`, whose
 * machines need no Docker.
 */
export default defineConfig({
  root: fileURLToPath(new URL('..', import.meta.url)),
  test: {
    include: ['test/compose/**/*.test.ts'],
    fileParallelism: false,
    testTimeout: 600_000,
    hookTimeout: 900_000,
    reporters: ['default'],
  },
});

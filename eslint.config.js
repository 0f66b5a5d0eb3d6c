// @ts-check
/**
 * ESLint with typescript-eslint's type-aware rules (`npm run lint`). Formatting is Prettier's job
 * (`npm run format`, `.prettierrc.json`), so no stylistic rules here.
 */
import eslint from '@eslint/js';
import { defineConfig, globalIgnores } from 'eslint/config';
import tseslint from 'typescript-eslint';

/** Small, named functions: none over about 80 lines (blank lines and comments not counted). */
const FUNCTION_LINES = { max: 80, skipBlankLines: true, skipComments: true, IIFEs: true };

export default defineConfig(
  globalIgnores(['dist/', 'node_modules/', 'coverage/', 'drizzle/']),
  eslint.configs.recommended,
  tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      // A floating promise loses its error; one passed where a void callback is expected too.
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/no-explicit-any': 'error',
      // `_name` says "unused on purpose" (a parameter kept for a signature, a rest sibling dropped).
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none', ignoreRestSiblings: true },
      ],
      'max-lines-per-function': ['error', FUNCTION_LINES],
      // Deliberate: an async function that does not await still turns a throw into a rejection, and
      // implements a promise-returning interface (route handlers, stubs, fetch fakes) as it reads.
      '@typescript-eslint/require-await': 'off',
      // Deliberate: errors rethrown with a described message drop the original on purpose; its message
      // can carry a connection string or a key (docs/security.md), and the new one says what to do.
      'preserve-caught-error': 'off',
      // Deliberate: some patterns match control characters (NUL, which Postgres text refuses; ANSI
      // escapes in log output).
      'no-control-regex': 'off',
      // Rejecting with a reason received from elsewhere (an AbortSignal's, a caught error) passes it on
      // unchanged; creating new rejections with non-Errors is still reported.
      '@typescript-eslint/prefer-promise-reject-errors': ['error', { allowThrowingAny: true, allowThrowingUnknown: true }],
    },
  },
  {
    // Tests, benchmarks and their helpers.
    files: ['test/**/*.ts'],
    rules: {
      // Tests read untyped JSON answers (`await res.json()`) and assert on them: the assertion is the check.
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      // Fetch fakes stringify the URL they are called with; messages join whatever ids a case has.
      '@typescript-eslint/no-base-to-string': 'off',
      // The lossless-id tests write literals above 2^53 on purpose, to show what a JSON number loses.
      'no-loss-of-precision': 'off',
    },
  },
  {
    // Declarative: a test is a list of cases, a corpus a table of inputs; their length is their content.
    // The metrics registry is one declaration per metric.
    files: ['test/**/*.test.ts', 'test/faults/helpers/*-corpus.ts', 'src/ground/metrics.ts'],
    rules: { 'max-lines-per-function': 'off' },
  },
  {
    files: ['**/*.js'],
    extends: [tseslint.configs.disableTypeChecked],
  },
);

#!/usr/bin/env node
/**
 * `node dist/healthcheck.js`, the image's HEALTHCHECK: the check itself is `commands/healthcheck.ts`,
 * which imports node: built-ins only. This entry stays at the top of `dist/` for the Dockerfile and
 * the compose files.
 */
import { healthcheckMain } from './commands/healthcheck.js';

healthcheckMain();

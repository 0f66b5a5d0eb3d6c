#!/usr/bin/env node
/**
 * `dist/cli.js`: the `subscriber-mirror` command (the package's bin, the image's entry point). The
 * commands are in `commands/`; this file only runs them.
 */
import { runCli } from './commands/cli.js';

runCli();

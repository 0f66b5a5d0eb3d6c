/** What every command is, and how it reads its options (docs/operations.md, "Commands"). */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { UsageError } from '../ground/usage-error.js';

/** One command: its arguments (after its name) → the exit code. */
export type Command = (args: string[]) => Promise<number>;

/** Strict options and no positionals; a bad option is a {@link UsageError}. */
export function parseOptions<T extends NonNullable<ParseArgsConfig['options']>>(args: string[], options: T) {
  try {
    return parseArgs({ args, options, strict: true, allowPositionals: false });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}

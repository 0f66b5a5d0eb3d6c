/**
 * Command-line helpers shared by the bench scripts that can also run on their own.
 */
import path from 'node:path';
import { pathToFileURL } from 'node:url';

/** True when the module at `moduleUrl` (pass `import.meta.url`) is the script node was started with. */
export function isMain(moduleUrl: string): boolean {
  return !!process.argv[1] && moduleUrl === pathToFileURL(path.resolve(process.argv[1])).href;
}

/** The argument after `flag` (e.g. `--json`), or undefined when the flag is absent. */
export function argText(flag: string): string | undefined {
  const i = process.argv.indexOf(flag);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

/** The number after `--name`, or undefined when the flag is absent; throws when it is not a number. */
export function argNumber(name: string): number | undefined {
  const i = process.argv.indexOf(`--${name}`);
  if (i === -1) return undefined;
  const n = Number(process.argv[i + 1]);
  if (!Number.isFinite(n)) throw new Error(`--${name} needs a number`);
  return n;
}

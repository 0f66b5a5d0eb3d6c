/**
 * System tools some tests drive (Debian's `promtool`/`prometheus` from the `prometheus` package,
 * `chromium`). `.ci/run` installs them, so under CI (CI set) a missing tool fails the test with a
 * message naming the package; elsewhere (a contributor's laptop) the tests that need it are skipped
 * and the run says so once, so `npm test` on a fresh clone still passes.
 */
import { accessSync, constants } from 'node:fs';
import path from 'node:path';

export interface Tool {
  name: string;
  /** Absolute path, or null when missing. */
  path: string | null;
  /** True when the tests needing it should be skipped (missing, and not under CI). */
  skip: boolean;
  /** What to run to get it. */
  install: string;
}

function onPath(name: string): string | null {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return null;
}

const warned = new Set<string>();

export function systemTool(name: string, debianPackage: string): Tool {
  const found = onPath(name);
  const install = `apt-get install -y ${debianPackage}`;
  const underCi = Boolean(process.env.CI);
  if (!found && !underCi && !warned.has(name)) {
    warned.add(name);
    process.stderr.write(
      `note: ${name} not found; skipping the tests that need it (install it with \`${install}\`; under CI they fail instead)\n`,
    );
  }
  return { name, path: found, skip: !found && !underCi, install };
}

/** Throws the message CI shows when a tool .ci/run should have installed is missing. */
export function requirePath(tool: Tool): string {
  if (tool.path) return tool.path;
  throw new Error(`${tool.name} not found on PATH: .ci/run installs it (${tool.install}); install it or run .ci/run`);
}

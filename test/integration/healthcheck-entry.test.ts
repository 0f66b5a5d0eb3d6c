/**
 * The container health check (`node dist/healthcheck.js`, docs/compose.md "Health checks"): compiled
 * alone into an empty directory it runs with plain node, so it imports nothing of the application;
 * it exits 0 against a ready service, 1 when nothing answers, 2 for a bad port setting.
 *
 * Its cost per call is printed, not asserted (no timed assertions): wall time, and CPU from the test
 * process's reaped-children counters where /proc exists.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { startService, type RunningService } from '../../src/commands/start.js';
import { freePort } from '../helpers/child-service.js';
import { ROOT } from '../helpers/cli.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

const SOURCE = path.join(ROOT, 'src/commands/healthcheck.ts');
/** The file `dist/healthcheck.js` is built from: it only runs {@link SOURCE}. */
const ENTRY = path.join(ROOT, 'src/healthcheck.ts');

/** What `npm run build` emits for src/commands/healthcheck.ts (same compiler options), as a standalone .mjs. */
function compileEntry(dir: string): { file: string; js: string } {
  const { options } = ts.convertCompilerOptionsFromJson(
    { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', verbatimModuleSyntax: true },
    ROOT,
  );
  const js = ts.transpileModule(readFileSync(SOURCE, 'utf8'), { compilerOptions: options, fileName: 'healthcheck.mts' }).outputText;
  const file = path.join(dir, 'healthcheck.mjs');
  writeFileSync(file, js);
  return { file, js };
}

/** Every module specifier of static and dynamic imports and requires. */
function importedModules(js: string): string[] {
  const found = new Set<string>();
  for (const re of [
    /\bfrom\s+['"]([^'"]+)['"]/g,
    /\bimport\s*\(\s*['"]([^'"]+)['"]/g,
    /\bimport\s+['"]([^'"]+)['"]/g,
    /\brequire\s*\(\s*['"]([^'"]+)['"]/g,
  ]) {
    for (const m of js.matchAll(re)) found.add(m[1]!);
  }
  return [...found].sort();
}

interface Run {
  code: number | null;
  stdout: string;
  ms: number;
}

function runEntry(file: string, env: Record<string, string>): Promise<Run> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    // The container's environment has more in it; the check reads only OPS_PORT and PORT.
    const child = spawn(process.execPath, [file], {
      cwd: path.dirname(file),
      env: { PATH: process.env.PATH, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, ms: performance.now() - started }));
  });
}

/** CPU seconds used by this process's reaped children (utime + stime), or null without /proc. */
function childrenCpuSeconds(): number | null {
  if (!existsSync('/proc/self/stat')) return null;
  const stat = readFileSync('/proc/self/stat', 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // Fields 16 and 17 of proc(5) (cutime, cstime), here counted from field 3: indexes 13 and 14.
  return (Number(fields[13]) + Number(fields[14])) / 100;
}

describe('dist/healthcheck.js, the container health check', () => {
  let database: TestDatabase;
  let service: RunningService;
  let dir: string;
  let entry: { file: string; js: string };
  const prefix = uniquePrefix('healthcheck');

  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'sm-healthcheck-'));
    entry = compileEntry(dir);
    database = await createTestDatabase();
    const config = loadConfig(
      { DATABASE_URL: database.url, REDIS_URL: redisUrl(), REDIS_PREFIX: prefix, PORT: '0', OPS_PORT: '0', LOG_LEVEL: 'silent' },
      ['receive'],
    );
    service = await startService(config, 'receiver');
    await waitFor('ready', async () => (await fetch(`http://127.0.0.1:${service.opsPort}/readyz`)).status === 200, 20_000, 100);
  });

  afterAll(async () => {
    await service?.stop('test over');
    await database?.drop();
    await deletePrefix(prefix);
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('imports only node: built-ins (it runs from an otherwise empty directory)', () => {
    const modules = importedModules(entry.js);
    expect(modules.length).toBeGreaterThan(0);
    expect(modules.filter((m) => !m.startsWith('node:'))).toEqual([]);
    // dist/healthcheck.js adds nothing but the check.
    expect(importedModules(readFileSync(ENTRY, 'utf8'))).toEqual(['./commands/healthcheck.js']);
  });

  it('exits 0 against a ready service, asking the ops port when OPS_PORT is set', async () => {
    const runs: Run[] = [];
    const cpuBefore = childrenCpuSeconds();
    for (let i = 0; i < 5; i += 1) runs.push(await runEntry(entry.file, { PORT: '1', OPS_PORT: String(service.opsPort) }));
    const cpuAfter = childrenCpuSeconds();
    for (const run of runs) {
      expect(run.code, run.stdout).toBe(0);
      expect(run.stdout).toMatch(/^200 .*"checks"/);
    }
    const wall = runs.map((r) => r.ms.toFixed(0)).join(', ');
    const cpu = cpuBefore === null || cpuAfter === null ? 'n/a' : `${(((cpuAfter - cpuBefore) / runs.length) * 1000).toFixed(0)} ms`;
    console.log(`healthcheck entry, ${runs.length} calls: wall ${wall} ms; CPU per call ${cpu}`);
  });

  it('falls back to PORT without OPS_PORT', async () => {
    const run = await runEntry(entry.file, { PORT: String(service.port), OPS_PORT: '' });
    expect(run.code, run.stdout).toBe(0);
    expect(run.stdout).toBe('200 {"status":"ready"}\n');
  });

  it('exits 1 when nothing answers on the port', async () => {
    const port = await freePort();
    const run = await runEntry(entry.file, { OPS_PORT: String(port) });
    expect(run.code).toBe(1);
    expect(run.stdout).toContain(`not answering on port ${port}`);
  });

  it('exits 2 on a port setting that is not a port', async () => {
    const run = await runEntry(entry.file, { OPS_PORT: '90x' });
    expect(run.code).toBe(2);
    expect(run.stdout).toContain('OPS_PORT must be a port number, got "90x"');
  });
});

import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadConfig, SETTINGS } from '../../src/config.js';
import { settingsOf } from '../../src/ground/settings.js';
import { ROOT } from '../helpers/cli.js';

/** ./configure writes .env, the one settings file of the compose stack (docs/compose.md, "Production"). */
const PASSWORDS = ['POSTGRES_PASSWORD', 'MIRROR_DB_PASSWORD', 'RECEIVER_DB_PASSWORD', 'REDIS_PASSWORD'];
const SETTING_NAMES = settingsOf(SETTINGS).flatMap((s) => [...s.names]);
const REQUIRED = ['--legacy-url', 'https://legacy.example.com', '--api-key', 'key-123', '--groups', '111, 222'];

let dir = '';
let output = '';
beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'configure-'));
  output = path.join(dir, '.env');
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** Runs ./configure with no terminal (nothing is asked), writing into the test's directory. */
function configure(...args: string[]) {
  const result = spawnSync('bash', [path.join(ROOT, 'configure'), '--output', output, ...args], { encoding: 'utf8', input: '' });
  return { code: result.status, out: result.stdout, err: result.stderr };
}

/** The variables of a written file (what Compose would read). */
function variables(file = output): Record<string, string> {
  const lines = readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => /^[A-Z][A-Z0-9_]*=/.test(l));
  return Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
}

describe('./configure', () => {
  it('writes random URL-safe passwords and admin token, and the settings given, readable by its owner only', () => {
    const run = configure(
      ...REQUIRED,
      '--webhooks-url',
      'https://connect.example.com',
      '--webhooks-token',
      'tok-1',
      '--set',
      'LOG_LEVEL=debug',
    );
    expect(run.code, run.err).toBe(0);
    expect(run.out).toContain('docker compose up -d --build --wait');
    const env = variables();
    for (const name of [...PASSWORDS, 'ADMIN_TOKEN']) expect(env[name], name).toMatch(/^[0-9a-f]{48}$/);
    expect(new Set(PASSWORDS.map((n) => env[n])).size).toBe(PASSWORDS.length);
    expect(env).toMatchObject({
      MAILER_LEGACY_URL: 'https://legacy.example.com',
      MAILER_API_KEY: 'key-123',
      SYNC_GROUPS: '111,222',
      MAILER_WEBHOOKS_URL: 'https://connect.example.com',
      MAILER_WEBHOOKS_TOKEN: 'tok-1',
      LOG_LEVEL: 'debug',
    });
    expect(statSync(output).mode & 0o777).toBe(0o600);
    // Every variable is a setting or a password Compose uses, and the worker's settings parse.
    expect(Object.keys(env).filter((n) => !SETTING_NAMES.includes(n) && !PASSWORDS.includes(n))).toEqual([]);
    // (OPS_PORT is the compose file's, as for the worker.)
    expect(() => loadConfig({ ...env, OPS_PORT: '9090' }, ['poll', 'manage-webhooks'])).not.toThrow();
    // Grafana's password only with its profile.
    expect(env.GRAFANA_ADMIN_PASSWORD).toBeUndefined();
  });

  it('writes new passwords at each run', () => {
    configure(...REQUIRED);
    const first = variables();
    expect(configure(...REQUIRED, '--force').code).toBe(0);
    expect(variables().MIRROR_DB_PASSWORD).not.toBe(first.MIRROR_DB_PASSWORD);
  });

  it('adds Grafana’s admin password with --monitoring', () => {
    expect(configure(...REQUIRED, '--monitoring').code).toBe(0);
    expect(variables().GRAFANA_ADMIN_PASSWORD).toMatch(/^[0-9a-f]{48}$/);
  });

  it('never replaces an existing file without --force', () => {
    writeFileSync(output, 'MAILER_API_KEY=mine\n');
    const run = configure(...REQUIRED);
    expect(run.code).toBe(2);
    expect(run.err).toMatch(/exists; edit it, or run again with --force/);
    expect(readFileSync(output, 'utf8')).toBe('MAILER_API_KEY=mine\n');
  });

  it.each([
    [[] as string[], /--legacy-url is required[\s\S]*--api-key is required[\s\S]*--groups is required/],
    [['--legacy-url', 'https://l.example.com', '--api-key', 'k', '--groups', '12,abc'], /--groups: comma-separated numeric ids/],
    [['--legacy-url', 'ftp://l.example.com', '--api-key', 'k', '--groups', '1'], /--legacy-url: an http\(s\) URL/],
    [[...REQUIRED, '--webhooks-url', 'https://c.example.com'], /--webhooks-token is required with --webhooks-url/],
    [[...REQUIRED, '--set', 'lower=1'], /--set NAME=VALUE/],
    [['--legacy-url', 'https://l.example.com', '--api-key', 'a b', '--groups', '1'], /spaces, quotes/],
    [['--bogus'], /unknown option: --bogus/],
  ])('refuses bad or missing input %j with exit 2 and writes nothing', (args, message) => {
    const run = configure(...args);
    expect(run.code).toBe(2);
    expect(run.err).toMatch(message);
    expect(existsSync(output)).toBe(false);
  });
});

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
const REQUIRED = ['--legacy-url', 'https://legacy.example.com', '--api-key-stdin', '--groups', '111, 222'];
/** The variables ./configure writes for Compose itself (the https profile), not for a service. */
const COMPOSE_VARIABLES = ['COMPOSE_PROFILES', 'PUBLIC_DOMAIN', 'PROXY_TLS', 'ACME_EMAIL', 'RECEIVER_PUBLISH'];

let dir = '';
let output = '';
beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'configure-'));
  output = path.join(dir, '.env');
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** Runs ./configure with no terminal (nothing is asked), writing into the test's directory; `input`: its standard input. */
function configureWith(input: string, ...args: string[]) {
  const result = spawnSync('bash', [path.join(ROOT, 'configure'), '--output', output, ...args], { encoding: 'utf8', input });
  return { code: result.status, out: result.stdout, err: result.stderr };
}

/** As configureWith, with the API key REQUIRED reads on standard input. */
const configure = (...args: string[]) => configureWith('key-123\n', ...args);

/** The variables of a written file (what Compose would read). */
function variables(file = output): Record<string, string> {
  const lines = readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => /^[A-Z][A-Z0-9_]*=/.test(l));
  return Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
}

describe('./configure', () => {
  it('writes random URL-safe passwords and admin token, and the settings given, readable by its owner only', () => {
    const run = configureWith(
      'key-123\ntok-1\n',
      ...REQUIRED,
      '--webhooks-url',
      'https://connect.example.com',
      '--webhooks-token-stdin',
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
    // Grafana's password only with its profile; the https profile only with --domain.
    expect(env.GRAFANA_ADMIN_PASSWORD).toBeUndefined();
    expect(env.COMPOSE_PROFILES).toBeUndefined();
  });

  // A secret on the command line shows in the process list and the shell history.
  it('takes secrets on standard input only, never as an option value', () => {
    for (const option of ['--api-key', '--webhooks-token']) {
      const run = configureWith('', '--legacy-url', 'https://l.example.com', option, 'key-on-the-command-line', '--groups', '1');
      expect(run.code, option).toBe(2);
      expect(run.err, option).toContain(`${option} no longer takes a value`);
      expect(run.err, option).toContain(`${option}-stdin`);
      expect(existsSync(output), option).toBe(false);
    }
    // A key that ends with the input (no newline) is read too; a missing line is an error.
    expect(configureWith('key-no-newline', ...REQUIRED).code).toBe(0);
    expect(variables().MAILER_API_KEY).toBe('key-no-newline');
    const short = configureWith(
      'only-the-key\n',
      ...REQUIRED,
      '--webhooks-url',
      'https://c.example.com',
      '--webhooks-token-stdin',
      '--force',
    );
    expect(short.code).toBe(2);
    expect(short.err).toMatch(/--webhooks-token-stdin: standard input ended/);
  });

  it('writes the https profile with --domain: the proxy in front, the receiver on loopback, the proxy trusted', () => {
    const run = configure(...REQUIRED, '--domain', 'hooks.example.com', '--acme-email', 'ops@example.com');
    expect(run.code, run.err).toBe(0);
    const env = variables();
    expect(env).toMatchObject({
      COMPOSE_PROFILES: 'https',
      PUBLIC_DOMAIN: 'hooks.example.com',
      PROXY_TLS: 'acme',
      ACME_EMAIL: 'ops@example.com',
      RECEIVER_PUBLISH: '127.0.0.1:8080',
      TRUST_PROXY: '1',
    });
    expect(Object.keys(env).filter((n) => !SETTING_NAMES.includes(n) && !PASSWORDS.includes(n) && !COMPOSE_VARIABLES.includes(n))).toEqual(
      [],
    );
    expect(() => loadConfig({ ...env, OPS_PORT: '9090' }, ['poll'])).not.toThrow();
    expect(configure(...REQUIRED, '--domain', 'mirror.test', '--internal-ca', '--force').code).toBe(0);
    expect(variables().PROXY_TLS).toBe('internal');
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
    [[] as string[], /--legacy-url is required[\s\S]*the API key is required[\s\S]*--groups is required/],
    [['--legacy-url', 'https://l.example.com', '--api-key-stdin', '--groups', '12,abc'], /--groups: comma-separated numeric ids/],
    [['--legacy-url', 'ftp://l.example.com', '--api-key-stdin', '--groups', '1'], /--legacy-url: an http\(s\) URL/],
    [[...REQUIRED, '--webhooks-url', 'https://c.example.com'], /the webhook token is required with --webhooks-url/],
    [[...REQUIRED, '--set', 'lower=1'], /--set NAME=VALUE/],
    [[...REQUIRED, '--domain', 'bad host'], /--domain: a host name/],
    [[...REQUIRED, '--domain', 'h.example.com', '--acme-email', 'not-an-address'], /--acme-email: an email address/],
    [[...REQUIRED, '--internal-ca'], /need --domain/],
    [['--bogus'], /unknown option: --bogus/],
  ])('refuses bad or missing input %j with exit 2 and writes nothing', (args, message) => {
    const run = configure(...args);
    expect(run.code).toBe(2);
    expect(run.err).toMatch(message);
    expect(existsSync(output)).toBe(false);
  });

  it('refuses a key with spaces or quotes, which cannot go into .env as written', () => {
    const run = configureWith('a b\n', '--legacy-url', 'https://l.example.com', '--api-key-stdin', '--groups', '1');
    expect(run.code).toBe(2);
    expect(run.err).toMatch(/spaces, quotes/);
    expect(existsSync(output)).toBe(false);
  });
});

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

// docs/operations.md, "Several accounts": an account added to an existing .env.
describe('./configure --add-account', () => {
  /** A single-account .env, as ./configure writes it. */
  function single() {
    const run = configureWith('key-123\ntok-1\n', ...REQUIRED, '--webhooks-url', 'https://connect.example.com', '--webhooks-token-stdin');
    expect(run.code, run.err).toBe(0);
    return readFileSync(output, 'utf8');
  }
  const addAccount = (input: string, name: string, ...args: string[]) => configureWith(input, '--add-account', name, ...args);
  const CURRENT = ['--source', 'current', '--api-url', 'https://current.example.com', '--api-token-stdin', '--groups', '7, 8'];

  it('adds an account to the single-account file: ACCOUNTS=default,NAME, its settings prefixed, a webhook secret of its own', () => {
    const before = single();
    const run = addAccount('tok-shop\n', 'shop', ...CURRENT);
    expect(run.code, run.err).toBe(0);
    expect(run.out).toContain('added account shop');
    const after = readFileSync(output, 'utf8');
    // Nothing of the file before changes: the account is appended.
    expect(after.startsWith(before)).toBe(true);
    const env = variables();
    expect(env).toMatchObject({
      ACCOUNTS: 'default,shop',
      ACCOUNT_SHOP__SYNC_SOURCE: 'current',
      ACCOUNT_SHOP__MAILER_API_URL: 'https://current.example.com',
      ACCOUNT_SHOP__MAILER_API_TOKEN: 'tok-shop',
      ACCOUNT_SHOP__SYNC_GROUPS: '7,8',
      MAILER_API_KEY: 'key-123',
    });
    expect(env.ACCOUNT_SHOP__WEBHOOK_SECRETS).toMatch(/^[0-9a-f]{48}$/);
    expect(statSync(output).mode & 0o777).toBe(0o600);
    const config = loadConfig({ ...env, OPS_PORT: '9090' }, ['poll', 'manage-webhooks']);
    expect(config.accounts.map((a) => [a.name, a.sync.source, a.sync.groups])).toEqual([
      ['default', 'legacy', ['111', '222']],
      ['shop', 'current', ['7', '8']],
    ]);
    expect(config.accounts[1]?.webhookSecrets).toEqual([env.ACCOUNT_SHOP__WEBHOOK_SECRETS]);
  });

  it('adds legacy and webhook-only accounts after it, appending to ACCOUNTS; each loads', () => {
    single();
    expect(addAccount('tok-shop\n', 'shop', ...CURRENT).code).toBe(0);
    const legacy = addAccount(
      'key-blog\ntok-blog\n',
      'blog_eu',
      ...['--source', 'legacy', '--legacy-url', 'https://legacy.example.com', '--api-key-stdin', '--groups', '3'],
      ...['--webhooks-url', 'https://connect.example.com', '--webhooks-token-stdin'],
    );
    expect(legacy.code, legacy.err).toBe(0);
    const hooks = addAccount('', 'news', '--source', 'webhook-only');
    expect(hooks.code, hooks.err).toBe(0);
    const env = variables();
    expect(env.ACCOUNTS).toBe('default,shop,blog_eu,news');
    expect(readFileSync(output, 'utf8').match(/^ACCOUNTS=/gm)).toHaveLength(1);
    expect(env).toMatchObject({
      ACCOUNT_BLOG_EU__SYNC_SOURCE: 'legacy',
      ACCOUNT_BLOG_EU__MAILER_LEGACY_URL: 'https://legacy.example.com',
      ACCOUNT_BLOG_EU__MAILER_API_KEY: 'key-blog',
      ACCOUNT_BLOG_EU__MAILER_WEBHOOKS_TOKEN: 'tok-blog',
      ACCOUNT_BLOG_EU__SYNC_GROUPS: '3',
    });
    expect(Object.keys(env).filter((n) => n.startsWith('ACCOUNT_NEWS__'))).toEqual(['ACCOUNT_NEWS__WEBHOOK_SECRETS']);
    const config = loadConfig({ ...env, OPS_PORT: '9090' }, ['reconcile']);
    expect(config.accounts.map((a) => [a.name, a.sync.reconciles])).toEqual([
      ['default', true],
      ['shop', true],
      ['blog_eu', true],
      ['news', false],
    ]);
    // Every account's webhook secret is its own.
    expect(new Set(config.accounts.slice(1).map((a) => a.webhookSecrets[0])).size).toBe(3);
  });

  it('appends to an ACCOUNTS that names no default account', () => {
    writeFileSync(output, 'ACCOUNTS=shop\nACCOUNT_SHOP__WEBHOOK_SECRETS=whsec-shop-0123456789\n', { mode: 0o600 });
    expect(addAccount('', 'blog', '--source', 'webhook-only').code).toBe(0);
    expect(variables().ACCOUNTS).toBe('shop,blog');
  });

  it.each([
    [['shop', ...CURRENT], 'tok-other\n', /account "shop" is declared already \(ACCOUNTS=default,shop\)/],
    [['default', '--source', 'webhook-only'], '', /account "default" is declared already/],
    [['Shop', '--source', 'webhook-only'], '', /"Shop" is not an account name/],
    [['a__b', '--source', 'webhook-only'], '', /"a__b" is not an account name/],
    [['blog'], '', /--source is required/],
    [['blog', '--source', 'v3'], '', /--source: legacy, current or webhook-only, got "v3"/],
    [['blog', '--source', 'legacy', '--api-key-stdin'], 'key-blog\n', /--legacy-url is required[\s\S]*--groups is required/],
    [['blog', '--source', 'current', '--groups', '1'], '', /--api-url is required[\s\S]*the token is required/],
    [['blog', ...CURRENT, '--webhooks-url', 'https://x.example.com'], 'tok-blog\n', /--webhooks-url does not go with --source current/],
    [['blog', '--source', 'webhook-only', '--groups', '1'], '', /--groups does not go with --source webhook-only/],
    [
      ['blog', '--source', 'current', '--api-url', 'ftp://x', '--api-token-stdin', '--groups', 'a'],
      'tok\n',
      /--groups: comma-separated[\s\S]*--api-url: an http\(s\) URL/,
    ],
    // A key or token another account holds: named by its variable, never echoed.
    [['blog', ...CURRENT], 'key-123\n', /a key or token given is already MAILER_API_KEY's in .*: each account needs its own/],
    [
      ['blog', '--source', 'webhook-only', '--domain', 'h.example.com'],
      '',
      /--add-account adds to an existing file: --domain only go with a new one/,
    ],
  ])('refuses %j with exit 2 and leaves the file as it was', (args, input, message) => {
    single();
    expect(addAccount('tok-shop\n', 'shop', ...CURRENT).code).toBe(0);
    const before = readFileSync(output, 'utf8');
    const run = addAccount(input, ...(args as [string, ...string[]]));
    expect(run.code, run.out).toBe(2);
    expect(run.err).toMatch(message);
    expect(run.err).not.toContain('key-123');
    expect(readFileSync(output, 'utf8')).toBe(before);
  });

  it('needs an existing file, and refuses leftovers of an undeclared account of that name', () => {
    const run = addAccount('', 'shop', '--source', 'webhook-only');
    expect(run.code).toBe(2);
    expect(run.err).toMatch(/does not exist: write it with \.\/configure first/);
    expect(existsSync(output)).toBe(false);
    writeFileSync(output, 'ACCOUNT_SHOP__SYNC_GROUPS=1\n');
    const leftover = addAccount('', 'shop', '--source', 'webhook-only');
    expect(leftover.code).toBe(2);
    expect(leftover.err).toMatch(/already holds variables of an account "shop" \(ACCOUNT_SHOP__…\)/);
    expect(readFileSync(output, 'utf8')).toBe('ACCOUNT_SHOP__SYNC_GROUPS=1\n');
  });

  it('takes the account options only with --add-account', () => {
    const run = configure(...REQUIRED, '--source', 'current');
    expect(run.code).toBe(2);
    expect(run.err).toMatch(/go with --add-account/);
    expect(configure(...REQUIRED, '--api-token', 'x').err).toMatch(/--api-token takes no value/);
  });
});

import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  ConfigError,
  configTable,
  loadConfig,
  loadDatabaseUrl,
  needsForRole,
  parseDuration,
  PER_ACCOUNT_SETTINGS,
  secretsOf,
  secretValuesIn,
  SETTINGS,
  syncSourceOf,
} from '../../src/config.js';
import { settingsOf } from '../../src/ground/settings.js';
import { ROOT } from '../helpers/cli.js';
import { CONFIG_DOCS, tableIn } from '../helpers/config-docs.js';

const POLL_ENV = {
  MAILER_LEGACY_URL: 'https://legacy.example.com/',
  MAILER_API_KEY: 'k-123456789',
  SYNC_GROUPS: '111, 222,111',
};

function problemsOf(env: Record<string, string>, needs: Parameters<typeof loadConfig>[1] = []): string[] {
  try {
    loadConfig(env, needs);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return (error as ConfigError).problems;
  }
  throw new Error('expected a ConfigError');
}

describe('parseDuration', () => {
  it.each([
    ['250ms', 250],
    ['30s', 30_000],
    ['5m', 300_000],
    ['24h', 86_400_000],
    ['1d', 86_400_000],
  ])('parses %s', (text, ms) => {
    expect(parseDuration(text)).toBe(ms);
  });

  it.each(['5', '5 minutes', '-5m', '1.5h', 'm', '', '5M'])('rejects %j', (text) => {
    expect(() => parseDuration(text)).toThrow(/not a duration/);
  });
});

describe('loadConfig', () => {
  it('applies the documented defaults', () => {
    const config = loadConfig({});
    expect(config.databaseUrl).toBe('postgres://postgres@127.0.0.1:5432/postgres');
    expect(config.redisUrl).toBe('redis://127.0.0.1:6379');
    expect(config.legacy.apiKeyHeader).toBe('X-Service-ApiKey');
    expect(config.legacy.sourceTimezone).toBe('UTC');
    expect(config.sync).toEqual({
      source: 'current',
      reconciles: false,
      groups: [],
      types: ['active', 'unsubscribed', 'bounced', 'junk', 'unconfirmed'],
      everyMs: 300_000,
      lookbackMs: 86_400_000,
      reconcileEveryMs: 86_400_000,
      pageSize: 1000,
      historyRetentionMs: 30 * 86_400_000,
    });
    expect(config.apiRateLimit).toBe(120);
    expect(config.webhookSecrets).toEqual([]);
    expect(config.port).toBe(8080);
    expect(config.webhookPath).toBe('/webhooks');
    expect(config.adminToken).toBeUndefined();
    expect(config.logLevel).toBe('info');
    expect(config.webhookRetentionMs).toBe(30 * 86_400_000);
    expect(config.upstreamTimeoutMs).toBe(30_000);
    expect(config.webhookFailedRetentionMs).toBe(90 * 86_400_000);
    expect(config.webhookBodyMemoryBytes).toBe(64 * 1024 * 1024);
    expect(config.eraseOutOfGroupsAfterMs).toBe(30 * 86_400_000);
    expect(config.http).toEqual({
      headersTimeoutMs: 5_000,
      requestTimeoutMs: 10_000,
      idleTimeoutMs: 75_000,
      maxConnections: 1_000,
      maxConnectionsPerClient: 32,
      requestRatePerClient: 50,
    });
    expect(config.opsPort).toBeUndefined();
    // The public listener on every interface (webhooks come from outside); the ops one on loopback.
    expect(config.host).toBe('0.0.0.0');
    expect(config.opsHost).toBe('127.0.0.1');
    expect(config.opsOnPublicPort).toBe(false);
    expect(config.adminCookieInsecure).toBe(false);
    expect(config.trustProxy).toBe(false);
    expect(config.metricsRefreshMs).toBe(15_000);
    expect(config.history).toEqual({ enabled: true, retentionMs: undefined });
  });

  it('parses the public-surface and data-protection settings', () => {
    const config = loadConfig({
      OPS_PORT: '9090',
      HTTP_HEADERS_TIMEOUT: '2s',
      HTTP_REQUEST_TIMEOUT: '20s',
      HTTP_IDLE_TIMEOUT: '30s',
      HTTP_MAX_CONNECTIONS: '5000',
      HTTP_MAX_CONNECTIONS_PER_CLIENT: '0',
      HTTP_REQUEST_RATE_PER_CLIENT: '200',
      WEBHOOK_BODY_MEMORY: String(128 * 1024 * 1024),
      WEBHOOK_FAILED_RETENTION: '180d',
      ERASE_OUT_OF_GROUPS_AFTER: '0d',
      METRICS_REFRESH_EVERY: '1m',
    });
    expect(config.opsPort).toBe(9090);
    expect(config.http).toEqual({
      headersTimeoutMs: 2_000,
      requestTimeoutMs: 20_000,
      idleTimeoutMs: 30_000,
      maxConnections: 5_000,
      maxConnectionsPerClient: 0,
      requestRatePerClient: 200,
    });
    expect(config.webhookBodyMemoryBytes).toBe(128 * 1024 * 1024);
    expect(config.webhookFailedRetentionMs).toBe(180 * 86_400_000);
    expect(config.eraseOutOfGroupsAfterMs).toBe(0);
    expect(config.metricsRefreshMs).toBe(60_000);
    // One largest body always fits the default budget.
    expect(loadConfig({ WEBHOOK_MAX_BODY: String(100 * 1024 * 1024) }).webhookBodyMemoryBytes).toBe(100 * 1024 * 1024);
  });

  it.each([
    [{ WEBHOOK_MAX_BODY: '2000000', WEBHOOK_BODY_MEMORY: '1000000' }, /WEBHOOK_BODY_MEMORY: 1000000 is below WEBHOOK_MAX_BODY/],
    [{ WEBHOOK_RETENTION: '100d' }, /WEBHOOK_FAILED_RETENTION: must not be shorter than WEBHOOK_RETENTION/],
    [{ ERASE_OUT_OF_GROUPS_AFTER: '12h' }, /ERASE_OUT_OF_GROUPS_AFTER: must be 0 \(never\) or at least 1d/],
    [{ HTTP_HEADERS_TIMEOUT: '20s' }, /HTTP_HEADERS_TIMEOUT: must not be longer than HTTP_REQUEST_TIMEOUT/],
    [
      { HTTP_MAX_CONNECTIONS: '10', HTTP_MAX_CONNECTIONS_PER_CLIENT: '11' },
      /HTTP_MAX_CONNECTIONS_PER_CLIENT: must not be above HTTP_MAX_CONNECTIONS \(10\)/,
    ],
    [{ HTTP_REQUEST_RATE_PER_CLIENT: '10' }, /HTTP_REQUEST_RATE_PER_CLIENT: must not be below HTTP_MAX_CONNECTIONS_PER_CLIENT \(32\)/],
    [{ HTTP_REQUEST_RATE_PER_CLIENT: 'fast' }, /HTTP_REQUEST_RATE_PER_CLIENT/],
    [{ PORT: '8080', OPS_PORT: '8080' }, /OPS_PORT: must differ from PORT/],
    [{ OPS_PORT: 'ops' }, /OPS_PORT: "ops" is not a whole number/],
    [{ HTTP_REQUEST_TIMEOUT: '100ms' }, /HTTP_REQUEST_TIMEOUT: "100ms" is shorter than 1s/],
    // Admin on the public port only when asked for explicitly.
    [
      { ADMIN_TOKEN: 'a'.repeat(32) },
      /ADMIN_TOKEN: the admin pages are served on OPS_PORT only; set OPS_PORT \(e\.g\. 9090\), or ADMIN_ON_PUBLIC_PORT=true/,
    ],
    [
      { ADMIN_ON_PUBLIC_PORT: 'true', OPS_PORT: '9090' },
      /ADMIN_ON_PUBLIC_PORT: set either OPS_PORT or ADMIN_ON_PUBLIC_PORT=true, not both/,
    ],
  ])('rejects inconsistent settings %o', (env, pattern) => {
    const problems = problemsOf(env);
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(pattern);
  });

  it('parses every documented form', () => {
    const config = loadConfig(
      {
        ...POLL_ENV,
        DATABASE_URL: 'postgresql://u:p@db:5432/mirror',
        REDIS_URL: 'rediss://cache:6380',
        MAILER_API_KEY_HEADER: 'X-MailerLite-ApiKey',
        MAILER_SOURCE_TZ: 'Europe/Vilnius',
        MAILER_WEBHOOKS_URL: 'https://connect.example.com',
        MAILER_WEBHOOKS_TOKEN: 'tok-abcdef',
        SYNC_TYPES: 'active,bounced',
        SYNC_EVERY: '30s',
        SYNC_LOOKBACK: '2d',
        RECONCILE_EVERY: '12h',
        SYNC_PAGE_SIZE: '500',
        API_RATE_LIMIT: '120',
        WEBHOOK_SECRETS: 'old-secret-0123456789, new-secret-0123456789',
        PORT: '9090',
        OPS_PORT: '9091',
        HOST: '::',
        OPS_HOST: '10.0.0.5',
        ADMIN_COOKIE_INSECURE: 'TRUE',
        TRUST_PROXY: '10.0.0.1, 10.20.0.0/16',
        WEBHOOK_PATH: '/hooks/mailer',
        ADMIN_TOKEN: 'a'.repeat(32),
        LOG_LEVEL: 'debug',
        WEBHOOK_RETENTION: '7d',
        MAILER_TIMEOUT: '10s',
        HISTORY: 'off',
        HISTORY_RETENTION: '400d',
      },
      ['poll', 'receive', 'manage-webhooks'],
    );
    expect(config.legacy.url).toBe('https://legacy.example.com');
    expect(config.sync.groups).toEqual(['111', '222']);
    expect(config.sync.types).toEqual(['active', 'bounced']);
    expect(config.sync.everyMs).toBe(30_000);
    expect(config.sync.lookbackMs).toBe(2 * 86_400_000);
    expect(config.sync.reconcileEveryMs).toBe(12 * 3_600_000);
    expect(config.sync.pageSize).toBe(500);
    expect(config.apiRateLimit).toBe(120);
    expect(config.webhookSecrets).toEqual(['old-secret-0123456789', 'new-secret-0123456789']);
    expect(config.port).toBe(9090);
    expect(config.opsPort).toBe(9091);
    expect(config.host).toBe('::');
    expect(config.opsHost).toBe('10.0.0.5');
    expect(config.adminCookieInsecure).toBe(true);
    expect(config.trustProxy).toEqual(['10.0.0.1', '10.20.0.0/16']);
    expect(loadConfig({ TRUST_PROXY: 'true' }).trustProxy).toBe(true);
    expect(loadConfig({ TRUST_PROXY: '2' }).trustProxy).toBe(2);
    const shared = loadConfig({ ADMIN_TOKEN: 'a'.repeat(32), ADMIN_ON_PUBLIC_PORT: 'true', HOST: '127.0.0.1' });
    expect([shared.opsOnPublicPort, shared.opsPort]).toEqual([true, undefined]);
    expect(config.webhookPath).toBe('/hooks/mailer');
    expect(config.legacy.sourceTimezone).toBe('Europe/Vilnius');
    expect(config.webhooksApi).toEqual({ url: 'https://connect.example.com', token: 'tok-abcdef' });
    expect(config.logLevel).toBe('debug');
    expect(config.webhookRetentionMs).toBe(7 * 86_400_000);
    expect(config.upstreamTimeoutMs).toBe(10_000);
    expect(config.history).toEqual({ enabled: false, retentionMs: 400 * 86_400_000 });
  });

  it.each([
    ['DATABASE_URL', 'mysql://x', /DATABASE_URL: must be a URL like postgres/],
    ['REDIS_URL', 'localhost:6379', /REDIS_URL: must be a URL like redis/],
    ['MAILER_LEGACY_URL', 'ftp://x', /MAILER_LEGACY_URL: must be an http\(s\) URL/],
    ['MAILER_API_KEY_HEADER', 'X Bad Header', /MAILER_API_KEY_HEADER: must be an HTTP header name/],
    ['MAILER_SOURCE_TZ', 'Mars/Olympus', /MAILER_SOURCE_TZ: must be an IANA timezone/],
    ['MAILER_WEBHOOKS_URL', 'not a url', /MAILER_WEBHOOKS_URL: must be an http\(s\) URL/],
    ['SYNC_GROUPS', '12,abc', /SYNC_GROUPS: group ids must be numeric, got "abc"/],
    ['SYNC_TYPES', 'active,spam', /SYNC_TYPES: unknown type "spam"/],
    ['SYNC_EVERY', '5', /SYNC_EVERY: "5" is not a duration/],
    ['SYNC_EVERY', '10ms', /SYNC_EVERY: "10ms" is shorter than 1s/],
    ['SYNC_LOOKBACK', 'yesterday', /SYNC_LOOKBACK: "yesterday" is not a duration/],
    ['RECONCILE_EVERY', '1w', /RECONCILE_EVERY: "1w" is not a duration/],
    ['SYNC_PAGE_SIZE', '0', /SYNC_PAGE_SIZE: 0 is outside 1\.\.10000/],
    ['SYNC_PAGE_SIZE', 'lots', /SYNC_PAGE_SIZE: "lots" is not a whole number/],
    ['API_RATE_LIMIT', '-1', /API_RATE_LIMIT: "-1" is not a whole number/],
    ['PORT', '70000', /PORT: 70000 is outside 0\.\.65535/],
    ['WEBHOOK_PATH', 'webhooks', /WEBHOOK_PATH: must be a path starting with \//],
    ['ADMIN_TOKEN', 'short', /ADMIN_TOKEN: must be at least 16 characters/],
    ['LOG_LEVEL', 'verbose', /LOG_LEVEL: /],
    ['WEBHOOK_RETENTION', '10m', /WEBHOOK_RETENTION: "10m" is shorter than 1h/],
    ['MAILER_TIMEOUT', '500ms', /MAILER_TIMEOUT: "500ms" is shorter than 1s/],
    ['WEBHOOK_RETENTION', 'forever', /WEBHOOK_RETENTION: "forever" is not a duration/],
    ['HISTORY', 'yes', /HISTORY: must be on or off/],
    ['HISTORY_RETENTION', '30m', /HISTORY_RETENTION: "30m" is shorter than 1h/],
    ['HISTORY_RETENTION', 'forever', /HISTORY_RETENTION: "forever" is not a duration/],
    ['WEBHOOK_SECRETS', 'abc', /WEBHOOK_SECRETS: each secret must be at least 16 characters .*; secret #1 has 3$/],
    [
      'WEBHOOK_SECRETS',
      'long-enough-secret-01,short-one',
      /WEBHOOK_SECRETS: each secret must be at least 16 characters .*; secret #2 has 9$/,
    ],
    ['HOST', 'not an address!', /HOST: must be an IP address/],
    ['OPS_HOST', 'bad host/x', /OPS_HOST: must be an IP address/],
    ['ADMIN_ON_PUBLIC_PORT', 'sure', /ADMIN_ON_PUBLIC_PORT: must be true or false/],
    ['ADMIN_COOKIE_INSECURE', 'maybe', /ADMIN_COOKIE_INSECURE: must be true or false/],
    ['TRUST_PROXY', 'proxy.example.com', /TRUST_PROXY: must be true, false, a hop count, or comma-separated proxy addresses/],
    ['TRUST_PROXY', '10.0.0.1/12/3', /TRUST_PROXY: must be true, false, a hop count/],
  ])('rejects a bad %s (%s) with a message naming it', (name, value, pattern) => {
    const problems = problemsOf({ [name]: value });
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(pattern);
  });

  it('names every bad variable in one error', () => {
    const problems = problemsOf({ SYNC_EVERY: 'soon', PORT: 'x', SYNC_TYPES: 'nope' });
    expect(problems.map((p) => p.split(':')[0]).sort()).toEqual(['PORT', 'SYNC_EVERY', 'SYNC_TYPES']);
  });

  it('requires the legacy URL, key and groups for polling the legacy API only', () => {
    const problems = problemsOf({ SYNC_SOURCE: 'legacy' }, needsForRole('worker'));
    expect(problems).toEqual([
      'MAILER_LEGACY_URL: required for polling',
      'MAILER_API_KEY: required for polling',
      'SYNC_GROUPS: required for polling',
    ]);
    expect(problemsOf({ MAILER_API_KEY: 'k-123456789' }, ['poll'])).toEqual([
      'MAILER_LEGACY_URL: required for polling',
      'SYNC_GROUPS: required for polling',
    ]);
    expect(() => loadConfig({}, needsForRole('receiver'))).not.toThrow();
    expect(() => loadConfig(POLL_ENV, needsForRole('all'))).not.toThrow();
  });

  it('never echoes secret values in its messages', () => {
    const error = (() => {
      try {
        loadConfig({ MAILER_API_KEY: 'supersecretkey', ADMIN_TOKEN: 'tiny-secret', WEBHOOK_SECRETS: 'weak-whsec', SYNC_EVERY: 'x' });
      } catch (e) {
        return e as Error;
      }
      throw new Error('expected failure');
    })();
    expect(error.message).not.toContain('supersecretkey');
    expect(error.message).not.toContain('tiny-secret');
    expect(error.message).toContain('WEBHOOK_SECRETS');
    expect(error.message).not.toContain('weak-whsec');
  });

  it('lists secrets for redaction', () => {
    const config = loadConfig({ ...POLL_ENV, WEBHOOK_SECRETS: 'whsec-1-0123456789', MAILER_WEBHOOKS_TOKEN: 'tok-2' });
    expect(secretsOf(config).sort()).toEqual(['k-123456789', 'tok-2', 'whsec-1-0123456789']);
  });
});

describe('the read source (SYNC_SOURCE) and the current API settings', () => {
  const CURRENT_ENV = { MAILER_API_URL: 'https://connect.example.com/', MAILER_API_TOKEN: 'tok-current-1', SYNC_GROUPS: '111' };

  it('defaults to legacy when legacy settings are given, else to current; SYNC_SOURCE overrides', () => {
    expect(loadConfig(POLL_ENV, ['poll']).sync.source).toBe('legacy');
    expect(syncSourceOf({ MAILER_API_KEY: 'k-1' })).toBe('legacy');
    expect(syncSourceOf({ MAILER_LEGACY_URL: 'https://legacy.example.com' })).toBe('legacy');
    expect(loadConfig(CURRENT_ENV, ['poll']).sync.source).toBe('current');
    expect(loadConfig({}).sync.source).toBe('current');
    expect(loadConfig({ ...POLL_ENV, ...CURRENT_ENV, SYNC_SOURCE: 'Current' }, ['poll']).sync.source).toBe('current');
    expect(loadConfig({ ...POLL_ENV, ...CURRENT_ENV, SYNC_SOURCE: 'legacy' }, ['poll']).sync.source).toBe('legacy');
    expect(problemsOf({ SYNC_SOURCE: 'v3' })).toEqual(['SYNC_SOURCE: must be legacy or current']);
  });

  it('requires the current API URL, token and groups for polling the current API, under either name', () => {
    expect(problemsOf({ SYNC_SOURCE: 'current' }, ['poll'])).toEqual([
      'MAILER_API_URL: required for polling the current API (or MAILER_WEBHOOKS_URL)',
      'MAILER_API_TOKEN: required for polling the current API (or MAILER_WEBHOOKS_TOKEN)',
      'SYNC_GROUPS: required for polling the current API',
    ]);
    const config = loadConfig(CURRENT_ENV, ['poll']);
    expect(config.currentApi).toEqual({ url: 'https://connect.example.com', token: 'tok-current-1' });
    const aliased = loadConfig({ MAILER_WEBHOOKS_URL: 'https://connect.example.com', MAILER_WEBHOOKS_TOKEN: 'tok-2', SYNC_GROUPS: '1' }, [
      'poll',
    ]);
    expect(aliased.sync.source).toBe('current');
    expect(aliased.currentApi).toEqual({ url: 'https://connect.example.com', token: 'tok-2' });
  });

  it('lets one pair configure both reads and webhook management', () => {
    const config = loadConfig({ MAILER_API_URL: 'https://connect.example.com', MAILER_API_TOKEN: 'tok-3' }, ['manage-webhooks']);
    expect(config.webhooksApi).toEqual({ url: 'https://connect.example.com', token: 'tok-3' });
    expect(config.currentApi).toEqual(config.webhooksApi);
    const same = loadConfig(
      { ...CURRENT_ENV, MAILER_WEBHOOKS_URL: 'https://connect.example.com', MAILER_WEBHOOKS_TOKEN: 'tok-current-1' },
      ['poll', 'manage-webhooks'],
    );
    expect(same.webhooksApi).toEqual(same.currentApi);
    expect(secretsOf(same)).toEqual(['tok-current-1']);
  });

  it('rejects the two names of one setting given different values, without echoing the tokens', () => {
    const problems = problemsOf({ ...CURRENT_ENV, MAILER_WEBHOOKS_URL: 'https://other.example.com', MAILER_WEBHOOKS_TOKEN: 'tok-other-9' });
    expect(problems.map((p) => p.split(':')[0])).toEqual(['MAILER_API_URL', 'MAILER_API_TOKEN']);
    expect(problems.join('\n')).not.toContain('tok-other-9');
    expect(problems.join('\n')).not.toContain('tok-current-1');
  });

  it('defaults API_RATE_LIMIT by source: 60 a minute for the legacy API, 120 for the current platform', () => {
    expect(loadConfig(POLL_ENV).apiRateLimit).toBe(60);
    expect(loadConfig(CURRENT_ENV).apiRateLimit).toBe(120);
    expect(loadConfig({ ...CURRENT_ENV, API_RATE_LIMIT: '100' }).apiRateLimit).toBe(100);
    // auto: the budgets the headers announce less a reserve; until then the platform's documented limit.
    expect(loadConfig({ ...POLL_ENV, API_RATE_LIMIT: 'AUTO' })).toMatchObject({ apiRateLimit: 60, apiRateLimitAuto: true });
    expect(loadConfig(POLL_ENV).apiRateLimitAuto).toBe(false);
  });

  it('accepts a webhook-only install (no read settings at all): nothing reconciles', () => {
    const webhooksOnly = {
      MAILER_API_URL: 'https://connect.example.com',
      MAILER_API_TOKEN: 'tok-4',
      WEBHOOK_SECRETS: 'whsec-1-0123456789',
    };
    const config = loadConfig(webhooksOnly, ['reconcile', 'receive', 'manage-webhooks']);
    expect(config.sync.reconciles).toBe(false);
    expect(config.sync.groups).toEqual([]);
    expect(loadConfig({}, ['reconcile', 'receive']).sync.reconciles).toBe(false);
    expect(loadConfig(POLL_ENV, ['reconcile']).sync.reconciles).toBe(true);
    expect(loadConfig(CURRENT_ENV, ['reconcile']).sync.reconciles).toBe(true);
  });

  it('still requires every read setting once any is given', () => {
    expect(problemsOf({ SYNC_GROUPS: '111' }, ['reconcile'])).toEqual([
      'MAILER_API_URL: required for polling the current API (or MAILER_WEBHOOKS_URL)',
      'MAILER_API_TOKEN: required for polling the current API (or MAILER_WEBHOOKS_TOKEN)',
    ]);
    expect(problemsOf({ MAILER_API_KEY: 'k-1' }, ['reconcile'])).toEqual([
      'MAILER_LEGACY_URL: required for polling',
      'SYNC_GROUPS: required for polling',
    ]);
    expect(problemsOf({ SYNC_SOURCE: 'current', MAILER_WEBHOOKS_URL: 'https://c.example.com' }, ['reconcile'])).toEqual([
      'MAILER_API_TOKEN: required for polling the current API (or MAILER_WEBHOOKS_TOKEN)',
      'SYNC_GROUPS: required for polling the current API',
    ]);
  });

  it('accepts MAILER_API_TOKEN for webhooks commands and names the missing ones', () => {
    expect(problemsOf({}, ['manage-webhooks'])).toEqual([
      'MAILER_WEBHOOKS_URL: required for webhooks commands (or MAILER_API_URL)',
      'MAILER_WEBHOOKS_TOKEN: required for webhooks commands (or MAILER_API_TOKEN)',
    ]);
    expect(problemsOf({ MAILER_API_URL: 'nope' }).map((p) => p.split(':')[0])).toEqual(['MAILER_API_URL']);
  });
});

describe('each setting declared once (SETTINGS in src/config.ts)', () => {
  const names = new Set(settingsOf(SETTINGS).flatMap((s) => s.names));

  it('is what the configuration table of docs/operations.md shows', () => {
    const table = tableIn(readFileSync(CONFIG_DOCS, 'utf8'));
    expect(table, 'docs/operations.md ("Configuration") differs from the settings: run `npm run docs:config`').toBe(configTable());
  });

  // .env.example is the one settings file's template (./configure writes the real one); besides the
  // settings it names only the passwords docker-compose.yml itself uses.
  it('is behind every variable .env.example names', () => {
    const composeOwn = [
      'POSTGRES_PASSWORD',
      'MIRROR_DB_PASSWORD',
      'RECEIVER_DB_PASSWORD',
      'REDIS_PASSWORD',
      'GRAFANA_ADMIN_PASSWORD',
      // The containers' memory limits, which Compose reads from .env (docs/compose.md, "Memory limits").
      ...[...readFileSync(path.join(ROOT, 'docker-compose.yml'), 'utf8').matchAll(/mem_limit: \$\{(\w+):-/g)].map((m) => m[1]!),
      // The https profile's, which Compose and the proxy read (docs/compose.md, "HTTPS").
      'COMPOSE_PROFILES',
      'PUBLIC_DOMAIN',
      'PROXY_TLS',
      'ACME_EMAIL',
      'RECEIVER_PUBLISH',
      // Postgres's connection slots, which Compose passes to the postgres service's command.
      'POSTGRES_MAX_CONNECTIONS',
    ];
    const named = [...readFileSync(path.join(ROOT, '.env.example'), 'utf8').matchAll(/^#? ?([A-Z][A-Z0-9_]+)=/gm)].map((m) => m[1]!);
    expect(named.length).toBeGreaterThan(composeOwn.length);
    expect(
      // (and the containers' memory limits, docs/compose.md "Memory limits")
      named.filter(
        (name) =>
          !names.has(name) &&
          !composeOwn.includes(name) &&
          !/^[A-Z]+_MEMORY_LIMIT$/.test(name) &&
          // An account's own (docs/operations.md, "Several accounts").
          !PER_ACCOUNT_SETTINGS.some((setting) => name === `ACCOUNT_SHOP__${setting}`),
      ),
      '.env.example names variables no setting reads: declare them in SETTINGS (src/config.ts) or drop them',
    ).toEqual([]);
  });

  it('keeps the value of every secret setting out of messages and logs, parsed or raw', () => {
    const secret = settingsOf(SETTINGS).filter((s) => s.declaration.secret);
    expect(secret.map((s) => s.names[0]).sort()).toEqual(['ADMIN_TOKEN', 'MAILER_API_KEY', 'MAILER_API_TOKEN', 'WEBHOOK_SECRETS']);
    const env = Object.fromEntries(secret.map((s) => [s.names[0], `secret-of-${s.names[0]}`]));
    // The admin token needs a port to be served on.
    const config = loadConfig({ ...env, OPS_PORT: '9090' });
    expect(secretsOf(config).sort()).toEqual(Object.values(env).sort());
    const aliased = Object.fromEntries(secret.map((s) => [s.names.at(-1)!, `bad,secret-of-${s.names.at(-1)!}`]));
    expect(secretValuesIn(aliased)).toEqual(expect.arrayContaining(Object.values(aliased).flatMap((v) => [v, ...v.split(',')])));
    // Whatever a message would say, the given secrets are not in it.
    const error = (() => {
      try {
        return loadConfig({ ...aliased, SYNC_EVERY: 'x' });
      } catch (e) {
        return e as Error;
      }
    })();
    expect(error).toBeInstanceOf(ConfigError);
    for (const value of Object.values(aliased)) expect((error as Error).message).not.toContain(value);
  });
});

describe('the audit settings', () => {
  it('AUDIT_EVERY is a duration of at least 1s or off; AUDIT_SAMPLE defaults to the page size', async () => {
    const { auditSettings } = await import('../../src/commands/audit-settings.js');
    expect(auditSettings(loadConfig({})).everyMs).toBe(15 * 60_000);
    expect(auditSettings(loadConfig({ AUDIT_EVERY: 'off' })).everyMs).toBeNull();
    expect(auditSettings(loadConfig({ AUDIT_EVERY: '2s' })).everyMs).toBe(2_000);
    expect(auditSettings(loadConfig({ SYNC_PAGE_SIZE: '250' })).sampleSize).toBe(250);
    expect(auditSettings(loadConfig({ AUDIT_SAMPLE: '40', WEBHOOKS_REENABLE: 'true' }))).toMatchObject({
      sampleSize: 40,
      reenableWebhooks: true,
    });
    expect(() => loadConfig({ AUDIT_EVERY: '500ms' })).toThrow(/AUDIT_EVERY/);
    expect(() => loadConfig({ AUDIT_EVERY: 'sometimes' })).toThrow(/AUDIT_EVERY.*or "off"/);
    expect(() => loadConfig({ AUDIT_SAMPLE: '0' })).toThrow(/AUDIT_SAMPLE/);
  });

  it('AUDIT_SETTLE defaults to 2 min; the legacy source never settles faster than two incremental intervals', async () => {
    const { auditSettings } = await import('../../src/commands/audit-settings.js');
    const legacy = { MAILER_LEGACY_URL: 'http://127.0.0.1:1', MAILER_API_KEY: 'k', SYNC_GROUPS: '1' };
    expect(auditSettings(loadConfig({})).settleMs).toBe(120_000);
    expect(auditSettings(loadConfig({ AUDIT_SETTLE: '4s' })).settleMs).toBe(4_000);
    expect(auditSettings(loadConfig({ ...legacy, AUDIT_SETTLE: '4s', SYNC_EVERY: '3s' })).settleMs).toBe(6_000);
    expect(auditSettings(loadConfig({ ...legacy, SYNC_EVERY: '5m' })).settleMs).toBe(600_000);
    expect(() => loadConfig({ AUDIT_SETTLE: '0s' })).toThrow(/AUDIT_SETTLE/);
  });
});

describe('loadDatabaseUrl (what `migrate` reads)', () => {
  // An install of an earlier release: ADMIN_TOKEN without OPS_PORT, which start now refuses.
  const EARLIER = { DATABASE_URL: 'postgres://mirror:pw@postgres:5432/mirror', ADMIN_TOKEN: 'a-token-of-24-characters' };

  it('takes DATABASE_URL and no other setting: one migrate does not use never stops it', () => {
    expect(problemsOf(EARLIER)).toEqual([expect.stringMatching(/^ADMIN_TOKEN: the admin pages are served on OPS_PORT only/)]);
    expect(loadDatabaseUrl(EARLIER)).toBe(EARLIER.DATABASE_URL);
    expect(loadDatabaseUrl({ ...EARLIER, SYNC_GROUPS: 'abc', OPS_PORT: 'x' })).toBe(EARLIER.DATABASE_URL);
  });

  it('defaults like start, and refuses a bad DATABASE_URL with one line naming it', () => {
    expect(loadDatabaseUrl({})).toBe('postgres://postgres@127.0.0.1:5432/postgres');
    expect(() => loadDatabaseUrl({ DATABASE_URL: 'mysql://x' })).toThrow(ConfigError);
    expect(() => loadDatabaseUrl({ DATABASE_URL: 'mysql://x' })).toThrow(/DATABASE_URL: must be a URL like postgres:\/\//);
  });
});

/**
 * Several accounts in the one settings file (docs/operations.md, "Several accounts"): ACCOUNTS, each
 * account's variables `ACCOUNT_<NAME>__<SETTING>`, the checks at load, and the API that code serving
 * one account calls (`accountConfig`, `findAccount`).
 */
import { describe, expect, it } from 'vitest';
import {
  AccountChoiceError,
  accountConfig,
  accountPrefix,
  accountRedisPrefix,
  type Config,
  ConfigError,
  configTable,
  DEFAULT_ACCOUNT,
  findAccount,
  loadConfig,
  PER_ACCOUNT_SETTINGS,
  SETTINGS,
  secretsOf,
  secretValuesIn,
  syncSourceOf,
} from '../../src/config.js';
import { settingsOf } from '../../src/ground/settings.js';
import { UsageError } from '../../src/ground/usage-error.js';

const LEGACY = { MAILER_LEGACY_URL: 'https://legacy.example.com', MAILER_API_KEY: 'key-default-0123', SYNC_GROUPS: '111' };
const SHOP = {
  ACCOUNT_SHOP__MAILER_API_URL: 'https://connect.example.com/',
  ACCOUNT_SHOP__MAILER_API_TOKEN: 'tok-shop-0123',
  ACCOUNT_SHOP__SYNC_GROUPS: '7,8',
  ACCOUNT_SHOP__SYNC_TYPES: 'active',
  ACCOUNT_SHOP__WEBHOOK_SECRETS: 'whsec-shop-0123456789',
};
const TWO = { ACCOUNTS: 'default,shop', ...LEGACY, ...SHOP, SYNC_EVERY: '30s' };

function problemsOf(env: Record<string, string>, needs: Parameters<typeof loadConfig>[1] = [], account?: string): string[] {
  try {
    loadConfig(env, needs, account);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return (error as ConfigError).problems;
  }
  throw new Error('expected a ConfigError');
}

/** Config's fields that are no account's. */
function deploymentWide(config: Config) {
  const {
    account: _a,
    legacy: _l,
    currentApi: _c,
    webhooksApi: _w,
    apiRateLimit: _r,
    apiRateLimitAuto: _ra,
    webhookSecrets: _s,
    redisPrefix: _p,
    ...rest
  } = config;
  const { source: _so, reconciles: _re, groups: _g, types: _t, ...sync } = config.sync;
  return { ...rest, sync };
}

describe('the accounts of a deployment (ACCOUNTS)', () => {
  it('is one account named default when unset: the single-account settings unchanged', () => {
    const config = loadConfig(LEGACY, ['poll']);
    expect(config.account).toBe(DEFAULT_ACCOUNT);
    expect(config.accounts).toEqual([
      {
        name: 'default',
        redisPrefix: 'subscriber-mirror',
        legacy: config.legacy,
        currentApi: config.currentApi,
        webhooksApi: config.webhooksApi,
        sync: { source: 'legacy', reconciles: true, groups: ['111'], types: config.sync.types },
        apiRateLimit: 60,
        apiRateLimitAuto: false,
        webhookSecrets: [],
      },
    ]);
    expect(accountConfig(config, 'default')).toEqual(config);
    expect(findAccount(config, undefined).name).toBe('default');
    // A blank or empty list is the same as unset.
    expect(loadConfig({ ...LEGACY, ACCOUNTS: ' , ' }).accounts.map((a) => a.name)).toEqual(['default']);
  });

  it('reads each account from its own variables, in the declared order; the top level is the first', () => {
    const config = loadConfig(TWO, ['poll']);
    expect(config.accounts.map((a) => a.name)).toEqual(['default', 'shop']);
    expect(config.account).toBe('default');
    expect(config.legacy.apiKey).toBe('key-default-0123');
    const shop = findAccount(config, 'shop');
    expect(shop).toEqual({
      name: 'shop',
      redisPrefix: 'subscriber-mirror:account:shop',
      legacy: { url: undefined, apiKey: undefined, apiKeyHeader: 'X-Service-ApiKey', sourceTimezone: 'UTC' },
      currentApi: { url: 'https://connect.example.com', token: 'tok-shop-0123' },
      webhooksApi: { url: 'https://connect.example.com', token: 'tok-shop-0123' },
      sync: { source: 'current', reconciles: true, groups: ['7', '8'], types: ['active'] },
      apiRateLimit: 120,
      apiRateLimitAuto: false,
      webhookSecrets: ['whsec-shop-0123456789'],
    });
    const served = accountConfig(config, 'shop');
    expect(served.account).toBe('shop');
    expect(served).toMatchObject({ currentApi: shop.currentApi, webhooksApi: shop.webhooksApi, apiRateLimit: 120 });
    expect(served.sync).toMatchObject({ ...shop.sync, everyMs: 30_000 });
    expect(served.webhookSecrets).toEqual(['whsec-shop-0123456789']);
    expect([config.redisPrefix, served.redisPrefix]).toEqual(['subscriber-mirror', 'subscriber-mirror:account:shop']);
    expect(deploymentWide(served)).toEqual(deploymentWide(config));
    expect(served.accounts).toBe(config.accounts);
    // Back to the first: the loaded Config again.
    expect(accountConfig(served, 'default')).toEqual(config);
    const reordered = loadConfig({ ...TWO, ACCOUNTS: 'shop,default' });
    expect([reordered.account, reordered.currentApi.token, reordered.legacy.apiKey]).toEqual(['shop', 'tok-shop-0123', undefined]);
  });

  // Sample values of every per-account setting, each unlike what an account with none of them has.
  const SAMPLES: Record<string, string> = {
    MAILER_LEGACY_URL: 'https://b.example.com',
    MAILER_API_KEY: 'key-b-0123',
    MAILER_API_KEY_HEADER: 'X-B-Key',
    MAILER_SOURCE_TZ: 'Europe/Vilnius',
    MAILER_API_URL: 'https://cb.example.com',
    MAILER_API_TOKEN: 'tok-b-0123',
    SYNC_SOURCE: 'legacy',
    SYNC_GROUPS: '5',
    SYNC_TYPES: 'bounced',
    API_RATE_LIMIT: '7',
    WEBHOOK_SECRETS: 'whsec-b-0123456789',
  };

  it('gives every per-account setting to its account only, and to accountConfig', () => {
    const primary = settingsOf(SETTINGS)
      .filter((s) => s.declaration.perAccount)
      .map((s) => s.names[0]);
    expect(primary.sort()).toEqual(Object.keys(SAMPLES).sort());
    const base = { ACCOUNTS: 'a,b' };
    const before = loadConfig(base);
    // Config for one account, less the list of every account.
    const served = (config: Config, name: string) => ({ ...accountConfig(config, name), accounts: undefined });
    for (const name of primary) {
      const after = loadConfig({ ...base, [`ACCOUNT_B__${name}`]: SAMPLES[name]! });
      expect(served(after, 'b'), name).not.toEqual(served(before, 'b'));
      expect(served(after, 'a'), name).toEqual(served(before, 'a'));
      expect(after.account, name).toBe('a');
    }
  });

  it('has exactly the settings that say who an account is and what to read per account', () => {
    expect([...PER_ACCOUNT_SETTINGS].sort()).toEqual([...Object.keys(SAMPLES), 'MAILER_WEBHOOKS_URL', 'MAILER_WEBHOOKS_TOKEN'].sort());
    expect(accountPrefix('shop_eu')).toBe('ACCOUNT_SHOP_EU__');
    // The docs table marks them, and documents ACCOUNTS.
    const marked = configTable()
      .split('\n')
      .filter((row) => row.includes('; per account |'))
      .map((row) => /^\| `(\w+)`/.exec(row)?.[1]);
    expect(marked.sort()).toEqual(Object.keys(SAMPLES).sort());
    expect(configTable()).toMatch(/^\| `ACCOUNTS` \| .*`ACCOUNT_<NAME>__<SETTING>`/m);
  });

  it('takes the default account from the unprefixed variables or its prefixed ones; both given must agree', () => {
    const prefixed = loadConfig({
      ACCOUNT_DEFAULT__MAILER_LEGACY_URL: 'https://legacy.example.com',
      ACCOUNT_DEFAULT__MAILER_API_KEY: 'key-9',
      ACCOUNT_DEFAULT__SYNC_GROUPS: '1',
      ACCOUNT_DEFAULT__MAILER_API_KEY_HEADER: 'X-Own',
    });
    expect(prefixed.legacy).toMatchObject({ apiKey: 'key-9', apiKeyHeader: 'X-Own' });
    expect(prefixed.sync).toMatchObject({ source: 'legacy', groups: ['1'] });
    // The same value twice is one value.
    expect(loadConfig({ ...LEGACY, ACCOUNT_DEFAULT__MAILER_API_KEY: LEGACY.MAILER_API_KEY }).legacy.apiKey).toBe('key-default-0123');
    const problems = problemsOf({ ...LEGACY, ACCOUNT_DEFAULT__MAILER_API_KEY: 'key-other', ACCOUNT_DEFAULT__SYNC_GROUPS: '2' });
    expect(problems).toEqual([
      'MAILER_API_KEY: differs from ACCOUNT_DEFAULT__MAILER_API_KEY, another name of the same setting; set one of them',
      'SYNC_GROUPS: differs from ACCOUNT_DEFAULT__SYNC_GROUPS, another name of the same setting; set one of them',
    ]);
    expect(problems.join('\n')).not.toContain('key-other');
  });

  it('names the prefixed variable of a bad per-account value', () => {
    expect(problemsOf({ ACCOUNTS: 'shop', ACCOUNT_SHOP__SYNC_GROUPS: '1,x', ACCOUNT_SHOP__MAILER_API_URL: 'nope' })).toEqual([
      'ACCOUNT_SHOP__MAILER_API_URL: must be an http(s) URL (the current platform host, without /api)',
      'ACCOUNT_SHOP__SYNC_GROUPS: group ids must be numeric, got "x"',
    ]);
    expect(
      problemsOf({
        ACCOUNTS: 'shop',
        ACCOUNT_SHOP__MAILER_API_URL: 'https://a.example.com',
        ACCOUNT_SHOP__MAILER_WEBHOOKS_URL: 'https://b.example.com',
      }),
    ).toEqual([
      'ACCOUNT_SHOP__MAILER_API_URL: differs from ACCOUNT_SHOP__MAILER_WEBHOOKS_URL, another name of the same setting; set one of them',
    ]);
    // A deployment-wide problem is reported once, not once per account.
    expect(problemsOf({ ...TWO, SYNC_EVERY: 'soon' })).toEqual(['SYNC_EVERY: "soon" is not a duration (use e.g. 30s, 5m, 24h, 1d)']);
  });

  it('refuses a bad declaration at load, every problem in one message', () => {
    const problems = problemsOf({
      ACCOUNTS: `shop,Blog,a__b,1x,${'x'.repeat(32)},shop,eu_1`,
      ACCOUNT_SHOP__SYNC_GROUPS: '1',
      ACCOUNT_BLOG__SYNC_GROUPS: '2',
      ACCOUNT_SHOP__SYNC_GROUP: '3',
      ACCOUNT_SHOP__SYNC_EVERY: '1m',
      ACCOUNT_EU_1__ADMIN_TOKEN: 'a'.repeat(20),
      MAILER_API_KEY: 'key-of-nobody',
      // Blank: unset, as every blank variable.
      ACCOUNT_GONE__SYNC_GROUPS: ' ',
    });
    expect(problems.sort()).toEqual(
      [
        'ACCOUNTS: "Blog" is not an account name (a lowercase letter, then up to 30 lowercase letters, digits or `_`, never `__`)',
        'ACCOUNTS: "a__b" is not an account name (a lowercase letter, then up to 30 lowercase letters, digits or `_`, never `__`)',
        'ACCOUNTS: "1x" is not an account name (a lowercase letter, then up to 30 lowercase letters, digits or `_`, never `__`)',
        `ACCOUNTS: "${'x'.repeat(32)}" is not an account name (a lowercase letter, then up to 30 lowercase letters, digits or \`_\`, never \`__\`)`,
        'ACCOUNTS: "shop" is declared twice: two accounts cannot share a name',
        'ACCOUNT_BLOG__SYNC_GROUPS: no account "blog" is declared: add it to ACCOUNTS (declared: shop, eu_1)',
        'ACCOUNT_SHOP__SYNC_GROUP: SYNC_GROUP is not a per-account setting (those are MAILER_LEGACY_URL, MAILER_API_KEY, MAILER_API_KEY_HEADER, MAILER_SOURCE_TZ, MAILER_API_URL, MAILER_WEBHOOKS_URL, MAILER_API_TOKEN, MAILER_WEBHOOKS_TOKEN, SYNC_SOURCE, SYNC_GROUPS, SYNC_TYPES, API_RATE_LIMIT, WEBHOOK_SECRETS)',
        'ACCOUNT_SHOP__SYNC_EVERY: SYNC_EVERY is deployment-wide, the same for every account: set it once, as SYNC_EVERY',
        'ACCOUNT_EU_1__ADMIN_TOKEN: ADMIN_TOKEN is deployment-wide, the same for every account: set it once, as ADMIN_TOKEN',
        'MAILER_API_KEY: a per-account setting given unprefixed, but ACCOUNTS declares no account "default" to take it: name its account, e.g. ACCOUNT_SHOP__MAILER_API_KEY',
      ].sort(),
    );
    expect(problems.join('\n')).not.toContain('key-of-nobody');
    // With ACCOUNTS unset, the one account is `default`.
    expect(problemsOf({ ...LEGACY, ACCOUNT_SHOP__SYNC_GROUPS: '1' })).toEqual([
      'ACCOUNT_SHOP__SYNC_GROUPS: no account "shop" is declared: add it to ACCOUNTS (declared: default)',
    ]);
    // An account of the longer name takes the variable whose prefix both names share.
    const underscored = loadConfig({ ACCOUNTS: 'a,a_', ACCOUNT_A___SYNC_GROUPS: '1', ACCOUNT_A__SYNC_GROUPS: '2' });
    expect(underscored.accounts.map((a) => [a.name, a.sync.groups])).toEqual([
      ['a', ['2']],
      ['a_', ['1']],
    ]);
  });

  it('refuses a secret shared by two accounts, naming the variables and never the value', () => {
    const shared = 'whsec-shared-0123456789';
    const problems = problemsOf({
      ...TWO,
      WEBHOOK_SECRETS: `whsec-own-0123456789,${shared}`,
      ACCOUNT_SHOP__WEBHOOK_SECRETS: shared,
      ACCOUNT_SHOP__MAILER_API_TOKEN: LEGACY.MAILER_API_KEY,
    });
    expect(problems).toEqual([
      'MAILER_API_KEY: holds the same secret as ACCOUNT_SHOP__MAILER_API_TOKEN (accounts default, shop): each account needs a key, token and webhook secrets of its own',
      'WEBHOOK_SECRETS: holds the same secret as ACCOUNT_SHOP__WEBHOOK_SECRETS (accounts default, shop): each account needs a key, token and webhook secrets of its own',
    ]);
    for (const secret of [shared, LEGACY.MAILER_API_KEY, 'whsec-own-0123456789']) expect(problems.join('\n')).not.toContain(secret);
    // One account's token under its two names is one secret, not a shared one; a deployment-wide secret is no account's.
    expect(() => loadConfig({ ...TWO, ACCOUNT_SHOP__MAILER_WEBHOOKS_TOKEN: SHOP.ACCOUNT_SHOP__MAILER_API_TOKEN })).not.toThrow();
    expect(loadConfig({ ...TWO, ADMIN_TOKEN: 'admin-token-0123456789', OPS_PORT: '9090' }).adminToken).toBe('admin-token-0123456789');
  });

  it('redacts every account’s secrets, parsed or raw, declared or not', () => {
    const config = loadConfig(TWO);
    expect(secretsOf(config).sort()).toEqual(['key-default-0123', 'tok-shop-0123', 'whsec-shop-0123456789'].sort());
    const raw = {
      ...TWO,
      ACCOUNT_SHOP__WEBHOOK_SECRETS: 'short-1,whsec-shop-0123456789',
      ACCOUNT_GHOST__MAILER_WEBHOOKS_TOKEN: 'tok-ghost-0123',
      ACCOUNT_SHOP__MAILER_API_KEY: 'key-shop-0123',
    };
    expect(secretValuesIn(raw)).toEqual(
      expect.arrayContaining(['short-1', 'whsec-shop-0123456789', 'tok-ghost-0123', 'key-shop-0123', 'key-default-0123', 'tok-shop-0123']),
    );
    expect(secretValuesIn(raw)).not.toContain('7,8');
    const error = (() => {
      try {
        return loadConfig(raw);
      } catch (e) {
        return e as Error;
      }
    })();
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as Error).message).toMatch(/ACCOUNT_SHOP__WEBHOOK_SECRETS: each secret must be at least 16 characters/);
    expect((error as Error).message).toMatch(/ACCOUNT_GHOST__MAILER_WEBHOOKS_TOKEN: no account "ghost"/);
    for (const secret of ['short-1', 'tok-ghost-0123', 'key-shop-0123']) expect((error as Error).message).not.toContain(secret);
  });
});

describe('what each use needs, per account', () => {
  it('requires each reading account’s read settings, naming its variables; a webhook-only account needs none', () => {
    const env = {
      ...TWO,
      ACCOUNTS: 'default,shop,news',
      ACCOUNT_SHOP__MAILER_API_TOKEN: '',
      ACCOUNT_NEWS__WEBHOOK_SECRETS: 'whsec-news-0123456789',
    };
    expect(problemsOf(env, ['reconcile'])).toEqual([
      'ACCOUNT_SHOP__MAILER_API_TOKEN: required for polling the current API (or ACCOUNT_SHOP__MAILER_WEBHOOKS_TOKEN)',
    ]);
    const news = findAccount(loadConfig({ ...env, ACCOUNT_SHOP__MAILER_API_TOKEN: 'tok-shop-0123' }, ['reconcile', 'receive']), 'news');
    expect(news.sync).toMatchObject({ reconciles: false, groups: [] });
    // Polling asks every account for its reads, unless one account is named.
    expect(problemsOf({ ...env, ACCOUNT_SHOP__MAILER_API_TOKEN: 'tok-shop-0123' }, ['poll'])).toEqual([
      'ACCOUNT_NEWS__MAILER_API_URL: required for polling the current API (or ACCOUNT_NEWS__MAILER_WEBHOOKS_URL)',
      'ACCOUNT_NEWS__MAILER_API_TOKEN: required for polling the current API (or ACCOUNT_NEWS__MAILER_WEBHOOKS_TOKEN)',
      'ACCOUNT_NEWS__SYNC_GROUPS: required for polling the current API',
    ]);
    expect(loadConfig(env, ['poll'], 'default').account).toBe('default');
    expect(problemsOf(env, ['manage-webhooks'], 'news')).toEqual([
      'ACCOUNT_NEWS__MAILER_WEBHOOKS_URL: required for webhooks commands (or ACCOUNT_NEWS__MAILER_API_URL)',
      'ACCOUNT_NEWS__MAILER_WEBHOOKS_TOKEN: required for webhooks commands (or ACCOUNT_NEWS__MAILER_API_TOKEN)',
    ]);
    // The default account's are named as in a single-account install.
    expect(problemsOf({ ACCOUNTS: 'default,shop', ...SHOP, MAILER_API_KEY: 'key-1' }, ['reconcile'])).toEqual([
      'MAILER_LEGACY_URL: required for polling',
      'SYNC_GROUPS: required for polling',
    ]);
  });

  it('decides each account’s source from its own variables', () => {
    expect(syncSourceOf(TWO)).toBe('legacy');
    expect(syncSourceOf(TWO, 'shop')).toBe('current');
    expect(syncSourceOf({ ...TWO, ACCOUNT_SHOP__MAILER_API_KEY: 'k' }, 'shop')).toBe('legacy');
    expect(syncSourceOf({ ACCOUNTS: 'shop', ACCOUNT_SHOP__SYNC_SOURCE: 'Legacy' })).toBe('legacy');
  });

  it('refuses an account a command names that is not declared', () => {
    expect(() => loadConfig(TWO, ['poll'], 'blog')).toThrow(AccountChoiceError);
    expect(() => loadConfig(TWO, [], 'blog')).toThrow('no account "blog" is declared (ACCOUNTS: default, shop)');
  });
});

describe('findAccount', () => {
  const two = loadConfig(TWO);

  it('takes the only account when none is named, and refuses to guess among several', () => {
    expect(findAccount(loadConfig({ ACCOUNTS: 'shop' }), undefined).name).toBe('shop');
    expect(() => findAccount(two, undefined)).toThrow('several accounts are declared (default, shop): name one with --account');
    expect(findAccount(two, 'shop').name).toBe('shop');
  });

  it('refuses an unknown name with a usage error (exit 2) naming the declared ones', () => {
    const error = (() => {
      try {
        return findAccount(two, 'Shop');
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(AccountChoiceError);
    expect(error).toBeInstanceOf(UsageError);
    expect((error as UsageError).printUsage).toBe(false);
    expect((error as Error).message).toBe('no account "Shop" is declared (ACCOUNTS: default, shop)');
    expect(() => accountConfig(two, 'blog')).toThrow(AccountChoiceError);
  });
});

describe("each account's Redis namespace (accountRedisPrefix)", () => {
  it('keeps REDIS_PREFIX for account default and gives every other one of its own under it, by name and not by place', () => {
    expect(accountRedisPrefix('sm', 'default')).toBe('sm');
    expect(accountRedisPrefix('sm', 'shop')).toBe('sm:account:shop');
    expect(accountRedisPrefix('sm', 'blog_eu')).toBe('sm:account:blog_eu');
  });

  it('is what accountConfig serves each account with: a single-account install keeps its prefix, two accounts never share one', () => {
    expect(loadConfig({ ...LEGACY, REDIS_PREFIX: 'mine' }).redisPrefix).toBe('mine');
    const two = loadConfig({ ...TWO, ACCOUNTS: 'default,shop,news', REDIS_PREFIX: 'mine' });
    const prefixes = two.accounts.map((a) => accountConfig(two, a.name).redisPrefix);
    expect(prefixes).toEqual(['mine', 'mine:account:shop', 'mine:account:news']);
    // Served from another account's config, the same: the namespace is the account's, not a suffix.
    expect(accountConfig(accountConfig(two, 'shop'), 'news').redisPrefix).toBe('mine:account:news');
  });

  it("keeps each account's prefix when ACCOUNTS is reordered; the deployment's own keys stay under REDIS_PREFIX", () => {
    const reordered = loadConfig({ ...TWO, ACCOUNTS: 'shop,news,default', REDIS_PREFIX: 'mine' });
    const prefixes = reordered.accounts.map((a) => [a.name, accountConfig(reordered, a.name).redisPrefix]);
    expect(prefixes).toEqual([
      ['shop', 'mine:account:shop'],
      ['news', 'mine:account:news'],
      ['default', 'mine'],
    ]);
    // The settings as loaded are the first account's: its prefix too, not REDIS_PREFIX.
    expect(reordered.redisPrefix).toBe('mine:account:shop');
    expect(reordered.redisNamespace).toBe('mine');
  });
});

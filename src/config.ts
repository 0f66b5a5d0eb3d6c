/**
 * Environment → one typed, validated Config (docs/operations.md, "Configuration").
 *
 * Every setting is declared once, in SETTINGS: its variable, values, default and docs line. The tree's
 * shape is the shape of Config; `configSchema` parses the environment into it, and the docs table is
 * generated from it (`npm run docs:config`; a unit test fails when the docs differ).
 *
 * Every variable is checked at once so an operator sees every mistake in one message, not one per
 * restart. Requirements depend on the role: polling needs the read settings of its source (the legacy
 * URL, key and groups, or the current API's URL, token and groups); the receiver does not; `webhooks`
 * commands need the management URL and token.
 *
 * The current platform serves reads and webhook management on one host with one token, so
 * `MAILER_API_URL`/`MAILER_API_TOKEN` and `MAILER_WEBHOOKS_URL`/`MAILER_WEBHOOKS_TOKEN` are two names
 * for the same pair: either configures both. An install with no read settings at all (no legacy
 * settings, no `SYNC_SOURCE`, no `SYNC_GROUPS`) only receives webhooks: nothing reconciles.
 *
 * A deployment may mirror several accounts (docs/operations.md, "Several accounts"): the settings
 * declared `perAccount` are read once per account in ACCOUNTS, from `ACCOUNT_<NAME>__<SETTING>` (and,
 * for `default`, from the unprefixed names), each account through its own renamed copy of SETTINGS,
 * so that every rule above, and every message, applies to each account under its own variables.
 */
import { isIP } from 'node:net';
import { z } from 'zod';
import { DEFAULT_ACCOUNT } from './db/client.js';
import { SUBSCRIBER_TYPES, type SubscriberType } from './db/schema.js';
import {
  anyText,
  bindAddress,
  commaList,
  duration,
  flag,
  givenSecrets,
  httpUrl,
  type Kind,
  minLength,
  onOff,
  type NamesOf,
  oneOf,
  rawSecretValues,
  renamed,
  type Report,
  schemeUrl,
  secretValues,
  setting,
  settingsOf,
  settingsTable,
  text,
  timezone,
  valuesOf,
  type ValuesOf,
  variablesSchema,
  wholeNumber,
  wholeNumberOr,
} from './ground/settings.js';
import { UsageError } from './ground/usage-error.js';

export { parseDuration } from './ground/settings.js';

export const ROLES = ['all', 'worker', 'receiver'] as const;
export type Role = (typeof ROLES)[number];

/** Where full and incremental reads come from: the legacy v2 API or the current platform's API. */
export const SYNC_SOURCES = ['legacy', 'current'] as const;
export type SyncSource = (typeof SYNC_SOURCES)[number];

/**
 * What the caller is about to do, which decides which variables are required. `poll` needs the read
 * settings of the chosen source; `reconcile` too, unless there are no read settings at all (a
 * webhook-only install).
 */
export type ConfigNeed = 'poll' | 'reconcile' | 'receive' | 'manage-webhooks' | 'database';

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export const LOG_FORMATS = ['auto', 'json', 'pretty'] as const;

/** Thrown for bad configuration; the CLI prints `message` and exits with code 2. */
export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

const DEFAULT_BODY_MEMORY = 64 * 1024 * 1024;
const MIN_WEBHOOK_SECRET = 16;

/** Requests per minute per account each platform allows (API_RATE_LIMIT's default). */
const DEFAULT_RATE_LIMIT = { legacy: 60, current: 120 } as const;

const code = (words: readonly string[]) => words.map((w) => `\`${w}\``).join(', ');

// ---------------------------------------------------------------------------------------------
// Kinds of this service's settings (the generic ones are in ground/settings.ts)

const groupIds: Kind<string[]> = {
  schema: z.string().transform((v, ctx) => {
    const ids = commaList(v);
    const bad = ids.filter((id) => !/^\d{1,30}$/.test(id));
    if (bad.length === 0) return [...new Set(ids)];
    ctx.addIssue({ code: 'custom', message: `group ids must be numeric, got ${bad.map((b) => `"${b}"`).join(', ')}` });
    return z.NEVER;
  }),
  values: 'comma-separated numeric group ids',
};

const subscriberTypes: Kind<SubscriberType[]> = {
  schema: z.string().transform((v, ctx) => {
    const list = commaList(v);
    const bad = list.filter((t) => !(SUBSCRIBER_TYPES as readonly string[]).includes(t));
    if (list.length === 0) return [...SUBSCRIBER_TYPES];
    if (bad.length === 0) return [...new Set(list)] as SubscriberType[];
    const allowed = SUBSCRIBER_TYPES.join(', ');
    ctx.addIssue({ code: 'custom', message: `unknown type ${bad.map((b) => `"${b}"`).join(', ')} (allowed: ${allowed})` });
    return z.NEVER;
  }),
  values: `comma-separated subset of ${code(SUBSCRIBER_TYPES)}`,
};

const webhookSecrets: Kind<string[]> = {
  schema: z.string().transform((v, ctx) => {
    const secrets = commaList(v);
    // Positions and lengths only: the values are secrets.
    const short = secrets.flatMap((s, i) => (s.length < MIN_WEBHOOK_SECRET ? [`#${i + 1} has ${s.length}`] : []));
    if (short.length === 0) return secrets;
    ctx.addIssue({
      code: 'custom',
      message: `each secret must be at least ${MIN_WEBHOOK_SECRET} characters (it is all that proves a delivery comes from the service); secret ${short.join(', secret ')}`,
    });
    return z.NEVER;
  }),
  values: `comma-separated, each at least ${MIN_WEBHOOK_SECRET} characters`,
};

const TRUST_PROXY_FORMS = 'true, false, a hop count, or comma-separated proxy addresses/CIDRs';

/**
 * TRUST_PROXY: false (the socket's peer is the client), true (trust every X-Forwarded-For hop: only
 * when nothing but the proxy can reach the port), a hop count, or the proxies' addresses/CIDRs.
 */
const trustProxy: Kind<boolean | number | string[]> = {
  schema: z.string().transform((v, ctx): boolean | number | string[] => {
    const given = v.trim().toLowerCase();
    if (given === 'false') return false;
    if (given === 'true') return true;
    if (/^\d{1,2}$/.test(given)) return Number(given);
    const list = commaList(given);
    const bad = list.filter((entry) => {
      const [address, bits, extra] = entry.split('/');
      return extra !== undefined || isIP(address ?? '') === 0 || (bits !== undefined && !/^\d{1,3}$/.test(bits));
    });
    if (list.length > 0 && bad.length === 0) return list;
    ctx.addIssue({ code: 'custom', message: `must be ${TRUST_PROXY_FORMS} (e.g. 10.0.0.1, the proxy's own address)` });
    return z.NEVER;
  }),
  values: TRUST_PROXY_FORMS.replace(/\b(true|false)\b/g, '`$1`'),
};

/** AUDIT_BUDGET: a share of the request budget as a percentage (`5%`, `50%`; the `%` may be left out), as a fraction in (0, 1]. */
const percentage: Kind<number> = {
  schema: z.string().transform((v, ctx): number => {
    const match = /^\s*(\d{1,3}(?:\.\d{1,2})?)\s*%?\s*$/.exec(v);
    const value = match ? Number(match[1]) : Number.NaN;
    if (value > 0 && value <= 100) return value / 100;
    ctx.addIssue({ code: 'custom', message: 'must be a percentage above 0 and at most 100, e.g. `5%` or `50%`' });
    return z.NEVER;
  }),
  values: 'percentage, above `0%`, at most `100%`',
};

/** AUDIT_EVERY: a duration of at least a second, or `off` (null: no audit). */
const durationOrOff: Kind<number | null> = {
  schema: z.string().transform((v, ctx): number | null => {
    if (v.trim().toLowerCase() === 'off') return null;
    const parsed = duration({ min: '1s' }).schema.safeParse(v);
    if (parsed.success) return parsed.data;
    ctx.addIssue({ code: 'custom', message: `${parsed.error.issues[0]?.message ?? 'not a duration'} (or "off")` });
    return z.NEVER;
  }),
  values: 'duration, at least `1s`, or `off`',
};

// The account the unprefixed per-account settings belong to: the only one when ACCOUNTS is unset.
export { DEFAULT_ACCOUNT };

const ACCOUNT_NAME_RULE = 'a lowercase letter, then up to 30 lowercase letters, digits or `_`, never `__`';

// Never `__`: it separates the account from the setting in `ACCOUNT_<NAME>__<SETTING>`.
const isAccountName = (name: string): boolean => /^[a-z][a-z0-9_]{0,30}$/.test(name) && !name.includes('__');

/** ACCOUNTS: account names, each valid and given once. */
const accountNames: Kind<string[]> = {
  schema: z.string().transform((v, ctx) => {
    const names = commaList(v);
    const bad = names.filter((name) => !isAccountName(name));
    const twice = [...new Set(names.filter((name, i) => names.indexOf(name) !== i))];
    for (const name of bad) {
      ctx.addIssue({ code: 'custom', message: `${JSON.stringify(name)} is not an account name (${ACCOUNT_NAME_RULE})` });
    }
    for (const name of twice) ctx.addIssue({ code: 'custom', message: `"${name}" is declared twice: two accounts cannot share a name` });
    return bad.length === 0 && twice.length === 0 ? names : z.NEVER;
  }),
  values: `comma-separated account names, each ${ACCOUNT_NAME_RULE}`,
};

// ---------------------------------------------------------------------------------------------
// The settings: Config's shape, one declaration per setting (docs/operations.md, "Configuration")

export const SETTINGS = {
  databaseUrl: setting('DATABASE_URL', schemeUrl(/^postgres(ql)?:\/\//, 'postgres://user@host:5432/db'), {
    doc: 'Postgres',
    default: 'postgres://postgres@127.0.0.1:5432/postgres',
  }),
  redisUrl: setting('REDIS_URL', schemeUrl(/^rediss?:\/\//, 'redis://host:6379'), {
    doc: 'Redis (`redis://:password@host:6379`; `rediss://` for TLS)',
    default: 'redis://127.0.0.1:6379',
  }),
  redisPrefix: setting('REDIS_PREFIX', text(/^[A-Za-z0-9_-]{1,64}$/, '1-64 letters, digits, "-" or "_"'), {
    doc: 'namespace of every Redis key (queues, limiter, locks, admin sessions); one per install',
    default: 'subscriber-mirror',
  }),
  accounts: setting('ACCOUNTS', accountNames, {
    doc: 'the accounts of the service this deployment mirrors ([Several accounts](#several-accounts)); the first is the one commands use when none is named and there is one. A setting marked *per account* is given for account `NAME` as `ACCOUNT_<NAME>__<SETTING>` (the name in capitals: `ACCOUNT_SHOP__SYNC_GROUPS`), for the account `default` also as itself',
    unset: 'one account, `default`, set by the unprefixed settings',
  }),
  legacy: {
    url: setting('MAILER_LEGACY_URL', httpUrl('the legacy host, without /api/v2'), {
      doc: 'legacy host (paths `/api/v2/…`)',
      perAccount: true,
      unset: 'required for polling the legacy API',
    }),
    apiKey: setting('MAILER_API_KEY', anyText, {
      doc: 'legacy API key',
      perAccount: true,
      unset: 'required for polling the legacy API',
      secret: true,
    }),
    apiKeyHeader: setting('MAILER_API_KEY_HEADER', text(/^[A-Za-z0-9-]+$/, 'an HTTP header name'), {
      doc: 'header carrying the key',
      perAccount: true,
      default: 'X-Service-ApiKey',
    }),
    sourceTimezone: setting('MAILER_SOURCE_TZ', timezone, {
      doc: 'timezone of legacy `Y-m-d H:i:s` values',
      perAccount: true,
      default: 'UTC',
    }),
  },
  currentApi: {
    url: setting('MAILER_API_URL', httpUrl('the current platform host, without /api'), {
      doc: "the current platform's host, without `/api`: its reads and webhook management (paths `/api/webhooks`) share it, so either name sets both; both given and different is an error",
      perAccount: true,
      unset: 'required for polling the current API and for `webhooks` commands',
      aliases: ['MAILER_WEBHOOKS_URL'],
    }),
    token: setting('MAILER_API_TOKEN', anyText, {
      doc: 'its bearer token, one for reads and webhook management; same rule',
      perAccount: true,
      unset: 'required with the URL',
      aliases: ['MAILER_WEBHOOKS_TOKEN'],
      secret: true,
    }),
  },
  sync: {
    /** Undefined until `withContextDefaults` sets the default, which depends on the legacy settings. */
    source: setting('SYNC_SOURCE', oneOf(SYNC_SOURCES), {
      doc: "where passes read: `legacy` (the v2 API: incremental and full passes) or `current` (the current platform, [upstream-current.md](upstream-current.md): full passes by cursor only, webhooks carry freshness). No read settings at all (none of `SYNC_SOURCE`, `SYNC_GROUPS`, the legacy or current read settings): a webhook-only install, nothing reconciles. Changing it while a full pass is open starts that pass again from the top (neither source can resume the other's checkpoint)",
      perAccount: true,
      unset: '`legacy` when `MAILER_LEGACY_URL` or `MAILER_API_KEY` is set, else `current`',
    }),
    groups: setting('SYNC_GROUPS', groupIds, {
      doc: 'group ids to mirror; backfills accept no other',
      perAccount: true,
      default: '',
      unset: 'required for polling (either source)',
    }),
    types: setting('SYNC_TYPES', subscriberTypes, {
      doc: 'subscriber types to mirror; backfills accept no other',
      perAccount: true,
      default: '',
      unset: 'all',
    }),
    everyMs: setting('SYNC_EVERY', duration({ min: '1s' }), {
      doc: 'incremental pass interval; unused with `SYNC_SOURCE=current`',
      default: '5m',
    }),
    lookbackMs: setting('SYNC_LOOKBACK', duration(), {
      doc: 'how far before the cursor an incremental pass re-reads',
      default: '1d',
    }),
    reconcileEveryMs: setting('RECONCILE_EVERY', duration({ min: '1s' }), {
      doc: 'full pass interval (with `SYNC_SOURCE=current` the only scheduled pass)',
      default: '24h',
    }),
    pageSize: setting('SYNC_PAGE_SIZE', wholeNumber(1, 10_000), {
      doc: '`limit` asked per page; the current API serves at most 100 whatever is asked',
      default: '1000',
    }),
    // At least a day: the proof reads the last passes, and "why was X ended" wants them for a while.
    historyRetentionMs: setting('PASS_HISTORY_RETENTION', duration({ min: '1d' }), {
      doc: 'rows of the pass history (`sync_passes`) that ended longer ago are deleted after each pass, except the passes the removal rule still reads and each pair’s newest',
      default: '30d',
    }),
  },
  // Default by source (withContextDefaults): the legacy API allows 60 a minute, the current platform
  // 120 (docs/upstream-current.md).
  apiRateLimit: setting('API_RATE_LIMIT', wholeNumberOr('auto', 1, 100_000), {
    doc: 'requests per minute per budget, all replicas together: the most used of any one budget the service grants (legacy: the budgets are learned from its rate-limit headers, one per endpoint or one for the account); `auto`: what the headers announce less a 10 % reserve',
    perAccount: true,
    unset: `\`${DEFAULT_RATE_LIMIT.legacy}\` (legacy), \`${DEFAULT_RATE_LIMIT.current}\` (current)`,
  }),
  // Per attempt, twice: for the headers, then for the body once it has room (upstream/http.ts); a
  // hung request counts as a failure and is retried.
  upstreamTimeoutMs: setting('MAILER_TIMEOUT', duration({ min: '1s' }), {
    doc: 'per-attempt timeout of requests to the mailing service, both APIs: for its headers, then for its body once the worker has room for it (the wait for that room is not counted); a request that hangs is retried',
    default: '30s',
  }),
  webhookSecrets: setting('WEBHOOK_SECRETS', webhookSecrets, {
    doc: 'extra webhook secrets (rotation); a shorter one stops every command (exit 2, naming its position and length). Secrets the service generates (10 characters, for a webhook created in its dashboard) are therefore not accepted here: run `webhooks adopt ID` instead, which stores the webhook and its secret in `webhook_endpoints`',
    perAccount: true,
    default: '',
    secret: true,
  }),
  webhookMaxBodyBytes: setting('WEBHOOK_MAX_BODY', wholeNumber(1024, 1024 * 1024 * 1024), {
    doc: 'largest accepted delivery, bytes',
    default: String(10 * 1024 * 1024),
  }),
  // At least an hour: the service retries a delivery for about 20 minutes, and the stored body hash
  // is what makes those retries duplicates.
  webhookRetentionMs: setting('WEBHOOK_RETENTION', duration({ min: '1h' }), {
    doc: 'applied and ignored deliveries older than this are deleted from `webhook_deliveries`',
    default: '30d',
  }),
  // Failed and pending rows are kept longer, for `webhooks replay`, but not for ever (they hold
  // personal data too).
  webhookFailedRetentionMs: setting('WEBHOOK_FAILED_RETENTION', duration({ min: '1h' }), {
    doc: 'failed and pending deliveries (never applied) older than this are deleted too; not shorter than `WEBHOOK_RETENTION`',
    default: '90d',
  }),
  webhookBodyMemoryBytes: setting('WEBHOOK_BODY_MEMORY', wholeNumber(1024, 16 * 1024 * 1024 * 1024), {
    doc: 'bytes of request bodies buffered at once, all requests together, whatever clients announce ([Public surface](#public-surface)); not below `WEBHOOK_MAX_BODY`',
    unset: `${DEFAULT_BODY_MEMORY / 1024 / 1024} MiB or \`WEBHOOK_MAX_BODY\``,
  }),
  // 0 disables; otherwise at least a day, so one failed reconciliation never erases anybody.
  eraseOutOfGroupsAfterMs: setting('ERASE_OUT_OF_GROUPS_AFTER', duration(), {
    doc: 'personal data of a subscriber out of every configured group for this long is erased; `0d` never, else at least `1d`',
    default: '30d',
  }),
  // The service gives up on a delivery after 3 s (docs/upstream.md, "Delivery and retries"): every
  // legitimate request is complete well within these; a client dripping bytes is cut off after them.
  http: {
    headersTimeoutMs: setting('HTTP_HEADERS_TIMEOUT', duration({ min: '1s' }), {
      doc: 'public listener: time to receive the request headers ([Public surface](#public-surface)); not longer than `HTTP_REQUEST_TIMEOUT`',
      default: '5s',
    }),
    requestTimeoutMs: setting('HTTP_REQUEST_TIMEOUT', duration({ min: '1s' }), {
      doc: 'public listener: time to receive a whole request',
      default: '10s',
    }),
    idleTimeoutMs: setting('HTTP_IDLE_TIMEOUT', duration({ min: '1s' }), {
      doc: "public listener: how long an idle kept-alive connection stays open (longer than the clients' and proxies' own, so they close first)",
      default: '75s',
    }),
    maxConnections: setting('HTTP_MAX_CONNECTIONS', wholeNumber(1, 1_000_000), {
      doc: 'open connections on the public listener at most (the ops listener keeps the defaults)',
      default: '1000',
    }),
    // Per client, so that one client holding every socket it can open cannot delay another's delivery.
    maxConnectionsPerClient: setting('HTTP_MAX_CONNECTIONS_PER_CLIENT', wholeNumber(0, 1_000_000), {
      doc: 'public listener: open connections per socket remote address at most, more are closed as they are accepted ([Public surface](#public-surface)); a peer `TRUST_PROXY` trusts is not limited. `0`: no limit; not above `HTTP_MAX_CONNECTIONS`',
      default: '32',
    }),
    requestRatePerClient: setting('HTTP_REQUEST_RATE_PER_CLIENT', wholeNumber(0, 1_000_000), {
      doc: 'public listener: requests per second per client address (behind `TRUST_PROXY`, the forwarded one), beyond answered 429 before the body is read; a stored delivery gives its request back. `0`: no limit; not below `HTTP_MAX_CONNECTIONS_PER_CLIENT`',
      default: '50',
    }),
  },
  port: setting('PORT', wholeNumber(0, 65_535), {
    doc: 'public HTTP port (webhook route, bare health)',
    default: '8080',
  }),
  host: setting('HOST', bindAddress, {
    doc: 'bind address of the public listener',
    default: '0.0.0.0',
  }),
  opsPort: setting('OPS_PORT', wholeNumber(0, 65_535), {
    doc: 'ops HTTP port (`/metrics`, `/admin`, detailed `/readyz`); must differ from `PORT`. Unset: none of these is served, unless `ADMIN_ON_PUBLIC_PORT` puts them on `PORT`',
    unset: 'none (image and compose: `9090`)',
  }),
  // Loopback by default: outside a container nothing else needs the ops port. The image sets 0.0.0.0
  // (Prometheus scrapes over the compose network), where the port is still never published.
  opsHost: setting('OPS_HOST', bindAddress, {
    doc: 'bind address of the ops listener (image and compose: `0.0.0.0`, never published)',
    default: '127.0.0.1',
  }),
  opsOnPublicPort: setting('ADMIN_ON_PUBLIC_PORT', flag, {
    doc: '`true`: serve `/metrics`, `/admin` and the detailed `/readyz` on `PORT` (not with `OPS_PORT`); for a loopback-only development setup such as the demo. With a `HOST` that is not loopback (the default is not) it is refused at start unless `EXPOSE_ADMIN_BEYOND_LOOPBACK=true`',
    default: 'false',
  }),
  adminToken: setting('ADMIN_TOKEN', minLength(16, 'it guards the admin API'), {
    doc: 'token for the admin routes and the status page; admin routes are off without it. Needs `OPS_PORT` or `ADMIN_ON_PUBLIC_PORT=true` (otherwise every command exits 2, as for any bad setting)',
    secret: true,
  }),
  // HOST defaults to every interface (right for the receiver): ADMIN_ON_PUBLIC_PORT alone would put
  // the admin pages on all of them (docs/security.md, "What is on the ops port").
  exposeAdminBeyondLoopback: setting('EXPOSE_ADMIN_BEYOND_LOOPBACK', flag, {
    doc: '`true`: confirms that `ADMIN_ON_PUBLIC_PORT=true` with a `HOST` that is not loopback is meant (e.g. a container whose port is published on loopback only); refused at start otherwise',
    default: 'false',
  }),
  dashboardWrite: setting('DASHBOARD_WRITE', flag, {
    doc: '`true`: the BullMQ dashboard (`/admin/queues`) may change queues (add, retry, clean, empty, pause…), from our own pages only; read-only otherwise (backfills go through `/admin/backfill`)',
    default: 'false',
  }),
  adminCookieInsecure: setting('ADMIN_COOKIE_INSECURE', flag, {
    doc: '`true`: the admin session cookie is not `Secure` on plain-http requests (development over http; https requests always get `Secure`)',
    default: 'false',
  }),
  trustProxy: setting('TRUST_PROXY', trustProxy, {
    doc: "on the public port only (never the ops port): read the client address, protocol and host from `X-Forwarded-*` (Fastify's `trustProxy`). `true` trusts every hop: prefer the proxy's own address, never a network other containers share, such as Docker's bridge range ([security.md](security.md#admin-authentication))",
    default: 'false',
  }),
  audit: {
    everyMs: setting('AUDIT_EVERY', durationOrOff, {
      doc: 'how often the [audit](#the-audit) checks each group × type against the service (values down to `1s` are accepted, for tests and demos); `off` disables it',
      default: '15m',
    }),
    budgetShare: setting('AUDIT_BUDGET', percentage, {
      doc: "the audit's share of the request budget (`API_RATE_LIMIT`): when `AUDIT_EVERY` cannot be honoured within it, pairs take turns and `start`, `status` and the status page say at what period each pair is really checked ([the audit](#the-audit))",
      default: '5%',
    }),
    sampleSize: setting('AUDIT_SAMPLE', wholeNumber(1, 10_000), {
      doc: 'rows the audit reads back per group × type per tick',
      unset: '`SYNC_PAGE_SIZE`',
    }),
    reenableWebhooks: setting('WEBHOOKS_REENABLE', flag, {
      doc: '`true`: the audit enables again a managed webhook the service disabled (logged), never one an operator disabled with `webhooks update --disable`',
      default: 'false',
    }),
    settleMs: setting('AUDIT_SETTLE', duration({ min: '1s' }), {
      doc: 'how long the service may take to deliver a stamped change by webhook (its batching, about a minute): the audit reports nothing younger than this (on the legacy source nothing younger than 2 × `SYNC_EVERY` either). Lower it only against a service that delivers faster, such as the simulator with a `timeScale` (the fault suite)',
      default: '2m',
    }),
  },
  metricsRefreshMs: setting('METRICS_REFRESH_EVERY', duration({ min: '1s' }), {
    doc: 'how often gauges read from Postgres and Redis are refreshed (a scrape only reads the registry)',
    default: '15s',
  }),
  history: {
    enabled: setting('HISTORY', onOff, {
      doc: '`on`: keep every version of every subscriber and every membership period (`subscriber_versions`, `group_membership_periods`); `off`: write none (what is already kept stays)',
      default: 'on',
    }),
    // At least an hour, so a typo like 10s cannot wipe history in a minute.
    retentionMs: setting('HISTORY_RETENTION', duration({ min: '1h' }), {
      doc: 'versions whose `valid_to` and membership periods whose `ended_at` are older than this are deleted (hourly); current versions and open periods always stay',
      unset: 'keep all',
    }),
  },
  webhookPath: setting('WEBHOOK_PATH', text(/^\/[A-Za-z0-9/_.-]*$/, 'a path starting with /'), {
    doc: 'receiver path',
    default: '/webhooks',
  }),
  logLevel: setting('LOG_LEVEL', oneOf(LOG_LEVELS), {
    doc: 'least severe level logged',
    default: 'info',
  }),
  logFormat: setting('LOG_FORMAT', oneOf(LOG_FORMATS), {
    doc: '`auto`: human-readable lines on a terminal unless `NODE_ENV=production`, JSON otherwise',
    default: 'auto',
  }),
  shutdownTimeoutMs: setting('SHUTDOWN_TIMEOUT', duration(), {
    doc: 'longest graceful shutdown before a forced exit',
    default: '30s',
  }),
};

/** Every variable name a setting is read from (aliases too). */
export type EnvName = NamesOf<typeof SETTINGS>;

// ---------------------------------------------------------------------------------------------
// One account's values: SETTINGS' values → Config's shape

type Values = ValuesOf<typeof SETTINGS>;

/** SYNC_SOURCE's default: legacy when legacy settings are given, else current. */
const defaultSource = (legacyGiven: boolean): SyncSource => (legacyGiven ? 'legacy' : 'current');

/** The values whose default depends on other settings (said in their `unset` docs). */
function withContextDefaults(v: Values) {
  const legacyGiven = v.legacy.url !== undefined || v.legacy.apiKey !== undefined;
  const source = v.sync.source ?? defaultSource(legacyGiven);
  return {
    ...v,
    sync: {
      ...v.sync,
      source,
      /** False for a webhook-only install (no read settings at all): nothing reconciles. */
      reconciles: legacyGiven || v.sync.source !== undefined || v.sync.groups.length > 0,
    },
    /** Webhook management: the same host and token as `currentApi` (its aliases name them). */
    webhooksApi: { ...v.currentApi },
    /** A number even with `auto`: the platform's documented limit, until the headers announce one. */
    apiRateLimit: typeof v.apiRateLimit === 'number' ? v.apiRateLimit : DEFAULT_RATE_LIMIT[source],
    apiRateLimitAuto: v.apiRateLimit === 'auto',
    webhookBodyMemoryBytes: v.webhookBodyMemoryBytes ?? Math.max(DEFAULT_BODY_MEMORY, v.webhookMaxBodyBytes),
  };
}

/** A bind address only this machine reaches: 127.0.0.0/8, ::1 (also IPv4-mapped) or localhost. */
function isLoopback(host: string): boolean {
  const h = host.trim().toLowerCase();
  return h === 'localhost' || h === '::1' || /^(::ffff:)?127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/** Rules between settings, reported with the others. */
function crossChecks(c: ReturnType<typeof withContextDefaults>, report: Report<EnvName>): void {
  if (c.webhookBodyMemoryBytes < c.webhookMaxBodyBytes) {
    report(
      'WEBHOOK_BODY_MEMORY',
      `${c.webhookBodyMemoryBytes} is below WEBHOOK_MAX_BODY (${c.webhookMaxBodyBytes}); one largest body must fit`,
    );
  }
  if (c.webhookFailedRetentionMs < c.webhookRetentionMs) {
    report('WEBHOOK_FAILED_RETENTION', 'must not be shorter than WEBHOOK_RETENTION (failed rows are kept for replay)');
  }
  if (c.eraseOutOfGroupsAfterMs !== 0 && c.eraseOutOfGroupsAfterMs < 86_400_000) {
    report('ERASE_OUT_OF_GROUPS_AFTER', 'must be 0 (never) or at least 1d');
  }
  if (c.http.headersTimeoutMs > c.http.requestTimeoutMs) {
    report('HTTP_HEADERS_TIMEOUT', 'must not be longer than HTTP_REQUEST_TIMEOUT');
  }
  if (c.http.maxConnectionsPerClient > c.http.maxConnections) {
    report('HTTP_MAX_CONNECTIONS_PER_CLIENT', `must not be above HTTP_MAX_CONNECTIONS (${c.http.maxConnections})`);
  }
  // A client then never has more requests in flight than tokens: valid deliveries alone are never refused.
  if (c.http.requestRatePerClient !== 0 && c.http.requestRatePerClient < c.http.maxConnectionsPerClient) {
    report(
      'HTTP_REQUEST_RATE_PER_CLIENT',
      `must not be below HTTP_MAX_CONNECTIONS_PER_CLIENT (${c.http.maxConnectionsPerClient}), or 0; otherwise a client sending only valid deliveries could be refused`,
    );
  }
  if (c.opsPort !== undefined && c.opsPort !== 0 && c.opsPort === c.port) {
    report('OPS_PORT', 'must differ from PORT (or unset it and set ADMIN_ON_PUBLIC_PORT=true to serve everything on PORT)');
  }
  if (c.opsOnPublicPort && c.opsPort !== undefined) {
    report('ADMIN_ON_PUBLIC_PORT', 'set either OPS_PORT or ADMIN_ON_PUBLIC_PORT=true, not both');
  }
  if (c.opsOnPublicPort && c.opsPort === undefined && !isLoopback(c.host) && !c.exposeAdminBeyondLoopback) {
    report(
      'ADMIN_ON_PUBLIC_PORT',
      `with HOST=${c.host} (not loopback) it would serve /admin, /metrics and the detailed /readyz beyond this machine; set OPS_PORT (e.g. 9090; OPS_HOST is loopback by default) instead, or HOST=127.0.0.1, or confirm with EXPOSE_ADMIN_BEYOND_LOOPBACK=true`,
    );
  }
  if (c.adminToken !== undefined && c.opsPort === undefined && !c.opsOnPublicPort) {
    report(
      'ADMIN_TOKEN',
      'the admin pages are served on OPS_PORT only; set OPS_PORT (e.g. 9090), or ADMIN_ON_PUBLIC_PORT=true to serve them on PORT',
    );
  }
}

// ---------------------------------------------------------------------------------------------
// Accounts: which settings are an account's, and the variables each account reads them from

/** The names of the per-account settings (aliases too), unprefixed. */
export const PER_ACCOUNT_SETTINGS: readonly EnvName[] = settingsOf(SETTINGS)
  .filter((s) => s.declaration.perAccount)
  .flatMap((s) => s.names as readonly EnvName[]);

const isPerAccount = (name: string): boolean => (PER_ACCOUNT_SETTINGS as readonly string[]).includes(name);

const SETTING_NAMES: ReadonlySet<string> = new Set(settingsOf(SETTINGS).flatMap((s) => s.names));

/** What precedes a setting's name in account `account`'s variables: `ACCOUNT_SHOP__` for `shop`. */
export const accountPrefix = (account: string): string => `ACCOUNT_${account.toUpperCase()}__`;

/** A variable of the accounts' form, whatever its account: `ACCOUNT_<NAME>__<SETTING>`. */
const ACCOUNT_VARIABLE = /^ACCOUNT_(.+?)__/;

/** The variables account `account` reads a per-account setting from: its own, and for `default` the unprefixed ones first. */
function accountNamesOf(account: string, names: readonly [string, ...string[]]): [string, ...string[]] {
  const [first, ...others] = names.map((name) => accountPrefix(account) + name) as [string, ...string[]];
  return account === DEFAULT_ACCOUNT ? [...names, first, ...others] : [first, ...others];
}

/** SETTINGS as account `account` reads them: each per-account setting from that account's variables. */
function settingsOfAccount(account: string): typeof SETTINGS {
  return renamed(SETTINGS, (s) => (s.declaration.perAccount ? accountNamesOf(account, s.names) : undefined));
}

/**
 * The accounts ACCOUNTS declares, in order: its valid names, once each (the bad ones are reported by
 * its setting); `default` alone when it is unset or names none.
 */
function declaredAccounts(env: NodeJS.ProcessEnv): string[] {
  const valid = [...new Set(commaList(env.ACCOUNTS).filter(isAccountName))];
  return valid.length > 0 ? valid : [DEFAULT_ACCOUNT];
}

const present = (env: NodeJS.ProcessEnv, name: string): boolean => {
  const raw = env[name];
  return raw !== undefined && raw.trim() !== '';
};

/**
 * Variables of the accounts' form that no declared account reads (an undeclared account, a name
 * that is no per-account setting), and per-account settings given unprefixed when there is no
 * account `default` to take them. Blank variables count as unset, as everywhere.
 */
function accountVariableProblems(env: NodeJS.ProcessEnv, accounts: readonly string[], report: Report): void {
  // The longest prefix first: `ACCOUNT_A___X` is account `a_`'s, not `a`'s (no setting starts with `_`).
  const prefixes = accounts.map((account) => accountPrefix(account)).sort((a, b) => b.length - a.length);
  for (const variable of Object.keys(env).sort()) {
    const loose = ACCOUNT_VARIABLE.exec(variable);
    if (loose === null || !present(env, variable)) continue;
    const prefix = prefixes.find((p) => variable.startsWith(p));
    if (prefix === undefined) {
      report(variable, `no account "${loose[1]?.toLowerCase()}" is declared: add it to ACCOUNTS (declared: ${accounts.join(', ')})`);
      continue;
    }
    const setting = variable.slice(prefix.length);
    if (isPerAccount(setting)) continue;
    report(
      variable,
      SETTING_NAMES.has(setting)
        ? `${setting} is deployment-wide, the same for every account: set it once, as ${setting}`
        : `${setting} is not a per-account setting (those are ${PER_ACCOUNT_SETTINGS.join(', ')})`,
    );
  }
  if (accounts.includes(DEFAULT_ACCOUNT)) return;
  for (const name of PER_ACCOUNT_SETTINGS.filter((n) => present(env, n))) {
    report(
      name,
      `a per-account setting given unprefixed, but ACCOUNTS declares no account "${DEFAULT_ACCOUNT}" to take it: name its account, e.g. ${accountPrefix(accounts[0] ?? DEFAULT_ACCOUNT)}${name}`,
    );
  }
}

/** Secrets given to two accounts or more, reported by the names of their variables (never the values). */
function sharedSecretProblems(
  given: ReadonlyArray<{ account: string; secrets: Array<{ name: string; values: string[] }> }>,
  report: Report,
) {
  const holders = new Map<string, Array<{ account: string; name: string }>>();
  for (const { account, secrets } of given) {
    for (const { name, values } of secrets)
      for (const value of values) holders.set(value, [...(holders.get(value) ?? []), { account, name }]);
  }
  const reported = new Set<string>();
  for (const held of holders.values()) {
    const accounts = [...new Set(held.map((h) => h.account))];
    const [first, ...others] = [...new Set(held.map((h) => h.name))];
    if (accounts.length < 2 || first === undefined || reported.has([first, ...others].join())) continue;
    reported.add([first, ...others].join());
    report(
      first,
      `holds the same secret as ${others.join(', ')} (accounts ${accounts.join(', ')}): each account needs a key, token and webhook secrets of its own`,
    );
  }
}

// ---------------------------------------------------------------------------------------------
// The schema: the environment → each account's SETTINGS values → Config

type Settled = ReturnType<typeof withContextDefaults>;

/**
 * The parts of Config that are an account's: the same shapes as those fields of Config. `redisPrefix`
 * is the account's Redis namespace ({@link accountRedisPrefix}), derived from REDIS_PREFIX.
 */
type AccountParts = Pick<
  Settled,
  'legacy' | 'currentApi' | 'webhooksApi' | 'apiRateLimit' | 'apiRateLimitAuto' | 'webhookSecrets' | 'redisPrefix'
> & {
  sync: Pick<Settled['sync'], 'source' | 'reconciles' | 'groups' | 'types'>;
};

/** One account: its name, who it is at the service and what to read (docs/operations.md, "Several accounts"). */
export interface AccountConfig extends AccountParts {
  readonly name: string;
}

/**
 * The settings. Its per-account fields are those of `account`: the first declared account as
 * loaded, any other through {@link accountConfig}. `accounts` holds every declared account, in order.
 */
export type Config = Omit<Settled, 'accounts'> & {
  /**
   * REDIS_PREFIX itself: the deployment's own keys (admin sessions) and connection names. An
   * account's keys are under its `redisPrefix` ({@link accountRedisPrefix}).
   */
  redisNamespace: string;
  /** The account the per-account fields are of. */
  account: string;
  /** Every declared account, in ACCOUNTS' order; at least one. */
  accounts: readonly AccountConfig[];
};

/**
 * The namespace of account `account`'s Redis keys (its queue, schedulers, locks, rate budgets, auth
 * pause), so that no two accounts share one. Account `default` keeps REDIS_PREFIX itself, so that an
 * install upgraded from one account keeps its schedulers, learned budgets and locks; any other's is
 * `<REDIS_PREFIX>:account:<name>`. By name, not by place in ACCOUNTS: reordering the accounts hands
 * no account another's queue or budgets. No key of `default` starts with `account:` after the prefix,
 * so the namespaces cannot overlap.
 */
export function accountRedisPrefix(redisPrefix: string, account: string): string {
  return account === DEFAULT_ACCOUNT ? redisPrefix : `${redisPrefix}:account:${account}`;
}

function accountOf(name: string, c: Settled): AccountConfig {
  const { source, reconciles, groups, types } = c.sync;
  return {
    name,
    redisPrefix: accountRedisPrefix(c.redisPrefix, name),
    legacy: c.legacy,
    currentApi: c.currentApi,
    webhooksApi: c.webhooksApi,
    sync: { source, reconciles, groups, types },
    apiRateLimit: c.apiRateLimit,
    apiRateLimitAuto: c.apiRateLimitAuto,
    webhookSecrets: c.webhookSecrets,
  };
}

/** Account `account`'s variables, parsed (undefined when one does not parse: reported). */
function variablesOfAccount(env: NodeJS.ProcessEnv, account: string, report: Report) {
  const tree = settingsOfAccount(account);
  const result = variablesSchema(tree).safeParse(env);
  if (result.success) return { account, tree, variables: result.data };
  for (const issue of result.error.issues) report(String(issue.path[0] ?? 'environment'), issue.message);
  return undefined;
}

/**
 * Every declared account's settings, each parsed from its own variables, then put in Config's shape,
 * the defaults that depend on other settings filled in, the rules between settings and between
 * accounts checked. Undefined when anything was reported.
 */
function parseEnvironment(env: NodeJS.ProcessEnv, report: Report): Config | undefined {
  const reported = new Set<string>();
  // A deployment-wide problem is found once per account: reported once.
  const once: Report = (name, message) => {
    if (reported.has(`${name}\n${message}`)) return;
    reported.add(`${name}\n${message}`);
    report(name, message);
  };
  const names = declaredAccounts(env);
  accountVariableProblems(env, names, once);
  const parsed = names.map((account) => variablesOfAccount(env, account, once));
  const accounts = parsed.filter((p) => p !== undefined);
  if (accounts.length < parsed.length) return undefined;
  const settled = accounts.map((p) => ({ ...p, values: withContextDefaults(valuesOf(p.tree, p.variables, once)) }));
  const [first] = settled;
  if (first === undefined) return undefined;
  crossChecks(first.values, once);
  sharedSecretProblems(
    settled.map((p) => ({ account: p.account, secrets: givenSecrets(p.tree, p.variables, (s) => s.declaration.perAccount === true) })),
    once,
  );
  if (reported.size > 0) return undefined;
  const { accounts: _names, ...settings } = first.values;
  // The per-account fields are the first account's, its Redis prefix too; REDIS_PREFIX itself stays as the deployment's.
  return {
    ...settings,
    redisPrefix: accountRedisPrefix(settings.redisPrefix, first.account),
    redisNamespace: settings.redisPrefix,
    account: first.account,
    accounts: settled.map((p) => accountOf(p.account, p.values)),
  };
}

/**
 * The environment's one schema: every declared account's variables parsed by their settings, then
 * (once all parse) the values put in Config's shape, the defaults that depend on other settings filled
 * in, and the rules between settings and accounts checked. Every issue's path is the variable it is about.
 */
export const configSchema = z
  .custom<NodeJS.ProcessEnv>((v) => typeof v === 'object' && v !== null, 'the environment must be an object')
  .transform((env, ctx): Config => {
    const report: Report = (name, message) => ctx.addIssue({ code: 'custom', path: [name], message });
    return parseEnvironment(env, report) ?? z.NEVER;
  });

/** The table of docs/operations.md, "Configuration" (`npm run docs:config` writes it there). */
export const configTable = (): string => settingsTable(SETTINGS);

// ---------------------------------------------------------------------------------------------
// Choosing an account

/** An account a command or request names that is not declared, or none named where several are: exit 2. */
export class AccountChoiceError extends UsageError {
  constructor(message: string) {
    super(message, { printUsage: false });
  }
}

/**
 * The account `name` names; with no name, the only account. Several accounts and no name, or a name
 * not declared, is an {@link AccountChoiceError} naming the declared ones.
 */
export function findAccount(config: Pick<Config, 'accounts'>, name: string | undefined): AccountConfig {
  const declared = config.accounts.map((a) => a.name).join(', ');
  if (name === undefined) {
    const [only, ...others] = config.accounts;
    if (only !== undefined && others.length === 0) return only;
    throw new AccountChoiceError(`several accounts are declared (${declared}): name one with --account`);
  }
  const found = config.accounts.find((a) => a.name === name);
  if (found) return found;
  throw new AccountChoiceError(`no account ${JSON.stringify(name)} is declared (ACCOUNTS: ${declared})`);
}

/** `config` for account `name`: its per-account fields that account's, everything else the same. */
export function accountConfig(config: Config, name: string): Config {
  const { name: account, sync, ...parts } = findAccount(config, name);
  return { ...config, ...parts, sync: { ...config.sync, ...sync }, account };
}

// ---------------------------------------------------------------------------------------------
// What each use needs

/** Required settings, each named by the name that suits the use (its aliases are accepted too). */
const READS_BY_SOURCE: Record<SyncSource, EnvName[]> = {
  legacy: ['MAILER_LEGACY_URL', 'MAILER_API_KEY', 'SYNC_GROUPS'],
  current: ['MAILER_API_URL', 'MAILER_API_TOKEN', 'SYNC_GROUPS'],
};

const MANAGE_WEBHOOKS: EnvName[] = ['MAILER_WEBHOOKS_URL', 'MAILER_WEBHOOKS_TOKEN'];

/** A name first, then the setting's other names. */
function namesOfSettingOf(name: EnvName): string[] {
  const names = settingNames().find((all) => all.includes(name)) ?? [name];
  return [name, ...names.filter((other) => other !== name)];
}

const settingNames = () => settingsOf(SETTINGS).map((s) => s.names as readonly string[]);

/**
 * The variables account `account` reads setting `name` from (`all`), and those a message names
 * (`shown`): the unprefixed ones for `default`, whose prefixed ones are the rarer form.
 */
function namesForAccount(account: string, name: EnvName): { all: string[]; shown: string[] } {
  const own = namesOfSettingOf(name);
  if (!isPerAccount(name)) return { all: own, shown: own };
  const prefixed = own.map((n) => accountPrefix(account) + n);
  return account === DEFAULT_ACCOUNT ? { all: [...own, ...prefixed], shown: own } : { all: prefixed, shown: prefixed };
}

const givenFor = (env: NodeJS.ProcessEnv, account: string, name: EnvName): string | undefined =>
  namesForAccount(account, name)
    .all.map((n) => env[n])
    .find((raw) => raw !== undefined && raw.trim() !== '');

const presentFor = (env: NodeJS.ProcessEnv, account: string, name: EnvName) => givenFor(env, account, name) !== undefined;

/** Settings that ask for reads: any legacy read setting, SYNC_SOURCE or SYNC_GROUPS. */
const READ_SETTINGS: EnvName[] = ['MAILER_LEGACY_URL', 'MAILER_API_KEY', 'SYNC_SOURCE', 'SYNC_GROUPS'];

/** SYNC_SOURCE of an account (the first declared by default), or its default: legacy when legacy settings are given, else current. */
export function syncSourceOf(env: NodeJS.ProcessEnv, account: string = declaredAccounts(env)[0] ?? DEFAULT_ACCOUNT): SyncSource {
  const given = givenFor(env, account, 'SYNC_SOURCE')?.trim().toLowerCase();
  if (given === 'legacy' || given === 'current') return given;
  return defaultSource(presentFor(env, account, 'MAILER_LEGACY_URL') || presentFor(env, account, 'MAILER_API_KEY'));
}

/** One problem per required setting missing under every one of its names. */
function missing(env: NodeJS.ProcessEnv, account: string, required: EnvName[], reason: string): string[] {
  return required.flatMap((name) => {
    if (presentFor(env, account, name)) return [];
    const [shown, ...others] = namesForAccount(account, name).shown;
    return [`${shown}: required for ${reason}${others.length > 0 ? ` (or ${others.join(', ')})` : ''}`];
  });
}

function problemsOfNeed(env: NodeJS.ProcessEnv, need: ConfigNeed, account: string): string[] {
  const source = syncSourceOf(env, account);
  const reason = source === 'legacy' ? 'polling' : 'polling the current API';
  const reads = () => missing(env, account, READS_BY_SOURCE[source], reason);
  switch (need) {
    case 'poll':
      return reads();
    case 'reconcile':
      return READ_SETTINGS.some((name) => presentFor(env, account, name)) ? reads() : [];
    case 'manage-webhooks':
      return missing(env, account, MANAGE_WEBHOOKS, 'webhooks commands');
    case 'receive':
    case 'database':
      return [];
  }
}

export function needsForRole(role: Role): ConfigNeed[] {
  // With no read settings at all, a worker still applies deliveries (a webhook-only install).
  if (role === 'worker') return ['reconcile'];
  if (role === 'receiver') return ['receive'];
  return ['reconcile', 'receive'];
}

/** Said at start, by `status` and on the status page when no read settings are given. */
export const NOTHING_RECONCILES =
  'webhook-only install: no read settings (SYNC_SOURCE, SYNC_GROUPS, MAILER_LEGACY_URL/MAILER_API_KEY or MAILER_API_URL/MAILER_API_TOKEN), so nothing reconciles: changes arrive by webhook only, and a missed delivery or a removal the service does not announce is never corrected';

/** The credential passes read with (its auth pause is keyed by it); undefined when nothing reconciles. */
export function readCredentialOf(config: Config): string | undefined {
  if (!config.sync.reconciles) return undefined;
  return config.sync.source === 'legacy' ? config.legacy.apiKey : config.currentApi.token;
}

/** `text` with every secret in it replaced (longest first, so no part of one is left). */
function redact(text: string, secrets: string[]): string {
  return [...secrets].sort((a, b) => b.length - a.length).reduce((t, s) => t.split(s).join('[redacted]'), text);
}

/**
 * Parses the environment. Throws one ConfigError listing every bad or missing variable; values of
 * secret settings are never echoed, only their names. `needs` are checked for every declared account,
 * or for `account` alone when it is given (a command serving one account); an `account` not declared
 * is an {@link AccountChoiceError}.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, needs: ConfigNeed[] = [], account?: string): Config {
  const result = configSchema.safeParse(env);
  const problems = result.success ? [] : result.error.issues.map((i) => `${String(i.path[0] ?? 'environment')}: ${i.message}`);
  const checked = declaredAccounts(env).filter((name) => account === undefined || name === account);
  for (const name of checked) for (const need of needs) problems.push(...problemsOfNeed(env, need, name));
  if (!result.success || problems.length > 0) {
    const secrets = secretValuesIn(env);
    throw new ConfigError([...new Set(problems)].map((p) => redact(p, secrets)));
  }
  if (account !== undefined) findAccount(result.data, account);
  return result.data;
}

/**
 * Only what `migrate` uses: the database's address. A setting it does not use (a bad ADMIN_TOKEN, a
 * rule between the ops settings) must not stop a migration, so nothing else is parsed.
 */
export function loadDatabaseUrl(env: NodeJS.ProcessEnv = process.env): string {
  const result = SETTINGS.databaseUrl.schema.safeParse(env.DATABASE_URL);
  if (result.success) return result.data;
  throw new ConfigError([`DATABASE_URL: ${result.error.issues[0]?.message ?? 'invalid'}`]);
}

/** Values that must never be printed, every account's; `log.ts` also redacts them wherever they appear in text. */
export function secretsOf(config: Config): string[] {
  const all = [...secretValues(SETTINGS, config), ...config.accounts.flatMap((account) => secretValues(SETTINGS, account))];
  return [...new Set(all)];
}

const SECRET_SETTING_NAMES = settingsOf(SETTINGS)
  .filter((s) => s.declaration.secret)
  .flatMap((s) => s.names);

/**
 * The secret variables' raw values, every account's (declared or not), for when the environment does
 * not parse (nothing else to go by).
 */
export function secretValuesIn(env: NodeJS.ProcessEnv): string[] {
  const perAccount = Object.entries(env)
    .filter(([name]) => ACCOUNT_VARIABLE.test(name) && SECRET_SETTING_NAMES.some((secret) => name.endsWith(`__${secret}`)))
    .map(([, raw]) => raw?.trim() ?? '')
    .flatMap((raw) => [raw, ...commaList(raw)]);
  return [...new Set([...rawSecretValues(SETTINGS, env), ...perAccount].filter((s) => s.length > 0))];
}

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
 */
import { isIP } from 'node:net';
import { z } from 'zod';
import { SUBSCRIBER_TYPES, type SubscriberType } from './db/schema.js';
import {
  anyText,
  bindAddress,
  commaList,
  duration,
  flag,
  httpUrl,
  type Kind,
  minLength,
  onOff,
  type NamesOf,
  oneOf,
  rawSecretValues,
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
  legacy: {
    url: setting('MAILER_LEGACY_URL', httpUrl('the legacy host, without /api/v2'), {
      doc: 'legacy host (paths `/api/v2/…`)',
      unset: 'required for polling the legacy API',
    }),
    apiKey: setting('MAILER_API_KEY', anyText, {
      doc: 'legacy API key',
      unset: 'required for polling the legacy API',
      secret: true,
    }),
    apiKeyHeader: setting('MAILER_API_KEY_HEADER', text(/^[A-Za-z0-9-]+$/, 'an HTTP header name'), {
      doc: 'header carrying the key',
      default: 'X-Service-ApiKey',
    }),
    sourceTimezone: setting('MAILER_SOURCE_TZ', timezone, {
      doc: 'timezone of legacy `Y-m-d H:i:s` values',
      default: 'UTC',
    }),
  },
  currentApi: {
    url: setting('MAILER_API_URL', httpUrl('the current platform host, without /api'), {
      doc: "the current platform's host, without `/api`: its reads and webhook management (paths `/api/webhooks`) share it, so either name sets both; both given and different is an error",
      unset: 'required for polling the current API and for `webhooks` commands',
      aliases: ['MAILER_WEBHOOKS_URL'],
    }),
    token: setting('MAILER_API_TOKEN', anyText, {
      doc: 'its bearer token, one for reads and webhook management; same rule',
      unset: 'required with the URL',
      aliases: ['MAILER_WEBHOOKS_TOKEN'],
      secret: true,
    }),
  },
  sync: {
    /** Undefined until `withContextDefaults` sets the default, which depends on the legacy settings. */
    source: setting('SYNC_SOURCE', oneOf(SYNC_SOURCES), {
      doc: "where passes read: `legacy` (the v2 API: incremental and full passes) or `current` (the current platform, [upstream-current.md](upstream-current.md): full passes by cursor only, webhooks carry freshness). No read settings at all (none of `SYNC_SOURCE`, `SYNC_GROUPS`, the legacy or current read settings): a webhook-only install, nothing reconciles. Changing it while a full pass is open starts that pass again from the top (neither source can resume the other's checkpoint)",
      unset: '`legacy` when `MAILER_LEGACY_URL` or `MAILER_API_KEY` is set, else `current`',
    }),
    groups: setting('SYNC_GROUPS', groupIds, {
      doc: 'group ids to mirror; backfills accept no other',
      default: '',
      unset: 'required for polling (either source)',
    }),
    types: setting('SYNC_TYPES', subscriberTypes, {
      doc: 'subscriber types to mirror; backfills accept no other',
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
    unset: `\`${DEFAULT_RATE_LIMIT.legacy}\` (legacy), \`${DEFAULT_RATE_LIMIT.current}\` (current)`,
  }),
  // Per attempt (connect, headers and body); a hung request counts as a failure and is retried.
  upstreamTimeoutMs: setting('MAILER_TIMEOUT', duration({ min: '1s' }), {
    doc: 'per-attempt timeout of requests to the mailing service, both APIs (a request that hangs is retried)',
    default: '30s',
  }),
  webhookSecrets: setting('WEBHOOK_SECRETS', webhookSecrets, {
    doc: 'extra webhook secrets (rotation); a shorter one stops every command (exit 2, naming its position and length). Secrets the service generates (10 characters, for a webhook created in its dashboard) are therefore not accepted here: run `webhooks adopt ID` instead, which stores the webhook and its secret in `webhook_endpoints`',
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
// The schema: variables → SETTINGS' values → Config

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

/**
 * The environment's one schema: each variable parsed by its setting, then (once all parse) the values
 * put in Config's shape, the defaults that depend on other settings filled in, and the rules between
 * settings checked. Every issue's path is the variable it is about.
 */
export const configSchema = variablesSchema(SETTINGS).transform((variables, ctx) => {
  const report: Report = (name, message) => ctx.addIssue({ code: 'custom', path: [name], message });
  const config = withContextDefaults(valuesOf(SETTINGS, variables, report));
  crossChecks(config, report);
  return config;
});

export type Config = z.output<typeof configSchema>;

/** The table of docs/operations.md, "Configuration" (`npm run docs:config` writes it there). */
export const configTable = (): string => settingsTable(SETTINGS);

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

const present = (env: NodeJS.ProcessEnv, name: string): boolean => {
  const raw = env[name];
  return raw !== undefined && raw.trim() !== '';
};

/** Settings that ask for reads: any legacy read setting, SYNC_SOURCE or SYNC_GROUPS. */
const READ_SETTINGS: EnvName[] = ['MAILER_LEGACY_URL', 'MAILER_API_KEY', 'SYNC_SOURCE', 'SYNC_GROUPS'];

const readSettingsGiven = (env: NodeJS.ProcessEnv): boolean => READ_SETTINGS.some((name) => present(env, name));

/** SYNC_SOURCE, or its default: legacy when legacy settings are given, else current. */
export function syncSourceOf(env: NodeJS.ProcessEnv): SyncSource {
  const given = env.SYNC_SOURCE?.trim().toLowerCase();
  if (given === 'legacy' || given === 'current') return given;
  return defaultSource(present(env, 'MAILER_LEGACY_URL') || present(env, 'MAILER_API_KEY'));
}

/** One problem per required setting missing under every one of its names. */
function missing(env: NodeJS.ProcessEnv, required: EnvName[], reason: string): string[] {
  return required.flatMap((name) => {
    const [, ...others] = namesOfSettingOf(name);
    if ([name, ...others].some((n) => present(env, n))) return [];
    return [`${name}: required for ${reason}${others.length > 0 ? ` (or ${others.join(', ')})` : ''}`];
  });
}

function problemsOfNeed(env: NodeJS.ProcessEnv, need: ConfigNeed): string[] {
  const source = syncSourceOf(env);
  const reason = source === 'legacy' ? 'polling' : 'polling the current API';
  switch (need) {
    case 'poll':
      return missing(env, READS_BY_SOURCE[source], reason);
    case 'reconcile':
      return readSettingsGiven(env) ? missing(env, READS_BY_SOURCE[source], reason) : [];
    case 'manage-webhooks':
      return missing(env, MANAGE_WEBHOOKS, 'webhooks commands');
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
 * secret settings are never echoed, only their names.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, needs: ConfigNeed[] = []): Config {
  const result = configSchema.safeParse(env);
  const problems = result.success ? [] : result.error.issues.map((i) => `${String(i.path[0] ?? 'environment')}: ${i.message}`);
  for (const need of needs) problems.push(...problemsOfNeed(env, need));
  if (!result.success || problems.length > 0) {
    const secrets = secretValuesIn(env);
    throw new ConfigError([...new Set(problems)].map((p) => redact(p, secrets)));
  }
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

/** Values that must never be printed; `log.ts` also redacts them wherever they appear in text. */
export function secretsOf(config: Config): string[] {
  return secretValues(SETTINGS, config);
}

/** The secret variables' raw values, for when the environment does not parse (nothing else to go by). */
export function secretValuesIn(env: NodeJS.ProcessEnv): string[] {
  return rawSecretValues(SETTINGS, env);
}

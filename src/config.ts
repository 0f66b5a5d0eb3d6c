/**
 * Environment → one typed, validated Config (docs/operations.md, "Configuration").
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

export interface Config {
  databaseUrl: string;
  redisUrl: string;
  /** Namespace of every Redis key (BullMQ queues, limiter, locks); one per install. */
  redisPrefix: string;
  legacy: {
    url: string | undefined;
    apiKey: string | undefined;
    apiKeyHeader: string;
    sourceTimezone: string;
  };
  /** The current platform's API (MAILER_API_URL/MAILER_API_TOKEN or their MAILER_WEBHOOKS_* aliases). */
  currentApi: { url: string | undefined; token: string | undefined };
  /** Webhook management: the same host and token as `currentApi`. */
  webhooksApi: { url: string | undefined; token: string | undefined };
  sync: {
    /** SYNC_SOURCE; default legacy when legacy settings are given, else current. */
    source: SyncSource;
    /** False for a webhook-only install (no read settings at all): nothing reconciles. */
    reconciles: boolean;
    groups: string[];
    types: SubscriberType[];
    everyMs: number;
    lookbackMs: number;
    reconcileEveryMs: number;
    pageSize: number;
  };
  apiRateLimit: number;
  /** Per-attempt timeout of requests to the mailing service (both APIs). */
  upstreamTimeoutMs: number;
  webhookSecrets: string[];
  webhookMaxBodyBytes: number;
  /** Applied and ignored deliveries older than this are deleted from the inbox. */
  webhookRetentionMs: number;
  /** Failed and pending deliveries (never applied) older than this are deleted too. */
  webhookFailedRetentionMs: number;
  /** Body bytes buffered at once across all webhook requests (memory bound whatever clients announce). */
  webhookBodyMemoryBytes: number;
  /** Personal data of a subscriber out of every configured group for this long is erased (0: never). */
  eraseOutOfGroupsAfterMs: number;
  /** Limits of the public listener (docs/operations.md, "Public surface"). */
  http: {
    headersTimeoutMs: number;
    requestTimeoutMs: number;
    idleTimeoutMs: number;
    maxConnections: number;
  };
  /** How often gauges read from Postgres/Redis are refreshed (a scrape only reads the registry). */
  metricsRefreshMs: number;
  history: {
    /** HISTORY: record subscriber versions and membership periods. */
    enabled: boolean;
    /** HISTORY_RETENTION: versions (periods) closed longer ago than this are deleted; undefined keeps all. */
    retentionMs: number | undefined;
  };
  port: number;
  /** Bind address of the public listener (HOST). */
  host: string;
  /**
   * Port of /metrics, /admin and the detailed /readyz. Undefined: they are not served at all, unless
   * `opsOnPublicPort` puts them on PORT.
   */
  opsPort: number | undefined;
  /** Bind address of the ops listener (OPS_HOST). */
  opsHost: string;
  /** ADMIN_ON_PUBLIC_PORT: serve admin, /metrics and the detailed /readyz on PORT (no OPS_PORT). */
  opsOnPublicPort: boolean;
  /** ADMIN_COOKIE_INSECURE: admin session cookie without `Secure` on plain-http requests. */
  adminCookieInsecure: boolean;
  /** TRUST_PROXY (Fastify's trustProxy): client address, protocol and host from X-Forwarded-* headers. */
  trustProxy: boolean | number | string[];
  webhookPath: string;
  adminToken: string | undefined;
  logLevel: (typeof LOG_LEVELS)[number];
  /** auto: human-readable on a terminal unless NODE_ENV=production, JSON otherwise. */
  logFormat: (typeof LOG_FORMATS)[number];
  shutdownTimeoutMs: number;
  /** AUDIT_EVERY, AUDIT_SAMPLE, WEBHOOKS_REENABLE as given: parsed and checked by `audit-settings.ts` (until they join this schema). */
  auditEnv: { every: string | undefined; sample: string | undefined; reenable: string | undefined };
}

/** Thrown for bad configuration; the CLI prints `message` and exits with code 2. */
export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** Parses `250ms`, `30s`, `5m`, `24h`, `1d` into milliseconds; anything else is rejected. */
export function parseDuration(text: string): number {
  const match = /^(\d+)(ms|s|m|h|d)$/.exec(text.trim());
  if (!match) throw new Error(`"${text}" is not a duration (use e.g. 30s, 5m, 24h, 1d)`);
  const value = Number(match[1]) * (DURATION_UNITS[match[2] as string] as number);
  if (!Number.isSafeInteger(value)) throw new Error(`"${text}" is too large`);
  return value;
}

export function formatDuration(ms: number): string {
  for (const [unit, size] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
  ] as const) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}

function isValidTimezone(tz: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

const DEFAULT_BODY_MEMORY = 64 * 1024 * 1024;
const MIN_WEBHOOK_SECRET = 16;

/** Requests per minute per account each platform allows (API_RATE_LIMIT's default). */
const DEFAULT_RATE_LIMIT = { legacy: 60, current: 120 } as const;

const emptyToUndefined = (v: unknown) => (typeof v === 'string' && v.trim() === '' ? undefined : v);
const optionalString = z.preprocess(emptyToUndefined, z.string().optional());

const httpUrl = (what: string) =>
  z.preprocess(
    emptyToUndefined,
    z
      .string()
      .refine((v) => /^https?:\/\/[^\s/]+/.test(v) && URL.canParse(v), `must be an http(s) URL (${what})`)
      .transform((v) => v.replace(/\/+$/, ''))
      .optional(),
  );

const dbUrl = (scheme: RegExp, example: string) =>
  z.string().refine((v) => scheme.test(v) && URL.canParse(v), `must be a URL like ${example}`);

const duration = (fallback: string, min: number) =>
  z
    .string()
    .default(fallback)
    .transform((v, ctx) => {
      try {
        const ms = parseDuration(v);
        if (ms < min) {
          ctx.addIssue({ code: 'custom', message: `"${v}" is shorter than ${formatDuration(min)}` });
          return z.NEVER;
        }
        return ms;
      } catch (error) {
        ctx.addIssue({ code: 'custom', message: (error as Error).message });
        return z.NEVER;
      }
    });

const intInRange = (fallback: number, min: number, max: number) =>
  z
    .string()
    .default(String(fallback))
    .transform((v, ctx) => wholeNumberIn(v, min, max, ctx));

/** Like `intInRange` without a default: undefined when unset. */
const optionalInt = (min: number, max: number) =>
  z
    .string()
    .optional()
    .transform((v, ctx) => (v === undefined ? undefined : wholeNumberIn(v, min, max, ctx)));

function wholeNumberIn(v: string, min: number, max: number, ctx: z.RefinementCtx): number {
  if (!/^\d+$/.test(v.trim())) {
    ctx.addIssue({ code: 'custom', message: `"${v}" is not a whole number` });
    return z.NEVER;
  }
  const n = Number(v);
  if (n < min || n > max) {
    ctx.addIssue({ code: 'custom', message: `${n} is outside ${min}..${max}` });
    return z.NEVER;
  }
  return n;
}

/** `true`/`false` (any case; also 1/0, yes/no); unset is false. */
const flag = z.preprocess(
  (v) => (typeof v === 'string' ? v.trim().toLowerCase() || undefined : v),
  z
    .enum(['true', 'false', '1', '0', 'yes', 'no'], { message: 'must be true or false' })
    .default('false')
    .transform((v) => v === 'true' || v === '1' || v === 'yes'),
);

/** An IP address or a host name to bind a listener to. */
const bindAddress = (fallback: string) =>
  z.preprocess(
    emptyToUndefined,
    z
      .string()
      .default(fallback)
      .refine(
        (v) => isIP(v) !== 0 || /^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$/.test(v),
        'must be an IP address (e.g. 127.0.0.1, 0.0.0.0, ::) or a host name',
      ),
  );

/**
 * TRUST_PROXY: unset/false (the socket's peer is the client), true (trust every X-Forwarded-For hop:
 * only when nothing but the proxy can reach the port), a hop count, or the proxies' addresses/CIDRs.
 */
const trustProxy = z.preprocess(
  emptyToUndefined,
  z
    .string()
    .optional()
    .transform((v, ctx): boolean | number | string[] => {
      const text = (v ?? 'false').trim().toLowerCase();
      if (text === 'false') return false;
      if (text === 'true') return true;
      if (/^\d{1,2}$/.test(text)) return Number(text);
      const list = commaList(text);
      const bad = list.filter((entry) => {
        const [address, bits, extra] = entry.split('/');
        return extra !== undefined || isIP(address ?? '') === 0 || (bits !== undefined && !/^\d{1,3}$/.test(bits));
      });
      if (list.length === 0 || bad.length > 0) {
        ctx.addIssue({
          code: 'custom',
          message: 'must be true, false, a hop count, or comma-separated proxy addresses/CIDRs (e.g. 10.0.0.1,172.16.0.0/12)',
        });
        return z.NEVER;
      }
      return list;
    }),
);

const commaList = (v: string | undefined) =>
  (v ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);

const groupIds = z
  .string()
  .optional()
  .transform((v, ctx) => {
    const ids = commaList(v);
    const bad = ids.filter((id) => !/^\d{1,30}$/.test(id));
    if (bad.length > 0) {
      ctx.addIssue({ code: 'custom', message: `group ids must be numeric, got ${bad.map((b) => `"${b}"`).join(', ')}` });
      return z.NEVER;
    }
    return [...new Set(ids)];
  });

const subscriberTypes = z
  .string()
  .optional()
  .transform((v, ctx) => {
    const list = commaList(v);
    if (list.length === 0) return [...SUBSCRIBER_TYPES];
    const bad = list.filter((t) => !(SUBSCRIBER_TYPES as readonly string[]).includes(t));
    if (bad.length > 0) {
      ctx.addIssue({
        code: 'custom',
        message: `unknown type ${bad.map((b) => `"${b}"`).join(', ')} (allowed: ${SUBSCRIBER_TYPES.join(', ')})`,
      });
      return z.NEVER;
    }
    return [...new Set(list)] as SubscriberType[];
  });

const envSchema = z.object({
  DATABASE_URL: z.preprocess(
    emptyToUndefined,
    dbUrl(/^postgres(ql)?:\/\//, 'postgres://user@host:5432/db').default('postgres://postgres@127.0.0.1:5432/postgres'),
  ),
  REDIS_URL: z.preprocess(emptyToUndefined, dbUrl(/^rediss?:\/\//, 'redis://host:6379').default('redis://127.0.0.1:6379')),
  REDIS_PREFIX: z.preprocess(
    emptyToUndefined,
    z
      .string()
      .regex(/^[A-Za-z0-9_-]{1,64}$/, 'must be 1-64 letters, digits, "-" or "_"')
      .default('subscriber-mirror'),
  ),
  MAILER_LEGACY_URL: httpUrl('the legacy host, without /api/v2'),
  MAILER_API_KEY: optionalString,
  MAILER_API_KEY_HEADER: z.preprocess(
    emptyToUndefined,
    z
      .string()
      .regex(/^[A-Za-z0-9-]+$/, 'must be an HTTP header name')
      .default('X-Service-ApiKey'),
  ),
  MAILER_SOURCE_TZ: z.preprocess(
    emptyToUndefined,
    z.string().default('UTC').refine(isValidTimezone, 'must be an IANA timezone such as UTC or Europe/Vilnius'),
  ),
  // Per attempt (connect, headers and body); a hung request counts as a failure and is retried.
  MAILER_TIMEOUT: z.preprocess(emptyToUndefined, duration('30s', 1000)),
  MAILER_WEBHOOKS_URL: httpUrl('the webhook-management host, without /api/webhooks'),
  MAILER_WEBHOOKS_TOKEN: optionalString,
  MAILER_API_URL: httpUrl('the current API host, without /api'),
  MAILER_API_TOKEN: optionalString,
  SYNC_SOURCE: z.preprocess(
    (v) => (typeof v === 'string' ? v.trim().toLowerCase() || undefined : v),
    z.enum(SYNC_SOURCES, { message: `must be ${SYNC_SOURCES.join(' or ')}` }).optional(),
  ),
  SYNC_GROUPS: groupIds,
  SYNC_TYPES: subscriberTypes,
  SYNC_EVERY: z.preprocess(emptyToUndefined, duration('5m', 1000)),
  SYNC_LOOKBACK: z.preprocess(emptyToUndefined, duration('1d', 0)),
  RECONCILE_EVERY: z.preprocess(emptyToUndefined, duration('24h', 1000)),
  SYNC_PAGE_SIZE: z.preprocess(emptyToUndefined, intInRange(1000, 1, 10_000)),
  // Default by source: the legacy API allows 60 a minute, the current platform 120 (docs/upstream-current.md).
  API_RATE_LIMIT: z.preprocess(emptyToUndefined, optionalInt(1, 100_000)),
  WEBHOOK_SECRETS: z
    .string()
    .optional()
    .transform((v, ctx) => {
      const secrets = commaList(v);
      // Positions and lengths only: the values are secrets.
      const short = secrets.flatMap((s, i) => (s.length < MIN_WEBHOOK_SECRET ? [`#${i + 1} has ${s.length}`] : []));
      if (short.length > 0) {
        ctx.addIssue({
          code: 'custom',
          message: `each secret must be at least ${MIN_WEBHOOK_SECRET} characters (it is all that proves a delivery comes from the service); secret ${short.join(', secret ')}`,
        });
        return z.NEVER;
      }
      return secrets;
    }),
  WEBHOOK_MAX_BODY: z.preprocess(emptyToUndefined, intInRange(10 * 1024 * 1024, 1024, 1024 * 1024 * 1024)),
  // At least an hour: the service retries a delivery for about 20 minutes, and the stored body hash
  // is what makes those retries duplicates.
  WEBHOOK_RETENTION: z.preprocess(emptyToUndefined, duration('30d', 3_600_000)),
  // Failed and pending rows are kept longer, for `webhooks replay`, but not for ever (they hold
  // personal data too).
  WEBHOOK_FAILED_RETENTION: z.preprocess(emptyToUndefined, duration('90d', 3_600_000)),
  // Default: 64 MiB, or one largest body when WEBHOOK_MAX_BODY is larger.
  WEBHOOK_BODY_MEMORY: z.preprocess(emptyToUndefined, optionalInt(1024, 16 * 1024 * 1024 * 1024)),
  // 0 disables; otherwise at least a day, so one failed reconciliation never erases anybody.
  ERASE_OUT_OF_GROUPS_AFTER: z.preprocess(emptyToUndefined, duration('30d', 0)),
  // The service gives up on a delivery after 3 s (docs/upstream.md, "Delivery and retries"): every legitimate request is complete
  // well within these; a client dripping bytes is cut off after them.
  HTTP_HEADERS_TIMEOUT: z.preprocess(emptyToUndefined, duration('5s', 1000)),
  HTTP_REQUEST_TIMEOUT: z.preprocess(emptyToUndefined, duration('10s', 1000)),
  HTTP_IDLE_TIMEOUT: z.preprocess(emptyToUndefined, duration('10s', 1000)),
  HTTP_MAX_CONNECTIONS: z.preprocess(emptyToUndefined, intInRange(1000, 1, 1_000_000)),
  METRICS_REFRESH_EVERY: z.preprocess(emptyToUndefined, duration('15s', 1000)),
  HISTORY: z.preprocess(
    (v) => (typeof v === 'string' ? v.trim().toLowerCase() || undefined : v),
    z.enum(['on', 'off'], { message: 'must be on or off' }).default('on'),
  ),
  // Unset keeps every version. At least an hour, so a typo like 10s cannot wipe history in a minute.
  HISTORY_RETENTION: z.preprocess(emptyToUndefined, duration('0s', 3_600_000).optional()),
  PORT: z.preprocess(emptyToUndefined, intInRange(8080, 0, 65_535)),
  HOST: bindAddress('0.0.0.0'),
  OPS_PORT: z.preprocess(emptyToUndefined, optionalInt(0, 65_535)),
  // Loopback by default: outside a container nothing else needs the ops port. The image sets 0.0.0.0
  // (Prometheus scrapes over the compose network), where the port is still never published.
  OPS_HOST: bindAddress('127.0.0.1'),
  ADMIN_ON_PUBLIC_PORT: flag,
  ADMIN_COOKIE_INSECURE: flag,
  TRUST_PROXY: trustProxy,
  WEBHOOK_PATH: z.preprocess(
    emptyToUndefined,
    z
      .string()
      .regex(/^\/[A-Za-z0-9/_.-]*$/, 'must be a path starting with /')
      .default('/webhooks'),
  ),
  ADMIN_TOKEN: z.preprocess(emptyToUndefined, z.string().min(16, 'must be at least 16 characters (it guards the admin API)').optional()),
  LOG_LEVEL: z.preprocess(emptyToUndefined, z.enum(LOG_LEVELS).default('info')),
  LOG_FORMAT: z.preprocess(emptyToUndefined, z.enum(LOG_FORMATS).default('auto')),
  SHUTDOWN_TIMEOUT: z.preprocess(emptyToUndefined, duration('30s', 0)),
});

type EnvName = keyof z.infer<typeof envSchema>;

/** A required setting: its name, and the other names it may be given under. */
interface Setting {
  name: EnvName;
  aliases?: EnvName[];
}

const READS_BY_SOURCE: Record<SyncSource, Setting[]> = {
  legacy: [{ name: 'MAILER_LEGACY_URL' }, { name: 'MAILER_API_KEY' }, { name: 'SYNC_GROUPS' }],
  current: [
    { name: 'MAILER_API_URL', aliases: ['MAILER_WEBHOOKS_URL'] },
    { name: 'MAILER_API_TOKEN', aliases: ['MAILER_WEBHOOKS_TOKEN'] },
    { name: 'SYNC_GROUPS' },
  ],
};

const MANAGE_WEBHOOKS: Setting[] = [
  { name: 'MAILER_WEBHOOKS_URL', aliases: ['MAILER_API_URL'] },
  { name: 'MAILER_WEBHOOKS_TOKEN', aliases: ['MAILER_API_TOKEN'] },
];

const present = (env: NodeJS.ProcessEnv, name: string): boolean => {
  const raw = env[name];
  return raw !== undefined && raw.trim() !== '';
};

/** Settings that ask for reads: any legacy read setting, SYNC_SOURCE or SYNC_GROUPS. */
function readSettingsGiven(env: NodeJS.ProcessEnv): boolean {
  return ['MAILER_LEGACY_URL', 'MAILER_API_KEY', 'SYNC_SOURCE', 'SYNC_GROUPS'].some((name) => present(env, name));
}

/** SYNC_SOURCE, or its default: legacy when legacy settings are given, else current. */
export function syncSourceOf(env: NodeJS.ProcessEnv): SyncSource {
  const given = env.SYNC_SOURCE?.trim().toLowerCase();
  if (given === 'legacy' || given === 'current') return given;
  return present(env, 'MAILER_LEGACY_URL') || present(env, 'MAILER_API_KEY') ? 'legacy' : 'current';
}

/** One problem per required setting missing under every one of its names. */
function missing(env: NodeJS.ProcessEnv, required: Setting[], reason: string): string[] {
  return required
    .filter((r) => ![r.name, ...(r.aliases ?? [])].some((name) => present(env, name)))
    .map((r) => `${r.name}: required for ${reason}${r.aliases ? ` (or ${r.aliases.join(', ')})` : ''}`);
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

/**
 * Parses the environment. Throws one ConfigError listing every bad or missing variable; values of
 * variables are never echoed for secrets (keys, tokens), only their names.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, needs: ConfigNeed[] = []): Config {
  const result = envSchema.safeParse(env);
  const problems: string[] = [];
  if (!result.success) {
    for (const issue of result.error.issues) {
      const name = String(issue.path[0] ?? 'environment');
      problems.push(`${name}: ${issue.message}`);
    }
  }
  for (const need of needs) problems.push(...problemsOfNeed(env, need));
  if (result.success) problems.push(...crossChecks(result.data));
  if (problems.length > 0 || !result.success) throw new ConfigError([...new Set(problems)]);
  const e = result.data;
  return {
    databaseUrl: e.DATABASE_URL,
    redisUrl: e.REDIS_URL,
    redisPrefix: e.REDIS_PREFIX,
    legacy: {
      url: e.MAILER_LEGACY_URL,
      apiKey: e.MAILER_API_KEY,
      apiKeyHeader: e.MAILER_API_KEY_HEADER,
      sourceTimezone: e.MAILER_SOURCE_TZ,
    },
    currentApi: { url: e.MAILER_API_URL ?? e.MAILER_WEBHOOKS_URL, token: e.MAILER_API_TOKEN ?? e.MAILER_WEBHOOKS_TOKEN },
    webhooksApi: { url: e.MAILER_API_URL ?? e.MAILER_WEBHOOKS_URL, token: e.MAILER_API_TOKEN ?? e.MAILER_WEBHOOKS_TOKEN },
    sync: {
      source: syncSourceOf(env),
      reconciles: readSettingsGiven(env),
      groups: e.SYNC_GROUPS,
      types: e.SYNC_TYPES,
      everyMs: e.SYNC_EVERY,
      lookbackMs: e.SYNC_LOOKBACK,
      reconcileEveryMs: e.RECONCILE_EVERY,
      pageSize: e.SYNC_PAGE_SIZE,
    },
    apiRateLimit: e.API_RATE_LIMIT ?? DEFAULT_RATE_LIMIT[syncSourceOf(env)],
    upstreamTimeoutMs: e.MAILER_TIMEOUT,
    webhookSecrets: e.WEBHOOK_SECRETS,
    webhookMaxBodyBytes: e.WEBHOOK_MAX_BODY,
    webhookRetentionMs: e.WEBHOOK_RETENTION,
    webhookFailedRetentionMs: e.WEBHOOK_FAILED_RETENTION,
    webhookBodyMemoryBytes: e.WEBHOOK_BODY_MEMORY ?? Math.max(DEFAULT_BODY_MEMORY, e.WEBHOOK_MAX_BODY),
    eraseOutOfGroupsAfterMs: e.ERASE_OUT_OF_GROUPS_AFTER,
    http: {
      headersTimeoutMs: e.HTTP_HEADERS_TIMEOUT,
      requestTimeoutMs: e.HTTP_REQUEST_TIMEOUT,
      idleTimeoutMs: e.HTTP_IDLE_TIMEOUT,
      maxConnections: e.HTTP_MAX_CONNECTIONS,
    },
    metricsRefreshMs: e.METRICS_REFRESH_EVERY,
    history: { enabled: e.HISTORY === 'on', retentionMs: e.HISTORY_RETENTION },
    port: e.PORT,
    host: e.HOST,
    opsPort: e.OPS_PORT,
    opsHost: e.OPS_HOST,
    opsOnPublicPort: e.ADMIN_ON_PUBLIC_PORT,
    adminCookieInsecure: e.ADMIN_COOKIE_INSECURE,
    trustProxy: e.TRUST_PROXY,
    webhookPath: e.WEBHOOK_PATH,
    adminToken: e.ADMIN_TOKEN,
    logLevel: e.LOG_LEVEL,
    logFormat: e.LOG_FORMAT,
    shutdownTimeoutMs: e.SHUTDOWN_TIMEOUT,
    auditEnv: { every: env.AUDIT_EVERY, sample: env.AUDIT_SAMPLE, reenable: env.WEBHOOKS_REENABLE },
  };
}

/** Rules between variables, reported with the others. */
function crossChecks(e: z.infer<typeof envSchema>): string[] {
  const problems: string[] = [];
  if (e.WEBHOOK_BODY_MEMORY !== undefined && e.WEBHOOK_BODY_MEMORY < e.WEBHOOK_MAX_BODY) {
    problems.push(
      `WEBHOOK_BODY_MEMORY: ${e.WEBHOOK_BODY_MEMORY} is below WEBHOOK_MAX_BODY (${e.WEBHOOK_MAX_BODY}); one largest body must fit`,
    );
  }
  if (e.WEBHOOK_FAILED_RETENTION < e.WEBHOOK_RETENTION) {
    problems.push('WEBHOOK_FAILED_RETENTION: must not be shorter than WEBHOOK_RETENTION (failed rows are kept for replay)');
  }
  if (e.ERASE_OUT_OF_GROUPS_AFTER !== 0 && e.ERASE_OUT_OF_GROUPS_AFTER < 86_400_000) {
    problems.push('ERASE_OUT_OF_GROUPS_AFTER: must be 0 (never) or at least 1d');
  }
  if (e.HTTP_HEADERS_TIMEOUT > e.HTTP_REQUEST_TIMEOUT) {
    problems.push('HTTP_HEADERS_TIMEOUT: must not be longer than HTTP_REQUEST_TIMEOUT');
  }
  // Two names for one setting: both given and different is a mistake whichever was meant.
  if (e.MAILER_API_URL !== undefined && e.MAILER_WEBHOOKS_URL !== undefined && e.MAILER_API_URL !== e.MAILER_WEBHOOKS_URL) {
    problems.push(
      'MAILER_API_URL: differs from MAILER_WEBHOOKS_URL, its alias (reads and webhook management share one host); set one of them',
    );
  }
  if (e.MAILER_API_TOKEN !== undefined && e.MAILER_WEBHOOKS_TOKEN !== undefined && e.MAILER_API_TOKEN !== e.MAILER_WEBHOOKS_TOKEN) {
    problems.push(
      'MAILER_API_TOKEN: differs from MAILER_WEBHOOKS_TOKEN, its alias (one token serves reads and webhook management); set one of them',
    );
  }
  if (e.OPS_PORT !== undefined && e.OPS_PORT !== 0 && e.OPS_PORT === e.PORT) {
    problems.push('OPS_PORT: must differ from PORT (or unset it and set ADMIN_ON_PUBLIC_PORT=true to serve everything on PORT)');
  }
  if (e.ADMIN_ON_PUBLIC_PORT && e.OPS_PORT !== undefined) {
    problems.push('ADMIN_ON_PUBLIC_PORT: set either OPS_PORT or ADMIN_ON_PUBLIC_PORT=true, not both');
  }
  if (e.ADMIN_TOKEN !== undefined && e.OPS_PORT === undefined && !e.ADMIN_ON_PUBLIC_PORT) {
    problems.push(
      'ADMIN_TOKEN: the admin pages are served on OPS_PORT only; set OPS_PORT (e.g. 9090), or ADMIN_ON_PUBLIC_PORT=true to serve them on PORT',
    );
  }
  return problems;
}

/** Values that must never be printed; `log.ts` also redacts them wherever they appear in text. */
export function secretsOf(config: Config): string[] {
  const secrets = [config.legacy.apiKey, config.currentApi.token, config.webhooksApi.token, config.adminToken, ...config.webhookSecrets];
  return [...new Set(secrets.filter((s): s is string => typeof s === 'string' && s.length > 0))];
}

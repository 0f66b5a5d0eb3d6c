/**
 * The read clients of the mailing service and the limiter they share (invariant 7), built from the
 * configuration in one place: for `start` (the passes and the audit loop) and for
 * `subscriber-mirror audit`.
 */
import type { Redis } from 'ioredis';
import type { Config } from '../config.js';
import type { Logger } from '../ground/log.js';
import type { Metrics } from '../ground/metrics.js';
import { createBudgetLimiter, rateBudgetsKey, type BudgetLimiter } from '../ratelimit/budget-limiter.js';
import type { LimiterConnections } from '../ratelimit/connections.js';
import { createLimiter, type Limiter } from '../ratelimit/limiter.js';
import { currentSource } from '../sync/current-pass.js';
import type { FieldReader } from '../sync/fields.js';
import { legacySource, type ReadSource } from '../sync/source.js';
import { createCurrentClient, type CurrentClient } from '../upstream/current/client.js';
import type { HttpHooks } from '../upstream/http.js';
import { createLegacyClient, type LegacyClient } from '../upstream/legacy/client.js';
import { createWebhooksApi, type WebhooksApi } from '../upstream/webhooks-api.js';

/**
 * The rate limiter every replica shares (invariant 7): the budgets the service's headers show, one per
 * endpoint or one for the account (budget-limiter.ts), each used up to API_RATE_LIMIT (60 a minute
 * legacy, 120 current). What it learned is published for `status` and the status page.
 */
export function createSharedLimiter(config: Config, redis: Redis, log: Logger, connections: LimiterConnections): BudgetLimiter {
  return createBudgetLimiter({
    mode: 'redis',
    connections,
    prefix: config.redisPrefix,
    perMinute: config.apiRateLimitAuto ? 'auto' : config.apiRateLimit,
    autoStart: config.apiRateLimit,
    publish: { client: redis, key: rateBudgetsKey(config.redisPrefix) },
    // A replica killed mid-request holds its shared concurrency slot until this expires; one attempt
    // never outlives MAILER_TIMEOUT, so a little more than that frees the slot as soon as it can.
    jobExpirationMs: config.upstreamTimeoutMs + 5_000,
    logger: log,
  });
}

/** Upstream request metrics and the limiter's waits, for the clients of either source. */
export function upstreamHooks(api: 'legacy' | 'current', limiter: Limiter, metrics: Metrics) {
  let lastWaitMsTotal = 0;
  return {
    onResponse: (info: { status: number }) => {
      metrics.upstreamRequests.inc({ api, outcome: String(info.status) });
      // The limiter reports a running total of wait time; record what accrued since.
      const total = limiter.stats().waitMsTotal;
      if (total > lastWaitMsTotal) metrics.limiterWait.observe((total - lastWaitMsTotal) / 1000);
      lastWaitMsTotal = total;
    },
  };
}

/**
 * A process that reads no list of its own (`subscriber-mirror audit`) follows the shared spacing the
 * service's limiter set (it may have re-rated it) and writes no settings of its own.
 */
export function followSharedLimiter(config: Config): Limiter {
  return createLimiter({
    mode: 'redis',
    redisUrl: config.redisUrl,
    prefix: config.redisPrefix,
    perMinute: config.apiRateLimit,
    writeSettings: false,
  });
}

/** SYNC_SOURCE's client, a fresh one per call (per pass, per audit), on the shared limiter. */
export type ReadClients = { source: 'legacy'; client: () => LegacyClient } | { source: 'current'; client: () => CurrentClient };

export function readClients(config: Config, limiter: Limiter, log: Logger, hooks?: HttpHooks): ReadClients {
  const http = { timeoutMs: config.upstreamTimeoutMs, ...(hooks ? { hooks } : {}) };
  if (config.sync.source === 'current') {
    const { url, token } = config.currentApi;
    return { source: 'current', client: () => createCurrentClient({ baseUrl: url as string, token: token as string, limiter, http }) };
  }
  const { url, apiKey, apiKeyHeader } = config.legacy;
  return {
    source: 'legacy',
    client: () => createLegacyClient({ baseUrl: url as string, apiKey: apiKey as string, apiKeyHeader, limiter, logger: log, http }),
  };
}

/** SYNC_SOURCE's custom field definitions, one fresh client per read, on the shared limiter. */
export function fieldReader(config: Config, limiter: Limiter, log: Logger, hooks?: HttpHooks): FieldReader {
  const clients = readClients(config, limiter, log, hooks);
  return () => clients.client().fields();
}

/** SYNC_SOURCE's read source (docs/architecture.md, "Read sources"), with a fresh client per pass. */
export function createReadSource(config: Config, limiter: Limiter, log: Logger, metrics: Metrics): ReadSource {
  const common = { sourceTimezone: config.legacy.sourceTimezone, pageSize: config.sync.pageSize };
  const clients = readClients(config, limiter, log, upstreamHooks(config.sync.source, limiter, metrics));
  if (clients.source === 'current') return currentSource({ ...common, clientFactory: clients.client });
  return legacySource({ ...common, legacyFactory: clients.client, lookbackMs: config.sync.lookbackMs });
}

/**
 * Webhook management for the audit's read-back, when configured: through the shared limiter like the
 * audit's other reads (the account's budget counts them too). The `webhooks` CLI's calls do not: an
 * operator runs them by hand, a few at a time.
 */
export function auditWebhooksApi(config: Config, limiter: Limiter, log: Logger): (() => WebhooksApi) | null {
  const { url, token } = config.webhooksApi;
  if (!url || !token) return null;
  return () => createWebhooksApi({ baseUrl: url, token, http: { timeoutMs: config.upstreamTimeoutMs, gate: limiter }, logger: log });
}

/**
 * Wires the audit (docs/operations.md, "The audit") from the configuration, for the worker's loop
 * (`start`) and for `subscriber-mirror audit`: the source's reader on the shared limiter, the queue
 * that full passes are asked on, and webhook management when it is configured.
 */
import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type pg from 'pg';
import type { AuditSettings } from './audit-settings.js';
import type { Config } from './config.js';
import { readCredentialOf } from './config.js';
import type { Logger } from './ground/log.js';
import type { Metrics } from './ground/metrics.js';
import { currentAuditReader, legacyAuditReader, type AuditReader } from './sync/audit.js';
import type { AuditLoopDeps } from './sync/audit-loop.js';
import { authPauseKey } from './sync/auth-pause.js';
import { enqueueBackfill, type PassJobData, type PassJobResult } from './sync/schedule.js';
import { createCurrentClient } from './upstream/current/client.js';
import { createLegacyClient } from './upstream/legacy/client.js';
import type { Limiter } from './upstream/limiter.js';
import { createWebhooksApi } from './upstream/webhooks-api.js';

export interface AuditWiring {
  config: Config;
  settings: AuditSettings;
  pool: pg.Pool;
  redis: Redis;
  limiter: Limiter;
  queue: Queue<PassJobData, PassJobResult>;
  logger: Logger;
  metrics?: Metrics;
  /** Upstream request metrics of the audit's clients. */
  hooks?: { onResponse: (info: { status: number }) => void };
}

/** A reader of SYNC_SOURCE with fresh clients on the shared limiter. */
function readerFactory(w: AuditWiring): () => AuditReader {
  const { config, limiter } = w;
  const http = { timeoutMs: config.upstreamTimeoutMs, ...(w.hooks ? { hooks: w.hooks } : {}) };
  if (config.sync.source === 'current') {
    return () =>
      currentAuditReader(
        createCurrentClient({ baseUrl: config.currentApi.url as string, token: config.currentApi.token as string, limiter, http }),
        config.legacy.sourceTimezone,
      );
  }
  return () =>
    legacyAuditReader(
      createLegacyClient({
        baseUrl: config.legacy.url as string,
        apiKey: config.legacy.apiKey as string,
        apiKeyHeader: config.legacy.apiKeyHeader,
        limiter,
        logger: w.logger,
        http,
      }),
      config.legacy.sourceTimezone,
    );
}

export function auditLoopDeps(w: AuditWiring, everyMs: number): AuditLoopDeps {
  const { config } = w;
  const credential = readCredentialOf(config);
  const { url, token } = config.webhooksApi;
  return {
    pool: w.pool,
    redis: w.redis,
    prefix: config.redisPrefix,
    logger: w.logger.child({ component: 'audit' }),
    ...(w.metrics ? { metrics: w.metrics } : {}),
    everyMs,
    sampleSize: w.settings.sampleSize,
    settleMs: w.settings.settleMs,
    groups: config.sync.groups,
    types: config.sync.types,
    readerFactory: readerFactory(w),
    perMinute: config.apiRateLimit,
    limiterWaiting: () => w.limiter.stats().waiting,
    askFullPass: (groupId, type) => enqueueBackfill(w.queue, groupId, type),
    ...(credential ? { pauseKey: authPauseKey(config.redisPrefix, credential) } : {}),
    ...(url && token
      ? {
          webhooks: {
            // Through the shared limiter like the audit's other reads: the account's budget counts them too.
            api: () =>
              createWebhooksApi({ baseUrl: url, token, http: { timeoutMs: config.upstreamTimeoutMs, gate: w.limiter }, logger: w.logger }),
            reenable: w.settings.reenableWebhooks,
          },
        }
      : {}),
  };
}

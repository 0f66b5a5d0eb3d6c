/**
 * Wires the audit (docs/operations.md, "The audit") from the configuration, for the worker's loop
 * (`start`) and for `subscriber-mirror audit`: the source's reader on the shared limiter and webhook
 * management when it is configured (both built by `reads.ts`, as the passes' clients are), and the
 * queue that full passes are asked on.
 */
import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type pg from 'pg';
import type { AuditSettings } from './audit-settings.js';
import type { Config } from '../config.js';
import { readCredentialOf } from '../config.js';
import type { Logger } from '../ground/log.js';
import type { Metrics } from '../ground/metrics.js';
import { currentAuditReader, legacyAuditReader, type AuditReader } from '../audit/pair.js';
import type { AuditLoopDeps } from '../audit/loop.js';
import { authPauseKey } from '../sync/auth-pause.js';
import { enqueueBackfill, type PassJobData, type PassJobResult } from '../sync/schedule.js';
import type { Limiter } from '../ratelimit/limiter.js';
import { auditWebhooksApi, readClients } from './reads.js';

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

/** A reader of SYNC_SOURCE with fresh clients on the shared limiter (`reads.ts`, as the passes'). */
function readerFactory(w: AuditWiring): () => AuditReader {
  const { config } = w;
  const clients = readClients(config, w.limiter, w.logger, w.hooks);
  if (clients.source === 'current') return () => currentAuditReader(clients.client(), config.legacy.sourceTimezone);
  return () => legacyAuditReader(clients.client(), config.legacy.sourceTimezone);
}

export function auditLoopDeps(w: AuditWiring, everyMs: number): AuditLoopDeps {
  const { config } = w;
  const credential = readCredentialOf(config);
  const webhooksApi = auditWebhooksApi(config, w.limiter, w.logger);
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
    share: w.settings.share,
    limiterWaiting: () => w.limiter.stats().waiting,
    askFullPass: (groupId, type) => enqueueBackfill(w.queue, groupId, type),
    ...(credential ? { pauseKey: authPauseKey(config.redisPrefix, credential) } : {}),
    ...(webhooksApi ? { webhooks: { api: webhooksApi, reenable: w.settings.reenableWebhooks } } : {}),
  };
}

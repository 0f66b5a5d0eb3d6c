/**
 * The audit's settings (docs/operations.md, "The audit") as its wiring uses them: AUDIT_EVERY,
 * AUDIT_SAMPLE (default one page) and WEBHOOKS_REENABLE from the configuration, and the settle time:
 * AUDIT_SETTLE (default 2 min: the service batches deliveries about once a minute, docs/upstream.md,
 * "Delivery and retries"; twice that, to be sure), or the incremental interval twice when longer.
 */
import { auditSchedule, type AuditSchedule } from '../audit/core.js';
import type { Config } from '../config.js';

export interface AuditSettings {
  /** AUDIT_EVERY in ms; null: `off`. */
  everyMs: number | null;
  /** AUDIT_BUDGET as a fraction (0.05 for `5%`). */
  share: number;
  /** AUDIT_SAMPLE: rows read back per (group, type) per tick; default one page (SYNC_PAGE_SIZE). */
  sampleSize: number;
  /** WEBHOOKS_REENABLE: enable again a webhook the service disabled. */
  reenableWebhooks: boolean;
  /** How long a stamped change may take to reach the mirror: webhook batching (about a minute), the incremental interval. */
  settleMs: number;
}

export function auditSettings(config: Config): AuditSettings {
  const incrementalMs = config.sync.source === 'legacy' ? 2 * config.sync.everyMs : 0;
  return {
    everyMs: config.audit.everyMs,
    share: config.audit.budgetShare,
    sampleSize: config.audit.sampleSize ?? config.sync.pageSize,
    reenableWebhooks: config.audit.reenableWebhooks,
    settleMs: Math.max(config.audit.settleMs, incrementalMs),
  };
}

/**
 * The period each configured pair is really audited at within AUDIT_BUDGET (`auditSchedule`), for
 * `start`'s notice, `status` and the status page; null when the audit is off or nothing is polled.
 */
export function configuredAuditSchedule(config: Config): AuditSchedule | null {
  const everyMs = config.audit.everyMs;
  if (everyMs === null || !config.sync.reconciles) return null;
  return auditSchedule({
    perMinute: config.apiRateLimit,
    share: config.audit.budgetShare,
    everyMs,
    groups: config.sync.groups.length,
    types: config.sync.types.length,
    source: config.sync.source === 'current' ? 'current' : 'legacy',
    webhookReads: config.webhooksApi.url && config.webhooksApi.token ? 1 : 0,
  });
}

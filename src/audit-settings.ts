/**
 * The audit's settings (docs/operations.md, "The audit"): `AUDIT_EVERY`, `AUDIT_SAMPLE`,
 * `WEBHOOKS_REENABLE`. Read here, beside `config.ts`, until they join its schema; a bad value is a
 * ConfigError naming it (exit 2), like every other setting.
 */
import { ConfigError, parseDuration, type Config } from './config.js';

export interface AuditSettings {
  /** AUDIT_EVERY in ms; null: `off`. */
  everyMs: number | null;
  /** AUDIT_SAMPLE: rows read back per (group, type) per tick; default one page (SYNC_PAGE_SIZE). */
  sampleSize: number;
  /** WEBHOOKS_REENABLE: enable again a webhook the service disabled. */
  reenableWebhooks: boolean;
  /** How long a stamped change may take to reach the mirror: webhook batching (about a minute), the incremental interval. */
  settleMs: number;
}

export const AUDIT_EVERY_DEFAULT_MS = 15 * 60_000;
const MIN_AUDIT_EVERY_MS = 1_000;
/** The service batches deliveries about once a minute (docs/upstream.md, "Delivery and retries"); twice that, to be sure. */
const WEBHOOK_SETTLE_MS = 2 * 60_000;

function parseEvery(text: string | undefined, problems: string[]): number | null {
  if (text === undefined || text.trim() === '') return AUDIT_EVERY_DEFAULT_MS;
  if (text.trim() === 'off') return null;
  try {
    const ms = parseDuration(text);
    if (ms >= MIN_AUDIT_EVERY_MS) return ms;
    problems.push(`AUDIT_EVERY: "${text}" is shorter than 1s (or "off")`);
  } catch (error) {
    problems.push(`AUDIT_EVERY: ${(error as Error).message} (or "off")`);
  }
  return AUDIT_EVERY_DEFAULT_MS;
}

function parseSample(text: string | undefined, pageSize: number, problems: string[]): number {
  if (text === undefined || text.trim() === '') return pageSize;
  if (/^\d+$/.test(text.trim()) && Number(text) >= 1 && Number(text) <= 10_000) return Number(text);
  problems.push(`AUDIT_SAMPLE: "${text}" is not a whole number of rows from 1 to 10000`);
  return pageSize;
}

function parseFlag(text: string | undefined, problems: string[]): boolean {
  const value = (text ?? '').trim().toLowerCase();
  if (['', 'false', '0', 'no'].includes(value)) return false;
  if (['true', '1', 'yes'].includes(value)) return true;
  problems.push(`WEBHOOKS_REENABLE: "${text}" is not true or false`);
  return false;
}

export function auditSettings(config: Config): AuditSettings {
  const problems: string[] = [];
  const everyMs = parseEvery(config.auditEnv.every, problems);
  const sampleSize = parseSample(config.auditEnv.sample, config.sync.pageSize, problems);
  const reenableWebhooks = parseFlag(config.auditEnv.reenable, problems);
  if (problems.length > 0) throw new ConfigError(problems);
  const incrementalMs = config.sync.source === 'legacy' ? 2 * config.sync.everyMs : 0;
  return { everyMs, sampleSize, reenableWebhooks, settleMs: Math.max(WEBHOOK_SETTLE_MS, incrementalMs) };
}

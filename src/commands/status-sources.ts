/**
 * What the status shows of each account besides its tables, from the configuration: its pairs, its
 * source, the audit's schedule for it, its pass interval, and readers of what the worker keeps of it
 * in Redis. For `status` and the admin pages (`AdminDeps.statusSources`).
 */
import type { Redis } from 'ioredis';
import { accountConfig, NOTHING_RECONCILES, readCredentialOf, type AccountConfig, type Config } from '../config.js';
import type { AccountSource } from '../http/status-report.js';
import { readRateBudgets } from '../ratelimit/budget-limiter.js';
import { authPauseKey, readAuthPause } from '../sync/auth-pause.js';
import { configuredAuditSchedule } from './audit-settings.js';
import { passIntervalMs } from './gauges.js';

/** Every account of `accounts` (all declared by default), in order; without Redis, nothing it keeps is read. */
export function statusSources(config: Config, redis: Redis | null, accounts: readonly AccountConfig[] = config.accounts): AccountSource[] {
  return accounts.map(({ name }) => accountSource(config, name, redis));
}

function accountSource(deployment: Config, name: string, redis: Redis | null): AccountSource {
  const config = accountConfig(deployment, name);
  const credential = readCredentialOf(config);
  const reads = config.sync.reconciles ? { source: config.sync.source } : { source: null, notice: NOTHING_RECONCILES };
  return {
    account: name,
    groups: config.sync.groups,
    types: config.sync.types,
    auditSchedule: configuredAuditSchedule(config),
    ...reads,
    passEveryMs: passIntervalMs(config),
    ...(redis && credential ? { authPause: () => readAuthPause(redis, authPauseKey(config.redisPrefix, credential)) } : {}),
    ...(redis && credential && publishesRateBudgets(deployment, name)
      ? { rateBudgets: () => readRateBudgets(redis, config.redisPrefix) }
      : {}),
  };
}

/**
 * Whether the rate budgets published under REDIS_PREFIX are this account's: the worker's one shared
 * limiter (src/commands/reads.ts) is built from the first account's settings, so only its budgets are
 * published there.
 */
function publishesRateBudgets(config: Config, name: string): boolean {
  return config.accounts[0]?.name === name;
}

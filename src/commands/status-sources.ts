/**
 * What the status shows of each account besides its tables, from the configuration: its pairs, its
 * source, the audit's schedule for it, its pass interval, and readers of what the worker keeps of it
 * in Redis (its auth pause, its rate budgets, the replicas that read it). For `status` and the admin pages (`AdminDeps.statusSources`).
 */
import type { Redis } from 'ioredis';
import { accountConfig, NOTHING_RECONCILES, readCredentialOf, type AccountConfig, type Config } from '../config.js';
import type { AccountSource } from '../http/status-report.js';
import { readRateBudgets } from '../ratelimit/budget-limiter.js';
import { authPauseKey, readAuthPause } from '../sync/auth-pause.js';
import { liveReplicaReads } from '../sync/replicas.js';
import { configuredAuditSchedule } from './audit-settings.js';
import { passIntervalMs } from './gauges.js';

/** Every account of `accounts` (all declared by default), in order; without Redis, nothing it keeps is read. */
export function statusSources(config: Config, redis: Redis | null, accounts: readonly AccountConfig[] = config.accounts): AccountSource[] {
  const readers = redis ? replicaReaders(redis, config.redisNamespace) : null;
  return accounts.map(({ name }) => accountSource(config, name, redis, readers));
}

/** Who reads an account, from one read of the replicas' list for every account shown (made on the first ask). */
function replicaReaders(redis: Redis, namespace: string): (account: string) => Promise<string[]> {
  let replicas: Promise<Map<string, string[] | null>> | undefined;
  return async (account) => {
    replicas ??= liveReplicaReads(redis, namespace);
    return [...(await replicas)].filter(([, reads]) => reads?.includes(account)).map(([id]) => id);
  };
}

/** Each account's Redis keys are under its own prefix (`accountRedisPrefix`), where its worker parts keep them. */
function accountSource(
  deployment: Config,
  name: string,
  redis: Redis | null,
  readers: ((account: string) => Promise<string[]>) | null,
): AccountSource {
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
    ...(redis && credential
      ? {
          authPause: () => readAuthPause(redis, authPauseKey(config.redisPrefix, credential)),
          rateBudgets: () => readRateBudgets(redis, config.redisPrefix),
          ...(readers ? { readBy: () => readers(name) } : {}),
        }
      : {}),
  };
}

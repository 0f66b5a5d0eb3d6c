/**
 * The field definitions' refresh (docs/operations.md, "Custom fields"): one request for the
 * service's list, through the shared limiter like every read, and the store replaces the mirror's
 * (rebuilding `subscriber_fields` when its columns change). A worker runs it at start and every
 * `RECONCILE_EVERY`, one replica per period; `subscriber-mirror fields --refresh` runs it on demand.
 */
import type { Redis } from 'ioredis';
import type pg from 'pg';
import type { Logger } from '../ground/log.js';
import { repeat, type Repeating } from '../ground/repeat.js';
import { replaceFieldDefinitions, type FieldChanges } from '../mirror/store/index.js';
import type { FieldDefinition } from '../upstream/fields.js';

/** Reads the service's definitions (the legacy or the current client's `fields()`). */
export type FieldReader = () => Promise<FieldDefinition[]>;

export async function refreshFields(pool: pg.Pool, read: FieldReader, logger: Logger): Promise<FieldChanges> {
  const changes = await replaceFieldDefinitions(pool, await read());
  if (changes.rebuilt || changes.retitled.length > 0) {
    logger.info(
      { added: changes.added, retyped: changes.retyped, removed: changes.removed, retitled: changes.retitled },
      changes.rebuilt ? 'custom field definitions changed; subscriber_fields rebuilt' : 'custom field titles changed',
    );
  }
  return changes;
}

export interface FieldRefreshLoop {
  pool: pg.Pool;
  redis: Redis;
  prefix: string;
  read: FieldReader;
  logger: Logger;
  /** RECONCILE_EVERY: the definitions are read once per reconcile. */
  everyMs: number;
}

/** One replica per period reads the definitions: the others find the claim taken. */
async function claimRefresh(deps: FieldRefreshLoop): Promise<boolean> {
  const ttl = Math.max(1_000, Math.floor(deps.everyMs * 0.9));
  return (await deps.redis.set(claimKey(deps), '1', 'PX', ttl, 'NX').catch(() => null)) === 'OK';
}

const claimKey = (deps: FieldRefreshLoop) => `${deps.prefix}:fields-refresh`;

/** A failed read gives the claim back, so that it is tried again within a minute rather than a whole reconcile. */
const RETRY_MS = 60_000;

/** Reads the definitions soon after start, then every reconcile. A failure is logged and tried again within a minute. */
export function startFieldRefresh(deps: FieldRefreshLoop): Repeating {
  return repeat(
    async () => {
      if (!(await claimRefresh(deps))) return;
      try {
        await refreshFields(deps.pool, deps.read, deps.logger);
      } catch (error) {
        await deps.redis.del(claimKey(deps)).catch(() => 0);
        throw error;
      }
    },
    {
      firstDelayMs: 1_000,
      nextDelayMs: (failed) => (failed ? Math.min(deps.everyMs, RETRY_MS) : deps.everyMs),
      onError: (error) => deps.logger.warn({ err: error }, 'reading the custom field definitions failed; trying again shortly'),
    },
  );
}

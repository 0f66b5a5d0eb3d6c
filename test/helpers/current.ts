/**
 * Passes of the current API's source in-process against the simulator and a test database.
 */
import { createLogger, type Logger } from '../../src/ground/log.js';
import type { Simulator } from '../../src/simulator/index.js';
import type { World } from '../../src/simulator/world.js';
import { normalizeCurrentSubscriber, type SubscriberValues } from '../../src/mirror/normalize.js';
import { currentSource } from '../../src/sync/current-pass.js';
import type { PassContext } from '../../src/sync/pass-recorder.js';
import type { ReadSource } from '../../src/sync/source.js';
import { createCurrentClient } from '../../src/upstream/current/client.js';
import type { RequestGate } from '../../src/upstream/http.js';
import type { TestDatabase } from './db.js';
import { ALL_TYPES } from './poll.js';

const { logger: silent } = createLogger({ level: 'silent' });

/** The current source against `sim` (Bearer = the simulator's token), page size 100 unless given. */
export function currentTestSource(sim: Simulator, options: { pageSize?: number; limiter?: RequestGate } = {}): ReadSource {
  return currentSource({
    sourceTimezone: 'UTC',
    pageSize: options.pageSize ?? 100,
    clientFactory: () =>
      createCurrentClient({
        baseUrl: sim.url,
        token: sim.webhooksToken,
        limiter: options.limiter,
        http: { retry: { retries: 4, minDelayMs: 5, maxDelayMs: 50 }, timeoutMs: 10_000 },
      }),
  });
}

export function passContext(database: TestDatabase, overrides: Partial<PassContext> & { logger?: Logger } = {}): PassContext {
  return { pool: database.pool, logger: silent, groupTypes: ALL_TYPES, ...overrides };
}

/** The current API's rendering of every given subscriber, normalized: what the mirror must hold after a pass. */
export function expectedFromWorldCurrent(world: World, ids: Iterable<string>): Map<string, SubscriberValues> {
  const out = new Map<string, SubscriberValues>();
  for (const id of ids) out.set(id, normalizeCurrentSubscriber(world.renderCurrent(id), { sourceTimezone: 'UTC' }).values);
  return out;
}

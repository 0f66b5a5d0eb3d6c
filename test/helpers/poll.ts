/**
 * Shared set-up for tests that run poll passes in-process against the simulator and a test database.
 */
import { afterAll, afterEach, beforeAll } from 'vitest';
import type { SubscriberType } from '../../src/db/schema.js';
import { createLogger } from '../../src/ground/log.js';
import type { Simulator } from '../../src/simulator/index.js';
import { runPass, type PassDeps, type PassResult } from '../../src/sync/legacy-pass.js';
import { createLegacyClient } from '../../src/upstream/legacy/client.js';
import { createTestDatabase, type TestDatabase } from './db.js';

export const ALL_TYPES: SubscriberType[] = ['active', 'unsubscribed', 'bounced', 'junk', 'unconfirmed'];

const { logger: silent } = createLogger({ level: 'silent' });

/** What the worker would hand `runPass`, against `sim`; page size 1000 unless overridden. */
export function passDeps(database: TestDatabase, sim: Simulator, overrides: Partial<PassDeps> = {}): PassDeps {
  return {
    pool: database.pool,
    legacy: createLegacyClient({
      baseUrl: sim.url,
      apiKey: sim.apiKey,
      http: { retry: { retries: 4, minDelayMs: 5, maxDelayMs: 50 }, timeoutMs: 10_000 },
    }),
    logger: silent,
    sourceTimezone: 'UTC',
    lookbackMs: 86_400_000,
    pageSize: 1000,
    groupTypes: ALL_TYPES,
    ...overrides,
  };
}

/** One pass of each type, in order. */
export async function passAllTypes(d: PassDeps, groupId: string, mode: 'full' | 'incremental', types = ALL_TYPES): Promise<PassResult[]> {
  const results = [];
  for (const type of types) results.push(await runPass(d, groupId, type, mode));
  return results;
}

/**
 * A test database for the describe block, emptied (with the simulator closed) after each test.
 * Tests set `fixture.sim` to the simulator they start.
 */
export function passFixture(): { database: TestDatabase; sim: Simulator | undefined } {
  const fixture = { database: undefined as unknown as TestDatabase, sim: undefined as Simulator | undefined };
  beforeAll(async () => {
    fixture.database = await createTestDatabase();
  });
  afterEach(async () => {
    await fixture.sim?.close();
    fixture.sim = undefined;
    await fixture.database.pool.query('truncate subscribers, group_members, sync_state, upstream_paging');
  });
  afterAll(async () => {
    await fixture.database.drop();
  });
  return fixture;
}

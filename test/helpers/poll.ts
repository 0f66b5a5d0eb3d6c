/**
 * Shared set-up for tests that run poll passes in-process against the simulator and a test database.
 */
import { afterAll, afterEach, beforeAll } from 'vitest';
import type { SubscriberType } from '../../src/db/schema.js';
import { createLogger } from '../../src/ground/log.js';
import type { Simulator } from '../../src/simulator/index.js';
import { runPass, type PassDeps } from '../../src/sync/legacy-pass.js';
import type { PassContext, PassResult } from '../../src/sync/pass-recorder.js';
import { legacySource, type ReadSource } from '../../src/sync/source.js';
import { createLegacyClient, type LegacyClient } from '../../src/upstream/legacy/client.js';
import { createTestDatabase, type TestDatabase } from './db.js';

export const ALL_TYPES: SubscriberType[] = ['active', 'unsubscribed', 'bounced', 'junk', 'unconfirmed'];

const { logger: silent } = createLogger({ level: 'silent' });

/** A legacy client of `sim` with short retries. */
function legacyTestClient(sim: Simulator): LegacyClient {
  return createLegacyClient({
    baseUrl: sim.url,
    apiKey: sim.apiKey,
    http: { retry: { retries: 4, minDelayMs: 5, maxDelayMs: 50 }, timeoutMs: 10_000 },
  });
}

/** What the worker would hand `runPass`, against `sim`; page size 1000 unless overridden. */
export function passDeps(database: TestDatabase, sim: Simulator, overrides: Partial<PassDeps> = {}): PassDeps {
  return {
    pool: database.pool,
    legacy: legacyTestClient(sim),
    logger: silent,
    sourceTimezone: 'UTC',
    lookbackMs: 86_400_000,
    pageSize: 1000,
    groupTypes: ALL_TYPES,
    ...overrides,
  };
}

/** The legacy source against `sim`, as the worker builds it (`legacySource`); page size 1000 unless given. */
export function legacyTestSource(sim: Simulator, options: { pageSize?: number } = {}): ReadSource {
  return legacySource({
    legacyFactory: () => legacyTestClient(sim),
    sourceTimezone: 'UTC',
    lookbackMs: 86_400_000,
    pageSize: options.pageSize ?? 1000,
  });
}

/** One pass of each type, in order. */
export async function passAllTypes(d: PassDeps, groupId: string, mode: 'full' | 'incremental', types = ALL_TYPES): Promise<PassResult[]> {
  const results = [];
  for (const type of types) results.push(await runPass(d, groupId, type, mode));
  return results;
}

/** One full pass of each type through a read source (as the worker calls it), in order. */
export async function fullPassAllTypes(
  source: ReadSource,
  ctx: PassContext,
  groupId: string,
  types: readonly SubscriberType[] = ALL_TYPES,
): Promise<PassResult[]> {
  const results = [];
  for (const type of types) results.push(await source.runPass(ctx, groupId, type, 'full'));
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
    await fixture.database.pool.query('truncate subscribers, group_members, sync_state, sync_passes, upstream_paging');
  });
  afterAll(async () => {
    await fixture.database.drop();
  });
  return fixture;
}

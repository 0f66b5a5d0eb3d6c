/**
 * The second account every fault scenario runs beside its own (issue 35: "the fault suite runs with
 * two accounts at once, green").
 *
 * Every service process a scenario starts (`startService`) declares `ACCOUNTS=default,second`: the
 * scenario's own settings stay unprefixed, so they remain account `default`'s (the first, which
 * keeps REDIS_PREFIX and the bare webhook path) and the scenario's checks read it as before; the
 * second account's are `ACCOUNT_SECOND__…`: a simulator of its own (its own world, key and webhook
 * secret), one group of a few hundred members, read from the legacy API. The faults hit the one
 * process serving both, so at the end every scenario checks the second account too: its mirror
 * equals its world, and no row of either account holds an id of the other's world.
 *
 * `useSecondAccount` in a scenario's describe starts the simulator once for the file and closes it
 * in afterAll; `startService` refuses to start a process without it.
 */
import type pg from 'pg';
import { afterAll, beforeAll, expect } from 'vitest';
import { accountPrefix, accountRedisPrefix, DEFAULT_ACCOUNT } from '../../../src/config.js';
import { openDatabase } from '../../../src/db/client.js';
import { SUBSCRIBER_TYPES, startSimulator, type Simulator, type World } from '../../../src/simulator/index.js';
import { listSyncStates, type SyncStateRow } from '../../../src/sync/state.js';
import { signBody } from '../../../src/webhooks/signature.js';
import { waitFor } from '../../helpers/wait.js';
import { compareGroupWithWorld, crossAccountIds, sharedIds, worldIds, type WorldIds } from './compare.js';
import { expireDeadWorker, type DeadWorkerCleanup } from './redis-keys.js';
import { makeSecret } from './secrets.js';

export const SECOND_ACCOUNT = 'second';
const DECLARED = [DEFAULT_ACCOUNT, SECOND_ACCOUNT] as const;
const SECOND = accountPrefix(SECOND_ACCOUNT);

export interface SecondAccountOptions {
  /**
   * The id scale of the second world: the other one than the scenario's simulators use. Worlds of one
   * scale issue the same group, campaign and automation ids, and may issue the same subscriber id;
   * of different scales, none (checked by `expectMirrored`).
   */
  largeIds: boolean;
  /** Subscribers of the second world (400): more make its passes several pages long. */
  subscribers?: number;
}

interface Running {
  sim: Simulator;
  groupId: string;
  apiKey: string;
  webhookSecret: string;
  ids: WorldIds;
}

let running: Running | undefined;

function current(): Running {
  if (!running) {
    throw new Error(
      'no second account: every fault scenario runs two accounts at once (issue 35); call useSecondAccount() in its describe',
    );
  }
  return running;
}

async function start(scenario: string, options: SecondAccountOptions): Promise<Running> {
  const apiKey = makeSecret(`${scenario}:second account's API key`, 'apikey2');
  const webhookSecret = makeSecret(`${scenario}:second account's webhook secret`, 'whsecret2');
  // Two groups, one mirrored: a member of the other group only must stay out of the mirror.
  const sim = await startSimulator({
    subscribers: options.subscribers ?? 400,
    groups: 2,
    seed: 35,
    accountId: 35_002,
    rateLimit: false,
    apiKey,
    largeIds: options.largeIds,
  });
  const groupId = sim.world.groupIds()[0] as string;
  return { sim, groupId, apiKey, webhookSecret, ids: worldIds(sim.world) };
}

/**
 * `env` as a service process of a fault scenario runs with: the scenario's settings for account
 * `default`, the second account's beside them.
 */
export function withSecondAccount(env: Record<string, string>): Record<string, string> {
  const second = current();
  return {
    ...env,
    ACCOUNTS: DECLARED.join(','),
    [`${SECOND}MAILER_LEGACY_URL`]: second.sim.url,
    [`${SECOND}MAILER_API_KEY`]: second.apiKey,
    [`${SECOND}SYNC_GROUPS`]: second.groupId,
    // A budget of its own, whatever the scenario gives the first account: its passes take seconds.
    [`${SECOND}API_RATE_LIMIT`]: '100000',
    [`${SECOND}WEBHOOK_SECRETS`]: second.webhookSecret,
  };
}

/** A signed delivery of the second account, for its route under `webhookPath`. */
export interface SecondDelivery {
  path: string;
  body: string;
  signature: string;
}

export interface SecondAccountFigures {
  secondMirrored: number;
  secondIdColumnsChecked: number;
}

export interface SecondAccount {
  readonly name: string;
  /** The second account's simulator (started in beforeAll). */
  readonly sim: Simulator;
  /**
   * Waits for a complete full pass of every type of the second account in the database at
   * `databaseUrl`, then checks, reading its rows: its mirror equals its world (every listed member
   * with every column, nobody else), and no row of it holds an id its world never issued, nor a row
   * of another account an id of its world. `firstWorlds` are the scenario's own worlds mirrored there:
   * they must share no id with the second's, or the last check could not see a crossing.
   */
  expectMirrored(databaseUrl: string, firstWorlds: readonly World[], timeoutMs?: number): Promise<SecondAccountFigures>;
  /** The second account's full passes under way in the database at `databaseUrl` (begun, not completed): `type@offset`. */
  openFullPasses(databaseUrl: string): Promise<string[]>;
  /** What `expireDeadWorker` does for the first account, for every pair of the second (its keys are under its own prefix). */
  expireDeadWorker(redisPrefix: string): Promise<DeadWorkerCleanup[]>;
  /** Delivery `n`: member n of its group (in rotation) as a `subscriber.updated` event, signed with its secret. */
  delivery(n: number, webhookPath: string): SecondDelivery;
}

const handle: SecondAccount = {
  name: SECOND_ACCOUNT,
  get sim() {
    return current().sim;
  },
  expectMirrored,
  async openFullPasses(databaseUrl) {
    const database = openDatabase(databaseUrl, { account: SECOND_ACCOUNT, max: 1 });
    try {
      const states = await listSyncStates(database.pool);
      return states
        .filter((s) => s.groupId === current().groupId && (s.fullOffset !== null || s.fullCursor !== null))
        .map((s) => `${s.type}@${s.fullOffset ?? s.fullCursor}`);
    } finally {
      await database.close();
    }
  },
  async expireDeadWorker(redisPrefix) {
    const second = current();
    const prefix = accountRedisPrefix(redisPrefix, SECOND_ACCOUNT);
    const cleanups: DeadWorkerCleanup[] = [];
    for (const type of SUBSCRIBER_TYPES) cleanups.push(await expireDeadWorker(prefix, second.groupId, type));
    return cleanups;
  },
  delivery(n, webhookPath) {
    const { sim, groupId, webhookSecret } = current();
    const members = sim.world.members(groupId);
    const id = members[n % members.length] as string;
    const body = JSON.stringify({ ...sim.world.renderWebhook(id), event: 'subscriber.updated', account_id: sim.world.accountId });
    return { path: `${webhookPath}/${SECOND_ACCOUNT}`, body, signature: signBody(body, webhookSecret) };
  },
};

/** Starts the second account's simulator before the file's scenarios and closes it after them. */
export function useSecondAccount(scenario: string, options: SecondAccountOptions): SecondAccount {
  beforeAll(async () => {
    running = await start(scenario, options);
  });
  afterAll(async () => {
    const stopping = running;
    running = undefined;
    await stopping?.sim.close();
  });
  return handle;
}

async function expectMirrored(databaseUrl: string, firstWorlds: readonly World[], timeoutMs = 120_000): Promise<SecondAccountFigures> {
  const second = current();
  expect(
    firstWorlds.flatMap((world) => sharedIds(second.ids, world)),
    'ids the second world shares with the scenario',
  ).toEqual([]);
  const database = openDatabase(databaseUrl, { account: SECOND_ACCOUNT, max: 2 });
  try {
    await waitForFullPasses(database.pool, second.groupId, timeoutMs);
    const comparison = await compareGroupWithWorld(database.pool, second.sim.world, second.groupId, SUBSCRIBER_TYPES, {
      exactRows: true,
    });
    expect(comparison.problems, 'account second against its world').toEqual([]);
    expect(comparison.expected).toBeGreaterThan(100);
    expect({ subscribers: comparison.subscriberRows, members: comparison.currentMembers }).toEqual({
      subscribers: comparison.expected,
      members: comparison.expected,
    });
    const crossing = await crossAccountIds(database.pool, SECOND_ACCOUNT, second.ids);
    expect(crossing.problems, 'rows holding the other account’s ids').toEqual([]);
    return { secondMirrored: comparison.subscriberRows, secondIdColumnsChecked: crossing.columns };
  } finally {
    await database.close();
  }
}

/** A pair whose last full pass completed and none is open. */
const fullPassDone = (s: SyncStateRow) => s.lastFullCompletedAt !== null && s.fullOffset === null && s.fullCursor === null;

async function waitForFullPasses(pool: pg.Pool, groupId: string, timeoutMs: number): Promise<void> {
  const done = async () => {
    const states = (await listSyncStates(pool)).filter((s) => s.groupId === groupId);
    return SUBSCRIBER_TYPES.every((type) => states.some((s) => s.type === type && fullPassDone(s)));
  };
  await waitFor("a complete full pass of every type of account second's group", done, timeoutMs, 250).catch(async (error: unknown) => {
    const states = await listSyncStates(pool);
    throw new Error(`${(error as Error).message}; its sync state: ${JSON.stringify(states)}`);
  });
}

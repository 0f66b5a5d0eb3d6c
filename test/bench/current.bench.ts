/**
 * The current API's full pass by cursor (docs/upstream-current.md, "Cost of a full pass"): requests
 * per full pass of every status against the minimum (one per page of at most 100 rows, plus the
 * group's counts once per status), rows per second end to end, and, from the measured requests per
 * member, the time to a first full mirror of 1,000,000 members at 120 requests a minute (the
 * limiter's 2 % margin included). The simulator's page cap is 100, below the 500 asked for.
 */
import { createLogger } from '../../src/ground/log.js';
import { SUBSCRIBER_TYPES } from '../../src/db/schema.js';
import { CURRENT_REQUESTS, startSimulator } from '../../src/simulator/index.js';
import { currentSource } from '../../src/sync/current-pass.js';
import { createCurrentClient } from '../../src/upstream/current/client.js';
import { createScratchDatabase } from './lib/scratch-db.js';

export interface CurrentBenchFigures {
  subscribers: number;
  members: number;
  pageCap: number;
  requests: { fullPass: number; minimum: number };
  rowsPerSecond: number;
  /** Computed: requests for 1M members and minutes at 120 a minute with the limiter's margin. */
  million: { requests: number; minutes: number };
}

/** Page cap of the simulator (and the lowest maximum anyone states for the service). */
const PAGE_CAP = 100;
const PER_MINUTE = 120;
/** The shared limiter keeps 2 % of each window as margin (src/ratelimit/limiter.ts). */
const LIMITER_MARGIN = 0.02;

export async function benchCurrent(options: {
  subscribers: number;
  databaseUrl: string;
  log: (line: string) => void;
}): Promise<CurrentBenchFigures> {
  const sim = await startSimulator({
    subscribers: options.subscribers,
    groups: 1,
    rateLimit: false,
    currentPageCap: PAGE_CAP,
    seed: 17,
  });
  const db = await createScratchDatabase(options.databaseUrl, 'current');
  try {
    const groupId = sim.world.groupIds()[0] as string;
    const source = currentSource({
      sourceTimezone: 'UTC',
      pageSize: 500,
      clientFactory: () => createCurrentClient({ baseUrl: sim.url, token: sim.webhooksToken }),
    });
    const ctx = {
      pool: db.pool,
      logger: createLogger({ level: 'silent' }).logger,
      groupTypes: SUBSCRIBER_TYPES,
    };
    const started = performance.now();
    let rows = 0;
    for (const type of SUBSCRIBER_TYPES) rows += (await source.runPass(ctx, groupId, type, 'full')).rowsSeen;
    const seconds = (performance.now() - started) / 1000;
    const members = sim.world.memberCount(groupId);
    if (rows !== members) throw new Error(`the pass read ${rows} rows of ${members} members`);
    const fullPass = sim.requests.filter(CURRENT_REQUESTS).length;
    const minimum = SUBSCRIBER_TYPES.reduce((n, t) => n + Math.max(1, Math.ceil(sim.world.members(groupId, t).length / PAGE_CAP)) + 1, 0);
    // 1M members: one request per 100 rows, one per list for its last (short) page, one count per list,
    // times what this run needed over its minimum.
    const millionMinimum = Math.ceil(1_000_000 / PAGE_CAP) + 2 * SUBSCRIBER_TYPES.length;
    const millionRequests = Math.ceil(millionMinimum * (fullPass / minimum));
    const minutes = (millionRequests / PER_MINUTE) * (1 + LIMITER_MARGIN);
    options.log(
      `current: ${members} members, ${fullPass} requests (minimum ${minimum}), ${Math.round(rows / seconds)} rows/s; 1M: ${millionRequests} requests, ${minutes.toFixed(1)} min`,
    );
    return {
      subscribers: options.subscribers,
      members,
      pageCap: PAGE_CAP,
      requests: { fullPass, minimum },
      rowsPerSecond: Math.round(rows / seconds),
      million: { requests: millionRequests, minutes: Math.round(minutes * 10) / 10 },
    };
  } finally {
    await sim.close();
    await db.drop();
  }
}

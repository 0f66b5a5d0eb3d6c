/**
 * Fault 6 (invariant 11, issue 11): churn during full passes. `start --role worker` runs its
 * scheduled full passes (every 20 s) over a group of 20,000 members with page size 500 while,
 * after every page the service serves, 3 members already read leave (removed from the group or
 * deleted), 2 join and 2 members ahead change type; then, for two more passes of every type, bursts on
 * top (40 more members already read leave after every 5th request: issue 20). Webhooks are off: only the poll can end a
 * membership. Throughout: no member still listed upstream ever has `removed_at`; every member that
 * left is ended by the first removal-proof sweep that starts after two complete full passes of every
 * type that started after it left (docs/architecture.md, "Proof in rounds"); once the churn has
 * stopped and the sweep after the last round has run, the mirror equals the world.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_ACCOUNT } from '../../src/config.js';
import { SUBSCRIBER_TYPES, startSimulator, type Simulator, type SubscriberType } from '../../src/simulator/index.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { readMembers } from '../helpers/mirror.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { compareGroupWithWorld, type GroupComparison } from './helpers/compare.js';
import { useSecondAccount } from './helpers/second-account.js';
import { makeSecrets, withCredentials } from './helpers/secrets.js';
import {
  assertRunning,
  killAll,
  linesOf,
  printSummary,
  sleep,
  startService,
  stopGracefully,
  type LogLine,
  type ServiceProcess,
} from './helpers/service.js';

const TYPES = SUBSCRIBER_TYPES as readonly SubscriberType[];

interface Pass {
  type: string;
  startedAt: number;
  /** When it succeeded; null while it runs, or when it failed or had a gap (then it proves nothing). */
  endedAt: number | null;
}

/**
 * Full passes as the worker logged them ('pass started' / 'pass succeeded', mode full). A pass
 * counts as complete only without gaps, and from the start its success line reports: a resumed pass
 * started when it was first opened. That is what the removal proof counts.
 */
function fullPasses(lines: readonly LogLine[]): Pass[] {
  const passes: Pass[] = [];
  const open = new Map<string, Pass>();
  for (const line of lines) {
    if (line.mode !== 'full' || typeof line.type !== 'string' || typeof line.time !== 'string') continue;
    if (line.msg === 'pass started') {
      const pass: Pass = { type: line.type, startedAt: Date.parse(line.time), endedAt: null };
      open.set(line.type, pass);
      passes.push(pass);
    } else if (line.msg === 'pass succeeded') {
      const pass = open.get(line.type);
      open.delete(line.type);
      if (!pass || line.gaps !== 0) continue;
      pass.endedAt = Date.parse(line.time);
      if (typeof line.startedAt === 'string') pass.startedAt = Date.parse(line.startedAt);
    }
  }
  return passes;
}

/**
 * For every type, the complete full passes that started in a later second than `at`; the fewest of
 * them. The service stamps changes to the second, so a fact from the second a pass started in may
 * be newer than its start: removal counts only passes that started in a later second (docs/architecture.md,
 * "Proof in rounds").
 */
function completePassesSince(passes: readonly Pass[], at: number): number {
  const from = nextSecond(at);
  return Math.min(...TYPES.map((type) => passes.filter((p) => p.type === type && p.endedAt !== null && p.startedAt >= from).length));
}

/**
 * When the second complete full pass of every type that started in a later second than `at` ended;
 * null while some type has fewer.
 */
function secondRoundEnded(passes: readonly Pass[], at: number): number | null {
  const from = nextSecond(at);
  let latest = -Infinity;
  for (const type of TYPES) {
    const ends = passes
      .filter((p) => p.type === type && p.endedAt !== null && p.startedAt >= from)
      .map((p) => p.endedAt as number)
      .sort((a, b) => a - b);
    const second = ends[1];
    if (second === undefined) return null;
    latest = Math.max(latest, second);
  }
  return latest;
}

/** Start times of the removal proof's sweeps (every type's pass lock held from the first read to the last). */
function sweepStarts(lines: readonly LogLine[]): number[] {
  return lines
    .filter((l) => l.msg === 'removal proof: swept every type' && typeof l.startedAt === 'string')
    .map((l) => Date.parse(l.startedAt as string));
}

/** The start of the second after the one `ms` falls in. */
function nextSecond(ms: number): number {
  return ms - (ms % 1000) + 1000;
}

describe('fault 6: churn during full passes', () => {
  const secrets = makeSecrets('churn-passes');
  // Its full passes run on the same schedule in the same process, without churn.
  const second = useSecondAccount('churn-passes', { largeIds: false });
  const prefix = uniquePrefix('fault-churn');
  let database: TestDatabase;
  let sim: Simulator;
  let groupId: string;
  let env: Record<string, string>;

  beforeAll(async () => {
    database = await createTestDatabase();
    sim = await startSimulator({ subscribers: 20_000, groups: 1, rateLimit: false, largeIds: true, seed: 61, apiKey: secrets.apiKey });
    groupId = sim.world.groupIds()[0] as string;
    env = {
      DATABASE_URL: withCredentials(database.url, 'postgres', secrets.dbPassword),
      REDIS_URL: withCredentials(redisUrl(), 'default', secrets.redisPassword),
      REDIS_PREFIX: prefix,
      MAILER_LEGACY_URL: sim.url,
      MAILER_API_KEY: secrets.apiKey,
      SYNC_GROUPS: groupId,
      SYNC_TYPES: TYPES.join(','),
      SYNC_PAGE_SIZE: '500',
      SYNC_EVERY: '10s',
      RECONCILE_EVERY: '20s',
      API_RATE_LIMIT: '100000',
      ADMIN_TOKEN: secrets.adminToken,
      // Admin is served on the ops listener only.
      OPS_PORT: '0',
      PORT: '0',
      LOG_LEVEL: 'info',
    };
  });

  afterAll(async () => {
    killAll();
    await sim?.close();
    await database?.drop();
    await deleteInstallKeys(prefix);
  });

  it('never ends a listed member, ends every leaver by the sweep after two complete passes, then equals the world', async () => {
    const started = Date.now();
    const members = sim.world.memberCount(groupId);
    expect(members).toBeGreaterThan(15_000);
    const leftAt = new Map<string, number>();
    // Every event of every member, so that a false removal can be explained from its history.
    const history = new Map<string, string[]>();
    sim.world.onEvent((e) => {
      if (!e.subscriberId) return;
      const seen = history.get(e.subscriberId) ?? [];
      seen.push(`${e.kind}${e.subscriber ? `(${e.subscriber.status})` : ''}@${new Date(e.atUs / 1000).toISOString()}`);
      history.set(e.subscriberId, seen);
      if ((e.kind === 'subscriber.removed_from_group' && e.group?.id === groupId) || e.kind === 'subscriber.deleted')
        leftAt.set(e.subscriberId, Date.now());
    });
    const endedAfter = new Map<string, number>();
    let falseRemovals = 0;
    const falselyEnded = new Map<string, string>();
    let late = 0;
    const lateSeen: string[] = [];
    let lateDetail: string | null = null;
    // A member the mirror holds wrongly (a late leaver, a stale membership) with what the removal rule
    // reads: its membership, the pass history and its events.
    const explainMember = async (id: string, at: number | undefined, round: number | null, sweeps: readonly number[]) => {
      const member = await database.pool.query('select * from group_members where group_id = $1 and subscriber_id = $2', [groupId, id]);
      const state = await database.pool.query(
        `select id, type, kind, trigger, started_at, listed_from, ended_at, status, complete, gap_free, read_since, removed
           from sync_passes where group_id = $1 order by id desc limit 40`,
        [groupId],
      );
      return JSON.stringify({
        id,
        leftAt: at === undefined ? null : new Date(at).toISOString(),
        secondRoundEnded: round === null ? null : new Date(round).toISOString(),
        sweeps: sweeps.map((t) => new Date(t).toISOString()),
        member: member.rows[0],
        syncState: state.rows,
        history: history.get(id),
      });
    };
    let checks = 0;

    const check = async (passes: readonly Pass[], sweeps: readonly number[]) => {
      checks += 1;
      // World first: a member listed now and ended in the mirror can only be a false removal.
      const listed = new Set(sim.world.members(groupId));
      const rows = await readMembers(database.pool, groupId);
      const removed = new Set(rows.filter((m) => m.removedAt !== null).map((m) => m.subscriberId));
      const known = new Set(rows.map((m) => m.subscriberId));
      const wrong = [...removed].filter((id) => listed.has(id));
      falseRemovals += wrong.length;
      for (const id of wrong) {
        if (falselyEnded.has(id)) continue;
        const row = rows.find((m) => m.subscriberId === id);
        falselyEnded.set(
          id,
          `${id}: ended ${row?.removedAt} (seen ${new Date().toISOString()}), now ${sim.world.membership(groupId, id)?.type}; ${(history.get(id) ?? []).join(', ')}`,
        );
      }
      for (const [id, at] of leftAt) {
        const since = completePassesSince(passes, at);
        if (removed.has(id) && !endedAfter.has(id)) endedAfter.set(id, since);
        const round = since >= 2 ? secondRoundEnded(passes, at) : null;
        const swept = round !== null && sweeps.some((startedAt) => startedAt >= round);
        if (swept && known.has(id) && !removed.has(id)) {
          late += 1;
          if (lateSeen.length < 5) lateSeen.push(`${id} left at ${new Date(at).toISOString()}`);
          if (lateDetail === null) lateDetail = await explainMember(id, at, round, sweeps);
        }
      }
    };

    // The first full pass of each type runs at start (no cursor yet); churn starts with it.
    sim.pageChurn.set({ groupId, leave: 3, join: 2, retype: 2 });
    const worker: ServiceProcess = startService('worker', env, 'churn-passes');
    // The second account's passes log the same messages for the same types.
    const own = () => linesOf(worker, DEFAULT_ACCOUNT);
    const until = async (what: string, done: (passes: Pass[]) => boolean | Promise<boolean>, timeoutMs: number) => {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        assertRunning(worker, `while waiting for ${what}`);
        const passes = fullPasses(own());
        await check(passes, sweepStarts(own()));
        if (await done(passes)) return passes;
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
        await sleep(1_000);
      }
    };
    const completeOf = (passes: Pass[], type: string, after = 0) =>
      passes.filter((p) => p.type === type && p.endedAt !== null && p.startedAt > after).length;

    // Three complete full passes of every type under churn.
    await until('3 full passes of every type under churn', (p) => TYPES.every((t) => completeOf(p, t) >= 3), 300_000);
    // Then bursts on top (issue 20: the unsubscribes right after a campaign): 40 more members already
    // read leave after every 5th request, for two more complete passes of every type.
    const burstFrom = Date.now();
    const leftBeforeBursts = sim.pageChurn.applied.leave;
    sim.pageChurn.set({ groupId, leave: 3, join: 2, retype: 2, burst: { every: 5, leave: 40 } });
    await until('2 full passes of every type under bursts', (p) => TYPES.every((t) => completeOf(p, t, burstFrom) >= 2), 300_000);
    const leftInBursts = sim.pageChurn.applied.leave - leftBeforeBursts;
    const churned = { ...sim.pageChurn.applied };
    sim.pageChurn.clear();
    // Passes that start in a later second: a departure stamped in the second a pass started can be
    // newer than its start, so that pass proves nothing about it (docs/architecture.md, "Proof in rounds").
    const calm = nextSecond(Date.now());
    // Two more that start after the churn stopped: every leaver is then past its two passes.
    await until('2 full passes of every type after the churn', (p) => TYPES.every((t) => completeOf(p, t, calm) >= 2), 300_000);
    // The last leavers are bound only to the sweep after that round, which may not have run yet (on
    // CI a comparison right at the round's end once found stale memberships while no leaver was past
    // its bound); `check` keeps holding every leaver to its bound meanwhile. After 120 s it gives up
    // without throwing, and the last comparison says what still differs.
    const roundEnded = Date.now();
    const compared: GroupComparison[] = [];
    const equalOrGaveUp = async () => {
      const comparison = await compareGroupWithWorld(database.pool, sim.world, groupId, TYPES);
      compared.push(comparison);
      return comparison.problems.length === 0 || Date.now() - roundEnded > 120_000;
    };
    await until('the sweep that ends the last leavers', equalOrGaveUp, 300_000);
    const convergedAfterMs = Date.now() - roundEnded;
    const passes = fullPasses(own());

    expect(churned.leave).toBeGreaterThan(100);
    expect(leftInBursts).toBeGreaterThan(200);
    expect(churned.join).toBeGreaterThan(50);
    expect(churned.retype).toBeGreaterThan(50);
    const passLog = passes.map(
      (p) => `${p.type} ${new Date(p.startedAt).toISOString()}..${p.endedAt === null ? '-' : new Date(p.endedAt).toISOString()}`,
    );
    expect(
      falseRemovals,
      `members ended while listed:\n${[...falselyEnded.values()].join('\n')}\nfull passes:\n${passLog.join('\n')}`,
    ).toBe(0);
    expect(late, `leavers not ended by the sweep after two passes of every type: ${lateSeen.join('; ')}\n${lateDetail}`).toBe(0);
    const leaversKnown = [...leftAt.keys()].filter((id) => endedAfter.has(id)).length;
    expect(leaversKnown).toBeGreaterThan(100);
    // The proof's sweeps ran (the check above holds each leaver to the first one after its two rounds).
    expect(sweepStarts(own()).length).toBeGreaterThan(0);

    const comparison = compared.at(-1) as GroupComparison;
    // A member still current that the world no longer lists, with what the removal rule reads.
    const stale = comparison.unlisted[0];
    const staleAt = stale === undefined ? undefined : leftAt.get(stale);
    const staleDetail =
      stale === undefined
        ? ''
        : await explainMember(stale, staleAt, staleAt === undefined ? null : secondRoundEnded(passes, staleAt), sweepStarts(own()));
    expect(comparison.problems, staleDetail).toEqual([]);
    const gapLines = own().filter((l) => typeof l.msg === 'string' && l.msg.includes('shifted by more than the page overlap')).length;
    // Members a pass missed are proven at once in this group of five types: confirming passes ran.
    const proofs = own().filter((l) => l.msg === 'removal proof done');
    expect(proofs.length).toBeGreaterThan(0);
    const secondFigures = await second.expectMirrored(database.url, [sim.world]);
    expect(await stopGracefully(worker)).toBe(0);

    const histogram = [0, 1, 2, 3].map((n) => [...endedAfter.values()].filter((v) => (n < 3 ? v === n : v >= n)).length).join('/');
    printSummary('churn during full passes', {
      members,
      fullPasses: passes.filter((p) => p.endedAt !== null).length,
      leftDuringPasses: churned.leave,
      leftDuringBurstPasses: leftInBursts,
      stepBacks: own().reduce((n, l) => n + (l.msg === 'pass succeeded' && typeof l.stepBacks === 'number' ? l.stepBacks : 0), 0),
      joinedDuringPasses: churned.join,
      retypedDuringPasses: churned.retype,
      falseRemovals,
      checks,
      trueRemovalsEnded: endedAfter.size,
      'endedAfter0/1/2/3+Passes': histogram,
      endedLate: late,
      passesWithGaps: gapLines,
      removalProofs: proofs.length,
      proofSweeps: sweepStarts(own()).length,
      confirmingPasses: proofs.reduce((n, l) => n + (typeof l.confirmingPasses === 'number' ? l.confirmingPasses : 0), 0),
      mirrored: comparison.currentMembers,
      problemsWhenLastRoundEnded: compared[0]?.problems.length ?? -1,
      secondsToEqualAfterLastRound: Math.round(convergedAfterMs / 100) / 10,
      ...secondFigures,
      seconds: Math.round((Date.now() - started) / 1000),
    });
  }, 1_200_000);
});

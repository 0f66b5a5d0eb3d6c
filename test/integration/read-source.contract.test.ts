/**
 * The contract of a read source (docs/architecture.md, "Read sources"): what must hold whichever API
 * a pass reads, written once and run against every source through the `ReadSource` seam, as the
 * worker calls it. The simulator stands in for the service; webhooks are off (passes alone), except
 * for one version stored as a webhook would store it.
 *
 * - Removals need proof (invariant 11): members leaving, joining and changing type between the pages
 *   of full passes; no member still listed is ever ended, every leaver is ended within two complete
 *   passes after it left (and the sweep after a round, where the source has a date filter), and the
 *   mirror then equals the world.
 * - Never regress (invariant 2): a listed version older than the stored one changes nothing; a newer
 *   one is taken.
 * - Lossless ids (invariant 6): ids above 2^53 arrive exactly; rows carry the source's `mirrored_via`.
 *
 * Each source's churn scenario is sized to its paging (legacy: overlapping pages of 500 over 20,000
 * subscribers; current: the service's cap of 100 over 8,000), so that every page moves the list.
 */
import { describe, expect, it } from 'vitest';
import type { SubscriberType } from '../../src/db/schema.js';
import { normalizeWebhookSubscriber, SUBSCRIBER_FIELDS, type SubscriberValues } from '../../src/mirror/normalize.js';
import { upsertSubscribers } from '../../src/mirror/store/index.js';
import { startSimulator, type Simulator, type SimulatorOptions } from '../../src/simulator/index.js';
import type { World } from '../../src/simulator/world.js';
import type { PassResult } from '../../src/sync/pass-recorder.js';
import type { ReadSource } from '../../src/sync/source.js';
import { collectStatus } from '../../src/sync/status.js';
import { currentTestSource, expectedFromWorldCurrent, passContext } from '../helpers/current.js';
import { diffSubscribers, expectedFromWorld, readMembers, readMirroredSubscribers } from '../helpers/mirror.js';
import { ALL_TYPES, fullPassAllTypes, legacyTestSource, passFixture } from '../helpers/poll.js';

const HOUR = 3_600_000;
const TWO_53 = 2n ** 53n;

/** A read source under contract, and how the mirror must look after it read the world. */
interface SourceUnderTest {
  name: string;
  source: (sim: Simulator) => ReadSource;
  /** The source's rendering of the given subscribers, normalized. */
  expected: (world: World, ids: Iterable<string>) => Map<string, SubscriberValues>;
  /** The fields its lists carry (compared with the world). */
  fields: readonly (keyof SubscriberValues)[];
  /** The churn scenario: a list large enough that every page of every round moves it. */
  churn: { subscribers: number; seed: number; leave: number; join: number; retype: number };
}

const SOURCES: SourceUnderTest[] = [
  {
    name: 'legacy',
    source: (sim) => legacyTestSource(sim, { pageSize: 500 }),
    expected: (world, ids) => expectedFromWorld(world, ids, 'UTC'),
    // The legacy lists carry no `source`; no list carries a deletion or an erasure time.
    fields: SUBSCRIBER_FIELDS.filter((f) => f !== 'source' && f !== 'deletedAt' && f !== 'forgetAt'),
    churn: { subscribers: 20_000, seed: 11, leave: 3, join: 2, retype: 2 },
  },
  {
    name: 'current',
    source: (sim) => currentTestSource(sim),
    expected: expectedFromWorldCurrent,
    fields: SUBSCRIBER_FIELDS.filter((f) => f !== 'deletedAt' && f !== 'forgetAt'),
    churn: { subscribers: 8_000, seed: 23, leave: 2, join: 2, retype: 3 },
  },
];

describe.each(SOURCES)('read source contract: $name', (under) => {
  const fixture = passFixture();
  const start = async (options: SimulatorOptions) => {
    const sim = (fixture.sim = await startSimulator({ groups: 1, rateLimit: false, ...options }));
    return { sim, groupId: sim.world.groupIds()[0]!, source: under.source(sim) };
  };
  const passAll = (source: ReadSource, groupId: string, types?: readonly SubscriberType[]): Promise<PassResult[]> =>
    fullPassAllTypes(source, passContext(fixture.database), groupId, types);

  async function mirrorEqualsWorld(sim: Simulator, groupId: string): Promise<void> {
    const { pool } = fixture.database;
    const expected = under.expected(sim.world, sim.world.members(groupId));
    expect(diffSubscribers(expected, await readMirroredSubscribers(pool), under.fields)).toEqual([]);
    const current = (await readMembers(pool, groupId)).filter((m) => m.removedAt === null);
    const want = [...sim.world.memberships()].filter((m) => m.groupId === groupId).map((m) => `${m.subscriberId}:${m.type}`);
    expect(current.map((m) => `${m.subscriberId}:${m.type}`).sort()).toEqual(want.sort());
  }

  it('churn on every page (leaves, joins, type changes): 0 false removals, every leaver ended within two passes, then equal to the world', async () => {
    const { subscribers, seed, ...rates } = under.churn;
    const { sim, groupId, source } = await start({ subscribers, seed });
    const { pool } = fixture.database;
    // When each member left the group upstream (wall clock, like the passes' start times).
    const leftAt = new Map<string, number>();
    sim.world.onEvent((e) => {
      if (!e.subscriberId) return;
      if ((e.kind === 'subscriber.removed_from_group' && e.group?.id === groupId) || e.kind === 'subscriber.deleted')
        leftAt.set(e.subscriberId, Date.now());
    });
    const rounds: number[] = []; // start of each complete full pass of every type
    const endedAfter = new Map<string, number>(); // leaver → complete passes after it left when it was first seen ended
    const check = async () => {
      const rows = await readMembers(pool, groupId);
      const listed = new Set(sim.world.members(groupId));
      expect(rows.filter((m) => m.removedAt !== null && listed.has(m.subscriberId))).toEqual([]);
      const removed = new Set(rows.filter((m) => m.removedAt !== null).map((m) => m.subscriberId));
      const known = new Set(rows.map((m) => m.subscriberId));
      for (const [id, at] of leftAt) {
        // Upstream times have whole seconds, and a fact in the cutoff's second blocks the removal
        // (invariant 11): a pass counts when it began in a later second than the member left.
        const passesSince = rounds.filter((begin) => Math.floor(begin / 1000) > Math.floor(at / 1000)).length;
        if (removed.has(id) && !endedAfter.has(id)) endedAfter.set(id, passesSince);
        // Within two complete passes that started after it left (if the mirror ever knew it).
        if (passesSince >= 2 && known.has(id)) expect(removed.has(id), `member ${id} left before two complete passes`).toBe(true);
      }
    };
    const round = async () => {
      rounds.push(Date.now());
      const results = await passAll(source, groupId);
      // The sweep the worker's removal proof runs after a round, where the source has a date filter:
      // a removal waits for one after the first of its two rounds ("Proof in rounds").
      if (source.incremental)
        for (const type of ALL_TYPES) await source.runPass(passContext(fixture.database), groupId, type, 'incremental');
      await check();
      return results.reduce((n, r) => n + r.gaps, 0);
    };

    sim.pageChurn.set({ groupId, ...rates });
    let gaps = 0;
    for (let i = 0; i < 3; i++) gaps += await round();
    expect(sim.pageChurn.applied.leave).toBeGreaterThan(100);
    expect(sim.pageChurn.applied.join).toBeGreaterThan(50);
    expect(sim.pageChurn.applied.retype).toBeGreaterThan(50);
    sim.pageChurn.clear();
    for (let i = 0; i < 2; i++) gaps += await round();
    // No pass lost its proof to a page it could not join to the one before.
    expect(gaps).toBe(0);
    // Every leaver the mirror knew is ended, none later than the second pass after it left.
    expect(endedAfter.size).toBeGreaterThan(100);
    expect(Math.max(...endedAfter.values())).toBeLessThanOrEqual(2);
    await mirrorEqualsWorld(sim, groupId);
  }, 300_000);

  it('never regress: a listed version older than the stored one changes nothing, a newer one is taken', async () => {
    let now = Date.parse('2024-05-10T12:00:00Z');
    const { sim, groupId, source } = await start({ subscribers: 300, seed: 3, clock: () => now });
    const { pool } = fixture.database;
    await passAll(source, groupId);
    // A webhook an hour ahead of what the lists still say.
    const id = sim.world.members(groupId, 'active')[0]!;
    const rendered = sim.world.renderWebhook(id);
    const ahead = '2024-05-10T13:00:00.000000Z';
    const webhook = { ...rendered, updated_at: ahead, fields: { ...rendered.fields, city: 'by-webhook' } };
    await upsertSubscribers(pool, [normalizeWebhookSubscriber(webhook)]);

    const behind = await passAll(source, groupId);
    expect(behind.reduce((n, r) => n + r.counts.skipped, 0)).toBe(1);
    expect(behind.reduce((n, r) => n + r.rowsWritten, 0)).toBe(0);
    const kept = (await readMirroredSubscribers(pool)).get(id);
    expect(kept).toMatchObject({ updatedAt: ahead, fields: expect.objectContaining({ city: 'by-webhook' }) });

    // The service moves past it: the lists' newer version wins.
    now += 2 * HOUR;
    sim.world.updateFields(id, { city: 'later-upstream' });
    const after = await passAll(source, groupId, ['active']);
    expect(after[0]!.rowsWritten).toBe(1);
    expect((await readMirroredSubscribers(pool)).get(id)?.fields).toMatchObject({ city: 'later-upstream' });
    await mirrorEqualsWorld(sim, groupId);
  });

  it('lossless ids: ids above 2^53 arrive exactly, rows carry the source’s mirrored_via, drift 0', async () => {
    const { sim, groupId, source } = await start({ subscribers: 1_500, seed: 5, largeIds: true });
    const { pool } = fixture.database;
    const results = await passAll(source, groupId);
    expect(results.reduce((n, r) => n + r.rowsSeen, 0)).toBe(sim.world.memberCount(groupId));
    const ids = [...(await readMirroredSubscribers(pool)).keys()];
    expect(ids.filter((id) => BigInt(id) > TWO_53).length).toBeGreaterThan(100);
    await mirrorEqualsWorld(sim, groupId);
    const { rows } = await pool.query<{ via: string; n: number }>(
      'select mirrored_via as via, count(*)::int as n from subscribers group by 1',
    );
    expect(rows).toEqual([{ via: source.via, n: ids.length }]);
    const status = await collectStatus(pool, { groups: [groupId], types: ALL_TYPES });
    expect(status.map((r) => r.drift)).toEqual(ALL_TYPES.map(() => 0));
  });
});

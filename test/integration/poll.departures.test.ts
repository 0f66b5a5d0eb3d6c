/**
 * Full passes while members the pass already read leave after every request (issue 20: the pace of
 * unsubscribes right after a campaign), at 1, 2 and 4 departures per request and in bursts, over
 * 20,000 members at page 500. Simulator + real Postgres, webhooks off (poll alone). The pass keeps
 * its footing (requests ÷ the same pass over a quiet list), concludes no false removal, and every
 * leaver is ended by the confirming pass that follows the pass that missed it.
 */
import { describe, expect, it } from 'vitest';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { runPass, type PassDeps } from '../../src/sync/legacy-pass.js';
import type { TestDatabase } from '../helpers/db.js';
import { readMembers } from '../helpers/mirror.js';
import { passDeps, passFixture } from '../helpers/poll.js';

const deps = (database: TestDatabase, sim: Simulator): PassDeps => passDeps(database, sim, { pageSize: 500, groupTypes: ['active'] });

async function falseRemovals(database: TestDatabase, sim: Simulator, groupId: string): Promise<string[]> {
  const listed = new Set(sim.world.members(groupId, 'active'));
  return (await readMembers(database.pool, groupId))
    .filter((m) => m.removedAt !== null && listed.has(m.subscriberId))
    .map((m) => m.subscriberId);
}

describe('departures per request during a full pass', () => {
  const fixture = passFixture();

  it('20,000 members, page 500, 1/2/4 departures per request and bursts: ≤ 1.5× a quiet pass at 1, no false removal, every leaver ended by the confirming pass', async () => {
    const sim = (fixture.sim = await startSimulator({ subscribers: 26_000, groups: 1, rateLimit: false, seed: 20 }));
    const database = fixture.database;
    const groupId = sim.world.groupIds()[0]!;
    expect(sim.world.memberCount(groupId, 'active')).toBeGreaterThan(18_000);
    const d = deps(database, sim);
    // The same pass over a quiet list (the list shrinks by a few percent over the settings: its page count barely moves).
    const quiet = await runPass(d, groupId, 'active', 'full');

    const settings = [{ leave: 1 }, { leave: 2 }, { leave: 4 }, { leave: 1, burst: { every: 10, leave: 60 } }];
    for (const churn of settings) {
      const leftBefore = sim.pageChurn.left.length;
      sim.pageChurn.set({ groupId, ...churn });
      const moving = await runPass(d, groupId, 'active', 'full');
      sim.pageChurn.clear();
      const leavers = sim.pageChurn.left.slice(leftBefore);
      expect(leavers.length).toBeGreaterThan(0);
      expect(moving.gaps).toBe(0);
      expect(await falseRemovals(database, sim, groupId)).toEqual([]);
      if (churn.leave === 1 && !churn.burst) expect(moving.requests).toBeLessThanOrEqual(1.5 * quiet.requests);
      // Heavier churn still ends, at a bounded cost.
      expect(moving.requests).toBeLessThanOrEqual(2 * quiet.requests);

      // The next full pass misses the leavers (read by the moving pass, then gone; a leaver from a page
      // the pass stepped back from was never read by it, and this pass already proves it gone) …
      const missing = await runPass(d, groupId, 'active', 'full');
      expect(missing.removed + (missing.awaitingProof?.count ?? 0)).toBe(leavers.length);
      // … and the confirming pass right after it ends every other one, and no listed member.
      const confirming = await runPass(d, groupId, 'active', 'full');
      expect(confirming.removed).toBe(missing.awaitingProof?.count);
      const rows = new Map((await readMembers(database.pool, groupId)).map((m) => [m.subscriberId, m]));
      expect(leavers.filter((id) => rows.get(id)?.removedAt == null)).toEqual([]);
      expect(await falseRemovals(database, sim, groupId)).toEqual([]);
      process.stdout.write(
        `departures ${JSON.stringify(churn)}: ${moving.requests} requests vs ${quiet.requests} quiet (${(moving.requests / quiet.requests).toFixed(2)}x), ` +
          `${moving.stepBacks} step backs, ${leavers.length} left, ${confirming.removed} ended by the confirming pass\n`,
      );
    }
  }, 600_000);
});

/**
 * `subscriber-mirror audit [--group G] [--type T] [--json]` (docs/operations.md, "The audit"), run as
 * operators run it (a child process) against the simulator: with blind spots set after the mirror's
 * full passes it prints what it found and repaired, by id only (no email, no name), and exits 0; a
 * --type or --group that is not configured gets a clear error, exit 2, and changes nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { runCli } from '../helpers/cli.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { passAllTypes, passDeps } from '../helpers/poll.js';
import { deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';

const DAY_MS = 86_400_000;

describe('subscriber-mirror audit', () => {
  let database: TestDatabase;
  let sim: Simulator;
  let groupId: string;
  let env: Record<string, string>;
  const prefix = uniquePrefix('audit-cli');

  beforeAll(async () => {
    database = await createTestDatabase();
    sim = await startSimulator({ subscribers: 150, groups: 2, seed: 7, rateLimit: false });
    groupId = sim.world.groupIds()[0] as string;
    await passAllTypes(passDeps(database, sim), groupId, 'full');
    env = {
      DATABASE_URL: database.url,
      REDIS_URL: redisUrl(),
      REDIS_PREFIX: prefix,
      MAILER_LEGACY_URL: sim.url,
      MAILER_API_KEY: sim.apiKey,
      SYNC_GROUPS: groupId,
      LOG_LEVEL: 'silent',
    };
  });

  afterAll(async () => {
    await sim?.close();
    await deletePrefix(prefix);
    await database?.drop();
  });

  async function auditRows(): Promise<{ state: number; results: number }> {
    const { rows } = await database.pool.query<{ state: number; results: number }>(
      'select (select count(*) from audit_state)::int as state, (select count(*) from audit_results)::int as results',
    );
    return rows[0] as { state: number; results: number };
  }

  it('refuses a --type or --group that is not configured, naming the configured ones, before any request or write', async () => {
    const requests = sim.requests.length;
    const type = await runCli(['audit', '--type', 'nonsense'], env);
    expect(type.code).toBe(2);
    expect(type.stderr).toContain(
      '--type must be one of the configured types (SYNC_TYPES): active, unsubscribed, bounced, junk, unconfirmed, got "nonsense"',
    );
    const narrowed = await runCli(['audit', '--type', 'bounced'], { ...env, SYNC_TYPES: 'active' });
    expect(narrowed.code).toBe(2);
    expect(narrowed.stderr).toContain('configured types (SYNC_TYPES): active, got "bounced"');
    const group = await runCli(['audit', '--group', '999'], env);
    expect(group.code).toBe(2);
    expect(group.stderr).toContain(`--group 999 is not configured; configured groups (SYNC_GROUPS): ${groupId}`);
    expect(sim.requests.length).toBe(requests);
    expect(await auditRows()).toEqual({ state: 0, results: 0 });
  });

  it('prints the ids it found and repaired (no personal data) and exits 0', async () => {
    const renamed = sim.world.members(groupId, 'active').slice(0, 3);
    for (const [i, id] of renamed.entries()) sim.world.updateFieldsSilently(id, { name: `Unstamped Name ${i}` });
    const [, other] = sim.world.groupIds() as [string, string];
    const joiner = sim.world.members(other, 'active').find((id) => !sim.world.membership(groupId, id)) as string;
    sim.world.restamp(joiner, Date.now() - 3 * DAY_MS);
    sim.world.addToGroupSilently(joiner, groupId);

    const result = await runCli(['audit', '--group', groupId], env, { timeoutMs: 60_000 });
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const out = result.stdout;
    const active = out.split('\n').find((l) => l.startsWith(`group ${groupId} active:`)) ?? '';
    expect(active).toContain('3 content, 1 missing');
    expect(active).toContain('4 repaired, 0 not repaired');
    const rewritten = out.split('\n').find((l) => l.includes('content rewritten:')) ?? '';
    expect(rewritten.split(': ')[1]?.split(', ').sort()).toEqual([...renamed].sort());
    expect(out).toContain(`missing added: ${joiner}`);
    for (const t of ['unsubscribed', 'bounced', 'junk', 'unconfirmed'])
      expect(out).toMatch(new RegExp(`group ${groupId} ${t}: \\d+ rows checked`));
    expect(out).toMatch(/\d+ request\(s\) to the service/);

    // Ids only: no email, no name, no field value of anyone the audit read.
    const personal = [...renamed, joiner].flatMap((id) => {
      const s = sim.world.subscriber(id);
      return s ? [s.email, ...Object.values(s.fields).filter((v): v is string => typeof v === 'string' && v.length > 3)] : [];
    });
    expect(personal.length).toBeGreaterThan(4);
    for (const value of personal) expect(out).not.toContain(value);
    expect(out).not.toContain('@');

    const { rows } = await database.pool.query<{ id: string; name: string | null }>('select id, name from subscribers where id = any($1)', [
      renamed,
    ]);
    expect(new Map(rows.map((r) => [r.id, r.name]))).toEqual(new Map(renamed.map((id, i) => [id, `Unstamped Name ${i}`])));
    const member = await database.pool.query(
      'select 1 from group_members where group_id = $1 and subscriber_id = $2 and removed_at is null',
      [groupId, joiner],
    );
    expect(member.rowCount).toBe(1);
    expect((await auditRows()).results).toBe(5);

    // Run again: nothing left to find.
    const again = await runCli(['audit', '--group', groupId, '--type', 'active', '--json'], env, { timeoutMs: 60_000 });
    expect(again.code).toBe(0);
    const json = JSON.parse(again.stdout) as { audits: Array<{ type: string; tally: { content: number; missing: number } }> };
    expect(json.audits).toEqual([expect.objectContaining({ type: 'active', tally: expect.objectContaining({ content: 0, missing: 0 }) })]);
  });
});

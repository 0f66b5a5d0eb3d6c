/**
 * The mirror against the simulator's world, as problem lists (empty when they agree), so a failing
 * scenario says what differs instead of only that something does.
 */
import type pg from 'pg';
import { SUBSCRIBER_FIELDS } from '../../../src/mirror/normalize.js';
import type { SubscriberType, World } from '../../../src/simulator/index.js';
import { diffSubscribers, expectedFromWorld, readMembers, readMirroredSubscribers } from '../../helpers/mirror.js';

export interface GroupComparison {
  /** Members the world lists for the group (and types). */
  expected: number;
  /** `subscribers` rows. */
  subscriberRows: number;
  /** Current `group_members` rows of the group (removed_at null). */
  currentMembers: number;
  problems: string[];
}

/**
 * Poll path: every member the legacy API lists for `groupId` (of `types`) is mirrored with exactly the
 * values the legacy rendering gives, current memberships are exactly the listed ones (with their
 * type), and, with `exactRows`, the subscribers table holds nobody else.
 */
export async function compareGroupWithWorld(
  pool: pg.Pool,
  world: World,
  groupId: string,
  types: readonly SubscriberType[],
  options: { exactRows?: boolean; limit?: number } = {},
): Promise<GroupComparison> {
  const limit = options.limit ?? 20;
  const listed = new Map<string, SubscriberType>();
  for (const type of types) for (const id of world.members(groupId, type)) listed.set(id, type);
  const expected = expectedFromWorld(world, listed.keys());
  const actual = await readMirroredSubscribers(pool);
  const problems = diffSubscribers(expected, actual, SUBSCRIBER_FIELDS, limit);
  if (options.exactRows) {
    const extra = [...actual.keys()].filter((id) => !listed.has(id));
    if (extra.length > 0) problems.push(`${extra.length} subscribers rows the world does not list, e.g. ${extra.slice(0, 5).join(', ')}`);
  }
  const members = await readMembers(pool, groupId);
  const current = members.filter((m) => m.removedAt === null);
  const seen = new Set<string>();
  for (const m of current) {
    if (seen.has(m.subscriberId)) problems.push(`membership ${groupId}/${m.subscriberId} twice`);
    seen.add(m.subscriberId);
    const want = listed.get(m.subscriberId);
    if (!want) problems.push(`membership ${groupId}/${m.subscriberId} is current, the world does not list it`);
    else if (m.type !== want) problems.push(`membership ${groupId}/${m.subscriberId} has type ${m.type}, the world lists ${want}`);
    if (problems.length >= limit * 2) break;
  }
  const missing = [...listed.keys()].filter((id) => !seen.has(id));
  if (missing.length > 0)
    problems.push(`${missing.length} listed members without a current membership, e.g. ${missing.slice(0, 5).join(', ')}`);
  return { expected: listed.size, subscriberRows: actual.size, currentMembers: current.length, problems };
}

// ---------------------------------------------------------------------------------------------
// Webhook path: compareWebhookEffects lives in test/helpers/mirror.ts (shared with webhooks-e2e)

export { compareWebhookEffects, type WebhookComparison } from '../../helpers/mirror.js';

/** Row count and content hash of each mirrored table (what bad input must leave untouched). */
export async function snapshotMirroredTables(pool: pg.Pool): Promise<Record<string, { rows: number; md5: string }>> {
  const tables = ['subscribers', 'groups', 'group_members', 'subscriber_activity', 'campaigns', 'automations'];
  const out: Record<string, { rows: number; md5: string }> = {};
  for (const table of tables) {
    const { rows } = await pool.query<{ rows: number; md5: string }>(
      `select count(*)::int as rows, md5(coalesce(string_agg(t::text, E'\\n' order by t::text), '')) as md5 from ${table} t`,
    );
    out[table] = rows[0] as { rows: number; md5: string };
  }
  return out;
}

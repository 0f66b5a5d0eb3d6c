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
  /** Subscribers with a current membership that the world does not list (stale). */
  unlisted: string[];
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
  // Every row is read (a count after an early stop would be wrong); only the first are named.
  const seen = new Set<string>();
  const wrong: string[] = [];
  const unlisted: string[] = [];
  for (const m of current) {
    if (seen.has(m.subscriberId)) wrong.push(`membership ${groupId}/${m.subscriberId} twice`);
    seen.add(m.subscriberId);
    const want = listed.get(m.subscriberId);
    if (!want) {
      unlisted.push(m.subscriberId);
      wrong.push(`membership ${groupId}/${m.subscriberId} is current, the world does not list it`);
    } else if (m.type !== want) wrong.push(`membership ${groupId}/${m.subscriberId} has type ${m.type}, the world lists ${want}`);
  }
  problems.push(...wrong.slice(0, limit * 2));
  if (wrong.length > limit * 2) problems.push(`${wrong.length - limit * 2} more wrong memberships`);
  const missing = [...listed.keys()].filter((id) => !seen.has(id));
  if (missing.length > 0)
    problems.push(`${missing.length} listed members without a current membership, e.g. ${missing.slice(0, 5).join(', ')}`);
  return { expected: listed.size, subscriberRows: actual.size, currentMembers: current.length, unlisted, problems };
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

// ---------------------------------------------------------------------------------------------
// Several accounts: no row of one carries an id of another's world

export type IdKind = 'subscriber' | 'group' | 'campaign' | 'automation';

/** Every id a world has issued, by kind. */
export type WorldIds = Record<IdKind, ReadonlySet<string>>;

export function worldIds(world: World): WorldIds {
  return {
    subscriber: new Set(Array.from(world.subscribers({ includeDeleted: true }), (s) => s.id)),
    group: new Set(world.groupIds()),
    campaign: new Set(world.campaigns().map((c) => c.id)),
    automation: new Set(world.automations().map((a) => a.id)),
  };
}

/** Ids of `ids` that `other` has issued too: a check of which account holds them would be blind to those. */
export function sharedIds(ids: WorldIds, other: World): string[] {
  const theirs = worldIds(other);
  return (Object.keys(ids) as IdKind[]).flatMap((kind) => [...ids[kind]].filter((id) => theirs[kind].has(id)).map((id) => `${kind} ${id}`));
}

/** Every column of the mirror that holds an id of the service's, with the kind of id it holds. */
const ID_COLUMNS: ReadonlyArray<{ table: string; column: string; kind: IdKind }> = [
  { table: 'subscribers', column: 'id', kind: 'subscriber' },
  { table: 'subscriber_versions_past', column: 'subscriber_id', kind: 'subscriber' },
  { table: 'group_members', column: 'subscriber_id', kind: 'subscriber' },
  { table: 'group_members', column: 'group_id', kind: 'group' },
  { table: 'group_membership_periods', column: 'subscriber_id', kind: 'subscriber' },
  { table: 'group_membership_periods', column: 'group_id', kind: 'group' },
  { table: 'groups', column: 'id', kind: 'group' },
  { table: 'subscriber_activity', column: 'subscriber_id', kind: 'subscriber' },
  { table: 'subscriber_activity', column: 'group_id', kind: 'group' },
  { table: 'subscriber_activity', column: 'campaign_id', kind: 'campaign' },
  { table: 'subscriber_activity', column: 'automation_id', kind: 'automation' },
  { table: 'campaigns', column: 'id', kind: 'campaign' },
  { table: 'automations', column: 'id', kind: 'automation' },
  { table: 'erasures', column: 'subscriber_id', kind: 'subscriber' },
  { table: 'sync_state', column: 'group_id', kind: 'group' },
  { table: 'sync_passes', column: 'group_id', kind: 'group' },
  { table: 'audit_state', column: 'group_id', kind: 'group' },
  { table: 'audit_results', column: 'group_id', kind: 'group' },
];

export interface CrossAccountIds {
  /** Id columns read. */
  columns: number;
  problems: string[];
}

/**
 * Rows that cross accounts, for an account whose world is `ids`: its rows holding an id that world
 * never issued, and other accounts' rows holding one it did. The statements name their accounts, so
 * any pool reads them.
 */
export async function crossAccountIds(pool: pg.Pool, account: string, ids: WorldIds): Promise<CrossAccountIds> {
  const problems: string[] = [];
  for (const { table, column, kind } of ID_COLUMNS) {
    const own = [...ids[kind]];
    const alien = await pool.query<{ id: string }>(
      `select distinct ${column} as id from ${table} where account = $1 and ${column} is not null and ${column} <> all($2::text[]) limit 5`,
      [account, own],
    );
    if (alien.rows.length > 0)
      problems.push(
        `${table}.${column}: rows of account ${account} hold ids its world never issued, e.g. ${alien.rows.map((r) => r.id).join(', ')}`,
      );
    const taken = await pool.query<{ id: string; account: string }>(
      `select distinct t.${column} as id, t.account from ${table} t join unnest($2::text[]) as own(id) on own.id = t.${column}
        where t.account <> $1 limit 5`,
      [account, own],
    );
    if (taken.rows.length > 0)
      problems.push(
        `${table}.${column}: rows of another account hold ids of account ${account}'s world, e.g. ${taken.rows.map((r) => `${r.id} (${r.account})`).join(', ')}`,
      );
  }
  return { columns: ID_COLUMNS.length, problems };
}

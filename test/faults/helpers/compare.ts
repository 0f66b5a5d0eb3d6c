/**
 * The mirror against the simulator's world, as problem lists (empty when they agree), so a failing
 * scenario says what differs instead of only that something does.
 */
import type pg from 'pg';
import { erasePersonalData, normalizeWebhookSubscriber, SUBSCRIBER_FIELDS, type SubscriberValues } from '../../../src/mirror/normalize.js';
import type { SubscriberType, WebhookSubscriber, World } from '../../../src/simulator/index.js';
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
  if (missing.length > 0) problems.push(`${missing.length} listed members without a current membership, e.g. ${missing.slice(0, 5).join(', ')}`);
  return { expected: listed.size, subscriberRows: actual.size, currentMembers: current.length, problems };
}

// ---------------------------------------------------------------------------------------------
// Webhook path (the same reading of the world as test/integration/webhooks-e2e.test.ts)

function expectedFromCarried(subscriber: WebhookSubscriber): SubscriberValues {
  const values = normalizeWebhookSubscriber(subscriber as unknown as Record<string, unknown>).values;
  // A forgotten subscriber keeps its id and timestamps; its personal data is erased.
  return values.forgetAt ? erasePersonalData(values) : values;
}

export interface WebhookComparison {
  /** Subscribers some event carried. */
  touched: number;
  /** Of those, subscribers a later campaign.sent bumped without an event naming them. */
  bumpedBySend: number;
  activityRows: number;
  problems: string[];
}

/**
 * Webhook path: every subscriber an event carried is mirrored as the world has it now (or as the last
 * event carried it, when a campaign send bumped it silently), current memberships of those
 * subscribers equal the world's, and one activity row exists per event that concerns a subscriber.
 * The subscribers table holds nobody else (run with a poll that mirrors no one).
 */
export async function compareWebhookEffects(pool: pg.Pool, world: World, options: { limit?: number } = {}): Promise<WebhookComparison> {
  const limit = options.limit ?? 20;
  const events = world.events;
  const lastCarried = new Map<string, WebhookSubscriber>();
  for (const e of events) if (e.subscriberId && e.subscriber) lastCarried.set(e.subscriberId, e.subscriber);

  const expected = new Map<string, SubscriberValues>();
  let bumpedBySend = 0;
  for (const [id, carried] of lastCarried) {
    const now = world.renderWebhook(id);
    const bumped = now.updated_at !== carried.updated_at;
    if (bumped) bumpedBySend++;
    expected.set(id, expectedFromCarried(bumped ? carried : now));
  }
  const mirrored = await readMirroredSubscribers(pool);
  const problems = diffSubscribers(expected, mirrored, SUBSCRIBER_FIELDS, limit);
  const extra = [...mirrored.keys()].filter((id) => !expected.has(id));
  if (extra.length > 0) problems.push(`${extra.length} subscribers rows no event carried, e.g. ${extra.slice(0, 5).join(', ')}`);

  const wantMembers = new Set<string>();
  for (const id of lastCarried.keys()) {
    for (const g of world.groupIds()) if (world.membership(g, id)) wantMembers.add(`${g}/${id}`);
  }
  const { rows: members } = await pool.query<{ k: string }>(
    `select group_id || '/' || subscriber_id as k from group_members where removed_at is null`,
  );
  const haveMembers = new Set(members.map((r) => r.k));
  const missingMembers = [...wantMembers].filter((k) => !haveMembers.has(k));
  const extraMembers = [...haveMembers].filter((k) => !wantMembers.has(k));
  if (missingMembers.length > 0) problems.push(`${missingMembers.length} memberships missing, e.g. ${missingMembers.slice(0, 5).join(', ')}`);
  if (extraMembers.length > 0) problems.push(`${extraMembers.length} memberships the world does not have, e.g. ${extraMembers.slice(0, 5).join(', ')}`);

  const TS = (col: string) => `to_char(${col} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
  const wantActivity = new Set<string>();
  for (const e of events) {
    if (!e.subscriber) continue;
    const key = [e.kind, e.subscriberId, e.group?.id, e.automation?.id, e.campaign?.id, e.linkUrl, e.subscriber.updated_at];
    wantActivity.add(key.filter((v) => v !== undefined && v !== null).join('|'));
  }
  const { rows: activity } = await pool.query<{ k: string }>(
    `select concat_ws('|', kind, subscriber_id, group_id, automation_id, campaign_id, link_url, ${TS('occurred_at')}) as k
       from subscriber_activity`,
  );
  const haveActivity = new Set(activity.map((r) => r.k));
  const missingActivity = [...wantActivity].filter((k) => !haveActivity.has(k));
  const extraActivity = [...haveActivity].filter((k) => !wantActivity.has(k));
  if (activity.length !== haveActivity.size) problems.push(`${activity.length - haveActivity.size} duplicated activity rows`);
  if (missingActivity.length > 0) problems.push(`${missingActivity.length} activity rows missing, e.g. ${missingActivity.slice(0, 3).join(', ')}`);
  if (extraActivity.length > 0) problems.push(`${extraActivity.length} activity rows no event explains, e.g. ${extraActivity.slice(0, 3).join(', ')}`);

  return { touched: lastCarried.size, bumpedBySend, activityRows: activity.length, problems };
}

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

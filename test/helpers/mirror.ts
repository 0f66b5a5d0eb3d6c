/**
 * Reads the mirror back for comparisons with the simulator's world. Timestamps are rendered by
 * Postgres as canonical UTC strings with microseconds, never through JS Date.
 */
import type pg from 'pg';
import type { WebhookSubscriber, World } from '../../src/simulator/index.js';
import {
  erasePersonalData,
  normalizeLegacySubscriber,
  normalizeWebhookSubscriber,
  SUBSCRIBER_FIELDS,
  type SubscriberValues,
} from '../../src/mirror/normalize.js';
import { SUBSCRIBER_COLUMN_OF } from '../../src/db/subscriber-columns.js';

/** SQL rendering `expr` (a timestamptz) as a UTC ISO-8601 string with microseconds, e.g. 2024-01-02T03:04:05.000006Z. */
export const iso = (expr: string) => `to_char((${expr}) at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

const TIMESTAMP_FIELDS = new Set(['subscribedAt', 'unsubscribedAt', 'createdAt', 'updatedAt', 'deletedAt', 'forgetAt', 'optedInAt']);

export async function readMirroredSubscribers(pool: pg.Pool): Promise<Map<string, SubscriberValues>> {
  const columns = SUBSCRIBER_FIELDS.map((f) => {
    const column = SUBSCRIBER_COLUMN_OF[f];
    return `${TIMESTAMP_FIELDS.has(f) ? iso(column) : column} as "${f}"`;
  });
  const { rows } = await pool.query<SubscriberValues>(`select id, ${columns.join(', ')} from subscribers where account = mirror_account()`);
  return new Map(rows.map((r) => [r.id, r]));
}

export interface MemberRow {
  groupId: string;
  subscriberId: string;
  type: string | null;
  removedAt: string | null;
}

export async function readMembers(pool: pg.Pool, groupId?: string): Promise<MemberRow[]> {
  const { rows } = await pool.query<MemberRow>(
    `select group_id as "groupId", subscriber_id as "subscriberId", type, ${iso('removed_at')} as "removedAt"
       from group_members where account = mirror_account() and ($1::text is null or group_id = $1) order by group_id, subscriber_id`,
    [groupId ?? null],
  );
  return rows;
}

/** The legacy rendering of every live subscriber, normalized: what the mirror must hold after a pass. */
export function expectedFromWorld(world: World, ids: Iterable<string>, sourceTimezone = 'UTC'): Map<string, SubscriberValues> {
  const out = new Map<string, SubscriberValues>();
  for (const id of ids) {
    out.set(id, normalizeLegacySubscriber(world.renderLegacy(id) as unknown as Record<string, unknown>, { sourceTimezone }).values);
  }
  return out;
}

/** Differences between expected and mirrored rows, as readable lines (empty when identical). */
export function diffSubscribers(
  expected: Map<string, SubscriberValues>,
  actual: Map<string, SubscriberValues>,
  fields: readonly (keyof SubscriberValues)[],
  limit = 10,
): string[] {
  const diffs: string[] = [];
  for (const [id, want] of expected) {
    const got = actual.get(id);
    if (!got) {
      diffs.push(`${id}: missing`);
    } else {
      for (const f of fields) {
        if (stableJson(want[f]) !== stableJson(got[f])) {
          diffs.push(`${id}.${String(f)}: want ${stableJson(want[f])} got ${stableJson(got[f])}`);
        }
      }
    }
    if (diffs.length >= limit) break;
  }
  return diffs;
}

/** JSON with object keys sorted, so jsonb's key order does not count as a difference. */
export function stableJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => a.localeCompare(b)))
      : v,
  );
}

/** One key per `subscriber_activity` row (kind|subscriber|group|automation|campaign|link|subscriber_updated_at), sorted. */
export async function readActivityKeys(pool: pg.Pool): Promise<string[]> {
  const { rows } = await pool.query<{ k: string }>(
    `select concat_ws('|', kind, subscriber_id, group_id, automation_id, campaign_id, link_url, ${iso('subscriber_updated_at')}) as k
       from subscriber_activity where account = mirror_account() order by 1`,
  );
  return rows.map((r) => r.k);
}

// ---------------------------------------------------------------------------------------------
// Webhook path: the mirror against the simulator's world

function expectedFromCarried(subscriber: WebhookSubscriber): SubscriberValues {
  const values = normalizeWebhookSubscriber(subscriber as unknown as Record<string, unknown>).values;
  // A forgotten subscriber keeps its id and timestamps; its personal data is erased.
  return values.forgetAt ? erasePersonalData(values) : values;
}

export interface WebhookComparison {
  /** Subscribers some event carried. */
  touched: number;
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
  // The last version of each subscriber that an event carried.
  const lastCarried = new Map<string, WebhookSubscriber>();
  for (const e of events) if (e.subscriberId && e.subscriber) lastCarried.set(e.subscriberId, e.subscriber);

  // Against the world itself, except for subscribers a later campaign.sent bumped: sending changes
  // `sent` and `updated_at` of every recipient with no event naming them (only polling sees it), so
  // for those the mirror must equal the last version an event carried.
  const expected = new Map<string, SubscriberValues>();
  for (const [id, carried] of lastCarried) {
    const now = world.renderWebhook(id);
    const bumped = now.updated_at !== carried.updated_at;
    expected.set(id, expectedFromCarried(bumped ? carried : now));
  }
  const mirrored = await readMirroredSubscribers(pool);
  const problems = diffSubscribers(expected, mirrored, SUBSCRIBER_FIELDS, limit);
  const extra = [...mirrored.keys()].filter((id) => !expected.has(id));
  if (extra.length > 0) problems.push(`${extra.length} subscribers rows no event carried, e.g. ${extra.slice(0, 5).join(', ')}`);

  // Current memberships: what the legacy API lists for these subscribers (deleted ones: nothing).
  const wantMembers = new Set<string>();
  for (const id of lastCarried.keys()) {
    for (const g of world.groupIds()) if (world.membership(g, id)) wantMembers.add(`${g}/${id}`);
  }
  const { rows: members } = await pool.query<{ k: string }>(
    `select group_id || '/' || subscriber_id as k from group_members where account = mirror_account() and removed_at is null`,
  );
  const haveMembers = new Set(members.map((r) => r.k));
  const missingMembers = [...wantMembers].filter((k) => !haveMembers.has(k));
  const extraMembers = [...haveMembers].filter((k) => !wantMembers.has(k));
  if (missingMembers.length > 0)
    problems.push(`${missingMembers.length} memberships missing, e.g. ${missingMembers.slice(0, 5).join(', ')}`);
  if (extraMembers.length > 0)
    problems.push(`${extraMembers.length} memberships the world does not have, e.g. ${extraMembers.slice(0, 5).join(', ')}`);

  // One activity row per event that concerns a subscriber, whatever the duplicates.
  const wantActivity = new Set<string>();
  for (const e of events) {
    if (!e.subscriber) continue;
    const key = [e.kind, e.subscriberId, e.group?.id, e.automation?.id, e.campaign?.id, e.linkUrl, e.subscriber.updated_at];
    wantActivity.add(key.filter((v) => v !== undefined && v !== null).join('|'));
  }
  const activity = await readActivityKeys(pool);
  const haveActivity = new Set(activity);
  const missingActivity = [...wantActivity].filter((k) => !haveActivity.has(k));
  const extraActivity = [...haveActivity].filter((k) => !wantActivity.has(k));
  if (activity.length !== haveActivity.size) problems.push(`${activity.length - haveActivity.size} duplicated activity rows`);
  if (missingActivity.length > 0)
    problems.push(`${missingActivity.length} activity rows missing, e.g. ${missingActivity.slice(0, 3).join(', ')}`);
  if (extraActivity.length > 0)
    problems.push(`${extraActivity.length} activity rows no event explains, e.g. ${extraActivity.slice(0, 3).join(', ')}`);

  return { touched: lastCarried.size, activityRows: activity.length, problems };
}

export interface CrossWorldCheck {
  /** (id, field) pairs on which the two worlds differ, over the ids both hold. */
  differing: number;
  /** Those of them the mirror holds as the other world has them, as `id.field` (at most `limit`). */
  fromOther: string[];
}

/**
 * How a mirror of one world compares with another world whose ids overlap it (two accounts of one
 * deployment): wherever the two worlds differ, the mirror must not hold the other's value, which it
 * would if a row of one account were written from, or read as, the other's.
 */
export function crossWorldCheck(
  mirrored: Map<string, SubscriberValues>,
  own: Map<string, SubscriberValues>,
  other: Map<string, SubscriberValues>,
  fields: readonly (keyof SubscriberValues)[],
  limit = 10,
): CrossWorldCheck {
  const result: CrossWorldCheck = { differing: 0, fromOther: [] };
  for (const [id, want] of own) {
    const theirs = other.get(id);
    const got = mirrored.get(id);
    if (!theirs || !got) continue;
    for (const f of fields) {
      const their = stableJson(theirs[f]);
      if (stableJson(want[f]) === their) continue;
      result.differing++;
      if (stableJson(got[f]) === their && result.fromOther.length < limit) result.fromOther.push(`${id}.${String(f)}`);
    }
  }
  return result;
}

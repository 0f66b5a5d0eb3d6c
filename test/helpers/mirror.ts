/**
 * Reads the mirror back for comparisons with the simulator's world. Timestamps are rendered by
 * Postgres as canonical UTC strings with microseconds, never through JS Date.
 */
import type pg from 'pg';
import type { World } from '../../src/simulator/index.js';
import { normalizeLegacySubscriber, SUBSCRIBER_FIELDS, type SubscriberValues } from '../../src/mirror/normalize.js';
import { SUBSCRIBER_COLUMN_OF } from '../../src/mirror/store.js';

const iso = (c: string) => `to_char(${c} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

const TIMESTAMP_FIELDS = new Set([
  'subscribedAt',
  'unsubscribedAt',
  'createdAt',
  'updatedAt',
  'deletedAt',
  'forgetAt',
  'optedInAt',
]);

export async function readMirroredSubscribers(pool: pg.Pool): Promise<Map<string, SubscriberValues>> {
  const columns = SUBSCRIBER_FIELDS.map((f) => {
    const column = SUBSCRIBER_COLUMN_OF[f];
    return `${TIMESTAMP_FIELDS.has(f) ? iso(column) : column} as "${f}"`;
  });
  const { rows } = await pool.query<SubscriberValues>(`select id, ${columns.join(', ')} from subscribers`);
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
       from group_members where $1::text is null or group_id = $1 order by group_id, subscriber_id`,
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

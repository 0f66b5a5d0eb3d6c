/**
 * What the audit reads of the mirror (docs/operations.md, "The audit"): the stored rows of the ids a
 * sample listed, the members as of an instant, and the members in a cursor page's id range. Reads
 * only: repairs go through the mirror store like any other read's rows.
 */
import { canonicalTimestampSql as iso } from '../db/columns.js';
import { SUBSCRIBER_TYPES } from '../db/schema.js';
import type { Queryable } from '../ground/queryable.js';
import type { AuditedValues, IdRange, MirrorCountAt, MirrorRow } from './core.js';

interface StoredRow {
  id: string;
  version: string | null;
  email: string | null;
  name: string | null;
  status: string | null;
  sent: number | null;
  opensCount: number | null;
  clicksCount: number | null;
  fields: Record<string, string | null> | null;
  updatedAt: string | null;
  unsubscribedAt: string | null;
  createdAt: string | null;
  memberType: string | null;
  removed: boolean | null;
  factAt: string | null;
  hasMembership: boolean;
}

/** The mirror's subscriber row and its membership in `groupId`, per id (absent ids map to empty rows). */
export async function mirrorRowsFor(db: Queryable, groupId: string, ids: readonly string[]): Promise<Map<string, MirrorRow>> {
  if (ids.length === 0) return new Map();
  const { rows } = await db.query<StoredRow>(
    `select i.id, ${iso('s.version_at')} as version, s.email, s.name, s.status, s.sent, s.opens_count as "opensCount",
            s.clicks_count as "clicksCount", s.fields, ${iso('s.updated_at')} as "updatedAt",
            ${iso('s.unsubscribed_at')} as "unsubscribedAt", ${iso('s.created_at')} as "createdAt",
            m.type as "memberType", m.removed_at is not null as removed, ${iso('m.source_updated_at')} as "factAt",
            m.subscriber_id is not null as "hasMembership"
       from unnest($2::text[]) as i(id)
       left join subscribers s on s.account = mirror_account() and s.id = i.id
       left join group_members m on m.account = mirror_account() and m.group_id = $1 and m.subscriber_id = i.id`,
    [groupId, ids],
  );
  return new Map(rows.map((r) => [r.id, mirrorRowOf(r)]));
}

function mirrorRowOf(r: StoredRow): MirrorRow {
  const values: AuditedValues | null =
    r.version === null
      ? null
      : {
          email: r.email,
          name: r.name,
          status: r.status,
          sent: r.sent,
          opensCount: r.opensCount,
          clicksCount: r.clicksCount,
          fields: r.fields ?? {},
          updatedAt: r.updatedAt,
          unsubscribedAt: r.unsubscribedAt,
          createdAt: r.createdAt,
        };
  const membership = r.hasMembership ? { type: r.memberType, removed: r.removed === true, factAt: r.factAt } : null;
  return { version: r.version, values, membership };
}

/**
 * The members of (group, type) as of `at` from the facts the mirror holds now: live members of the
 * type whose fact is not newer than `at` were members then; members of the group with a newer fact
 * may or may not have been. So may a live member *moving* into or out of the type: its subscriber
 * row holds another status than its membership's type (a status event updates the subscriber; the
 * type follows at the type's next pass), and the service may count it under either.
 */
export async function mirrorCountAt(db: Queryable, groupId: string, type: string, at: string): Promise<MirrorCountAt> {
  const { rows } = await db.query<MirrorCountAt>(
    `select count(*) filter (where m.type = $2 and m.removed_at is null and not ${MOVING}
                               and (m.source_updated_at is null or m.source_updated_at <= $3::timestamptz))::int as certain,
            count(*) filter (where m.source_updated_at > $3::timestamptz
                               or (m.removed_at is null and ${MOVING} and (m.type = $2 or s.status = $2)))::int as uncertain
       from ${MEMBERS_AND_STATUS}
      where m.account = mirror_account() and m.group_id = $1`,
    [groupId, type, at],
  );
  return rows[0] ?? { certain: 0, uncertain: 0 };
}

/**
 * A membership (`m`) whose subscriber row (`s`) holds another of the types as its status: the type
 * follows later. A status that is no type (one the service added) moves nothing: such a member would
 * otherwise never be extra.
 */
const MOVING = `coalesce(s.status <> m.type and s.status in (${SUBSCRIBER_TYPES.map((t) => `'${t}'`).join(', ')}), false)`;

/** The memberships (`m`) beside their subscriber rows (`s`), as `MOVING` reads them. */
const MEMBERS_AND_STATUS = `group_members m left join subscribers s on s.account = m.account and s.id = m.subscriber_id`;

/** Live members of (group, type) whose id lies in `range` (ids of digits, compared as numbers), with their fact time. */
export async function mirrorMembersInRange(
  db: Queryable,
  groupId: string,
  type: string,
  range: IdRange,
): Promise<Array<{ id: string; factAt: string | null }>> {
  const { rows } = await db.query<{ id: string; factAt: string | null }>(
    `select subscriber_id as id, ${iso('source_updated_at')} as "factAt"
       from group_members
      where account = mirror_account() and group_id = $1 and type = $2 and removed_at is null
        and ($3::text is null or (length(subscriber_id), subscriber_id) > (length($3::text), $3::text))
        and ($4::text is null or (length(subscriber_id), subscriber_id) <= (length($4::text), $4::text))
      order by length(subscriber_id), subscriber_id`,
    [groupId, type, range.after, range.upTo],
  );
  return rows;
}

/**
 * Per id: whether it is a live member of (group, type) now, its membership fact, and whether it is
 * moving out of the type (its subscriber row holds another status; `mirrorCountAt`).
 */
export async function membershipNow(
  db: Queryable,
  groupId: string,
  type: string,
  ids: readonly string[],
): Promise<Map<string, { live: boolean; factAt: string | null; moving: boolean }>> {
  const { rows } = await db.query<{ id: string; live: boolean; factAt: string | null; moving: boolean }>(
    `select m.subscriber_id as id, (m.removed_at is null and m.type = $2) as live, ${iso('m.source_updated_at')} as "factAt",
            ${MOVING} as moving
       from ${MEMBERS_AND_STATUS}
      where m.account = mirror_account() and m.group_id = $1 and m.subscriber_id = any($3::text[])`,
    [groupId, type, ids],
  );
  return new Map(rows.map((r) => [r.id, { live: r.live, factAt: r.factAt, moving: r.moving }]));
}

/** The webhooks this install manages (register's own and adopted ones), as stored: what the service should still have. */
export async function managedWebhooks(
  db: Queryable,
): Promise<Array<{ id: string; url: string; events: string[]; disabledByOperator: boolean }>> {
  const { rows } = await db.query<{ id: string; url: string; events: string[]; disabledByOperator: boolean }>(
    `select id, url, events, disabled_by_operator as "disabledByOperator" from webhook_endpoints
      where account = mirror_account() order by id`,
  );
  return rows;
}

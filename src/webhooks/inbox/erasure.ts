/**
 * What an erasure reads and rewrites of the stored deliveries (docs/security.md, "Personal data and
 * erasure"): the deliveries that mention erased subscribers, the emails their bodies give them, and
 * the redacted body written back.
 */
import type { Queryable } from '../../ground/queryable.js';
import { canonicalIdSql } from '../../mirror/rules.js';

/**
 * An `id` found in a body (a jsonb value `v`) as the normalizer reads it: `007` is subscriber 7. What
 * the normalizer would refuse is compared as it is written (no subscriber has such an id).
 */
const bodyId = (text: string) => `coalesce(${canonicalIdSql(text)}, ${text})`;
const BODY_ID = bodyId(`v #>> '{}'`);

// Any `id` anywhere in the body that is one of the ids (however spelled); pages by delivery id.
const MENTIONING_SQL = `
select id::text, body::text as body from webhook_deliveries d
 where d.account = mirror_account()
   and d.id > $2::bigint
   and exists (select 1 from jsonb_path_query(d.body, 'lax $.**.id') v where ${BODY_ID} = any($1::text[]))
 order by d.id
 limit $3`;

/** Up to `limit` deliveries after id `afterId` whose body has an `id` among `ids`, with their bodies as text. */
export async function deliveriesMentioning(
  pool: Queryable,
  ids: readonly string[],
  afterId: string,
  limit: number,
): Promise<Array<{ id: string; body: string }>> {
  return (await pool.query<{ id: string; body: string }>(MENTIONING_SQL, [ids, afterId, limit])).rows;
}

// Deliveries that mention an erased subscriber and were received since its last check (less a margin
// for receipts still in flight then), with the erased ids each mentions; pages by delivery id.
const MENTIONING_ERASED_SQL = `
select d.id::text as id, d.body::text as body, array_agg(distinct e.subscriber_id) as ids
  from webhook_deliveries d
  cross join lateral jsonb_path_query(d.body, 'lax $.**.id') v
  join erasures e on e.account = d.account and e.subscriber_id = ${BODY_ID}
 where d.account = mirror_account()
   and d.id > $3::bigint
   and e.deliveries_redacted_at < $1::timestamptz
   and d.received_at >= e.deliveries_redacted_at - make_interval(secs => $2::float8 / 1000)
 group by d.id
 order by d.id
 limit $4`;

/**
 * Up to `limit` deliveries after id `afterId` that mention a subscriber of `erasures` checked before
 * `checkedBefore` and were received since that check (less `marginMs`), with the ids they mention.
 */
export async function deliveriesMentioningErasedSince(
  pool: Queryable,
  checkedBefore: string,
  marginMs: number,
  afterId: string,
  limit: number,
): Promise<Array<{ id: string; body: string; ids: string[] }>> {
  return (await pool.query<{ id: string; body: string; ids: string[] }>(MENTIONING_ERASED_SQL, [checkedBefore, marginMs, afterId, limit]))
    .rows;
}

// The emails the stored bodies give the subscribers `ids` (objects with an id among them and an
// email), lower-cased: what else an erasure scrubs from the bodies it redacts.
const EMAILS_OF_SQL = `
select distinct lower(o ->> 'email') as email
  from webhook_deliveries d
  cross join lateral jsonb_path_query(d.body, 'strict $.** ? (@.type() == "object" && exists(@.email))') o
 where d.account = mirror_account()
   and ${bodyId(`o ->> 'id'`)} = any($1::text[])
   and coalesce(o ->> 'email', '') <> ''`;

/** The emails stored deliveries carry for the subscribers `ids`, lower-cased. */
export async function emailsOfSubscribers(pool: Queryable, ids: readonly string[]): Promise<string[]> {
  if (ids.length === 0) return [];
  return (await pool.query<{ email: string }>(EMAILS_OF_SQL, [ids])).rows.map((r) => r.email);
}

// The other way round: the subscriber ids stored bodies give an email (any case), `erase --email`.
const SUBSCRIBERS_WITH_EMAIL_SQL = `
select distinct ${bodyId(`o ->> 'id'`)} as id
  from webhook_deliveries d
  cross join lateral jsonb_path_query(d.body, 'strict $.** ? (@.type() == "object" && exists(@.email) && exists(@.id))') o
 where d.account = mirror_account()
   and lower(o ->> 'email') = lower($1)`;

/** The subscriber ids whose objects in stored deliveries carry `email` (any case). */
export async function subscribersWithEmailInDeliveries(pool: Queryable, email: string): Promise<string[]> {
  return (await pool.query<{ id: string }>(SUBSCRIBERS_WITH_EMAIL_SQL, [email])).rows.map((r) => r.id).filter((id) => id !== '');
}

/** Whether any stored delivery mentions one of `ids` as an `id` (however spelled). */
export async function anyDeliveryMentions(pool: Queryable, ids: readonly string[]): Promise<boolean> {
  return (await deliveriesMentioning(pool, ids, '0', 1)).length > 0;
}

/** One stored body as text, or null when the row is gone. */
export async function deliveryBody(pool: Queryable, id: string): Promise<string | null> {
  const { rows } = await pool.query<{ body: string }>(
    'select body::text as body from webhook_deliveries where id = $1 and account = mirror_account()',
    [id],
  );
  return rows[0]?.body ?? null;
}

/** Replaces a stored body (redaction); status, hash and attempts stay. */
export async function replaceDeliveryBody(pool: Queryable, id: string, body: string): Promise<void> {
  await pool.query('update webhook_deliveries set body = $2::jsonb, updated_at = now() where id = $1 and account = mirror_account()', [
    id,
    body,
  ]);
}

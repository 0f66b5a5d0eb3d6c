/** What operators see of the inbox (the status page, the metrics): deliveries by status, the latest failures. */
import type { RowOf } from '../../db/columns.js';
import { DELIVERY_STATUSES, type DeliveryStatus, type webhookDeliveries } from '../../db/schema.js';
import type { Queryable } from '../../ground/queryable.js';

/** Stored deliveries of the session's account per status; every status is present (0 when none). */
export async function countDeliveriesByStatus(pool: Queryable): Promise<Record<DeliveryStatus, number>> {
  const { rows } = await pool.query<{ status: DeliveryStatus; n: number }>(
    `select status, count(*)::int as n from webhook_deliveries where account = mirror_account() group by status`,
  );
  const counts = Object.fromEntries(DELIVERY_STATUSES.map((s) => [s, 0])) as Record<DeliveryStatus, number>;
  for (const row of rows) counts[row.status] = row.n;
  return counts;
}

/** Stored deliveries per status of each account named, deployment-wide (one statement); every account and status present. */
export async function countDeliveriesOf(db: Queryable, accounts: readonly string[]): Promise<Map<string, Record<DeliveryStatus, number>>> {
  const { rows } = await db.query<{ account: string; status: DeliveryStatus; n: number }>(
    `select account, status, count(*)::int as n from webhook_deliveries where account = any($1::text[]) group by account, status`,
    [accounts],
  );
  const counts = new Map(accounts.map((account) => [account, noDeliveries()]));
  for (const row of rows) {
    const of = counts.get(row.account);
    if (of) of[row.status] = row.n;
  }
  return counts;
}

function noDeliveries(): Record<DeliveryStatus, number> {
  return Object.fromEntries(DELIVERY_STATUSES.map((s) => [s, 0])) as Record<DeliveryStatus, number>;
}

/** `receivedAt` to the second; `id` as text (int8 comes back from node-postgres as a string). */
export type FailedDelivery = { id: string } & Pick<RowOf<typeof webhookDeliveries>, 'kinds' | 'attempts' | 'error' | 'receivedAt'>;

/** The account's most recent deliveries that could not be applied, newest first (ids and errors, no payload). */
export async function latestFailedDeliveries(pool: Queryable, limit = 10): Promise<FailedDelivery[]> {
  const { rows } = await pool.query<FailedDelivery>(
    `select id::text as id, kinds, attempts, error,
            to_char(received_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') as "receivedAt"
       from webhook_deliveries where account = mirror_account() and status = 'failed' order by received_at desc, id desc limit $1`,
    [limit],
  );
  return rows;
}

/** `latestFailedDeliveries` of each account named, deployment-wide (one statement): up to `limit` per account. */
export async function latestFailedDeliveriesOf(
  db: Queryable,
  accounts: readonly string[],
  limit = 10,
): Promise<Map<string, FailedDelivery[]>> {
  const { rows } = await db.query<FailedDelivery & { account: string }>(
    `select account, id, kinds, attempts, error, "receivedAt"
       from (select account, id::text as id, kinds, attempts, error,
                    to_char(received_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') as "receivedAt",
                    row_number() over (partition by account order by received_at desc, id desc) as rank
               from webhook_deliveries where account = any($1::text[]) and status = 'failed') latest
      where rank <= $2
      order by account, rank`,
    [accounts, limit],
  );
  const failed = new Map<string, FailedDelivery[]>(accounts.map((account) => [account, []]));
  for (const { account, ...delivery } of rows) failed.get(account)?.push(delivery);
  return failed;
}

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

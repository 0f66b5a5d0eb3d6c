/**
 * An account's data in every table that holds one: for the tests of what stays within an account
 * (analysts' limits, the removal of an account).
 */
import type pg from 'pg';

/** One row in every table that holds an account's data, written through a pool scoped to it. */
export async function populateAccount(pool: pg.Pool, marker: string): Promise<void> {
  const statements = [
    `insert into subscribers (id, email, status, version_at, updated_at, mirrored_via) values ('1', '${marker}@example.com', 'unsubscribed', now() - interval '1 hour', now() - interval '1 hour', 'poll')`,
    `update subscribers set email = '${marker}+2@example.com', version_at = now(), updated_at = now() where account = mirror_account() and id = '1'`,
    `insert into groups (id, name) values ('10', '${marker} group')`,
    `insert into group_members (group_id, subscriber_id, type, added_at, mirrored_via) values ('10', '1', 'active', now() - interval '1 day', 'poll')`,
    `insert into campaigns (id, name, total_recipients) values ('20', '${marker} campaign', 1)`,
    `insert into automations (id, name) values ('30', '${marker} automation')`,
    `insert into subscriber_activity (kind, subscriber_id, campaign_id, occurred_at) values ('campaign.open', '1', '20', now())`,
    `insert into subscriber_activity (kind, subscriber_id, occurred_at) values ('subscriber.spam_reported', '1', now())`,
    `insert into sync_state (group_id, type, cursor) values ('10', 'active', now())`,
    `insert into sync_passes (group_id, type, kind, source, status, upstream_count) values ('10', 'active', 'full', 'legacy', 'succeeded', 1)`,
    `insert into upstream_paging (page_cap) values (1000)`,
    `insert into audit_state (group_id, type) values ('10', 'active')`,
    `insert into audit_results (group_id, type, rows_checked, in_flight, content, missing, extra, count, repaired, unrepaired, missed_deliveries) values ('10', 'active', 1, 0, 0, 0, 0, 0, 0, 0, 0)`,
    `insert into audit_webhooks (id, problems, missing_events, checked_at) values ('w1', '{}', '{}', now())`,
    `insert into webhook_endpoints (id, url, events, secret) values ('w1', 'https://x/webhooks/${marker}', '{subscriber.created}', 'secret-of-${marker}-0123456789')`,
    `insert into webhook_deliveries (body_sha256, body, status) values ('${marker}', '{}', 'applied')`,
    `insert into webhook_delivery_hashes (body_sha256, delivery_id, status, received_at) values ('\\x00', 1, 'applied', now())`,
    `insert into fields (key, type) values ('score', 'number')`,
    `insert into erasures (subscriber_id, reason) values ('2', 'forget')`,
  ];
  for (const statement of statements) await pool.query(statement);
}

/**
 * The `analyst_accounts` table (docs/sql.md, "Roles"): which accounts an analyst's login may read.
 * Row-level security (migration 0030) reads it; `subscriber-mirror analysts` writes it.
 */
import type pg from 'pg';
import { UsageError } from '../ground/usage-error.js';
import { inTransaction } from './client.js';

/** The group role every analyst login is a member of (migration 0006). */
export const ANALYST_GROUP = 'subscriber_mirror_analyst';

export interface AnalystLimit {
  role: string;
  accounts: string[];
}

/**
 * Limits `role` to `accounts` (replacing its earlier limit), in one transaction: a role that is not an
 * analyst or an account that is not declared is refused and nothing changes.
 */
export async function limitAnalyst(pool: pg.Pool, role: string, accounts: readonly string[]): Promise<void> {
  if (accounts.length === 0)
    throw new UsageError('name at least one account (to lift a limit, use `analysts unlimit`)', { printUsage: false });
  await inTransaction(pool, async (client) => {
    await assertAnalyst(client, role);
    const { rows } = await client.query<{ name: string }>(`select name from accounts where name = any($1::text[])`, [accounts]);
    const declared = new Set(rows.map((r) => r.name));
    const unknown = accounts.filter((a) => !declared.has(a));
    if (unknown.length > 0) {
      const { rows: all } = await client.query<{ name: string }>(`select name from accounts order by name`);
      throw new UsageError(
        `no account ${unknown.map((a) => JSON.stringify(a)).join(', ')} is declared (accounts: ${all.map((r) => r.name).join(', ')})`,
      );
    }
    await client.query(`delete from analyst_accounts where role = $1`, [role]);
    await client.query(`insert into analyst_accounts (role, account) select $1, unnest($2::text[])`, [role, [...declared]]);
  });
}

/** Lifts `role`'s limit: it reads every account again. */
export async function unlimitAnalyst(pool: pg.Pool, role: string): Promise<number> {
  const { rowCount } = await pool.query(`delete from analyst_accounts where role = $1`, [role]);
  return rowCount ?? 0;
}

export async function listAnalystLimits(pool: pg.Pool): Promise<AnalystLimit[]> {
  const { rows } = await pool.query<AnalystLimit>(
    `select role, array_agg(account order by account) as accounts from analyst_accounts group by role order by role`,
  );
  return rows;
}

async function assertAnalyst(client: pg.PoolClient, role: string): Promise<void> {
  const { rows } = await client.query<{ analyst: boolean | null }>(
    `select pg_has_role(r.oid, $2, 'member') and not r.rolsuper and not r.rolbypassrls as analyst
       from pg_roles r where r.rolname = $1`,
    [role, ANALYST_GROUP],
  );
  if (rows.length === 0) throw new UsageError(`no role ${JSON.stringify(role)} exists`);
  if (!rows[0]?.analyst) {
    throw new UsageError(
      `role ${JSON.stringify(role)} is not a member of ${ANALYST_GROUP} (or bypasses row-level security): a limit would not hold for it`,
    );
  }
}

/**
 * Drops the limits naming `account`, which is being removed, on `client`'s transaction. A login whose
 * only limit it is would be left with none, and a login with none reads every account: that is
 * refused (a UsageError naming the logins), and the caller's transaction changes nothing. A limit of
 * a login that no longer exists is dropped with the rest.
 */
export async function dropLimitsOn(client: pg.PoolClient, account: string): Promise<void> {
  const { rows } = await client.query<{ role: string }>(
    `select a.role from analyst_accounts a
      where a.account = $1 and exists (select 1 from pg_roles r where r.rolname = a.role)
        and not exists (select 1 from analyst_accounts o where o.role = a.role and o.account <> $1)
      order by a.role`,
    [account],
  );
  if (rows.length > 0) {
    const roles = rows.map((r) => r.role).join(', ');
    throw new UsageError(
      `analyst login(s) ${roles} may read account ${account} alone, and without a limit would read every account: ` +
        `limit them to another account (\`analysts limit ROLE --account NAME\`) or drop the login first; nothing changed`,
      { printUsage: false },
    );
  }
  await client.query(`delete from analyst_accounts where account = $1`, [account]);
}

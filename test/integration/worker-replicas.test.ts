/**
 * Accounts spread over worker replicas (docs/architecture.md, "Accounts spread over replicas"), as
 * operators run them: `start --role worker` twice, in child processes, with three accounts that read.
 * Each account is read by exactly one replica (its queue has one sync worker connected), every
 * account is mirrored, and a replica that leaves (stopped, or killed) hands its accounts to the other.
 * A replica whose settings declare other accounts makes every replica warn.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase, type Database } from '../../src/db/client.js';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { liveReplicaServes, replicasKey } from '../../src/sync/replicas.js';
import { createSyncQueue } from '../../src/sync/schedule.js';
import { startChildCli, type ChildService } from '../helpers/child-service.js';
import { runCli } from '../helpers/cli.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

const ACCOUNTS = ['default', 'shop', 'news'] as const;
type Account = (typeof ACCOUNTS)[number];

describe('accounts spread over worker replicas', () => {
  let database: TestDatabase;
  let deployment: Database;
  let sims: Record<Account, Simulator>;
  let redis: Redis;
  let env: Record<string, string>;
  const replicas: ChildService[] = [];
  const prefix = uniquePrefix('replicas');
  const queues = Object.fromEntries(
    ACCOUNTS.map((a) => [a, createSyncQueue({ url: redisUrl() }, a === 'default' ? prefix : `${prefix}:account:${a}`)]),
  ) as Record<Account, ReturnType<typeof createSyncQueue>>;

  const group = (account: Account) => sims[account].world.groupIds()[0]!;

  beforeAll(async () => {
    database = await createTestDatabase();
    deployment = openDatabase(database.url, { max: 2 });
    redis = new Redis(redisUrl());
    const common = { groups: 1, rateLimit: false as const, subscribers: 300 };
    sims = {
      default: await startSimulator({ ...common, seed: 71, apiKey: 'key-default-0123456789' }),
      shop: await startSimulator({ ...common, seed: 72, apiKey: 'key-shop-0123456789' }),
      news: await startSimulator({ ...common, seed: 73, apiKey: 'key-news-0123456789' }),
    };
    env = {
      DATABASE_URL: database.url,
      REDIS_URL: redisUrl(),
      REDIS_PREFIX: prefix,
      ACCOUNTS: ACCOUNTS.join(','),
      MAILER_LEGACY_URL: sims.default.url,
      MAILER_API_KEY: sims.default.apiKey,
      SYNC_GROUPS: group('default'),
      SYNC_TYPES: 'active',
      API_RATE_LIMIT: '100000',
      SYNC_EVERY: '1s',
      RECONCILE_EVERY: '24h',
      SYNC_PAGE_SIZE: '100',
      AUDIT_EVERY: 'off',
      PORT: '0',
      OPS_PORT: '0',
      LOG_LEVEL: 'info',
      LOG_FORMAT: 'json',
      SHUTDOWN_TIMEOUT: '10s',
    };
    for (const account of ['shop', 'news'] as const) {
      const upper = account.toUpperCase();
      env[`ACCOUNT_${upper}__MAILER_LEGACY_URL`] = sims[account].url;
      env[`ACCOUNT_${upper}__MAILER_API_KEY`] = sims[account].apiKey;
      env[`ACCOUNT_${upper}__SYNC_GROUPS`] = group(account);
      env[`ACCOUNT_${upper}__SYNC_TYPES`] = 'active';
      env[`ACCOUNT_${upper}__API_RATE_LIMIT`] = '100000';
    }
  });

  afterAll(async () => {
    for (const replica of replicas) await replica.stop();
    await Promise.all(Object.values(queues).map((q) => q.close()));
    for (const sim of Object.values(sims ?? {})) await sim.close();
    await deployment?.close();
    await deleteInstallKeys(prefix);
    redis?.disconnect();
    await database?.drop();
  });

  const startReplica = async (extra: Record<string, string> = {}): Promise<ChildService> => {
    const replica = startChildCli(['start', '--role', 'worker'], { ...env, ...extra }, (line) =>
      line.msg === 'service started' ? Number(line.port) : null,
    );
    replicas.push(replica);
    await replica.port;
    return replica;
  };

  /** How many replicas run each account's sync worker (its queue's connected workers). */
  const readers = async (): Promise<Record<Account, number>> =>
    Object.fromEntries(await Promise.all(ACCOUNTS.map(async (a) => [a, await queues[a].getWorkersCount()]))) as Record<Account, number>;

  /** What a replica last said it reads. */
  const reads = (replica: ChildService): string[] | undefined => {
    const said = replica.lines.filter(
      (l): l is Record<string, unknown> => typeof l === 'object' && l.component === 'replicas' && Array.isArray(l.reads),
    );
    return said.at(-1)?.reads as string[] | undefined;
  };

  /** What a replica's gauge of the accounts it reads says (all three accounts read the legacy API). */
  const readGauge = async (replica: ChildService): Promise<number> => {
    const started = replica.lines.find((l): l is Record<string, unknown> => typeof l === 'object' && l.msg === 'service started');
    const text = await (await fetch(`http://127.0.0.1:${String(started?.opsPort)}/metrics`)).text();
    const series = [...text.matchAll(/^subscriber_mirror_worker_accounts_read\{source="(\w+)"\} (\d+)$/gm)];
    expect(series.map((m) => m[1])).toEqual(['legacy']);
    return Number(series[0]?.[2]);
  };

  const mirrored = async (account: Account): Promise<number> => {
    const { rows } = await deployment.pool.query<{ n: number }>(
      `select count(*)::int as n from current_group_members where account = $1 and group_id = $2`,
      [account, group(account)],
    );
    return rows[0]?.n ?? 0;
  };

  it('reads each account on exactly one of two replicas, and mirrors them all', async () => {
    const first = await startReplica();
    const second = await startReplica();
    await waitFor(
      'each account read by one replica, the two replicas reading three',
      async () => {
        const counts = await readers();
        const split = [reads(first)?.length ?? 0, reads(second)?.length ?? 0];
        return ACCOUNTS.every((a) => counts[a] === 1) && split[0]! + split[1]! === 3 && Math.min(...split) >= 1 ? counts : undefined;
      },
      30_000,
      100,
    );
    expect(new Set([...(reads(first) ?? []), ...(reads(second) ?? [])])).toEqual(new Set(ACCOUNTS));
    // Each replica's gauge counts what it reads (the dashboard's "Accounts read" panel).
    expect([await readGauge(first), await readGauge(second)]).toEqual([reads(first)?.length, reads(second)?.length]);
    expect(await redis.zcard(replicasKey(prefix))).toBe(2);
    // Each says it serves all three (its ACCOUNTS), read there or not: what `accounts remove` checks.
    expect([...(await liveReplicaServes(redis, prefix)).values()]).toEqual([[...ACCOUNTS], [...ACCOUNTS]]);
    // `status` says which replica reads each account: one each, two replicas in all (each publishes
    // what it reads right after it changed, so this holds within moments of the split).
    const shown = await waitFor(
      'status showing one replica per account, two in all',
      async () => {
        const status = await runCli(['status', '--json'], env);
        expect(status.code, status.stderr).toBe(0);
        const accounts = (JSON.parse(status.stdout) as { accounts: Array<{ account: string; readBy: string[] }> }).accounts;
        const one = accounts.every((a) => a.readBy.length === 1);
        return one && new Set(accounts.flatMap((a) => a.readBy)).size === 2 ? accounts : undefined;
      },
      10_000,
      200,
    );
    expect(shown.map((a) => a.account)).toEqual([...ACCOUNTS]);
    for (const account of ACCOUNTS) {
      const members = sims[account].world.memberCount(group(account), 'active');
      await waitFor(`${account} mirrored`, async () => ((await mirrored(account)) === members ? true : undefined), 60_000, 200);
    }
  });

  it('hands a stopped replica’s accounts to the one left', async () => {
    const [first, second] = replicas as [ChildService, ChildService];
    await second.stop();
    await waitFor(
      'the first replica reading all three accounts',
      async () => {
        const counts = await readers();
        return ACCOUNTS.every((a) => counts[a] === 1) && reads(first)?.length === 3 ? counts : undefined;
      },
      15_000,
      100,
    );
    expect(await redis.zcard(replicasKey(prefix))).toBe(1);
    expect(await readGauge(first)).toBe(3);
    // And the passes go on there: a new member of each world reaches the mirror.
    for (const account of ACCOUNTS) {
      const before = await mirrored(account);
      sims[account].world.createSubscriber({ groups: [group(account)] });
      await waitFor(
        `${account} read after the hand-over`,
        async () => ((await mirrored(account)) > before ? true : undefined),
        30_000,
        200,
      );
    }
  });

  it('takes a killed replica’s accounts once it is no longer heard from', async () => {
    const first = replicas[0] as ChildService;
    const third = await startReplica();
    await waitFor(
      'the new replica reading some accounts',
      async () => ((reads(third)?.length ?? 0) >= 1 && (reads(first)?.length ?? 0) < 3 ? true : undefined),
      15_000,
      100,
    );
    const handed = reads(third) ?? [];
    third.child.kill('SIGKILL');
    const killedAt = Date.now();
    await waitFor('the first replica reading all three again', async () => (reads(first)?.length === 3 ? true : undefined), 20_000, 100);
    // Not before the killed one's heartbeats ran out (6 s), nor long after.
    expect(Date.now() - killedAt).toBeGreaterThan(3_000);
    for (const account of handed as Account[]) {
      const before = await mirrored(account);
      sims[account].world.createSubscriber({ groups: [group(account)] });
      await waitFor(`${account} read after the kill`, async () => ((await mirrored(account)) > before ? true : undefined), 60_000, 200);
    }
  });

  it('warns on every replica when one declares accounts the others do not', async () => {
    const first = replicas[0] as ChildService;
    // A settings change that reached one replica only: it also declares `blog` (webhook-only).
    const other = await startReplica({ ACCOUNTS: [...ACCOUNTS, 'blog'].join(',') });
    const warned = (replica: ChildService) =>
      replica.lines.some((l) => typeof l === 'object' && l.level === 'warn' && String(l.msg).includes('do not all declare blog'));
    await waitFor('both replicas warning', async () => (warned(first) && warned(other) ? true : undefined), 15_000, 100);
    await other.stop();
  });
});

/**
 * Several accounts in one worker (docs/operations.md, "Several accounts"; docs/architecture.md,
 * "Several accounts"), as operators run it: `start --role worker` in a child process with four
 * accounts, each but the last reading a simulator of its own (its own world, key and budget):
 * `default` legacy (the big one), `shop` legacy, `news` current, `hooks` webhook-only. Every world
 * has the same group id, so every Redis key of a pass (lock, queue, scheduler) would collide if the
 * accounts shared a namespace.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase, type Database } from '../../src/db/client.js';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { authPauseKey, isPaused, readAuthPause } from '../../src/sync/auth-pause.js';
import { createSyncQueue, SYNC_QUEUE } from '../../src/sync/schedule.js';
import { readSyncState } from '../../src/sync/state.js';
import { storeDelivery } from '../../src/webhooks/inbox/write.js';
import { startChildCli, type ChildService } from '../helpers/child-service.js';
import { runCli } from '../helpers/cli.js';
import { expectedFromWorldCurrent } from '../helpers/current.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { diffSubscribers, expectedFromWorld, readMirroredSubscribers } from '../helpers/mirror.js';
import { connectionsByName, deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

const READING = ['default', 'shop', 'news'] as const;
type Reading = (typeof READING)[number];
const SYNC_EVERY_MS = 1_000;
const ADMIN_TOKEN = 'admin-token-0123456789abcdef';
const COMPARED = ['email', 'status', 'fields', 'updatedAt', 'sent'] as const;
/** Each account's Redis namespace: the first keeps REDIS_PREFIX. */
const PREFIXES = (prefix: string) => ({
  default: prefix,
  shop: `${prefix}:account:shop`,
  news: `${prefix}:account:news`,
  hooks: `${prefix}:account:hooks`,
});

describe('one worker, several accounts', () => {
  let database: TestDatabase;
  let sims: Record<Reading, Simulator>;
  let pools: Record<Reading, Database>;
  let deployment: Database;
  let service: ChildService;
  let opsPort = 0;
  let env: Record<string, string>;
  let redis: Redis;
  const prefix = uniquePrefix('accounts');
  const shopPrefix = `${prefix}:account:shop`;

  const group = (account: Reading) => sims[account].world.groupIds()[0]!;

  beforeAll(async () => {
    database = await createTestDatabase();
    const common = { groups: 1, rateLimit: false as const, timeScale: 0.001 };
    sims = {
      default: await startSimulator({ ...common, subscribers: 12_000, seed: 61, apiKey: 'key-default-0123456789' }),
      shop: await startSimulator({ ...common, subscribers: 300, seed: 62, apiKey: 'key-shop-0123456789' }),
      news: await startSimulator({ ...common, subscribers: 300, seed: 63, webhooksToken: 'token-news-0123456789' }),
    };
    pools = {
      default: openDatabase(database.url, { account: 'default', max: 2 }),
      shop: openDatabase(database.url, { account: 'shop', max: 2 }),
      news: openDatabase(database.url, { account: 'news', max: 2 }),
    };
    deployment = openDatabase(database.url, { max: 2 });
    redis = new Redis(redisUrl());
    env = {
      DATABASE_URL: database.url,
      REDIS_URL: redisUrl(),
      REDIS_PREFIX: prefix,
      ACCOUNTS: 'default,shop,news,hooks',
      MAILER_LEGACY_URL: sims.default.url,
      MAILER_API_KEY: sims.default.apiKey,
      SYNC_GROUPS: group('default'),
      SYNC_TYPES: 'active',
      API_RATE_LIMIT: '100000',
      ACCOUNT_SHOP__MAILER_LEGACY_URL: sims.shop.url,
      ACCOUNT_SHOP__MAILER_API_KEY: sims.shop.apiKey,
      ACCOUNT_SHOP__SYNC_GROUPS: group('shop'),
      ACCOUNT_SHOP__SYNC_TYPES: 'active',
      ACCOUNT_SHOP__API_RATE_LIMIT: '100000',
      ACCOUNT_NEWS__MAILER_API_URL: sims.news.url,
      ACCOUNT_NEWS__MAILER_API_TOKEN: sims.news.webhooksToken,
      ACCOUNT_NEWS__SYNC_GROUPS: group('news'),
      ACCOUNT_NEWS__SYNC_TYPES: 'active',
      ACCOUNT_NEWS__API_RATE_LIMIT: '100000',
      SYNC_EVERY: `${SYNC_EVERY_MS / 1000}s`,
      RECONCILE_EVERY: '24h',
      SYNC_PAGE_SIZE: '100',
      AUDIT_EVERY: 'off',
      PORT: '0',
      OPS_PORT: '0',
      LOG_LEVEL: 'info',
      LOG_FORMAT: 'json',
      METRICS_REFRESH_EVERY: '1s',
      ADMIN_TOKEN,
    };
    service = startChildCli(['start', '--role', 'worker'], env, (line) => {
      if (line.msg !== 'service started') return null;
      opsPort = Number(line.opsPort);
      return Number(line.port);
    });
    await service.port;
  });

  afterAll(async () => {
    await service?.stop();
    for (const sim of Object.values(sims ?? {})) await sim.close();
    for (const pool of Object.values(pools ?? {})) await pool.close();
    await deployment?.close();
    redis?.disconnect();
    await database?.drop();
    await deleteInstallKeys(prefix);
  });

  /** The latest full pass of `account`'s group completed (its state's last complete full pass). */
  const fullPassDone = (account: Reading) =>
    waitFor(
      `a complete full pass of ${account}`,
      async () => (await readSyncState(pools[account].pool, group(account), 'active'))?.lastFullCompletedAt ?? null,
      90_000,
      100,
    );

  /**
   * The account ticks: an incremental pass started after its first full pass completed. Until then
   * a scheduled full pass that met the first one (an incremental job with no cursor yet, run in
   * full) may wait for its turn and skip the ticks meanwhile, a few seconds that have nothing to do
   * with another account.
   */
  const ticking = async (account: Reading) => {
    const completed = Date.parse(await fullPassDone(account));
    await waitFor(
      `${account}'s incremental passes after its first full pass`,
      async () =>
        (await passes(account, `kind = 'incremental' and started_at > to_timestamp(${completed / 1000})`)).length > 0 || undefined,
      30_000,
      100,
    );
  };

  const passes = async (account: string, where = 'true') =>
    (
      await deployment.pool.query<{
        id: number;
        kind: string;
        trigger: string | null;
        status: string;
        started: number;
        ended: number | null;
      }>(
        `select id::int, kind, trigger, status, extract(epoch from started_at) * 1000 as started, extract(epoch from ended_at) * 1000 as ended
           from sync_passes where account = $1 and (${where}) order by started_at, id`,
        [account],
      )
    ).rows.map((r) => ({ ...r, started: Number(r.started), ended: r.ended === null ? null : Number(r.ended) }));

  it("mirrors every account's world exactly, each account's rows under its account, its Redis keys under its prefix", async () => {
    for (const account of READING) await fullPassDone(account);
    for (const account of ['default', 'shop'] as const) {
      const world = sims[account].world;
      const expected = expectedFromWorld(world, world.members(group(account), 'active'));
      expect(diffSubscribers(expected, await readMirroredSubscribers(pools[account].pool), [...COMPARED]), account).toEqual([]);
    }
    const news = sims.news.world;
    const expected = expectedFromWorldCurrent(news, news.members(group('news'), 'active'));
    expect(diffSubscribers(expected, await readMirroredSubscribers(pools.news.pool), [...COMPARED])).toEqual([]);

    const { rows } = await deployment.pool.query<{ account: string; n: number }>(
      `select account, count(*)::int as n from subscribers group by account order by account`,
    );
    expect(rows).toEqual(
      (['default', 'news', 'shop'] as const).map((account) => ({
        account,
        n: sims[account].world.memberCount(group(account), 'active'),
      })),
    );
    // The same group id in every world, and a queue and schedulers for each account under its own prefix.
    expect(new Set(READING.map(group)).size).toBe(1);
    const schedulers: Record<string, string[]> = {};
    for (const [account, p] of Object.entries(PREFIXES(prefix))) {
      const queue = createSyncQueue({ url: redisUrl(), maxRetriesPerRequest: 1 }, p);
      schedulers[account] = (await queue.getJobSchedulers(0, -1)).map((j) => j.key).sort();
      await queue.close();
    }
    const gid = group('default');
    expect(schedulers).toEqual({
      default: [`full-g${gid}-active`, `incremental-g${gid}-active`],
      shop: [`full-g${gid}-active`, `incremental-g${gid}-active`],
      news: [`full-g${gid}-active`],
      hooks: [],
    });

    // Redis connections per process, not per account: the limiters' two and the queues' one for
    // every account, and a blocking one per sync worker (BullMQ names it <prefix>:<queue>).
    const blocking = Buffer.from(SYNC_QUEUE).toString('base64');
    expect(await connectionsByName(`${prefix}:`)).toEqual({
      [`${prefix}:limiters`]: 2,
      [`${prefix}:queues`]: 1,
      [`${prefix}:${blocking}`]: 1,
      [`${shopPrefix}:${blocking}`]: 1,
      [`${prefix}:account:news:${blocking}`]: 1,
    });

    // The webhook-only account runs its consumer only, and says so once.
    const notices = service.lines.filter((l) => typeof l === 'object' && String(l.msg).includes('nothing reconciles'));
    expect(notices.map((l) => (l as Record<string, unknown>).account)).toEqual(['hooks']);
  });

  it("wakes each account's consumer from the worker's one listener: a delivery is applied at once, within its account", async () => {
    // One listening connection for every account (not one per account's pool).
    const { rows: listening } = await deployment.pool.query<{ n: number }>(
      `select count(*)::int as n from pg_stat_activity where datname = current_database() and query ilike 'listen %'`,
    );
    expect(listening).toEqual([{ n: 1 }]);
    const world = sims.shop.world;
    const ids = world.members(group('shop'), 'active').slice(0, 3);
    for (const [i, id] of ids.entries()) {
      const account = i % 2 === 0 ? 'hooks' : 'shop';
      const body = { event: 'subscriber.updated', account_id: 1, ...world.renderWebhook(id) };
      const raw = Buffer.from(JSON.stringify(body));
      const storedAt = Date.now();
      const stored = await storeDelivery(
        deployment.pool,
        { raw, body, kinds: ['subscriber.updated'], eventCount: 1, endpointId: null, status: 'pending' },
        account,
      );
      await waitFor(
        `delivery ${i} applied`,
        async () => {
          const { rows } = await deployment.pool.query<{ status: string }>(`select status from webhook_deliveries where id = $1`, [
            stored.id,
          ]);
          return rows[0]?.status === 'applied';
        },
        10_000,
        20,
      );
      // Far sooner than the consumers' safety-net poll (every 10 s): the notification woke it.
      expect(Date.now() - storedAt, `delivery ${i}`).toBeLessThan(2_000);
      const { rows } = await deployment.pool.query<{ account: string }>(`select account from subscribers where id = $1 order by account`, [
        id,
      ]);
      expect(rows.map((r) => r.account)).toContain(account);
    }
    const { rows: hooks } = await deployment.pool.query<{ n: number }>(
      `select count(*)::int as n from subscribers where account = 'hooks'`,
    );
    expect(hooks).toEqual([{ n: 2 }]);
  });

  it("a long backfill of one account holds back none of another's scheduled passes", async () => {
    await fullPassDone('default');
    await ticking('shop');
    // Each page of the big account now takes a while: its full pass of ~90 pages lasts seconds.
    sims.default.faults.set({ delayMs: 60 });
    try {
      const asked = await runCli(['backfill', '--account', 'default', '--group', group('default'), '--type', 'active'], env);
      expect(asked.code, asked.stderr).toBe(0);
      expect(asked.stdout).toContain('of account default');
      const backfill = await waitFor(
        "the big account's backfill pass to end",
        async () => {
          const [pass] = await passes('default', "trigger = 'backfill' and kind = 'full'");
          return pass?.ended ? pass : null;
        },
        90_000,
        100,
      );
      expect(backfill.status).toBe('succeeded');
      const during = await passes(
        'shop',
        `trigger = 'schedule' and started_at between to_timestamp(${backfill.started / 1000}) and to_timestamp(${backfill.ended! / 1000})`,
      );
      const lengthMs = backfill.ended! - backfill.started;
      process.stdout.write(
        `[figure] accounts: default's backfill pass ${lengthMs} ms; shop's scheduled passes started meanwhile: ${during.length}\n`,
      );
      expect(lengthMs).toBeGreaterThan(4 * SYNC_EVERY_MS);
      // Every SYNC_EVERY, as if the other account were idle: none waited for the long pass.
      expect(during.length).toBeGreaterThanOrEqual(Math.floor(lengthMs / SYNC_EVERY_MS / 2));
      const starts = [backfill.started, ...during.map((p) => p.started), backfill.ended!];
      const longestGap = Math.max(...starts.slice(1).map((s, i) => s - starts[i]!));
      // A pass held back by the long one would leave a gap as long as the backfill. A loaded machine
      // stretches both the backfill and the other account's own passes, so the bound is half the
      // backfill, and at least three ticks.
      expect(longestGap).toBeLessThan(Math.max(3 * SYNC_EVERY_MS, lengthMs / 2));
      // None failed (the last may still run when read).
      expect(during.filter((p) => p.status === 'failed')).toEqual([]);
    } finally {
      sims.default.faults.clear();
    }
  });

  it('takes --account on backfill, audit, fields, erase and status: needed among several, an unknown one refused, nothing changed', async () => {
    const backfillJobs = async () => {
      const ids: string[] = [];
      for (const p of Object.values(PREFIXES(prefix))) {
        const queue = createSyncQueue({ url: redisUrl(), maxRetriesPerRequest: 1 }, p);
        const jobs = await queue.getJobs(['waiting', 'active', 'delayed', 'prioritized', 'completed', 'failed']);
        ids.push(...jobs.filter((j) => j.data.trigger === 'backfill').map((j) => `${p}/${j.id}`));
        await queue.close();
      }
      return ids.sort();
    };
    const before = await backfillJobs();
    const several = 'several accounts are declared (default, shop, news, hooks): name one with --account';
    const unknown = 'no account "blog" is declared (ACCOUNTS: default, shop, news, hooks)';
    const member = sims.default.world.members(group('default'), 'active')[0]!;
    const refused: Array<[string[], string]> = [
      [['backfill', '--all'], several],
      [['backfill', '--all', '--account', 'blog'], unknown],
      [['audit'], several],
      [['audit', '--account', 'blog'], unknown],
      [['fields'], several],
      [['fields', '--account', 'blog'], unknown],
      [['erase', '--id', member], several],
      [['erase', '--id', member, '--account', 'blog'], unknown],
      [['status', '--account', 'blog'], unknown],
    ];
    const results = await Promise.all(refused.map(([args]) => runCli(args, env)));
    refused.forEach(([args, message], i) => {
      expect([results[i]!.code, results[i]!.stderr.trim()], args.join(' ')).toEqual([2, `subscriber-mirror: ${message}`]);
    });
    expect(await backfillJobs()).toEqual(before);

    // Erasure stays within its account: the default account's member is no subscriber of shop's.
    const erase = await runCli(['erase', '--id', member, '--account', 'shop'], env);
    expect(erase.code).toBe(2);
    expect(erase.stderr).toContain(`no subscriber ${member} in the mirror`);
    expect((await readMirroredSubscribers(pools.default.pool)).get(member)?.email).toBeTruthy();

    // A named account's backfill runs on its queue, by its worker, within its rows.
    const backfill = await runCli(['backfill', '--account', 'shop', '--group', group('shop'), '--type', 'active', '--wait'], env, {
      timeoutMs: 60_000,
    });
    expect(backfill.code, backfill.stderr).toBe(0);
    expect(backfill.stdout).toMatch(/group \d+ active: done, \d+ rows read/);
    expect((await passes('shop', "trigger = 'backfill'")).map((p) => p.status)).toEqual(['succeeded']);
    expect((await passes('news', "trigger = 'backfill'")).length).toBe(0);

    // The admin API takes the account the same way.
    const admin = (path: string, body?: object) =>
      fetch(`http://127.0.0.1:${opsPort}${path}`, {
        method: body ? 'POST' : 'GET',
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, ...(body ? { 'content-type': 'application/json' } : {}) },
        ...(body ? { body: JSON.stringify(body) } : {}),
      });
    const gid = group('news');
    for (const [body, message] of [
      [{ group: gid }, several],
      [{ group: gid, account: 'blog' }, unknown],
    ] as const) {
      const refusedOver = await admin('/admin/backfill', body);
      expect([refusedOver.status, await refusedOver.json()]).toEqual([400, { error: message }]);
    }
    const queued = await admin('/admin/backfill', { group: gid, type: 'active', account: 'news' });
    expect(queued.status).toBe(202);
    const { account, jobId } = (await queued.json()) as { account: string; jobId: string };
    expect(account).toBe('news');
    expect((await admin(`/admin/jobs/${jobId}`)).status).toBe(400);
    const job = await admin(`/admin/jobs/${jobId}?account=news`);
    expect([job.status, ((await job.json()) as { account: string }).account]).toEqual([200, 'news']);
    await waitFor(
      'the news backfill',
      async () => (await passes('news', "trigger = 'backfill' and ended_at is not null")).length === 1,
      30_000,
      100,
    );

    const fields = await runCli(['fields', '--account', 'news', '--json'], env);
    expect(fields.code, fields.stderr).toBe(0);
    const table = await runCli(['status'], env);
    expect(table.code, table.stderr).toBe(0);
    for (const account of ['default', 'shop', 'news', 'hooks']) expect(table.stdout).toContain(`ACCOUNT ${account}`);
  }, 240_000); // about fifteen CLI runs, each a process of its own: over a minute on 2 loaded cores

  it('a revoked key pauses its account alone: the others keep being read, the worker stays ready', async () => {
    sims.shop.setApiKey('key-shop-rotated-9876543210');
    const pauseKey = authPauseKey(shopPrefix, sims.shop.apiKey);
    const pause = await waitFor(
      'the shop account paused',
      async () => {
        const p = await readAuthPause(redis, pauseKey);
        return isPaused(p) ? p : null;
      },
      30_000,
      100,
    );
    expect(pause.message).toContain('302');
    const pausedAt = Date.now();
    await waitFor(
      'the default account read after the pause',
      async () => (await passes('default', `status = 'succeeded' and started_at > to_timestamp(${pausedAt / 1000})`)).length >= 2,
      30_000,
      100,
    );
    expect(await passes('shop', `status = 'succeeded' and started_at > to_timestamp(${pausedAt / 1000})`)).toEqual([]);
    expect(await readAuthPause(redis, authPauseKey(prefix, sims.default.apiKey))).toBeNull();

    expect((await fetch(`http://127.0.0.1:${opsPort}/readyz`)).status).toBe(200);
    const metrics = await (await fetch(`http://127.0.0.1:${opsPort}/metrics`)).text();
    expect(metrics).toMatch(/^subscriber_mirror_upstream_auth_paused\{account="shop"\} 1$/m);
    expect(metrics).toMatch(/^subscriber_mirror_upstream_auth_paused\{account="default"\} 0$/m);
    expect(metrics).toMatch(/^subscriber_mirror_sync_last_success_timestamp_seconds\{group="\d+",type="active",account="news"\} \d/m);

    const shop = await runCli(['status', '--account', 'shop'], env);
    expect(shop.code, shop.stderr).toBe(0);
    expect(shop.stdout).toContain('POLLING PAUSED');
    const other = await runCli(['status', '--account', 'default'], env);
    expect(other.stdout).not.toContain('POLLING PAUSED');
    const every = await runCli(['status', '--json'], env);
    const answer = JSON.parse(every.stdout) as { accounts: Array<{ account: string; authPause: unknown; source: string | null }> };
    expect(answer.accounts.map((a) => [a.account, a.source, a.authPause !== null])).toEqual([
      ['default', 'legacy', false],
      ['shop', 'legacy', true],
      ['news', 'current', false],
      ['hooks', null, false],
    ]);
    sims.shop.setApiKey(null);
  });
});

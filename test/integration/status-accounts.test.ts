/**
 * Two accounts in one database (issue 35, "every surface gains the account"): the deployment-wide
 * status reader, on a pool of no account, shows each account's pairs, members, drift, awaiting
 * proof, audit figures and webhooks, and nothing of the other's, with the same few statements
 * whatever the number of accounts; the gauges carry the account; `status`, `status --json`,
 * `/admin/status` and the status page show each account under its name, and one account as before.
 */
import type { FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { emptyTally, recordAuditResult, saveWebhookHealth } from '../../src/audit/state.js';
import { statusSources } from '../../src/commands/status-sources.js';
import { startGauges } from '../../src/commands/gauges.js';
import { accountRedisPrefix, loadConfig } from '../../src/config.js';
import { openDatabase, type Database } from '../../src/db/client.js';
import { createLogger } from '../../src/ground/log.js';
import { createMetrics } from '../../src/ground/metrics.js';
import type { Queryable } from '../../src/ground/queryable.js';
import { registerAdminRoutes } from '../../src/http/admin.js';
import { buildServer } from '../../src/http/server.js';
import { createSessionStore } from '../../src/http/sessions.js';
import { collectReports, statusJson } from '../../src/http/status-report.js';
import { upsertMemberships } from '../../src/mirror/store/index.js';
import { rateBudgetsKey } from '../../src/ratelimit/budget-limiter.js';
import { authPauseKey, recordAuthFailure } from '../../src/sync/auth-pause.js';
import { closeRow, openRow, saveUpstreamCount } from '../../src/sync/pass-history.js';
import { createSyncQueue } from '../../src/sync/schedule.js';
import { ensureSyncState } from '../../src/sync/state.js';
import { collectAccountsStatus, collectStatus, type StatusScope } from '../../src/sync/status.js';
import { runCli } from '../helpers/cli.js';
import { whileReplicaBeats } from '../helpers/replica-beat.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { heartbeat, replicasKey } from '../../src/sync/replicas.js';
import { waitFor } from '../helpers/wait.js';

const SHOP = 'shop';
const GROUP = '7';
const SHOP_TOKEN = 'shop-current-api-token-0123456789';
const TOKEN = 'status-admin-token-0123456789';

/** The rate budgets a limiter publishes, of model `model`. */
function budgets(model: 'account' | 'endpoint') {
  return {
    model,
    fallbackUntil: null,
    windowMs: 60_000,
    budgets: [{ budget: 'shared', perWindow: 60, announcedLimit: 60 }],
    endpoints: [],
    modelChanges: 1,
    at: '2026-11-27T00:00:00.000Z',
  };
}

/** A statement counter around a pool: the reader's statements must not grow with the accounts. */
function counting(db: Queryable): { db: Queryable; statements: () => number } {
  let n = 0;
  return {
    db: {
      query(query, values) {
        n += 1;
        return db.query(query, values);
      },
    },
    statements: () => n,
  };
}

/** A full pass of (GROUP, active) that completed, listing from `listedFrom`, with the service's count. */
async function fullPass(db: Queryable, listedFrom: string, upstreamCount: number): Promise<void> {
  await ensureSyncState(db, GROUP, 'active');
  const id = await openRow(db, { groupId: GROUP, type: 'active', kind: 'full', source: 'legacy', trigger: 'schedule' });
  await saveUpstreamCount(db, id, upstreamCount);
  await closeRow(db, id, { status: 'succeeded', listedFrom, complete: true, gapFree: true, rowsSeen: 1, rowsWritten: 1, requests: 1 });
}

async function storeDeliveries(db: Queryable, account: string, statuses: string[]): Promise<void> {
  for (const [i, status] of statuses.entries()) {
    await db.query(`insert into webhook_deliveries (body_sha256, body, status, error) values ($1, '{}', $2, $3)`, [
      `${account}-${i}-${status}`,
      status,
      status === 'failed' ? `cannot apply ${account} ${i}` : null,
    ]);
  }
}

describe('status of two accounts in one database', () => {
  let database: TestDatabase;
  let shop: Database;
  let deployment: Database;
  let redis: Redis;
  const prefix = uniquePrefix('status-accounts');
  const apps: FastifyInstance[] = [];
  const queue = createSyncQueue({ url: redisUrl(), maxRetriesPerRequest: 1 }, prefix);

  // default: legacy, group 7 (active, bounced); shop: the current API, groups 7 and 8, active only.
  const env = (): Record<string, string> => ({
    DATABASE_URL: database.url,
    REDIS_URL: redisUrl(),
    REDIS_PREFIX: prefix,
    ACCOUNTS: `default,${SHOP}`,
    MAILER_LEGACY_URL: 'http://127.0.0.1:1',
    MAILER_API_KEY: 'default-legacy-key-0123456789',
    SYNC_GROUPS: GROUP,
    SYNC_TYPES: 'active,bounced',
    ACCOUNT_SHOP__MAILER_API_URL: 'http://127.0.0.1:2',
    ACCOUNT_SHOP__MAILER_API_TOKEN: SHOP_TOKEN,
    ACCOUNT_SHOP__SYNC_GROUPS: `${GROUP},8`,
    ACCOUNT_SHOP__SYNC_TYPES: 'active',
    AUDIT_EVERY: 'off',
  });
  const shopPrefix = () => accountRedisPrefix(prefix, SHOP);
  const scopes: StatusScope[] = [
    { account: 'default', groups: [GROUP], types: ['active', 'bounced'] },
    { account: SHOP, groups: [GROUP, '8'], types: ['active'] },
  ];

  beforeAll(async () => {
    database = await createTestDatabase();
    await database.pool.query(`insert into accounts (name) values ($1)`, [SHOP]);
    shop = openDatabase(database.url, { account: SHOP, max: 2 });
    deployment = openDatabase(database.url, { max: 2 });
    redis = new Redis(redisUrl());

    // The same pair in both accounts, with different data. default: 3 members, all listed by its pass.
    await fullPass(database.pool, '2026-01-15T00:00:00.000000Z', 3);
    await upsertMemberships(
      database.pool,
      GROUP,
      ['1', '2', '3'].map((subscriberId) => ({ subscriberId, type: 'active', at: '2026-01-01T00:00:00.000000Z' })),
      { via: 'poll', seenAt: '2026-02-01T00:00:00.000000Z' },
    );
    // shop: 2 members, one of them not listed since its last pass began (awaiting proof); the
    // service counts 10; its last run failed.
    await fullPass(shop.pool, '2026-01-15T00:00:00.000000Z', 10);
    await upsertMemberships(shop.pool, GROUP, [{ subscriberId: '1', type: 'active', at: '2026-01-01T00:00:00.000000Z' }], {
      via: 'poll',
      seenAt: '2026-02-01T00:00:00.000000Z',
    });
    await upsertMemberships(shop.pool, GROUP, [{ subscriberId: '9', type: 'active', at: '2026-01-01T00:00:00.000000Z' }], {
      via: 'poll',
      seenAt: '2026-01-10T00:00:00.000000Z',
    });
    const failed = await openRow(shop.pool, {
      groupId: GROUP,
      type: 'active',
      kind: 'incremental',
      source: 'current',
      trigger: 'schedule',
    });
    await closeRow(shop.pool, failed, { status: 'failed', rowsSeen: 0, rowsWritten: 0, requests: 1, error: 'HTTP 500 from the shop' });

    await recordAuditResult(database.pool, GROUP, 'active', { ...emptyTally(), rowsChecked: 100, content: 1 });
    await recordAuditResult(shop.pool, GROUP, 'active', { ...emptyTally(), rowsChecked: 50, missing: 5, unrepaired: 1 });
    await saveWebhookHealth(shop.pool, [{ id: 'w-shop', enabled: false, problems: ['disabled'], missingEvents: [] }], []);
    await storeDeliveries(database.pool, 'default', ['applied']);
    await storeDeliveries(shop.pool, SHOP, ['failed', 'failed', 'pending']);
    // The shop's read credential is rejected: its polling is paused, default's is not. Each account's
    // worker keeps its pause and the budgets it learned under its own prefix.
    await recordAuthFailure(redis, authPauseKey(shopPrefix(), SHOP_TOKEN), 'Unauthenticated (shop)');
    await redis.set(rateBudgetsKey(prefix), JSON.stringify(budgets('endpoint')));
    await redis.set(rateBudgetsKey(shopPrefix()), JSON.stringify(budgets('account')));
  });

  afterAll(async () => {
    for (const app of apps) await app.close();
    await queue.close();
    redis?.disconnect();
    await deleteInstallKeys(prefix);
    await shop?.close();
    await deployment?.close();
    await database?.drop();
  });

  it('reads every account on a pool of none: each its own pairs and figures, none of the other’s', async () => {
    const [mine, theirs] = await collectAccountsStatus(deployment.pool, scopes);
    expect(mine?.account).toBe('default');
    expect(mine?.passes.map((p) => [p.account, p.groupId, p.type, p.mirrored, p.upstreamCount, p.drift, p.awaitingProof])).toEqual([
      ['default', GROUP, 'active', 3, 3, 0, 0],
      ['default', GROUP, 'bounced', 0, null, null, 0],
    ]);
    expect(mine?.passes[0]).toMatchObject({ lastStatus: 'succeeded', lastMode: 'full', lastError: null });
    expect(mine?.passes[0]?.audit).toMatchObject({ rowsChecked: 100, accuracy: 0.99, unrepaired: 0 });
    expect(mine?.webhooks).toEqual([]);

    expect(theirs?.account).toBe(SHOP);
    expect(theirs?.passes.map((p) => [p.account, p.groupId, p.type, p.mirrored, p.upstreamCount, p.drift, p.awaitingProof])).toEqual([
      [SHOP, GROUP, 'active', 2, 10, 8, 1],
      [SHOP, '8', 'active', 0, null, null, 0],
    ]);
    expect(theirs?.passes[0]).toMatchObject({ lastStatus: 'failed', lastMode: 'incremental', lastError: 'HTTP 500 from the shop' });
    expect(theirs?.passes[0]?.lastSuccessAt).not.toBeNull();
    expect(theirs?.passes[0]?.audit).toMatchObject({ rowsChecked: 50, accuracy: 0.9, unrepaired: 1 });
    expect(theirs?.webhooks.map((w) => [w.id, w.problems])).toEqual([['w-shop', ['disabled']]]);
  });

  it('costs the same statements for two accounts as for one (each reads every account at once)', async () => {
    const one = counting(deployment.pool);
    await collectAccountsStatus(one.db, scopes.slice(0, 1));
    const two = counting(deployment.pool);
    await collectAccountsStatus(two.db, scopes);
    expect(two.statements()).toBe(one.statements());
  });

  it("on one account's pool, reads that account as the deployment-wide reader does", async () => {
    const [mine, theirs] = await collectAccountsStatus(deployment.pool, scopes);
    expect(await collectStatus(database.pool, scopes[0] as StatusScope)).toEqual(mine?.passes);
    expect(await collectStatus(shop.pool, scopes[1] as StatusScope)).toEqual(theirs?.passes);
  });

  it('labels every gauge with its account, the inbox of each account included', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    const config = loadConfig(env(), ['database']);
    const gauges = startGauges(metrics, { pool: database.pool, queues: [], config, polls: true });
    try {
      await waitFor(
        'the gauges refreshed',
        async () => (await metrics.registry.metrics()).includes('subscriber_mirror_sync_drift{'),
        10_000,
      );
      const text = await metrics.registry.metrics();
      expect(text).toContain(`subscriber_mirror_sync_drift{group="${GROUP}",type="active",account="default"} 0`);
      expect(text).toContain(`subscriber_mirror_sync_drift{group="${GROUP}",type="active",account="shop"} 8`);
      expect(text).toContain(`subscriber_mirror_sync_mirrored_members{group="8",type="active",account="shop"} 0`);
      expect(text).toContain(`subscriber_mirror_members_awaiting_proof{group="${GROUP}",type="active",account="shop"} 1`);
      expect(text).toContain(`subscriber_mirror_audit_accuracy{group="${GROUP}",type="active",account="default"} 0.99`);
      expect(text).toContain(`subscriber_mirror_audit_accuracy{group="${GROUP}",type="active",account="shop"} 0.9`);
      // Each account's own pass interval: SYNC_EVERY (5 min) on the legacy API, RECONCILE_EVERY (24 h) on the current one.
      expect(text).toContain(`subscriber_mirror_sync_interval_seconds{group="${GROUP}",type="active",account="default"} 300`);
      expect(text).toContain(`subscriber_mirror_sync_interval_seconds{group="${GROUP}",type="active",account="shop"} 86400`);
      await waitFor('the inbox counted', async () =>
        (await metrics.registry.metrics()).includes('subscriber_mirror_webhook_inbox_deliveries{status="failed",account="shop"} 2'),
      );
      const inbox = (await metrics.registry.metrics())
        .split('\n')
        .filter((l) => l.startsWith('subscriber_mirror_webhook_inbox_deliveries{'));
      expect(inbox).toContain('subscriber_mirror_webhook_inbox_deliveries{status="applied",account="default"} 1');
      expect(inbox).toContain('subscriber_mirror_webhook_inbox_deliveries{status="pending",account="shop"} 1');
      expect(inbox).toContain('subscriber_mirror_webhook_inbox_deliveries{status="failed",account="default"} 0');
      // No series without an account, the counters the gauges start at 0 included.
      expect(inbox.filter((l) => !l.includes('account='))).toEqual([]);
      expect(text).toContain(`subscriber_mirror_audit_unrepaired_total{group="${GROUP}",type="active",account="shop"} 0`);
      expect(
        text.split('\n').filter((l) => /^subscriber_mirror_(audit_|full_pass_step_backs)\w*\{/.test(l) && !l.includes('account=')),
      ).toEqual([]);
    } finally {
      gauges.stop();
    }
  });

  /** A live worker replica that says it reads `reads` (what a worker's heartbeat publishes, src/sync/replicas.ts). */
  const replicaReading = (...reads: string[]) => heartbeat(redis, prefix, 'replica-a', { reads });

  /** `run` (a CLI run) while that replica says it reads `reads`, beating every second. */
  const whileReading = <T>(reads: string[], run: () => Promise<T>): Promise<T> =>
    whileReplicaBeats(redis, prefix, 'replica-a', { reads }, run);

  it('status: a header per account with its own rows and pause; --json: accounts and passes naming theirs', async () => {
    const text = await whileReading(['default'], () => runCli(['status'], env()));
    expect(text.stderr).toBe('');
    expect(text.code).toBe(0);
    const [mine, theirs] = text.stdout.split(/^(?=ACCOUNT )/m);
    expect(mine).toMatch(/^ACCOUNT default \(legacy, read by 1 worker replica\)\n\ngroup\s+type\s+cursor/);
    expect(mine).toMatch(new RegExp(`^${GROUP}\\s+bounced\\s`, 'm'));
    expect(mine).not.toContain('PAUSED');
    expect(mine).toContain('RATE BUDGETS (learned from the rate-limit headers, 2026-11-27T00:00:00.000Z): model endpoint');
    expect(theirs).toContain('RATE BUDGETS (learned from the rate-limit headers, 2026-11-27T00:00:00.000Z): model account');
    // No live replica reads shop: its passes do not run, and status says so before anything else.
    expect(theirs).toMatch(
      /^ACCOUNT shop \(current, read by 0 worker replicas\)\n\nNOT READ: no worker replica reads this account now .*\n\nPOLLING PAUSED until .* after 1 auth failure\(s\): Unauthenticated \(shop\)/,
    );
    expect(theirs).toContain('HTTP 500 from the shop');
    expect(theirs).toMatch(/^8\s+active\s+-\s+never/m);
    expect(theirs).toContain('WEBHOOK w-shop: disabled');

    const json = await whileReading(['default'], () => runCli(['status', '--json'], env()));
    expect(json.code).toBe(0);
    const parsed = JSON.parse(json.stdout) as {
      accounts: Array<{
        account: string;
        source: string;
        authPause: { failures: number } | null;
        rateBudgets: { model: string } | null;
        readBy: string[];
      }>;
      passes: Array<{ account: string; groupId: string; type: string; mirrored: number }>;
    };
    expect(parsed.accounts.map((a) => [a.account, a.source, a.authPause?.failures ?? null, a.rateBudgets?.model, a.readBy])).toEqual([
      ['default', 'legacy', null, 'endpoint', ['replica-a']],
      [SHOP, 'current', 1, 'account', []],
    ]);
    expect(parsed.passes.map((p) => [p.account, p.groupId, p.type, p.mirrored])).toEqual([
      ['default', GROUP, 'active', 3],
      ['default', GROUP, 'bounced', 0],
      [SHOP, GROUP, 'active', 2],
      [SHOP, '8', 'active', 0],
    ]);
  }, 60_000);

  it('status of a single-account install: no header, the fields at the top, as before', async () => {
    const single = Object.fromEntries(Object.entries(env()).filter(([name]) => name !== 'ACCOUNTS' && !name.startsWith('ACCOUNT_')));
    const text = await whileReading(['default'], () => runCli(['status'], single));
    expect(text.code).toBe(0);
    expect(text.stdout).not.toContain('ACCOUNT');
    expect(text.stdout).toMatch(/^group\s+type\s+cursor/);
    const json = JSON.parse((await whileReading(['default'], () => runCli(['status', '--json'], single))).stdout) as Record<
      string,
      unknown
    >;
    expect(Object.keys(json)).toEqual(['source', 'authPause', 'rateBudgets', 'readBy', 'audit', 'passes', 'webhooks']);
    expect(json.readBy).toEqual(['replica-a']);
    // With no worker replica heard from, it says that nothing reads the account, above the table.
    await redis.del(replicasKey(prefix));
    const unread = await runCli(['status'], single);
    expect(unread.stdout).toMatch(/^NOT READ: no worker replica reads this account now[^\n]*\n\ngroup\s+type\s+cursor/);
    expect((json.passes as Array<{ account: string }>).map((p) => p.account)).toEqual(['default', 'default']);
  }, 60_000);

  it('/admin/status and the status page show every account the edge describes', async () => {
    const { logger } = createLogger({ level: 'silent' });
    const config = loadConfig(env(), ['database']);
    const app = buildServer({ logger, readiness: [] });
    await registerAdminRoutes(app, {
      token: TOKEN,
      pool: database.pool,
      accounts: config.accounts.map((a) => ({
        name: a.name,
        syncQueue: queue,
        configured: { groups: a.sync.groups, types: a.sync.types },
      })),
      chooseAccount: (name) => name ?? config.account,
      configured: { groups: config.sync.groups, types: config.sync.types },
      syncEveryMs: 300_000,
      statusSources: statusSources(config, redis),
      sessions: createSessionStore(redis, { prefix, token: TOKEN }),
      logger,
    });
    await app.ready();
    apps.push(app);
    const headers = { authorization: `Bearer ${TOKEN}` };

    await replicaReading('default');
    const status = (await app.inject({ method: 'GET', url: '/admin/status', headers })).json<{
      accounts: Array<{ account: string; webhooks: unknown[] }>;
      passes: Array<{ account: string }>;
    }>();
    expect(status.accounts.map((a) => [a.account, a.webhooks.length])).toEqual([
      ['default', 0],
      [SHOP, 1],
    ]);
    expect(status).toEqual(await reportsJson(config));

    await replicaReading('default');
    const page = await app.inject({ method: 'GET', url: '/admin/', headers: { ...headers, accept: 'text/html' } });
    expect(page.statusCode).toBe(200);
    expect(page.body).toContain('<section id="account-shop" data-account="shop">');
    expect(page.body).toMatch(/id="shop-auth-pause"[\s\S]*Unauthenticated \(shop\)/);
    expect(page.body).not.toContain('id="default-auth-pause"');
    expect(page.body).toContain('<p id="shop-rate-budgets">Model <strong data-field="model">account</strong>');
    expect(page.body).toContain('<p id="default-rate-budgets">Model <strong data-field="model">endpoint</strong>');
    expect(page.body).toMatch(/<table id="shop-failed">[\s\S]*?cannot apply shop 1[\s\S]*?cannot apply shop 0/);
    expect(page.body).toContain('<td class="num" data-inbox="applied">1</td>');
    expect(page.body).toMatch(/<tr data-account="shop">[\s\S]*?data-field="pending">1<\/td><td class="num late" data-field="failed">2</);
    // Who reads each account: shop is paused (which says more than that nobody reads it).
    expect(page.body).toMatch(/<tr data-account="default">[\s\S]*?<td data-field="polling">ok · 1 replica</);
  });

  /** What `status --json` prints for the same sources. */
  async function reportsJson(config: ReturnType<typeof loadConfig>): Promise<unknown> {
    return JSON.parse(JSON.stringify(statusJson(await collectReports(deployment.pool, statusSources(config, redis))))) as unknown;
  }
});

/**
 * Fault 2 (invariants 1 and 5): Postgres goes away for 10 s while the simulator's delivery engine
 * sends real signed deliveries under churn. `start --role all` reaches Postgres through a TCP proxy
 * the test cuts and restores. The service's retries (10/100/1000 s, scaled) land after the outage.
 *
 * Afterwards: every delivery some attempt of which was answered 2xx has its body hash stored; no
 * delivery was given up; every stored delivery is applied; the mirror equals the world for every
 * subscriber the events touched (columns, memberships, activity).
 *
 * The webhooks are set up as an operator does: `webhooks register` (secrets kept in
 * webhook_endpoints) plus one more webhook made in the service's dashboard, whose 10-character
 * secret WEBHOOK_SECRETS refuses, taken over with `webhooks adopt ID`. WEBHOOK_SECRETS still holds a
 * long static secret, so the environment path is exercised too.
 */
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { readSyncState } from '../../src/sync/state.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { hostPort, startTcpProxy, type TcpProxy } from '../helpers/proxy.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { registerSecret, secretScanFigures } from './helpers/collector.js';
import { compareWebhookEffects } from './helpers/compare.js';
import { useSecondAccount } from './helpers/second-account.js';
import { makeSecrets, withCredentials } from './helpers/secrets.js';
import {
  assertRunning,
  freePort,
  killAll,
  printSummary,
  runCollected,
  servicePort,
  sleep,
  startService,
  stopGracefully,
  waitFor,
} from './helpers/service.js';

const OUTAGE_MS = 10_000;
/** Retries after 150 ms, 1.5 s and 15 s: the last one lands after a 10 s outage. */
const TIME_SCALE = 0.015;
const CHURN_PER_SECOND = 100;

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

describe('fault 2: Postgres restarted for 10 s under webhook load', () => {
  const secrets = makeSecrets('postgres-outage');
  // Polled through the same cut Postgres by the same process.
  const second = useSecondAccount('postgres-outage', { largeIds: false });
  const prefix = uniquePrefix('fault-pg');
  let database: TestDatabase;
  let proxy: TcpProxy;
  let sim: Simulator;

  beforeAll(async () => {
    database = await createTestDatabase();
    proxy = await startTcpProxy(hostPort(database.url, 5432));
    // Everyone is created through events once the service listens: memberships that existed before
    // any webhook could not be known from webhooks alone.
    sim = await startSimulator({
      subscribers: 0,
      groups: 2,
      largeIds: true,
      rateLimit: false,
      seed: 72,
      timeScale: TIME_SCALE,
      apiKey: secrets.apiKey,
      webhooksToken: secrets.webhooksToken,
    });
  });

  afterAll(async () => {
    killAll();
    await sim?.close();
    await proxy?.close();
    await database?.drop();
    await deleteInstallKeys(prefix);
  });

  it('loses no acknowledged delivery and applies every event', async () => {
    const started = Date.now();
    const directUrl = withCredentials(database.url, 'postgres', secrets.dbPassword);
    // Polling is configured (role all) for a group nobody is in, so every mirrored row comes from webhooks.
    const pollGroup = sim.world.createGroup('fault: polled, empty').id;
    const port = await freePort();
    const receiverUrl = `http://127.0.0.1:${port}/webhooks`;

    const registered = await runCollected(
      ['webhooks', 'register', '--url', receiverUrl],
      { DATABASE_URL: directUrl, MAILER_WEBHOOKS_URL: sim.url, MAILER_WEBHOOKS_TOKEN: secrets.webhooksToken },
      'postgres-outage-webhooks-register',
    );
    expect(registered.stderr).toBe('');
    expect(registered.code).toBe(0);
    const extra = sim.webhooks.register({
      name: 'rotation',
      url: receiverUrl,
      events: ['subscriber.updated', 'subscriber.unsubscribed'],
      batchable: false,
    });
    for (const hook of sim.webhooks.list()) registerSecret(`postgres-outage:webhook ${hook.name}`, hook.secret);
    expect(sim.webhooks.list()).toHaveLength(3);
    const adopted = await runCollected(
      ['webhooks', 'adopt', extra.id],
      { DATABASE_URL: directUrl, MAILER_WEBHOOKS_URL: sim.url, MAILER_WEBHOOKS_TOKEN: secrets.webhooksToken },
      'postgres-outage-webhooks-adopt',
    );
    expect(adopted.stderr).toBe('');
    expect(adopted.code).toBe(0);
    expect(adopted.stdout).toContain(`adopted webhook ${extra.id} "rotation"`);
    const { rows: endpoints } = await database.pool.query<{ id: string }>('select id from webhook_endpoints order by id');
    expect(endpoints.map((r) => r.id).sort()).toEqual(
      sim.webhooks
        .list()
        .map((h) => h.id)
        .sort(),
    );

    const service = startService(
      'all',
      {
        DATABASE_URL: proxy.via(directUrl),
        REDIS_URL: withCredentials(redisUrl(), 'default', secrets.redisPassword),
        REDIS_PREFIX: prefix,
        MAILER_LEGACY_URL: sim.url,
        MAILER_API_KEY: secrets.apiKey,
        SYNC_GROUPS: pollGroup,
        SYNC_TYPES: 'active',
        SYNC_EVERY: '1h',
        RECONCILE_EVERY: '24h',
        // The mirror is compared with what the webhooks carried. The audit (on by default, first tick
        // at 30 s) reads the service's lists and writes what is newer there, such as campaign counts
        // no webhook carries, so its rows would differ from the webhooks' effects by design.
        AUDIT_EVERY: 'off',
        API_RATE_LIMIT: '100000',
        WEBHOOK_SECRETS: secrets.staticWebhookSecret,
        ADMIN_TOKEN: secrets.adminToken,
        // Admin is served on the ops listener only.
        OPS_PORT: '0',
        PORT: String(port),
        LOG_LEVEL: 'trace',
      },
      'postgres-outage',
    );
    expect(await servicePort(service)).toBe(port);
    await waitFor(
      'the first poll of the empty group',
      async () => (await readSyncState(database.pool, pollGroup, 'active'))?.lastStatus === 'succeeded',
      60_000,
    );

    const groups = sim.world.groupIds().filter((g) => g !== pollGroup);
    for (let i = 0; i < 1_500; i++) {
      sim.world.createSubscriber({ groups: groups.filter((_, g) => (i + g) % 3 !== 0) });
      if (i % 100 === 99) await sleep(50);
    }
    sim.churn.setRate(CHURN_PER_SECOND);
    await sleep(3_000);
    await proxy.cut();
    const outageStart = performance.timeOrigin + performance.now();
    await sleep(OUTAGE_MS);
    const outageEnd = performance.timeOrigin + performance.now();
    await proxy.restore();
    // Losing every connection, idle or in use, is an outage to ride out, not a reason to exit.
    assertRunning(service, 'during the Postgres outage');
    await sleep(4_000);
    sim.churn.stop();
    await sim.deliveries.settle(120_000);
    await waitFor(
      'every stored delivery to be applied',
      async () => {
        assertRunning(service, 'after the Postgres outage');
        return (await database.pool.query(`select 1 from webhook_deliveries where status = 'pending' limit 1`)).rows.length === 0;
      },
      180_000,
      250,
    );

    const attempts = sim.deliveries.attempts;
    const during = attempts.filter((a) => a.startedAt >= outageStart && a.finishedAt <= outageEnd);
    // The outage was real: deliveries kept coming and not one of them was acknowledged meanwhile.
    expect(during.length).toBeGreaterThan(100);
    expect(during.filter((a) => a.ok)).toEqual([]);
    expect(attempts.filter((a) => a.gaveUp)).toEqual([]);
    // The adopted webhook's deliveries verified with the secret `webhooks adopt` stored.
    const adoptedAcknowledged = attempts.filter((a) => a.webhookId === extra.id && a.ok).length;
    expect(adoptedAcknowledged).toBeGreaterThan(0);

    const deliveries = new Map<number, { ok: boolean; body: string; attempts: number }>();
    for (const a of attempts) {
      const d = deliveries.get(a.deliveryId) ?? { ok: false, body: a.body, attempts: 0 };
      d.ok ||= a.ok;
      d.attempts += 1;
      deliveries.set(a.deliveryId, d);
    }
    const acknowledged = [...deliveries.values()].filter((d) => d.ok);
    const { rows } = await database.pool.query<{ body_sha256: string; status: string }>(
      `select body_sha256, status from webhook_deliveries`,
    );
    const stored = new Map(rows.map((r) => [r.body_sha256, r.status]));
    const lost = acknowledged.filter((d) => !stored.has(sha256(d.body)));
    expect(lost.map((d) => d.body.slice(0, 120))).toEqual([]);
    expect([...deliveries.values()].filter((d) => !d.ok).map((d) => `${d.attempts} attempts: ${d.body.slice(0, 80)}`)).toEqual([]);
    expect([...new Set(stored.values())]).toEqual(['applied']);
    const refused = new Set(during.map((a) => a.deliveryId));
    const landedAfterOutage = [...refused].filter((id) => deliveries.get(id)?.ok).length;
    expect(landedAfterOutage).toBe(refused.size);

    const comparison = await compareWebhookEffects(database.pool, sim.world);
    expect(comparison.problems).toEqual([]);
    expect(comparison.touched).toBeGreaterThan(500);
    const secondFigures = await second.expectMirrored(database.url, [sim.world]);

    expect(await stopGracefully(service)).toBe(0);
    printSummary('Postgres down 10 s under webhook load', {
      ...secondFigures,
      events: sim.world.events.length,
      deliveries: deliveries.size,
      attempts: attempts.length,
      attemptsRefusedDuringOutage: during.length,
      deliveriesRefusedThenLanded: landedAfterOutage,
      adoptedWebhookAcknowledged: adoptedAcknowledged,
      acknowledged: acknowledged.length,
      storedRows: stored.size,
      applied: [...stored.values()].filter((s) => s === 'applied').length,
      lost: lost.length,
      subscribersTouched: comparison.touched,
      activityRows: comparison.activityRows,
      seconds: Math.round((Date.now() - started) / 1000),
    });
  }, 600_000);

  it('printed no secret in any log line', () => {
    const { leaks, ...figures } = secretScanFigures(20);
    printSummary('Postgres down, secrets', { ...figures, leaks: leaks.length });
    expect(leaks).toEqual([]);
  });
});

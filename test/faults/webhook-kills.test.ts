/**
 * Fault 9 (invariants 1 and 5, issue 37): the webhook path as compose runs it, a receiver
 * (`start --role receiver`, Postgres only) and a worker (`start --role worker`), under real signed
 * deliveries with churn, while the worker is killed with `kill -9` twice, the receiver once, and the
 * worker's Redis is cut for 5 s (the consumer needs none: it claims from the inbox). Postgres cut
 * under webhook load is fault 2 (postgres-outage.test.ts).
 *
 * Afterwards, counted: every delivery some attempt of which was answered 2xx is stored (lost 0); no
 * delivery was given up; every stored delivery is applied; the mirror equals the world for every
 * subscriber the events touched, with one activity row per event (applied twice 0); and deliveries
 * were applied while Redis was cut.
 */
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { readActivityKeys } from '../helpers/mirror.js';
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
  killHard,
  printSummary,
  runCollected,
  servicePort,
  sleep,
  startService,
  stopGracefully,
  waitFor,
  type ServiceProcess,
} from './helpers/service.js';

/** Retries after 150 ms, 1.5 s and 15 s: the last one lands after a receiver's restart. */
const TIME_SCALE = 0.015;
const CHURN_PER_SECOND = 100;
const REDIS_CUT_MS = 5_000;

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

describe('fault 9: receiver and worker killed, Redis cut, under webhook load', () => {
  const secrets = makeSecrets('webhook-kills');
  // Polled by the worker the scenario kills, through the Redis it cuts; the default account only receives.
  const second = useSecondAccount('webhook-kills', { largeIds: false });
  const prefix = uniquePrefix('fault-wh');
  let database: TestDatabase;
  let redisProxy: TcpProxy;
  let sim: Simulator;

  beforeAll(async () => {
    database = await createTestDatabase();
    redisProxy = await startTcpProxy(hostPort(redisUrl(), 6379));
    sim = await startSimulator({
      subscribers: 0,
      groups: 2,
      largeIds: true,
      rateLimit: false,
      seed: 91,
      timeScale: TIME_SCALE,
      apiKey: secrets.apiKey,
      webhooksToken: secrets.webhooksToken,
    });
  });

  afterAll(async () => {
    killAll();
    await sim?.close();
    await redisProxy?.close();
    await database?.drop();
    await deleteInstallKeys(prefix);
  });

  it('loses no acknowledged delivery and applies each exactly once', async () => {
    const started = Date.now();
    const directUrl = withCredentials(database.url, 'postgres', secrets.dbPassword);
    const port = await freePort();
    const receiverUrl = `http://127.0.0.1:${port}/webhooks`;
    const registered = await runCollected(
      ['webhooks', 'register', '--url', receiverUrl],
      { DATABASE_URL: directUrl, MAILER_WEBHOOKS_URL: sim.url, MAILER_WEBHOOKS_TOKEN: secrets.webhooksToken },
      'webhook-kills-webhooks-register',
    );
    expect(registered.code).toBe(0);
    for (const hook of sim.webhooks.list()) registerSecret(`webhook-kills:webhook ${hook.name}`, hook.secret);

    // The receiver's environment holds no Redis address at all: it must not need one.
    const receiverEnv = { DATABASE_URL: directUrl, PORT: String(port), LOG_LEVEL: 'debug' };
    const workerEnv = {
      DATABASE_URL: directUrl,
      REDIS_URL: withCredentials(redisProxy.via(redisUrl()), 'default', secrets.redisPassword),
      REDIS_PREFIX: prefix,
      PORT: '0',
      LOG_LEVEL: 'debug',
    };
    let receiver: ServiceProcess = startService('receiver', receiverEnv, 'webhook-kills');
    let worker: ServiceProcess = startService('worker', workerEnv, 'webhook-kills');
    expect(await servicePort(receiver)).toBe(port);
    await servicePort(worker);

    const groups = sim.world.groupIds();
    for (let i = 0; i < 1_500; i++) {
      sim.world.createSubscriber({ groups: groups.filter((_, g) => (i + g) % 3 !== 0) });
      if (i % 100 === 99) await sleep(50);
    }
    sim.churn.setRate(CHURN_PER_SECOND);
    const faults: string[] = [];

    await sleep(3_000);
    await killHard(worker);
    faults.push('worker kill -9');
    await sleep(1_000);
    worker = startService('worker', workerEnv, 'webhook-kills');
    await servicePort(worker);

    await sleep(3_000);
    await killHard(receiver);
    faults.push('receiver kill -9');
    await sleep(1_000);
    receiver = startService('receiver', receiverEnv, 'webhook-kills');
    expect(await servicePort(receiver)).toBe(port);

    await sleep(2_000);
    const appliedBeforeCut = await appliedCount(database);
    await redisProxy.cut();
    faults.push(`Redis cut ${REDIS_CUT_MS / 1000} s`);
    await sleep(REDIS_CUT_MS);
    const appliedDuringCut = (await appliedCount(database)) - appliedBeforeCut;
    await redisProxy.restore();
    assertRunning(worker, 'after the Redis cut');

    await sleep(2_000);
    await killHard(worker);
    faults.push('worker kill -9');
    await sleep(1_000);
    worker = startService('worker', workerEnv, 'webhook-kills');
    await servicePort(worker);

    await sleep(2_000);
    sim.churn.stop();
    await sim.deliveries.settle(120_000);
    await waitFor(
      'every stored delivery to be applied',
      async () => {
        assertRunning(worker, 'while applying');
        return (await database.pool.query(`select 1 from webhook_deliveries where status = 'pending' limit 1`)).rows.length === 0;
      },
      180_000,
      250,
    );

    const attempts = sim.deliveries.attempts;
    expect(attempts.filter((a) => a.gaveUp)).toEqual([]);
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
    // The consumer needs no Redis: it went on applying while Redis was cut.
    expect(appliedDuringCut).toBeGreaterThan(0);

    const activity = await readActivityKeys(database.pool);
    const appliedTwice = activity.length - new Set(activity).size;
    expect(appliedTwice).toBe(0);
    const comparison = await compareWebhookEffects(database.pool, sim.world);
    expect(comparison.problems).toEqual([]);
    expect(comparison.touched).toBeGreaterThan(500);
    const secondFigures = await second.expectMirrored(directUrl, [sim.world]);

    expect(await stopGracefully(receiver)).toBe(0);
    expect(await stopGracefully(worker)).toBe(0);
    printSummary('receiver and worker killed, Redis cut, under webhook load', {
      faults: faults.join(', '),
      events: sim.world.events.length,
      deliveries: deliveries.size,
      attempts: attempts.length,
      retried: [...deliveries.values()].filter((d) => d.attempts > 1).length,
      acknowledged: acknowledged.length,
      storedRows: stored.size,
      applied: [...stored.values()].filter((s) => s === 'applied').length,
      appliedDuringRedisCut: appliedDuringCut,
      lost: lost.length,
      appliedTwice,
      subscribersTouched: comparison.touched,
      activityRows: comparison.activityRows,
      ...secondFigures,
      seconds: Math.round((Date.now() - started) / 1000),
    });
  }, 600_000);

  it('printed no secret in any log line', () => {
    const { leaks, ...figures } = secretScanFigures(20);
    printSummary('webhook kills, secrets', { ...figures, leaks: leaks.length });
    expect(leaks).toEqual([]);
  });
});

async function appliedCount(database: TestDatabase): Promise<number> {
  const { rows } = await database.pool.query<{ n: number }>(`select count(*)::int as n from webhook_deliveries where status = 'applied'`);
  return rows[0]?.n ?? 0;
}

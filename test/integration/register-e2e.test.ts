/**
 * Going live as the README says: `webhooks register` against the service, then the receiver
 * verifies real deliveries with the secrets register stored (no WEBHOOK_SECRETS configured).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { startService, type RunningService } from '../../src/commands/start.js';
import { runCli } from '../helpers/cli.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';

describe('webhooks register, then deliveries', () => {
  const prefix = uniquePrefix('register');
  let database: TestDatabase | undefined;
  let sim: Simulator | undefined;
  let service: RunningService | undefined;

  afterAll(async () => {
    await service?.stop('test over');
    await sim?.close();
    await database?.drop();
    await deleteInstallKeys(prefix);
  });

  it('verifies and applies deliveries signed with the secrets register stored', async () => {
    database = await createTestDatabase();
    sim = await startSimulator({ subscribers: 200, groups: 1, timeScale: 0.001, rateLimit: false });
    const env = {
      DATABASE_URL: database.url,
      REDIS_URL: redisUrl(),
      REDIS_PREFIX: prefix,
      MAILER_LEGACY_URL: sim.url,
      MAILER_API_KEY: sim.apiKey,
      MAILER_WEBHOOKS_URL: sim.url,
      MAILER_WEBHOOKS_TOKEN: sim.webhooksToken,
      SYNC_GROUPS: sim.world.groupIds()[0]!,
      SYNC_EVERY: '1h',
      RECONCILE_EVERY: '24h',
      PORT: '0',
      LOG_LEVEL: 'silent',
    };
    service = await startService(loadConfig(env, ['poll', 'receive']), 'all');
    const url = `http://127.0.0.1:${service.port}/webhooks`;

    const first = await runCli(['webhooks', 'register', '--url', url], env);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toMatch(/created real-time webhook/);
    expect(first.stdout).toMatch(/created batched webhook/);
    const again = await runCli(['webhooks', 'register', '--url', url], env);
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(/^unchanged real-time webhook/m);
    expect(again.stdout).toMatch(/^unchanged batched webhook/m);
    expect(again.stdout).not.toMatch(/^(created|updated) /m);
    const hooks = sim.webhooks.list();
    expect(hooks.map((h) => h.batchable).sort()).toEqual([false, true]);
    for (const h of hooks) expect(first.stdout + again.stdout).not.toContain(h.secret);

    const id = sim.world.members(sim.world.groupIds()[0]!)[0]!;
    sim.world.updateFields(id, { city: 'Registered City' });
    sim.world.deleteSubscriber(sim.world.members(sim.world.groupIds()[0]!)[1]!);
    await sim.deliveries.settle(10_000);
    const attempts = sim.deliveries.attempts;
    expect(attempts.length).toBeGreaterThanOrEqual(2);
    expect(
      attempts.filter((a) => a.status !== 200).map((a) => `attempt ${a.attempt} of delivery ${a.deliveryId}: ${a.status} ${a.error ?? ''}`),
    ).toEqual([]);

    const deadline = Date.now() + 15_000;
    for (;;) {
      const { rows } = await database.pool.query<{ city: string | null; applied: number }>(
        `select (select fields->>'city' from subscribers where id = $1) as city,
                (select count(*)::int from webhook_deliveries where status = 'applied') as applied`,
        [id],
      );
      if (rows[0]?.city === 'Registered City' && rows[0].applied >= 2) break;
      if (Date.now() > deadline) throw new Error(`not applied: ${JSON.stringify(rows[0])}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  });
});

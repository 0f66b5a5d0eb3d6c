/**
 * `subscriber-mirror start` (a child process, as operators run it) with each kind of read settings:
 * the current API (full passes by cursor, webhooks for freshness), none at all (a webhook-only
 * install), and a legacy key whose account has moved to the current platform.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { ALL_EVENT_KINDS, BATCH_ONLY_KINDS } from '../../src/simulator/kinds.js';
import { mulberry32 } from '../../src/simulator/prng.js';
import { freePort, startChildCli, type ChildService } from '../helpers/child-service.js';
import { runCli } from '../helpers/cli.js';
import { expectedFromWorldCurrent } from '../helpers/current.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { compareWebhookEffects, diffSubscribers, readMirroredSubscribers } from '../helpers/mirror.js';
import { createSubscribers, mutate } from '../helpers/mutations.js';
import { waitForFullPasses } from '../helpers/passes.js';
import { deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { sleep, waitFor } from '../helpers/wait.js';

const ADMIN_TOKEN = 'admin-token-0123456789abcdef';

interface Setup {
  sim: Simulator;
  database: TestDatabase;
  service: ChildService;
  env: Record<string, string>;
  port: number;
  opsPort: number;
  prefix: string;
}

let setup: Setup | null = null;
afterEach(async () => {
  if (!setup) return;
  await setup.service.stop();
  await setup.sim.close();
  await setup.database.drop();
  await deletePrefix(setup.prefix);
  setup = null;
});

/** Starts the simulator, registers its webhooks to the service's port, then starts the service with `reads`. */
async function start(simOptions: Parameters<typeof startSimulator>[0], reads: (sim: Simulator) => Record<string, string>): Promise<Setup> {
  const sim = await startSimulator({ largeIds: true, timeScale: 0.001, ...simOptions });
  const database = await createTestDatabase({ migrated: false });
  const prefix = uniquePrefix('i22');
  const port = await freePort();
  const url = `http://127.0.0.1:${port}/webhooks`;
  sim.webhooks.register({
    name: 'plain',
    url,
    events: ALL_EVENT_KINDS.filter((k) => !BATCH_ONLY_KINDS.includes(k)),
    batchable: false,
  });
  sim.webhooks.register({ name: 'batched', url, events: ALL_EVENT_KINDS, batchable: true });
  // The service takes secrets of 16 characters or more; the simulator's own are shorter. Its live
  // records (what deliveries sign with) are those `subscribedTo` hands out.
  const secrets = sim.webhooks.subscribedTo('subscriber.updated').map((hook) => (hook.secret = `${hook.secret}-long-enough-secret`));
  expect(secrets).toHaveLength(2);
  const env = {
    DATABASE_URL: database.url,
    REDIS_URL: redisUrl(),
    REDIS_PREFIX: prefix,
    PORT: String(port),
    OPS_PORT: '0',
    ADMIN_TOKEN,
    LOG_LEVEL: 'info',
    LOG_FORMAT: 'json',
    WEBHOOK_SECRETS: secrets.join(','),
    ...reads(sim),
  };
  let opsPort = 0;
  const service = startChildCli(['start'], env, (line) => {
    if (line.msg !== 'service started') return null;
    opsPort = Number(line.opsPort);
    return Number(line.port);
  });
  await service.port;
  return (setup = { sim, database, service, env, port, opsPort, prefix });
}

const admin = (s: Setup, path: string) =>
  fetch(`http://127.0.0.1:${s.opsPort}${path}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });

describe('SYNC_SOURCE=current', () => {
  it('initial mirror exact by cursor passes; a change by webhook within a second; a change no event announces by the next full pass', async () => {
    const s = await start({ subscribers: 1_500, groups: 1, seed: 31 }, (sim) => ({
      SYNC_SOURCE: 'current',
      MAILER_API_URL: sim.url,
      MAILER_API_TOKEN: sim.webhooksToken,
      SYNC_GROUPS: sim.world.groupIds().join(','),
      RECONCILE_EVERY: '24h',
    }));
    const groupId = s.sim.world.groupIds()[0]!;
    await waitForFullPasses(s.database.pool, [groupId]);
    const expected = expectedFromWorldCurrent(s.sim.world, s.sim.world.members(groupId));
    expect(
      diffSubscribers(expected, await readMirroredSubscribers(s.database.pool), ['email', 'status', 'fields', 'updatedAt', 'sent']),
    ).toEqual([]);
    // No incremental reads exist: only full passes, one per status.
    expect(s.sim.requests.filter((r) => r.api === 'legacy')).toEqual([]);
    expect(s.sim.requests.filter((r) => r.api === 'current' && r.status === 429)).toEqual([]);

    const id = s.sim.world.members(groupId, 'active')[0]!;
    const changedAt = Date.now();
    s.sim.world.updateFields(id, { city: 'by-webhook' });
    await waitFor(
      'the webhook change',
      async () =>
        ((await readMirroredSubscribers(s.database.pool)).get(id)?.fields as Record<string, unknown> | undefined)?.city === 'by-webhook',
      10_000,
      10,
    );
    const latencyMs = Date.now() - changedAt;
    process.stdout.write(`[figure] current source: change by webhook mirrored after ${latencyMs} ms\n`);

    // A campaign send moves `sent` of every active member with no subscriber event: only a pass sees it.
    // In a later second than the webhook's change: list dates have whole seconds, so a listed version
    // of the webhook's own second cannot be told newer than it (docs/upstream-current.md).
    await sleep(1_100);
    s.sim.world.sendCampaign({ groupIds: [groupId] });
    const backfill = await runCli(['backfill', '--group', groupId, '--type', 'active', '--wait'], s.env, {
      timeoutMs: 60_000,
    });
    expect(backfill.code, backfill.stderr).toBe(0);
    const after = await readMirroredSubscribers(s.database.pool);
    expect(after.get(id)?.sent).toBe(s.sim.world.renderCurrent(id).sent);
    const { rows } = await s.database.pool.query<{ via: string }>(
      `select distinct mirrored_via as via from subscribers where id = any($1::text[])`,
      [s.sim.world.members(groupId, 'active').slice(1, 50)],
    );
    expect(rows).toEqual([{ via: 'current' }]);
  }, 180_000);
});

describe('a webhook-only install (no read settings at all)', () => {
  it('runs the receiver and the consumer, applies every event kind, and says everywhere that nothing reconciles', async () => {
    const s = await start({ subscribers: 0, groups: 3, seed: 41, rateLimit: false }, () => ({}));
    const rng = mulberry32(41);
    const ids = createSubscribers(s.sim.world, 30, rng);
    await mutate(s.sim.world, ids, 200, rng);
    s.sim.world.sendCampaign();
    await mutate(s.sim.world, ids, 20, rng);
    await s.sim.deliveries.settle(30_000);
    expect(s.sim.deliveries.attempts.filter((a) => a.status === 401)).toEqual([]);
    await waitFor(
      'every delivery applied',
      async () => {
        const { rows } = await s.database.pool.query<{ waiting: number; applied: number }>(
          `select count(*) filter (where status <> 'applied')::int as waiting, count(*) filter (where status = 'applied')::int as applied from webhook_deliveries`,
        );
        return rows[0]?.waiting === 0 && rows[0].applied > 0 ? true : undefined;
      },
      30_000,
      50,
    );
    const kinds = new Set(s.sim.world.events.map((e) => e.kind));
    expect([...kinds].sort()).toEqual([...ALL_EVENT_KINDS].sort());
    const comparison = await compareWebhookEffects(s.database.pool, s.sim.world);
    expect(comparison.problems).toEqual([]);

    expect(
      s.service.lines.some((l) => typeof l === 'object' && l.level !== undefined && String(l.msg).includes('nothing reconciles')),
    ).toBe(true);
    const ready = await fetch(`http://127.0.0.1:${s.opsPort}/readyz`);
    expect(ready.status).toBe(200);
    const status = await runCli(['status', '--json'], s.env);
    expect(JSON.parse(status.stdout)).toMatchObject({
      source: null,
      notice: expect.stringContaining('nothing reconciles'),
    });
    expect((await runCli(['status'], s.env)).stdout).toContain('nothing reconciles');
    expect(await (await admin(s, '/admin/status')).json()).toMatchObject({
      notice: expect.stringContaining('nothing reconciles'),
    });
    expect(await (await admin(s, '/admin/')).text()).toContain('nothing reconciles');
  }, 120_000);
});

describe('a legacy key whose account moved to the current platform', () => {
  it('pauses polling with a message naming the current platform and its settings: log, status, /readyz, status page', async () => {
    const s = await start({ subscribers: 50, groups: 1, seed: 51, movedAccount: true }, (sim) => ({
      MAILER_LEGACY_URL: sim.url,
      MAILER_API_KEY: sim.apiKey,
      SYNC_GROUPS: sim.world.groupIds().join(','),
    }));
    const moved = (text: string) =>
      text.includes('current platform') &&
      text.includes('MAILER_API_URL') &&
      text.includes('MAILER_API_TOKEN') &&
      text.includes('SYNC_SOURCE=current');
    const line = await waitFor(
      'the pause in the log',
      async () => s.service.lines.find((l) => typeof l === 'object' && String(l.msg).includes('polling paused')),
      30_000,
      50,
    );
    expect(moved(String((line as Record<string, unknown>).msg))).toBe(true);
    const ready = await fetch(`http://127.0.0.1:${s.opsPort}/readyz`);
    expect(ready.status).toBe(503);
    expect(moved(await ready.text())).toBe(true);
    const status = await runCli(['status'], s.env);
    expect(status.stdout).toContain('POLLING PAUSED');
    expect(moved(status.stdout)).toBe(true);
    expect(moved(JSON.stringify(await (await admin(s, '/admin/status')).json()))).toBe(true);
    const page = await (await admin(s, '/admin/')).text();
    expect(page).toContain('id="auth-pause"');
    expect(moved(page)).toBe(true);
  }, 120_000);
});

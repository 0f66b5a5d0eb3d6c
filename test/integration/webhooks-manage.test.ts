/**
 * Webhook management against the simulator's management API and a real Postgres: paging, register
 * (create, no-op, update, recreate), adopt (a webhook created in the service's dashboard, whose
 * 10-character secret WEBHOOK_SECRETS refuses), secrets stored and never printed, and the service's
 * 401 / 404 / 422 answers as one clear line each.
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { ConfigError, loadConfig, type Config } from '../../src/config.js';
import { UsageError } from '../../src/ground/usage-error.js';
import {
  createWebhooksApi,
  WebhookAuthError,
  WebhookNotFoundError,
  WebhookValidationError,
  type WebhooksApi,
} from '../../src/upstream/webhooks-api.js';
import {
  adoptWebhook,
  AlreadyRegisteredError,
  BATCHED_KINDS,
  readEndpoints,
  REALTIME_KINDS,
  REGISTER_LOCK_KEY,
  registerWebhooks,
  removeEndpoint,
  storeEndpoint,
  updateWebhook,
  type StoredEndpoint,
} from '../../src/webhooks/manage.js';
import { runWebhooksCli } from '../../src/commands/webhooks.js';
import { DEFAULT_ACCOUNT, openDatabase, type Database } from '../../src/db/client.js';
import { loadSecrets } from '../../src/webhooks/inbox/write.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { buildServer } from '../../src/http/server.js';
import { createLogger } from '../../src/ground/log.js';
import { registerWebhookRoute } from '../../src/webhooks/receiver.js';
import { signBody } from '../../src/webhooks/signature.js';
import { fixture } from '../fixtures/webhooks/index.js';

const TOKEN = 'tok-integration-8d41c0f2e9';
const RECEIVER = 'https://mirror.example.test/webhooks';
const FAST = { retry: { retries: 1, minDelayMs: 5, maxDelayMs: 20, jitter: false }, timeoutMs: 5000 };

let database: TestDatabase;
let sim: Simulator;

beforeAll(async () => {
  database = await createTestDatabase();
});

afterAll(async () => {
  await database.drop();
});

beforeEach(async () => {
  await database.pool.query('truncate webhook_endpoints');
  sim = await startSimulator({ subscribers: 5, groups: 1, rateLimit: false, webhooksToken: TOKEN, seed: 11 });
});

afterEach(async () => {
  await sim.close();
});

function api(token = TOKEN): WebhooksApi {
  return createWebhooksApi({ baseUrl: sim.url, token, http: FAST });
}

function config(token = TOKEN): Config {
  return loadConfig({ MAILER_WEBHOOKS_URL: sim.url, MAILER_WEBHOOKS_TOKEN: token }, ['manage-webhooks']);
}

interface CliRun {
  code: number;
  lines: string[];
  error: Error | undefined;
}

/** Runs the subcommand and maps errors the way src/commands/cli.ts does (UsageError → 2, others → 1). */
async function cli(argv: string[], token = TOKEN): Promise<CliRun> {
  const lines: string[] = [];
  try {
    const code = await runWebhooksCli(argv, { config: config(token), pool: database.pool, out: (line) => lines.push(line), http: FAST });
    return { code, lines, error: undefined };
  } catch (error) {
    const e = error as Error;
    return { code: e instanceof UsageError || e instanceof ConfigError ? 2 : 1, lines, error: e };
  }
}

/** Every secret that exists anywhere: upstream and stored. */
async function allSecrets(): Promise<string[]> {
  const stored = await readEndpoints(database.pool);
  return [...new Set([...sim.webhooks.list().map((w) => w.secret), ...stored.map((r) => r.secret), TOKEN])];
}

async function expectNoSecretIn(runs: CliRun[]): Promise<void> {
  const text = runs.map((r) => [...r.lines, r.error?.message ?? ''].join('\n')).join('\n');
  for (const secret of await allSecrets()) expect(text).not.toContain(secret);
}

function writes(): string[] {
  return sim.requests.filter((r) => r.api === 'webhooks' && r.method !== 'GET').map((r) => `${r.method} ${r.url}`);
}

/** The receiver as `start` runs it: no static secret, endpoint secrets reloaded from webhook_endpoints. */
async function receiver() {
  const { logger } = createLogger({ level: 'silent' });
  const app = buildServer({ logger, readiness: [] });
  registerWebhookRoute(app, {
    path: '/webhooks',
    maxBodyBytes: 64 * 1024,
    secrets: () => [],
    pool: database.pool,
    logger,
    inbox: { maxWaitMs: 2 },
    secretsTtlMs: 60_000,
    secretsMissRefreshMs: 0,
    secretsLoadTimeoutMs: 2_000,
  });
  await app.ready();
  return app;
}

/** Posts a delivery of one created subscriber to `receiver()`'s route, signed with `secret`; its status. */
async function deliver(app: Awaited<ReturnType<typeof receiver>>, secret: string): Promise<number> {
  const body = fixture('subscriber.created', 'flat').body;
  const response = await app.inject({
    method: 'POST',
    url: '/webhooks',
    payload: body,
    headers: { 'content-type': 'application/json', signature: signBody(body, secret) },
  });
  return response.statusCode;
}

function byBatchable(rows: StoredEndpoint[]): { realtime: StoredEndpoint; batched: StoredEndpoint } {
  const realtime = rows.find((r) => !r.batchable);
  const batched = rows.find((r) => r.batchable);
  if (!realtime || !batched) throw new Error(`expected one realtime and one batched row, got ${rows.length}`);
  return { realtime, batched };
}

describe('webhooks API client', () => {
  it('list follows every page of the envelope (120 webhooks, 50 per page)', async () => {
    const created = Array.from({ length: 120 }, (_, i) =>
      sim.webhooks.register({ url: `https://elsewhere.test/${i}`, events: ['subscriber.created'], name: `other ${i}` }),
    );
    sim.clearRequests();
    const listed = await api().list();
    expect(listed).toHaveLength(120);
    expect(listed.map((w) => w.id)).toEqual(created.map((w) => w.id));
    expect(listed[119]).toMatchObject({ url: 'https://elsewhere.test/119', name: 'other 119', enabled: true, batchable: false });
    const pages = sim.requests.filter((r) => r.api === 'webhooks').map((r) => r.url);
    expect(pages).toEqual(['/api/webhooks', '/api/webhooks?page=2', '/api/webhooks?page=3']);
  });

  it('a wrong token: one clear line, without the token', async () => {
    const wrong = 'wrong-token-3a9b7c11';
    const error = await api(wrong)
      .list()
      .catch((e: unknown) => e as Error);
    expect(error).toBeInstanceOf(WebhookAuthError);
    expect((error as Error).message).toBe('webhook API rejected the token (401 Unauthenticated.)');
    expect((error as Error).message).not.toContain(wrong);
  });

  it('404 on get, update and delete of an unknown id', async () => {
    const client = api();
    await expect(client.get('999')).rejects.toThrow(WebhookNotFoundError);
    await expect(client.get('999')).rejects.toThrow('webhook 999 does not exist');
    await expect(client.update('999', { enabled: false })).rejects.toThrow('webhook 999 does not exist');
    await expect(client.delete('999')).rejects.toThrow('webhook 999 does not exist');
    expect(await client.find('999')).toBeNull();
  });

  it('422 is surfaced with its field errors (batchable false for campaign.open, bypassing local checks)', async () => {
    const { actions } = await registerWebhooks(api(), database.pool, { url: RECEIVER });
    const batched = actions.find((a) => a.webhook === 'batched');
    const before = await readEndpoints(database.pool);
    const error = await updateWebhook(api(), database.pool, batched?.id ?? '', { events: ['campaign.open'], batchable: false }).catch(
      (e: unknown) => e as Error,
    );
    expect(error).toBeInstanceOf(WebhookValidationError);
    expect((error as Error).message).toBe(
      'webhook API refused the request: batchable: The batchable field must be true when events contains campaign.open.',
    );
    expect(await readEndpoints(database.pool)).toEqual(before);
    const unknownKind = await api()
      .create({ url: RECEIVER, events: ['subscriber.teleported'] })
      .catch((e: unknown) => e as Error);
    expect((unknownKind as Error).message).toBe('webhook API refused the request: events.0: The selected events.0 is invalid.');
  });
});

describe('registerWebhooks', () => {
  it('creates a real-time and a batched webhook and stores them with their secrets', async () => {
    const { actions } = await registerWebhooks(api(), database.pool, { url: RECEIVER });
    expect(actions.map((a) => [a.webhook, a.action])).toEqual([
      ['realtime', 'created'],
      ['batched', 'created'],
    ]);
    const upstream = sim.webhooks.list();
    expect(upstream).toHaveLength(2);
    const realtime = upstream.find((w) => !w.batchable);
    const batched = upstream.find((w) => w.batchable);
    expect(realtime).toMatchObject({ url: RECEIVER, enabled: true, batchable: false, name: 'subscriber-mirror (real-time)' });
    expect(batched).toMatchObject({ url: RECEIVER, enabled: true, batchable: true, name: 'subscriber-mirror (batched)' });
    expect([...(realtime?.events ?? [])].sort()).toEqual([...REALTIME_KINDS].sort());
    expect([...(batched?.events ?? [])].sort()).toEqual([...BATCHED_KINDS].sort());

    const rows = byBatchable(await readEndpoints(database.pool));
    expect(rows.realtime).toMatchObject({
      id: realtime?.id,
      secret: realtime?.secret,
      url: RECEIVER,
      enabled: true,
      name: 'subscriber-mirror (real-time)',
    });
    expect(rows.batched).toMatchObject({ id: batched?.id, secret: batched?.secret, url: RECEIVER, enabled: true });
    expect([...rows.batched.events].sort()).toEqual([...BATCHED_KINDS].sort());
    expect(rows.realtime.secret.length).toBeGreaterThan(0);
  });

  it('a second run with the same URL changes nothing: no POST/PUT/DELETE, no row rewritten', async () => {
    const first = await registerWebhooks(api(), database.pool, { url: RECEIVER });
    const rowsBefore = await readEndpoints(database.pool);
    sim.clearRequests();
    const second = await registerWebhooks(api(), database.pool, { url: RECEIVER });
    expect(second.actions.map((a) => a.action)).toEqual(['unchanged', 'unchanged']);
    expect(second.actions.map((a) => a.id)).toEqual(first.actions.map((a) => a.id));
    expect(writes()).toEqual([]);
    expect(sim.requests.filter((r) => r.api === 'webhooks').length).toBe(2); // one GET per webhook
    expect(await readEndpoints(database.pool)).toEqual(rowsBefore);
    expect(sim.webhooks.list()).toHaveLength(2);
  });

  it('a changed URL updates both webhooks in place (one PUT each), keeping ids and secrets', async () => {
    const first = await registerWebhooks(api(), database.pool, { url: RECEIVER });
    const secretsBefore = byBatchable(await readEndpoints(database.pool));
    sim.clearRequests();
    const moved = 'https://mirror2.example.test/hooks';
    const second = await registerWebhooks(api(), database.pool, { url: moved });
    expect(second.actions.map((a) => [a.webhook, a.action, a.id])).toEqual(first.actions.map((a) => [a.webhook, 'updated', a.id]));
    expect(writes()).toEqual(first.actions.map((a) => `PUT /api/webhooks/${a.id}`));
    expect(sim.webhooks.list().map((w) => w.url)).toEqual([moved, moved]);
    const rows = byBatchable(await readEndpoints(database.pool));
    expect(rows.realtime).toMatchObject({ url: moved, secret: secretsBefore.realtime.secret });
    expect(rows.batched).toMatchObject({ url: moved, secret: secretsBefore.batched.secret });
  });

  it('a webhook changed elsewhere (disabled, events trimmed) is put back', async () => {
    const first = await registerWebhooks(api(), database.pool, { url: RECEIVER });
    const realtimeId = first.actions[0]?.id ?? '';
    sim.webhooks.update(realtimeId, { enabled: false, events: ['subscriber.created'] });
    const second = await registerWebhooks(api(), database.pool, { url: RECEIVER });
    expect(second.actions.map((a) => a.action)).toEqual(['updated', 'unchanged']);
    const hook = sim.webhooks.get(realtimeId);
    expect(hook?.enabled).toBe(true);
    expect([...(hook?.events ?? [])].sort()).toEqual([...REALTIME_KINDS].sort());
  });

  it('a new secret returned by an update is stored', async () => {
    await registerWebhooks(api(), database.pool, { url: RECEIVER });
    const registry = sim.webhooks;
    const original = registry.update.bind(registry);
    registry.update = (id, body) => {
      const result = original(id, body);
      if (result?.ok) result.webhook.secret = `rotated-${id}`;
      return result;
    };
    const { actions } = await registerWebhooks(api(), database.pool, { url: 'https://mirror3.example.test/webhooks' });
    const rows = await readEndpoints(database.pool);
    expect(rows.map((r) => r.secret).sort()).toEqual(actions.map((a) => `rotated-${a.id}`).sort());
  });

  it('a webhook deleted upstream is created again and its stale row forgotten', async () => {
    const first = await registerWebhooks(api(), database.pool, { url: RECEIVER });
    const [realtime, batched] = first.actions;
    expect(sim.webhooks.delete(batched?.id ?? '')).toBe(true);
    sim.clearRequests();
    const second = await registerWebhooks(api(), database.pool, { url: RECEIVER });
    expect(second.actions[0]).toMatchObject({ webhook: 'realtime', action: 'unchanged', id: realtime?.id });
    expect(second.actions[1]).toMatchObject({ webhook: 'batched', action: 'created', replaces: batched?.id });
    const recreated = second.actions[1]?.id ?? '';
    expect(recreated).not.toBe(batched?.id);
    // Created disabled, enabled once its secret is stored (no delivery can come before the secret).
    expect(writes()).toEqual(['POST /api/webhooks', `PUT /api/webhooks/${recreated}`]);
    const rows = await readEndpoints(database.pool);
    expect(rows.map((r) => r.id).sort()).toEqual([realtime?.id, recreated].sort());
    expect(rows.find((r) => r.id === recreated)?.secret).toBe(sim.webhooks.get(recreated)?.secret);
    expect(sim.webhooks.get(recreated)?.batchable).toBe(true);
  });

  it('a delivery the service sends the moment it enables a webhook verifies, before register stores the enabling', async () => {
    const app = await receiver();
    try {
      const base = api();
      const statuses: number[] = [];
      // The service delivers to a webhook as soon as it is enabled; register stores that afterwards.
      const deliverOnEnable: WebhooksApi = {
        ...base,
        update: async (id, body, options) => {
          const updated = await base.update(id, body, options);
          statuses.push(await deliver(app, sim.webhooks.get(id)?.secret ?? ''));
          return updated;
        },
      };
      const { actions } = await registerWebhooks(deliverOnEnable, database.pool, { url: RECEIVER });
      expect(actions.map((a) => a.action)).toEqual(['created', 'created']);
      expect(statuses).toEqual([200, 200]);
    } finally {
      await app.close();
    }
  });

  it('works on a pool of one connection (the lock holder runs every statement)', async () => {
    const single = openDatabase(database.url, { max: 1, connectionTimeoutMillis: 2000, account: DEFAULT_ACCOUNT });
    try {
      const { actions } = await registerWebhooks(api(), single.pool, { url: RECEIVER });
      expect(actions.map((a) => a.action)).toEqual(['created', 'created']);
      const again = await registerWebhooks(api(), single.pool, { url: 'https://moved.example.test/webhooks' });
      expect(again.actions.map((a) => a.action)).toEqual(['updated', 'updated']);
      expect(await readEndpoints(single.pool)).toHaveLength(2);
    } finally {
      await single.close();
    }
  });

  it('two registers at once never create four webhooks', async () => {
    const results = await Promise.allSettled([
      registerWebhooks(api(), database.pool, { url: RECEIVER }),
      registerWebhooks(api(), database.pool, { url: RECEIVER }),
    ]);
    for (const r of results) if (r.status === 'rejected') expect(String(r.reason)).toContain('another `webhooks register` is running');
    expect(sim.webhooks.list()).toHaveLength(2);
    expect(await readEndpoints(database.pool)).toHaveLength(2);
  });
});

describe('subscriber-mirror webhooks (runWebhooksCli)', () => {
  it('register, list, get, update, delete: expected lines, exit 0, no secret printed', async () => {
    const runs: CliRun[] = [];
    const run = async (argv: string[]): Promise<CliRun> => {
      const r = await cli(argv);
      runs.push(r);
      return r;
    };
    const other = sim.webhooks.register({ url: 'https://elsewhere.test/x', events: ['campaign.sent'], name: 'someone else' });

    const reg = await run(['register', '--url', RECEIVER]);
    expect(reg.error).toBeUndefined();
    expect(reg.code).toBe(0);
    const ids = (await readEndpoints(database.pool)).map((r) => r.id);
    const { realtime, batched } = byBatchable(await readEndpoints(database.pool));
    expect(reg.lines).toEqual([
      `created real-time webhook ${realtime.id} for ${REALTIME_KINDS.join(', ')} → ${RECEIVER}`,
      `created batched webhook ${batched.id} for subscriber.deleted, campaign.click, campaign.open → ${RECEIVER}`,
      'next: run `subscriber-mirror backfill --all` to catch up on changes made before the webhooks existed',
    ]);
    const again = await run(['register', '--url', RECEIVER]);
    expect(again.lines).toEqual([
      `unchanged real-time webhook ${realtime.id} for ${REALTIME_KINDS.join(', ')} → ${RECEIVER}`,
      `unchanged batched webhook ${batched.id} for subscriber.deleted, campaign.click, campaign.open → ${RECEIVER}`,
    ]);

    const list = await run(['list']);
    expect(list.code).toBe(0);
    expect(list.lines[0]).toMatch(/^ID\s+NAME\s+URL\s+EVENTS\s+ENABLED\s+BATCHABLE\s+MANAGED$/);
    const rowOf = (id: string) => list.lines.find((l) => l.startsWith(`${id} `)) ?? '';
    expect(rowOf(other.id)).toMatch(/someone else\s+https:\/\/elsewhere\.test\/x\s+campaign\.sent\s+yes\s+no\s+no$/);
    expect(rowOf(realtime.id)).toMatch(/subscriber-mirror \(real-time\)\s+\S+\s+11 kinds\s+yes\s+no\s+yes$/);
    expect(rowOf(batched.id)).toMatch(
      /subscriber-mirror \(batched\)\s+\S+\s+subscriber\.deleted, campaign\.click, campaign\.open\s+yes\s+yes\s+yes$/,
    );
    expect(list.lines.at(-1)).toBe('3 webhook(s), 2 managed by this install');

    const json = await run(['list', '--json']);
    const parsed = JSON.parse(json.lines.join('\n')) as { webhooks: Array<Record<string, unknown>>; missingUpstream: string[] };
    expect(parsed.webhooks.map((w) => [w.id, w.managed])).toEqual([
      [other.id, false],
      [realtime.id, true],
      [batched.id, true],
    ]);
    expect(parsed.webhooks.every((w) => !('secret' in w))).toBe(true);

    const get = await run(['get', batched.id]);
    expect(get.lines).toContain(`id:        ${batched.id}`);
    expect(get.lines).toContain('batchable: yes');
    expect(get.lines).toContain('secret:    stored');
    expect(get.lines).toContain('managed:   yes (in webhook_endpoints)');
    const getOther = await run(['get', other.id, '--json']);
    expect(JSON.parse(getOther.lines.join('\n'))).toMatchObject({ id: other.id, managed: false, secretStored: false });
    expect(JSON.parse(getOther.lines.join('\n'))).not.toHaveProperty('secret');

    const upd = await run(['update', realtime.id, '--disable', '--name', 'paused']);
    expect(upd.code).toBe(0);
    expect(upd.lines).toHaveLength(1);
    expect(upd.lines[0]).toMatch(
      new RegExp(
        `^updated webhook ${realtime.id}: name "paused", url ${RECEIVER}, events .*enabled no, batchable no; stored in webhook_endpoints$`,
      ),
    );
    const afterUpdate = (await readEndpoints(database.pool)).find((r) => r.id === realtime.id);
    expect(afterUpdate).toMatchObject({ enabled: false, name: 'paused' });

    const del = await run(['delete', batched.id]);
    expect(del.lines).toEqual([`deleted webhook ${batched.id} and removed it from webhook_endpoints`]);
    expect(sim.webhooks.get(batched.id)).toBeUndefined();
    expect((await readEndpoints(database.pool)).map((r) => r.id)).toEqual(ids.filter((id) => id !== batched.id));

    for (const r of runs) expect([r.code, r.error?.message]).toEqual([0, undefined]);
    // Secrets of the deleted webhook too: they were printable while it existed.
    const text = runs.map((r) => r.lines.join('\n')).join('\n');
    expect(text).not.toContain(batched.secret);
    await expectNoSecretIn(runs);
  });

  it('errors: wrong token, unknown id, gone-upstream id, usage; one line each, no secret', async () => {
    await cli(['register', '--url', RECEIVER]);
    const { batched } = byBatchable(await readEndpoints(database.pool));
    const runs: CliRun[] = [];

    const wrong = 'wrong-token-77e0b1d5';
    const unauthorized = await cli(['list'], wrong);
    runs.push(unauthorized);
    expect(unauthorized.code).toBe(1);
    expect(unauthorized.error?.message).toBe('webhook API rejected the token (401 Unauthenticated.); check MAILER_WEBHOOKS_TOKEN');
    expect(unauthorized.error?.message).not.toContain(wrong);

    const missing = await cli(['get', '999']);
    const missingDelete = await cli(['delete', '999']);
    runs.push(missing, missingDelete);
    expect([missing.code, missing.error?.message]).toEqual([1, 'webhook 999 does not exist']);
    expect([missingDelete.code, missingDelete.error?.message]).toEqual([1, 'webhook 999 does not exist']);

    sim.webhooks.delete(batched.id);
    const gone = await cli(['get', batched.id]);
    runs.push(gone);
    expect(gone.code).toBe(1);
    expect(gone.error?.message).toBe(
      `webhook ${batched.id} does not exist upstream, but it is still in webhook_endpoints: \`webhooks register\` recreates it, \`webhooks delete ${batched.id}\` forgets it`,
    );
    const listGone = await cli(['list']);
    runs.push(listGone);
    expect(listGone.lines.at(-1)).toContain(`note: webhook ${batched.id} is in webhook_endpoints but no longer exists upstream`);
    const forget = await cli(['delete', batched.id]);
    runs.push(forget);
    expect([forget.code, forget.lines]).toEqual([
      0,
      [`webhook ${batched.id} was already gone upstream; removed it from webhook_endpoints`],
    ]);
    expect((await readEndpoints(database.pool)).map((r) => r.id)).not.toContain(batched.id);

    sim.clearRequests();
    const rule = await cli(['update', '1', '--events', 'campaign.open', '--batchable', 'false']);
    const unknownKind = await cli(['update', '1', '--events', 'subscriber.vanished']);
    const noSub = await cli([]);
    const badSub = await cli(['frobnicate']);
    runs.push(rule, unknownKind, noSub, badSub);
    for (const r of [rule, unknownKind, noSub, badSub]) {
      expect(r.code).toBe(2);
      expect(r.error?.message).toContain('usage: subscriber-mirror webhooks');
    }
    expect(unknownKind.error?.message).toContain('unknown event kind "subscriber.vanished"');
    expect(badSub.error?.message).toContain('unknown webhooks subcommand "frobnicate"');
    expect(sim.requests).toEqual([]); // refused before any request

    const help = await cli(['help']);
    expect(help.code).toBe(0);
    expect(help.lines.join('\n')).toContain('register --url URL');

    await expectNoSecretIn(runs);
  });
});

describe('webhooks adopt', () => {
  /** A webhook made in the service's dashboard: the service generates its 10-character secret. */
  function dashboardWebhook() {
    return sim.webhooks.register({
      name: 'dashboard',
      url: RECEIVER,
      events: ['subscriber.created', 'subscriber.updated'],
      batchable: false,
    });
  }

  it('stores the webhook with its secret, so a delivery signed with it is accepted; nothing sent upstream', async () => {
    const hook = dashboardWebhook();
    expect(hook.secret).toHaveLength(10);
    const app = await receiver();
    try {
      const post = () => deliver(app, hook.secret);
      expect(await post()).toBe(401); // not ours yet

      sim.clearRequests();
      const run = await cli(['adopt', hook.id]);
      expect(run.error).toBeUndefined();
      expect(run.code).toBe(0);
      expect(run.lines).toEqual([
        `adopted webhook ${hook.id} "dashboard" (subscriber.created, subscriber.updated → ${RECEIVER}, enabled yes): ` +
          'secret stored in webhook_endpoints, the receiver verifies its deliveries',
      ]);
      expect(writes()).toEqual([]);
      const rows = await readEndpoints(database.pool);
      expect(rows).toMatchObject([
        { id: hook.id, name: 'dashboard', url: RECEIVER, events: ['subscriber.created', 'subscriber.updated'], secret: hook.secret },
      ]);

      expect(await post()).toBe(200);
      const { rows: stored } = await database.pool.query<{ endpoint_id: string | null }>('select endpoint_id from webhook_deliveries');
      expect(stored).toEqual([{ endpoint_id: hook.id }]);

      const listed = await cli(['list']);
      expect(listed.lines.find((l) => l.startsWith(hook.id))).toMatch(/adopted$/); // MANAGED
      await expectNoSecretIn([run, listed]);
    } finally {
      await app.close();
    }
  });

  it('adopting twice changes nothing: same row, updated_at kept, one line saying so', async () => {
    const hook = dashboardWebhook();
    const first = await cli(['adopt', hook.id]);
    expect(first.code).toBe(0);
    const before = await readEndpoints(database.pool);
    sim.clearRequests();
    const second = await cli(['adopt', hook.id]);
    expect(second.code).toBe(0);
    expect(second.lines).toEqual([
      `webhook ${hook.id} "dashboard" (subscriber.created, subscriber.updated → ${RECEIVER}, enabled yes) is already adopted; nothing changed`,
    ]);
    expect(await readEndpoints(database.pool)).toEqual(before);
    expect(writes()).toEqual([]);
    expect((await adoptWebhook(api(), database.pool, hook.id)).outcome).toBe('unchanged');
    await expectNoSecretIn([first, second]);
  });

  it('a webhook changed upstream since it was adopted is refreshed (new URL stored, same secret)', async () => {
    const hook = dashboardWebhook();
    await adoptWebhook(api(), database.pool, hook.id);
    sim.webhooks.update(hook.id, { url: 'https://moved.example.test/webhooks' });
    const again = await cli(['adopt', hook.id]);
    expect(again.lines[0]).toContain('was already adopted; refreshed its row and secret in webhook_endpoints');
    expect(await readEndpoints(database.pool)).toMatchObject([
      { id: hook.id, url: 'https://moved.example.test/webhooks', secret: hook.secret },
    ]);
    await expectNoSecretIn([again]);
  });

  it('an unknown id is one line, exit 1; a bad or missing id is usage, exit 2; nothing stored', async () => {
    dashboardWebhook();
    const unknown = await cli(['adopt', '999']);
    expect([unknown.code, unknown.error?.message, unknown.lines]).toEqual([1, 'webhook 999 does not exist', []]);
    sim.clearRequests();
    const bad = await cli(['adopt', '../1']);
    const none = await cli(['adopt']);
    const extra = await cli(['adopt', '1', '2']);
    for (const r of [bad, none, extra]) {
      expect(r.code).toBe(2);
      expect(r.error?.message).toContain('usage: subscriber-mirror webhooks');
      expect(r.error?.message).toContain('adopt ID');
    }
    expect(bad.error?.message.split('\n')[0]).toBe('webhooks adopt: "../1" is not a webhook id (digits, as `webhooks list` shows them)');
    expect(sim.requests).toEqual([]); // refused before any request
    expect(await readEndpoints(database.pool)).toEqual([]);
    await expectNoSecretIn([unknown, bad, none, extra]);
  });

  /** A batchable one made in the dashboard too: register's batched role would have claimed it. */
  function dashboardBatchedWebhook() {
    return sim.webhooks.register({ name: 'dashboard opens', url: RECEIVER, events: ['campaign.open'], batchable: true });
  }

  it('register leaves adopted webhooks alone (no write to them, rows unchanged) and creates its own two', async () => {
    const hook = dashboardWebhook();
    const opens = dashboardBatchedWebhook();
    await adoptWebhook(api(), database.pool, hook.id);
    await adoptWebhook(api(), database.pool, opens.id);
    const adoptedRows = await readEndpoints(database.pool);
    const upstreamBefore = [sim.webhooks.get(hook.id), sim.webhooks.get(opens.id)].map((w) => ({ ...w }));
    sim.clearRequests();

    const { actions } = await registerWebhooks(api(), database.pool, { url: RECEIVER });
    expect(actions.map((a) => [a.webhook, a.action])).toEqual([
      ['realtime', 'created'],
      ['batched', 'created'],
    ]);
    const ownIds = actions.map((a) => a.id);
    expect(ownIds).not.toContain(hook.id);
    expect(ownIds).not.toContain(opens.id);
    expect(writes()).toEqual(ownIds.flatMap((id) => ['POST /api/webhooks', `PUT /api/webhooks/${id}`]));
    expect([sim.webhooks.get(hook.id), sim.webhooks.get(opens.id)]).toEqual(upstreamBefore);
    const rows = await readEndpoints(database.pool);
    expect(rows.filter((r) => [hook.id, opens.id].includes(r.id))).toEqual(adoptedRows);
    expect(rows.map((r) => [r.id, r.adopted])).toEqual([[hook.id, true], [opens.id, true], ...ownIds.map((id) => [id, false])]);

    // Its own rows are still recognised: a second run sends no write.
    sim.clearRequests();
    const again = await registerWebhooks(api(), database.pool, { url: RECEIVER });
    expect(again.actions.map((a) => [a.action, a.id])).toEqual(ownIds.map((id) => ['unchanged', id]));
    expect(writes()).toEqual([]);
    expect(await readEndpoints(database.pool)).toEqual(rows);
  });

  it('an adopted webhook deleted upstream keeps its row through register (only `delete` forgets it)', async () => {
    const hook = dashboardWebhook();
    await adoptWebhook(api(), database.pool, hook.id);
    const [adoptedRow] = await readEndpoints(database.pool);
    sim.webhooks.delete(hook.id);
    const { actions } = await registerWebhooks(api(), database.pool, { url: RECEIVER });
    expect(actions.map((a) => a.action)).toEqual(['created', 'created']);
    expect(actions.every((a) => a.replaces === undefined)).toBe(true);
    expect((await readEndpoints(database.pool)).filter((r) => r.adopted)).toEqual([adoptedRow]);
    const listed = await cli(['list']);
    expect(listed.lines.at(-1)).toBe(
      `note: webhook ${hook.id} is in webhook_endpoints but no longer exists upstream; ` +
        `it was adopted, so \`webhooks register\` leaves it alone; \`webhooks delete ${hook.id}\` forgets it`,
    );
    const forget = await cli(['delete', hook.id]);
    expect([forget.code, forget.lines]).toEqual([0, [`webhook ${hook.id} was already gone upstream; removed it from webhook_endpoints`]]);
    expect((await readEndpoints(database.pool)).filter((r) => r.adopted)).toEqual([]);
  });

  it('adopting one of register’s own webhooks is refused, exit 2, before any request; nothing changes', async () => {
    const { actions } = await registerWebhooks(api(), database.pool, { url: RECEIVER });
    const realtimeId = actions[0]?.id ?? '';
    const before = await readEndpoints(database.pool);
    sim.clearRequests();
    const run = await cli(['adopt', realtimeId]);
    expect(run.code).toBe(2);
    expect(run.lines).toEqual([]);
    expect(run.error?.message).toBe(
      `webhook ${realtimeId} is already managed by \`webhooks register\` (it is one of its own rows in webhook_endpoints, ` +
        'its secret already stored); `webhooks adopt` is for webhooks created elsewhere. Nothing changed',
    );
    await expect(adoptWebhook(api(), database.pool, realtimeId)).rejects.toBeInstanceOf(AlreadyRegisteredError);
    expect(sim.requests).toEqual([]);
    expect(await readEndpoints(database.pool)).toEqual(before);
    // Still register's: the next register finds it and changes nothing.
    const again = await registerWebhooks(api(), database.pool, { url: RECEIVER });
    expect(again.actions.map((a) => [a.action, a.id])).toEqual(actions.map((a) => ['unchanged', a.id]));
    await expectNoSecretIn([run]);
  });

  it('an adopting store never rewrites a row of register’s (the guard behind adopt’s check)', async () => {
    const { actions } = await registerWebhooks(api(), database.pool, { url: RECEIVER });
    const id = actions[0]?.id ?? '';
    const before = await readEndpoints(database.pool);
    const changed = { ...(await api().get(id)), url: 'https://elsewhere.test/x', secret: 'other-secret' };
    expect(await storeEndpoint(database.pool, changed, changed.secret, { adopted: true })).toBe('unchanged');
    expect(await readEndpoints(database.pool)).toEqual(before);
  });

  it('list and get mark adopted webhooks; delete works for both kinds', async () => {
    const other = sim.webhooks.register({ url: 'https://elsewhere.test/x', events: ['campaign.sent'], name: 'someone else' });
    const { actions } = await registerWebhooks(api(), database.pool, { url: RECEIVER });
    const [realtimeId, batchedId] = actions.map((a) => a.id);
    const hook = dashboardWebhook();
    const adopt = await cli(['adopt', hook.id]);
    expect(adopt.code).toBe(0);

    const list = await cli(['list']);
    const rowOf = (id: string | undefined) => list.lines.find((l) => l.startsWith(`${id ?? '?'} `)) ?? '';
    expect(rowOf(hook.id)).toMatch(/^\S+\s+dashboard\s+.*\s+yes\s+no\s+adopted$/);
    expect(rowOf(realtimeId)).toMatch(/\s+yes$/);
    expect(rowOf(batchedId)).toMatch(/\s+yes$/);
    expect(rowOf(other.id)).toMatch(/\s+no$/);
    expect(list.lines.at(-1)).toBe('4 webhook(s), 3 managed by this install (1 adopted)');

    const json = await cli(['list', '--json']);
    const parsed = JSON.parse(json.lines.join('\n')) as { webhooks: Array<Record<string, unknown>> };
    expect(parsed.webhooks.map((w) => [w.id, w.managed, w.adopted])).toEqual([
      [other.id, false, false],
      [realtimeId, true, false],
      [batchedId, true, false],
      [hook.id, true, true],
    ]);

    const get = await cli(['get', hook.id]);
    expect(get.lines).toContain('managed:   adopted (in webhook_endpoints; register leaves it alone)');
    const getOwn = await cli(['get', realtimeId ?? '', '--json']);
    expect(JSON.parse(getOwn.lines.join('\n'))).toMatchObject({ managed: true, adopted: false, secretStored: true });
    const getAdopted = await cli(['get', hook.id, '--json']);
    expect(JSON.parse(getAdopted.lines.join('\n'))).toMatchObject({ managed: true, adopted: true, secretStored: true });

    const delAdopted = await cli(['delete', hook.id]);
    const delOwn = await cli(['delete', batchedId ?? '']);
    expect(delAdopted.lines).toEqual([`deleted webhook ${hook.id} and removed it from webhook_endpoints`]);
    expect(delOwn.lines).toEqual([`deleted webhook ${batchedId ?? ''} and removed it from webhook_endpoints`]);
    expect((await readEndpoints(database.pool)).map((r) => r.id)).toEqual([realtimeId]);
    await expectNoSecretIn([adopt, list, json, get, getOwn, getAdopted, delAdopted, delOwn]);
  });
});

describe('two accounts in one database', () => {
  const OTHER = 'other';
  let other: Database;

  beforeAll(async () => {
    await database.pool.query('insert into accounts (name) values ($1) on conflict do nothing', [OTHER]);
    other = openDatabase(database.url, { account: OTHER, max: 2 });
  });

  afterAll(async () => {
    await other?.close();
  });

  const hook = (url: string) => ({
    id: '77',
    name: 'hook',
    url,
    events: ['subscriber.created'],
    enabled: true,
    batchable: false,
    secret: undefined,
    created_at: null,
    updated_at: null,
  });

  it('the same webhook id in both: each account reads, verifies with and forgets only its own row', async () => {
    await storeEndpoint(database.pool, hook('https://a.example.test/webhooks'), 'secret-of-default-0001');
    await storeEndpoint(other.pool, hook('https://b.example.test/webhooks'), 'secret-of-other-0001');
    const view = async (pool: Database['pool']) => (await readEndpoints(pool)).map((r) => [r.account, r.id, r.url]);
    expect(await view(database.pool)).toEqual([[DEFAULT_ACCOUNT, '77', 'https://a.example.test/webhooks']]);
    expect(await view(other.pool)).toEqual([[OTHER, '77', 'https://b.example.test/webhooks']]);
    expect(await loadSecrets(database.pool)).toEqual([{ endpointId: '77', secret: 'secret-of-default-0001' }]);
    expect(await loadSecrets(other.pool)).toEqual([{ endpointId: '77', secret: 'secret-of-other-0001' }]);
    expect(await removeEndpoint(other.pool, '77')).toBe(true);
    expect(await removeEndpoint(other.pool, '77')).toBe(false);
    expect(await view(database.pool)).toEqual([[DEFAULT_ACCOUNT, '77', 'https://a.example.test/webhooks']]);
  });

  it('register claims nothing of another account, and one running for an account does not hold back another', async () => {
    const mine = await registerWebhooks(api(), database.pool, { url: RECEIVER });
    const holder = await database.pool.connect();
    try {
      await holder.query('select pg_advisory_lock($1::int, hashtext($2))', [REGISTER_LOCK_KEY, DEFAULT_ACCOUNT]);
      await expect(registerWebhooks(api(), database.pool, { url: RECEIVER })).rejects.toThrow('another `webhooks register` is running');
      // The simulator stands in for the other account's service: its register finds no row of its own.
      const theirs = await registerWebhooks(api(), other.pool, { url: RECEIVER });
      expect(theirs.actions.map((a) => a.action)).toEqual(['created', 'created']);
      expect((await readEndpoints(other.pool)).map((r) => r.id).sort()).toEqual(theirs.actions.map((a) => a.id).sort());
    } finally {
      await holder.query('select pg_advisory_unlock($1::int, hashtext($2))', [REGISTER_LOCK_KEY, DEFAULT_ACCOUNT]);
      holder.release();
    }
    expect((await readEndpoints(database.pool)).map((r) => r.id).sort()).toEqual(mine.actions.map((a) => a.id).sort());
  });
});

describe('service strings on the terminal', () => {
  it('list and get show control characters in a webhook name and URL as escapes, never raw', async () => {
    const evil = sim.webhooks.register({
      url: 'https://elsewhere.test/\u001b[2Jx',
      events: ['campaign.sent'],
      name: 'title\u001b]0;owned\u0007 \u009b31m red\r',
    });
    const list = await cli(['list']);
    const get = await cli(['get', evil.id]);
    const json = await cli(['list', '--json']);
    for (const run of [list, get, json]) {
      expect(run.code).toBe(0);
      expect(run.lines.join('\n')).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/);
    }
    expect(list.lines.join('\n')).toContain('title\\u001b]0;owned\\u0007 \\u009b31m red\\u000d');
    expect(get.lines.join('\n')).toContain('https://elsewhere.test/\\u001b[2Jx');
    // JSON stays JSON: the escapes are JSON's own.
    const parsed = JSON.parse(json.lines.join('\n')) as { webhooks: Array<{ id: string; name: string }> };
    expect(parsed.webhooks.find((w) => w.id === evil.id)?.name).toBe('title\u001b]0;owned\u0007 \u009b31m red\r');
  });
});

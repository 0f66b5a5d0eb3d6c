/**
 * Two accounts, one database, one receiver (docs/operations.md, "Several accounts"), each account a
 * simulator of its own with its own management token: `webhooks register --account NAME` registers
 * that account's path with that account's token and stores its webhooks under it; each simulator's
 * deliveries then arrive at its account's path and are stored under that account. Without
 * `--account`, or with an undeclared one, a command exits 2 before asking anything of either service
 * or writing anything.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { startService, type RunningService } from '../../src/commands/start.js';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { signBody } from '../../src/webhooks/signature.js';
import { runCli } from '../helpers/cli.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

let database: TestDatabase;
let simA: Simulator;
let simB: Simulator;
let service: RunningService;
let env: Record<string, string>;
/** The receiver's URL as an operator gives it to `webhooks register --url`. */
let base: string;

beforeAll(async () => {
  database = await createTestDatabase();
  await database.pool.query(`insert into accounts (name) values ('a'), ('b')`);
  simA = await startSimulator({
    subscribers: 20,
    groups: 1,
    timeScale: 0.001,
    rateLimit: false,
    webhooksToken: 'token-of-account-a-1d7e',
    seed: 1,
  });
  simB = await startSimulator({
    subscribers: 20,
    groups: 1,
    timeScale: 0.001,
    rateLimit: false,
    webhooksToken: 'token-of-account-b-93c0',
    seed: 2,
  });
  env = {
    DATABASE_URL: database.url,
    ACCOUNTS: 'a,b',
    ACCOUNT_A__MAILER_WEBHOOKS_URL: simA.url,
    ACCOUNT_A__MAILER_WEBHOOKS_TOKEN: simA.webhooksToken,
    ACCOUNT_B__MAILER_WEBHOOKS_URL: simB.url,
    ACCOUNT_B__MAILER_WEBHOOKS_TOKEN: simB.webhooksToken,
    PORT: '0',
    LOG_LEVEL: 'silent',
  };
  service = await startService(loadConfig(env, ['receive']), 'receiver');
  base = `http://127.0.0.1:${service.port}/webhooks`;
}, 60_000);

afterAll(async () => {
  await service?.stop('test over');
  await simA?.close();
  await simB?.close();
  await database?.drop();
});

const managementCalls = (sim: Simulator) =>
  sim.requests.filter((r) => r.api === 'webhooks').map((r) => `${r.method} ${r.url} → ${r.status}`);

async function endpoints(): Promise<Array<{ account: string; url: string }>> {
  const { rows } = await database.pool.query<{ account: string; url: string }>(
    'select account, url from webhook_endpoints order by account, id',
  );
  return rows;
}

describe('webhooks --account with two accounts declared', () => {
  it('no --account, or an undeclared one: exit 2 naming the accounts, nothing asked of either service, nothing stored', async () => {
    const runs = [
      { args: ['webhooks', 'register', '--url', base], message: /several accounts are declared \(a, b\): name one with --account/ },
      { args: ['webhooks', 'list'], message: /several accounts are declared \(a, b\): name one with --account/ },
      { args: ['webhooks', 'register', '--account', 'c', '--url', base], message: /no account "c" is declared \(ACCOUNTS: a, b\)/ },
      { args: ['webhooks', 'delete', '1', '--account=c'], message: /no account "c" is declared/ },
      { args: ['webhooks', 'replay'], message: /several accounts are declared \(a, b\)/ },
      { args: ['webhooks', 'replay', '--account', 'c'], message: /no account "c" is declared/ },
    ];
    for (const { args, message } of runs) {
      const run = await runCli(args, env);
      expect(run.code, `${args.join(' ')}: ${run.stderr}`).toBe(2);
      expect(run.stderr, args.join(' ')).toMatch(message);
    }
    expect(managementCalls(simA), "requests to account a's service").toEqual([]);
    expect(managementCalls(simB), "requests to account b's service").toEqual([]);
    expect(await endpoints(), 'webhook_endpoints').toEqual([]);
  }, 120_000);

  it("register --account b registers b's path with b's token and stores the webhooks under b", async () => {
    const run = await runCli(['webhooks', 'register', '--account', 'b', '--url', base], env);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(new RegExp(`created real-time webhook .* → ${base}/b`));
    expect(run.stdout).toMatch(/backfill --all --account b/);
    expect(simB.webhooks.list().map((w) => w.url)).toEqual([`${base}/b`, `${base}/b`]);
    expect(
      managementCalls(simB).every((call) => !call.endsWith('→ 401')),
      "b's service accepted the token it was sent",
    ).toBe(true);
    expect(simA.webhooks.list(), "account a's service").toEqual([]);
    expect(managementCalls(simA), "requests to account a's service").toEqual([]);
    expect(await endpoints()).toEqual([
      { account: 'b', url: `${base}/b` },
      { account: 'b', url: `${base}/b` },
    ]);
  }, 60_000);

  it('register --account a, the first declared, registers its own path too: only account default has WEBHOOK_PATH itself', async () => {
    const run = await runCli(['webhooks', 'register', '--account', 'a', '--url', base], env);
    expect(run.code, run.stderr).toBe(0);
    expect(simA.webhooks.list().map((w) => w.url)).toEqual([`${base}/a`, `${base}/a`]);
    expect((await endpoints()).map((e) => `${e.account} ${e.url}`)).toEqual([`a ${base}/a`, `a ${base}/a`, `b ${base}/b`, `b ${base}/b`]);
    const listed = await runCli(['webhooks', 'list', '--account', 'b', '--json'], env);
    expect(listed.code, listed.stderr).toBe(0);
    const json = JSON.parse(listed.stdout) as { webhooks: Array<{ url: string; managed: boolean }> };
    expect(json.webhooks.map((w) => `${w.url} ${w.managed}`)).toEqual([`${base}/b true`, `${base}/b true`]);
  }, 60_000);

  it("each service's deliveries arrive at its account's path and are stored under that account", async () => {
    for (const [name, sim] of [
      ['a', simA],
      ['b', simB],
    ] as const) {
      const group = sim.world.groupIds()[0]!;
      sim.world.updateFields(sim.world.members(group)[0]!, { city: `City of ${name}` });
      sim.world.deleteSubscriber(sim.world.members(group)[1]!);
    }
    await Promise.all([simA.deliveries.settle(15_000), simB.deliveries.settle(15_000)]);
    for (const [name, sim] of [
      ['a', simA],
      ['b', simB],
    ] as const) {
      const refused = sim.deliveries.attempts.filter((a) => a.status !== 200).map((a) => `${a.url}: ${a.status} ${a.error ?? ''}`);
      expect(refused, `deliveries of account ${name}'s service not answered 200`).toEqual([]);
      const { rows } = await database.pool.query<{ account: string; n: number }>(
        `select account, count(*)::int as n from webhook_deliveries where body::text like $1 group by account`,
        [`%City of ${name}%`],
      );
      expect(
        rows.map((r) => r.account),
        `the accounts holding the delivery of account ${name}'s change`,
      ).toEqual([name]);
    }
    const { rows: kinds } = await database.pool.query<{ account: string; batched: boolean }>(
      `select distinct d.account, e.batchable as batched from webhook_deliveries d
         join webhook_endpoints e on e.account = d.account and e.id = d.endpoint_id order by 1, 2`,
    );
    expect(kinds, "each account's deliveries verified by its own two webhooks' secrets").toEqual([
      { account: 'a', batched: false },
      { account: 'a', batched: true },
      { account: 'b', batched: false },
      { account: 'b', batched: true },
    ]);
  }, 60_000);

  it("then a delivery signed with a's stored secret and posted to b's path is refused 401 and not stored", async () => {
    const { rows } = await database.pool.query<{ secret: string }>(`select secret from webhook_endpoints where account = 'a' limit 1`);
    const secretOfA = rows[0]!.secret;
    const text = JSON.stringify({
      event: 'subscriber.updated',
      id: '424242',
      email: 'probe@example.com',
      updated_at: '2024-06-11T09:15:42Z',
    });
    const count = async () =>
      (await database.pool.query<{ n: number }>(`select count(*)::int as n from webhook_deliveries where body->>'id' = '424242'`)).rows[0]!
        .n;
    const send = (path: string) =>
      fetch(`${base}${path}`, {
        method: 'POST',
        body: text,
        headers: { 'content-type': 'application/json', signature: signBody(text, secretOfA) },
      });
    expect((await send('/b')).status, "a-signed delivery at b's path").toBe(401);
    expect((await send('/zzz')).status, "a-signed delivery at an undeclared account's path").toBe(404);
    expect(await count(), "a's delivery refused at b's path is not stored").toBe(0);
    expect((await send('')).status, 'the same delivery at the bare path: account default is not declared').toBe(404);
    expect((await send('/a')).status, "the same delivery at a's path").toBe(200);
    const { rows: stored } = await database.pool.query<{ account: string }>(
      `select account from webhook_deliveries where body->>'id' = '424242'`,
    );
    expect(stored).toEqual([{ account: 'a' }]);
  });
});

/**
 * Fault 5 (invariant 9): a generated corpus of bad input against a running `start --role all` (so a
 * wrongly accepted delivery would really be applied by its consumer) and against the CLI and its
 * configuration. Every case gets its expected status or exit code and a clear message; the mirrored
 * tables are byte-for-byte unchanged afterwards (row counts and an md5 of every row); the service is
 * still alive and answers /healthz.
 */
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { listSyncStates } from '../../src/sync/state.js';
import { signBody } from '../../src/webhooks/signature.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { deleteInstallKeys, deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { buildCliCorpus, type CliCase } from './helpers/cli-corpus.js';
import { secretScanFigures } from './helpers/collector.js';
import { snapshotMirroredTables } from './helpers/compare.js';
import { sendCase, type Answer } from './helpers/http-send.js';
import { buildReceiverCorpus, deeplyNested, invalidUtf8Cases, realisticBodies, type ReceiverCase } from './helpers/receiver-corpus.js';
import { useSecondAccount } from './helpers/second-account.js';
import { makeSecrets, withCredentials } from './helpers/secrets.js';
import {
  assertRunning,
  killAll,
  printSummary,
  runCollected,
  servicePort,
  startService,
  stopGracefully,
  waitFor,
  type ServiceProcess,
} from './helpers/service.js';

const MAX_BODY = 65_536;
const PATH = '/webhooks';

const sha256 = (body: Buffer) => createHash('sha256').update(body).digest('hex');

/** What a 4xx/2xx answer must say: the receiver's own `{error}` / `{status, id}`, Fastify's 404 `{error, message}`. */
function clearMessage(answer: Answer): boolean {
  try {
    const body = JSON.parse(answer.body) as { error?: unknown; status?: unknown; id?: unknown };
    if (answer.status === 200) return typeof body.status === 'string' && typeof body.id === 'string';
    return typeof body.error === 'string' && body.error.length > 0;
  } catch {
    return false;
  }
}

describe('fault 5: bad input', () => {
  const secrets = makeSecrets('bad-input');
  const second = useSecondAccount('bad-input', { largeIds: false });
  const prefix = uniquePrefix('fault-bad');
  const cliPrefix = uniquePrefix('fault-bad-cli');
  let database: TestDatabase;
  let sim: Simulator;
  let service: ServiceProcess;
  let port: number;
  let env: Record<string, string>;
  const figures: Record<string, number | string> = {};

  beforeAll(async () => {
    database = await createTestDatabase();
    sim = await startSimulator({
      subscribers: 500,
      groups: 1,
      largeIds: true,
      rateLimit: false,
      seed: 75,
      apiKey: secrets.apiKey,
      webhooksToken: secrets.webhooksToken,
    });
    const groupId = sim.world.groupIds()[0] as string;
    env = {
      DATABASE_URL: withCredentials(database.url, 'postgres', secrets.dbPassword),
      REDIS_URL: withCredentials(redisUrl(), 'default', secrets.redisPassword),
      REDIS_PREFIX: prefix,
      MAILER_LEGACY_URL: sim.url,
      MAILER_API_KEY: secrets.apiKey,
      MAILER_WEBHOOKS_URL: sim.url,
      MAILER_WEBHOOKS_TOKEN: secrets.webhooksToken,
      SYNC_GROUPS: groupId,
      SYNC_EVERY: '1h',
      RECONCILE_EVERY: '24h',
      API_RATE_LIMIT: '100000',
      WEBHOOK_SECRETS: secrets.staticWebhookSecret,
      WEBHOOK_MAX_BODY: String(MAX_BODY),
      WEBHOOK_PATH: PATH,
      ADMIN_TOKEN: secrets.adminToken,
      // Admin is served on the ops listener only.
      OPS_PORT: '0',
      PORT: '0',
      LOG_LEVEL: 'trace',
      // Hundreds of rejected cases from one address, back to back: each must get its own answer, not
      // the 429 of the per-client request rate (client-limits.test.ts proves that one).
      HTTP_REQUEST_RATE_PER_CLIENT: '0',
    };
    service = startService('all', env, 'bad-input');
    port = await servicePort(service);
    // The mirror holds real rows before the corpus: every type of the group mirrored by a full pass.
    await waitFor(
      'the first passes',
      async () => {
        const states = await listSyncStates(database.pool);
        return states.length === 5 && states.every((s) => s.lastStatus === 'succeeded');
      },
      60_000,
      100,
    );
    // The snapshots below cover every account's rows: the second account's first passes must be over too.
    await second.expectMirrored(database.url, [sim.world]);
  });

  afterAll(async () => {
    killAll();
    await sim?.close();
    await database?.drop();
    await deleteInstallKeys(prefix);
    await deletePrefix(cliPrefix);
  });

  const deliveryStatuses = async (): Promise<Map<string, string>> => {
    const { rows } = await database.pool.query<{ body_sha256: string; status: string }>(
      `select body_sha256, status from webhook_deliveries`,
    );
    return new Map(rows.map((r) => [r.body_sha256, r.status]));
  };
  const noPending = async () =>
    (await database.pool.query(`select 1 from webhook_deliveries where status = 'pending' limit 1`)).rows.length === 0;

  /** Sends the cases one by one; returns readable lines for every case whose answer or inbox row is wrong. */
  async function runCases(cases: readonly ReceiverCase[]): Promise<{ problems: string[]; byStatus: Record<string, number> }> {
    const problems: string[] = [];
    const byStatus: Record<string, number> = {};
    const answers: Answer[] = [];
    for (const c of cases) {
      const answer = await sendCase(port, c);
      answers.push(answer);
      byStatus[answer.status] = (byStatus[answer.status] ?? 0) + 1;
      if (answer.status !== c.expect.status) {
        problems.push(
          `${c.name}: answered ${answer.status}${answer.error ? ` (${answer.error})` : ''} ${answer.body.slice(0, 120)}, expected ${c.expect.status}`,
        );
      } else if (answer.status !== 431 && !clearMessage(answer)) {
        problems.push(`${c.name}: ${answer.status} without a clear message: ${JSON.stringify(answer.body.slice(0, 120))}`);
      }
    }
    await waitFor('the consumer to settle every stored delivery', noPending, 60_000, 100);
    const stored = await deliveryStatuses();
    cases.forEach((c) => {
      const row = stored.get(sha256(c.body));
      if (c.expect.status === 200) {
        if (row !== c.expect.stored) problems.push(`${c.name}: inbox row is ${row ?? 'missing'}, expected ${c.expect.stored}`);
      } else if (row !== undefined) {
        problems.push(`${c.name}: expected ${c.expect.status} and no inbox row, but a row is ${row}`);
      }
    });
    return { problems, byStatus };
  }

  it('answers every case of a generated receiver corpus as it must, and applies none of them', async () => {
    const cases = buildReceiverCorpus({ secret: secrets.staticWebhookSecret, path: PATH, maxBodyBytes: MAX_BODY });
    expect(cases.length).toBeGreaterThanOrEqual(200);
    expect(new Set(cases.map((c) => c.name)).size).toBe(cases.length);
    const before = await snapshotMirroredTables(database.pool);
    const rowsBefore = (await deliveryStatuses()).size;

    const { problems, byStatus } = await runCases(cases);
    expect(problems).toEqual([]);

    expect(await snapshotMirroredTables(database.pool)).toEqual(before);
    const stored = await deliveryStatuses();
    expect(stored.size - rowsBefore).toBe(cases.filter((c) => c.expect.status === 200).length);
    expect([...stored.values()].filter((s) => s === 'applied' || s === 'pending')).toEqual([]);
    assertRunning(service, 'after the corpus');
    expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
    expect((await fetch(`http://127.0.0.1:${port}/readyz`)).status).toBe(200);

    // The measurement can see a change: one real delivery, properly signed, is applied and shows.
    const real = Buffer.from(JSON.stringify(realisticBodies().get('subscriber.created')));
    const control = await sendCase(port, {
      name: 'control',
      category: 'control',
      method: 'POST',
      path: PATH,
      body: real,
      headers: { 'content-type': 'application/json', signature: signBody(real, secrets.staticWebhookSecret) },
      expect: { status: 200 },
    });
    expect(control.status).toBe(200);
    await waitFor(
      'the control delivery to be applied',
      async () => (await deliveryStatuses()).get(sha256(real)) === 'applied',
      30_000,
      100,
    );
    expect((await snapshotMirroredTables(database.pool)).subscribers).not.toEqual(before.subscribers);

    figures.receiverCases = cases.length;
    figures.answers = Object.entries(byStatus)
      .map(([s, n]) => `${s}:${n}`)
      .join(' ');
    figures.storedNotApplied = stored.size - rowsBefore - 1;
    figures.applied = 0;
    figures.categories = new Set(cases.map((c) => c.category)).size;
  }, 180_000);

  it('refuses signed bodies that are not UTF-8 (400) instead of storing a lossy decoding and applying it', async () => {
    const base = realisticBodies().get('subscriber.updated') as Record<string, unknown>;
    const cases = invalidUtf8Cases({ secret: secrets.staticWebhookSecret, path: PATH, maxBodyBytes: MAX_BODY }, base);
    const before = await snapshotMirroredTables(database.pool);
    const { problems } = await runCases(cases);
    const mirrorChanged = JSON.stringify(await snapshotMirroredTables(database.pool)) !== JSON.stringify(before);
    // What such a delivery leaves in the mirror: U+FFFD where the service's bytes were.
    const { rows } = await database.pool.query<{ n: number }>(
      `select count(*)::int as n from subscribers where email like '%' || chr(65533) || '%'`,
    );
    figures.invalidUtf8Cases = cases.length;
    expect({ problems, mirrorChanged, emailsWithReplacementCharacter: rows[0]?.n }).toEqual({
      problems: [],
      mirrorChanged: false,
      emailsWithReplacementCharacter: 0,
    });
  }, 120_000);

  it('answers a signed body nested deeper than Postgres can store with a 4xx, not a 503 the service retries forever', async () => {
    const c = deeplyNested({ secret: secrets.staticWebhookSecret, path: PATH, maxBodyBytes: MAX_BODY }, 30_000, 'deep-30000');
    expect(c.body.length).toBeLessThan(MAX_BODY);
    const first = await sendCase(port, c);
    // The service retries a failed delivery after 10, 100 and 1000 s with the same body; every retry
    // must get a final answer too.
    const retry = await sendCase(port, c);
    figures.deepNestingAnswers = `${first.status},${retry.status}`;
    assertRunning(service, 'after the deeply nested body');
    const logged = service.lines.filter((l) => l.msg === 'webhook delivery not stored').map((l) => String(l.error));
    expect({ final: [first.status, retry.status].map((s) => s >= 400 && s < 500), logged: logged.slice(-1) }).toEqual({
      final: [true, true],
      logged: [],
    });
  }, 60_000);

  it('exits with the right code and a clear message for every bad command line and configuration', async () => {
    const cases = buildCliCorpus({ dbPassword: secrets.dbPassword });
    const before = await snapshotMirroredTables(database.pool);
    const deliveriesBefore = (await deliveryStatuses()).size;
    const cliEnv = { ...env, REDIS_PREFIX: cliPrefix, PORT: '0' };
    const problems: string[] = [];
    const queue = [...cases];
    const runOne = async (c: CliCase) => {
      const result = await runCollected(c.args, { ...cliEnv, ...c.env }, `bad-input-cli ${c.name}`, { timeoutMs: 45_000 }).catch(
        (error: unknown) => ({ code: -1, signal: null, stdout: '', stderr: (error as Error).message }),
      );
      const text = (c.stream ?? (c.code === 0 ? 'stdout' : 'stderr')) === 'stdout' ? result.stdout : result.stderr;
      if (result.code !== c.code)
        problems.push(`${c.name}: exit ${result.code}, expected ${c.code}: ${result.stderr.trim().split('\n')[0] ?? ''}`);
      for (const m of c.messages)
        if (!m.test(text)) problems.push(`${c.name}: output does not match ${m}: ${JSON.stringify(text.slice(0, 300))}`);
      if (/\n\s+at .*:\d+:\d+/.test(result.stderr)) problems.push(`${c.name}: printed a stack trace`);
      if (c.code === 1 && result.stderr.trim().split('\n').length !== 1)
        problems.push(`${c.name}: more than one line: ${JSON.stringify(result.stderr)}`);
    };
    // Two at a time: each case is a node process of its own.
    await Promise.all(
      [0, 1].map(async () => {
        for (let c = queue.shift(); c; c = queue.shift()) await runOne(c);
      }),
    );
    expect(problems).toEqual([]);
    expect(await snapshotMirroredTables(database.pool)).toEqual(before);
    expect((await deliveryStatuses()).size).toBe(deliveriesBefore);
    assertRunning(service, 'after the CLI corpus');
    expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
    figures.cliCases = cases.length;
  }, 300_000);

  it('leaves the second account, served by the same process, equal to its world', async () => {
    assertRunning(service, 'before the second account is checked');
    Object.assign(figures, await second.expectMirrored(database.url, [sim.world]));
  });

  it('printed no secret in any log line or CLI output', async () => {
    expect(await stopGracefully(service)).toBe(0);
    const { leaks, ...scan } = secretScanFigures(200);
    printSummary('bad input', { ...figures, ...scan, leaks: leaks.length });
    expect(leaks).toEqual([]);
  });
});

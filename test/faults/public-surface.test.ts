/**
 * The public listener under attack (docs/operations.md, "Public surface"), against a real `start --role receiver`
 * process: unauthenticated clients dripping huge announced uploads, and a flood of forged signatures.
 * Real signed deliveries sent meanwhile (from this process, one every 250 ms) must be answered 2xx
 * within the service's 3 s, and the receiver's RSS must stay bounded. The attackers run in their own
 * process (helpers/attackers.ts).
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_ACCOUNT } from '../../src/config.js';
import { declareAccounts } from '../../src/db/accounts.js';
import { signBody } from '../../src/webhooks/signature.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { SECOND_ACCOUNT, useSecondAccount, type SecondAccount } from './helpers/second-account.js';
import { killAll, printSummary, servicePort, sleep, startService, stopGracefully, type ServiceProcess } from './helpers/service.js';

const SECRET = 'whsec-public-surface-0001';
const WEBHOOK_PATH = '/webhooks';
const MiB = 1024 * 1024;
const BODY_MEMORY = 64 * MiB;
const ATTACKERS = fileURLToPath(new URL('./helpers/attackers.ts', import.meta.url));
const ROOT = path.resolve(path.dirname(ATTACKERS), '../../..');

function runAttackers<T>(config: object): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', ATTACKERS, JSON.stringify(config)], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(JSON.parse(out) as T) : reject(new Error(`attackers exited with ${code}`))));
  });
}

function rssBytes(pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(match?.[1] ?? 0) * 1024;
}

/** Samples the receiver's RSS every 100 ms until stopped; returns the peak. */
function sampleRss(pid: number): { stop(): number } {
  let peak = rssBytes(pid);
  const timer = setInterval(() => {
    try {
      peak = Math.max(peak, rssBytes(pid));
    } catch {
      // exited
    }
  }, 100);
  return {
    stop() {
      clearInterval(timer);
      return peak;
    },
  };
}

interface Sent {
  account: string;
  sha256: string;
  status: number;
  ms: number;
}

interface RealDelivery {
  account: string;
  path: string;
  body: string;
  signature: string;
}

/**
 * Real delivery `n`: every other one the second account's, at its own path with its own secret, so
 * that the attacks on the one listener meet both accounts' deliveries.
 */
function realDelivery(n: number, second: SecondAccount): RealDelivery {
  if (n % 2 === 0) return { account: SECOND_ACCOUNT, ...second.delivery(n / 2, WEBHOOK_PATH) };
  const body = JSON.stringify({
    event: 'subscriber.updated',
    account_id: 1,
    subscriber: { id: `${Date.now()}${n}`, email: `real${n}@example.com`, status: 'active' },
  });
  return { account: DEFAULT_ACCOUNT, path: WEBHOOK_PATH, body, signature: signBody(body, SECRET) };
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/**
 * Sends a real signed delivery every `everyMs` until `until` resolves, numbered on from `from` (each
 * body new); returns each answer and its latency.
 */
async function deliverMeanwhile(
  port: number,
  second: SecondAccount,
  until: Promise<unknown>,
  from: number,
  everyMs = 250,
): Promise<Sent[]> {
  const sent: Array<Promise<Sent>> = [];
  let done = false;
  void until.finally(() => (done = true));
  let n = from;
  while (!done) {
    n += 1;
    const { account, path, body, signature } = realDelivery(n, second);
    const started = performance.now();
    const answered = (status: number): Sent => ({ account, sha256: sha256(body), status, ms: performance.now() - started });
    sent.push(
      fetch(`http://127.0.0.1:${port}${path}`, {
        method: 'POST',
        body,
        headers: { signature, 'content-type': 'application/json' },
        signal: AbortSignal.timeout(10_000),
      }).then(
        async (res) => {
          await res.arrayBuffer();
          return answered(res.status);
        },
        () => answered(0),
      ),
    );
    await sleep(everyMs);
  }
  return Promise.all(sent);
}

function latencyFigures(sent: Sent[]): { delivered: number; ok: number; p50Ms: number; maxMs: number } {
  const ms = sent.map((s) => s.ms).sort((a, b) => a - b);
  return {
    delivered: sent.length,
    ok: sent.filter((s) => s.status === 200).length,
    p50Ms: Math.round(ms[Math.floor(ms.length / 2)] ?? 0),
    maxMs: Math.round(ms[ms.length - 1] ?? 0),
  };
}

describe('public surface under attack', () => {
  let database: TestDatabase;
  let service: ServiceProcess;
  let port: number;
  const prefix = uniquePrefix('surface');
  const second = useSecondAccount('public-surface', { largeIds: false });
  /** Every real delivery sent during the attacks, both accounts'. */
  const delivered: Sent[] = [];

  beforeAll(async () => {
    database = await createTestDatabase();
    // What the deployment's workers do at start: a receiver alone declares no account, and stores a
    // delivery only under a declared one.
    await declareAccounts(database.pool, [SECOND_ACCOUNT]);
    service = startService(
      'receiver',
      {
        DATABASE_URL: database.url,
        REDIS_URL: redisUrl(),
        REDIS_PREFIX: prefix,
        PORT: '0',
        OPS_PORT: '0',
        WEBHOOK_SECRETS: SECRET,
        WEBHOOK_BODY_MEMORY: String(BODY_MEMORY),
        // The attackers and the real deliveries share 127.0.0.1: this file proves the limits of the
        // whole listener; the per-client ones are client-limits.test.ts's and the probe bench's.
        HTTP_MAX_CONNECTIONS_PER_CLIENT: '0',
        HTTP_REQUEST_RATE_PER_CLIENT: '0',
      },
      'surface',
    );
    port = await servicePort(service);
  });

  afterAll(async () => {
    killAll();
    await database?.drop();
    await deletePrefix(prefix);
  });

  interface DripOutcome {
    byStatus: Record<string, number>;
    stillOpen: number;
    minOpenMs: number;
    maxOpenMs: number;
  }

  /** 300 connections announcing 10 MiB and sending `chunkBytes` every 500 ms, real deliveries meanwhile. */
  async function dripAttack(scenario: string, chunkBytes: number) {
    const pid = service.child.pid as number;
    const baseline = rssBytes(pid);
    const rss = sampleRss(pid);
    const attack = runAttackers<DripOutcome>({
      mode: 'drip',
      port,
      path: '/webhooks',
      connections: 300,
      announcedBytes: 10 * MiB,
      chunkBytes,
      everyMs: 500,
      maxMs: 60_000,
    });
    const sent = await deliverMeanwhile(port, second, attack, delivered.length);
    delivered.push(...sent);
    const result = await attack;
    const growth = rss.stop() - baseline;
    const figures = latencyFigures(sent);
    printSummary(scenario, {
      ...result.byStatus,
      stillOpen: result.stillOpen,
      openMsMin: result.minOpenMs,
      openMsMax: result.maxOpenMs,
      ...figures,
      rssBaselineMiB: Math.round(baseline / MiB),
      rssGrowthMiB: Math.round(growth / MiB),
    });
    return { result, figures, growth };
  }

  it('300 connections announcing 10 MiB and dripping: each closed by the request timeout, real deliveries 2xx within 3 s', async () => {
    const { result, figures, growth } = await dripAttack('public drip', 1024);
    // Node answers 408 when HTTP_REQUEST_TIMEOUT (10 s) passes before the body is complete.
    expect(result.byStatus).toEqual({ '408': 300 });
    expect(result.stillOpen).toBe(0);
    expect(figures.ok).toBe(figures.delivered);
    expect(figures.maxMs).toBeLessThan(3_000);
    expect(growth).toBeLessThan(BODY_MEMORY + 64 * MiB);
  });

  it('300 connections announcing 10 MiB and sending 64 KiB/s each: buffered bodies stay within WEBHOOK_BODY_MEMORY', async () => {
    const { result, figures, growth } = await dripAttack('public heavy drip', 32 * 1024);
    // Unbounded, 300 × 64 KiB/s × 10 s would be 190 MiB of bodies: past the budget they are refused (503, closed after the 2 s linger).
    expect(Object.keys(result.byStatus).every((s) => s === '408' || s === '503')).toBe(true);
    expect(result.byStatus['503'] ?? 0).toBeGreaterThan(0);
    expect(result.stillOpen).toBe(0);
    expect(figures.ok).toBe(figures.delivered);
    expect(figures.maxMs).toBeLessThan(3_000);
    expect(growth).toBeLessThan(BODY_MEMORY + 64 * MiB);
  });

  it('64 connections flooding forged signatures: real deliveries from the same address answered 2xx within 3 s', async () => {
    const attack = runAttackers<{ byStatus: Record<string, number>; requests: number }>({
      mode: 'flood',
      port,
      path: '/webhooks',
      connections: 64,
      bodyBytes: 2_048,
      durationMs: 15_000,
    });
    const sent = await deliverMeanwhile(port, second, attack, delivered.length);
    delivered.push(...sent);
    const result = await attack;
    const figures = latencyFigures(sent);
    printSummary('public forged flood', { forgedRequests: result.requests, ...result.byStatus, ...figures });
    expect(Object.keys(result.byStatus)).toEqual(['401']);
    expect(result.requests).toBeGreaterThan(1_000);
    expect(figures.ok).toBe(figures.delivered);
    expect(figures.maxMs).toBeLessThan(3_000);
  });

  it("stored every real delivery under the account of its path, the second account's under its own", async () => {
    const { rows } = await database.pool.query<{ body_sha256: string; account: string }>(
      'select body_sha256, account from webhook_deliveries',
    );
    const storedUnder = new Map(rows.map((r) => [r.body_sha256, r.account]));
    const answered = delivered.filter((d) => d.status === 200);
    const misplaced = answered.filter((d) => storedUnder.get(d.sha256) !== d.account);
    printSummary('public surface, both accounts', {
      delivered: answered.length,
      secondAccount: answered.filter((d) => d.account === SECOND_ACCOUNT).length,
      storedRows: rows.length,
      misplaced: misplaced.length,
    });
    expect(answered.filter((d) => d.account === SECOND_ACCOUNT).length).toBeGreaterThan(50);
    expect(misplaced.map((d) => `${d.account} ${d.sha256}: ${storedUnder.get(d.sha256) ?? 'not stored'}`)).toEqual([]);
    // Nothing else was stored: the attackers' bodies never were, duplicates once.
    expect(rows.length).toBe(new Set(answered.map((d) => d.sha256)).size);
  });

  it('stops cleanly afterwards', async () => {
    expect(await stopGracefully(service)).toBe(0);
  });
});

/**
 * The shared limiter on a real Redis (invariant 7), including the Bottleneck 2.19.5 / Redis 7 trap
 * from docs/architecture.md, "Traps we work around": state lost in Redis must not stop scheduling.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import Bottleneck from 'bottleneck';
import { Redis } from 'ioredis';
import { startTcpProxy } from '../helpers/proxy.js';
import { connectionsByName, deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { sleep } from '../helpers/wait.js';
import { catchInFlight, createLimiterConnections, type LimiterConnections } from '../../src/ratelimit/connections.js';
import {
  createLimiter,
  LimiterClosedError,
  LimiterUnavailableError,
  maxInAnyWindow,
  spacingMs,
  type Limiter,
  type LimiterOptions,
} from '../../src/ratelimit/limiter.js';
import { createLegacyClient } from '../../src/upstream/legacy/client.js';

const PER_WINDOW = 20;
const WINDOW_MS = 2000;

const open: Limiter[] = [];
const prefixes: string[] = [];

function limiter(prefix: string, extra: Partial<LimiterOptions> = {}): Limiter {
  const created = createLimiter({ redisUrl: redisUrl(), prefix, perMinute: PER_WINDOW, windowMs: WINDOW_MS, ...extra });
  open.push(created);
  return created;
}

function newPrefix(label: string): string {
  const prefix = uniquePrefix(label);
  prefixes.push(prefix);
  return prefix;
}

/** Every key of one install's limiter: Bottleneck names them `b_<id>_…`. */
async function limiterKeys(prefix: string): Promise<string[]> {
  const redis = new Redis(redisUrl());
  try {
    const keys: string[] = [];
    let cursor = '0';
    do {
      const [next, batch] = await redis.scan(cursor, 'MATCH', `b_${prefix}:*`, 'COUNT', 500);
      cursor = next;
      keys.push(...batch);
    } while (cursor !== '0');
    return keys;
  } finally {
    redis.disconnect();
  }
}

afterEach(async () => {
  await Promise.all(open.splice(0).map((l) => l.close()));
});

afterAll(async () => {
  for (const prefix of prefixes) {
    await deletePrefix(`b_${prefix}`);
    await deletePrefix(prefix);
  }
});

/** A stub legacy service that records when each request arrives. */
async function recordingServer(): Promise<{ url: string; arrivals: number[]; close: () => Promise<void> }> {
  const arrivals: number[] = [];
  const server: Server = createServer((req, res) => {
    arrivals.push(performance.now());
    res.setHeader('content-type', 'application/json');
    res.end(req.url?.endsWith('/count') ? '{"count":1}' : '[]');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    arrivals,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

describe('limiter shared through Redis', () => {
  it('two replicas together never exceed the limit in any window, measured where requests arrive', async () => {
    const prefix = newPrefix('two-replicas');
    const server = await recordingServer();
    try {
      const replicas = [limiter(prefix), limiter(prefix)].map((l) =>
        createLegacyClient({ baseUrl: server.url, apiKey: 'key-for-limiter-test', limiter: l, http: { retry: { retries: 0 } } }),
      );
      const perReplica = 25;
      await Promise.all(replicas.flatMap((client) => Array.from({ length: perReplica }, () => client.count('1'))));
      expect(server.arrivals).toHaveLength(2 * perReplica);
      // The bound: no window of WINDOW_MS (closed at both ends, anywhere) holds more than PER_WINDOW.
      expect(maxInAnyWindow(server.arrivals, WINDOW_MS)).toBeLessThanOrEqual(PER_WINDOW);
      // And the budget is used, not starved: some window holds as many as the spacing allows.
      const spacing = (open[0] as Limiter).stats().minTimeMs;
      expect(maxInAnyWindow(server.arrivals, WINDOW_MS)).toBeGreaterThanOrEqual(Math.floor(WINDOW_MS / spacing));
      for (const client of replicas) expect(client.stats().requests).toBe(perReplica);
    } finally {
      await server.close();
    }
  });

  it('an event loop stalled past the safety margin does not crowd a window: the send ledger holds the late slots back', async () => {
    const prefix = newPrefix('stalled');
    const server = await recordingServer();
    try {
      const replicas = [limiter(prefix), limiter(prefix)];
      const clients = replicas.map((l) =>
        createLegacyClient({ baseUrl: server.url, apiKey: 'key-for-limiter-test', limiter: l, http: { retry: { retries: 0 } } }),
      );
      // Twice, a busy process: every slot timer due in the next 800 ms (3 times the 250 ms margin) fires at once after it.
      const stalls = [700, 1_900].map((at) =>
        setTimeout(() => {
          const until = performance.now() + 800;
          while (performance.now() < until);
        }, at),
      );
      await Promise.all(clients.flatMap((client) => Array.from({ length: 20 }, () => client.count('1'))));
      stalls.forEach(clearTimeout);
      expect(server.arrivals).toHaveLength(40);
      expect(maxInAnyWindow(server.arrivals, WINDOW_MS)).toBeLessThanOrEqual(PER_WINDOW);
      expect(replicas.reduce((n, l) => n + l.stats().windowWaits, 0)).toBeGreaterThan(0);
    } finally {
      await server.close();
    }
  });

  it('the window check itself catches a burst (a reservoir refill straddling a window would fail it)', () => {
    // 20 just before a refill and 20 just after: 40 within 2 s.
    const burst = [...Array.from({ length: 20 }, (_, i) => 1000 + i), ...Array.from({ length: 20 }, (_, i) => 2100 + i)];
    expect(maxInAnyWindow(burst, WINDOW_MS)).toBe(40);
  });

  it('a pause from one replica (a 429) holds back the other', async () => {
    const prefix = newPrefix('pause');
    const a = limiter(prefix);
    const b = limiter(prefix);
    await b.schedule(async () => undefined); // b is up and has used a slot
    const pausedAt = performance.now();
    await a.pauseFor(800);
    expect(await b.pausedForMs()).toBeGreaterThan(600);
    let startedAt = 0;
    await b.schedule(async () => {
      startedAt = performance.now();
    });
    expect(startedAt - pausedAt).toBeGreaterThanOrEqual(800 - 20);
    // A shorter pause never shortens a longer one.
    await a.pauseFor(5000);
    await a.pauseFor(100);
    expect(await b.pausedForMs()).toBeGreaterThan(4000);
    expect(a.stats().pauses).toBe(3);
  });

  it('a new rate under the same id takes effect: Redis keeps no older spacing (API_RATE_LIMIT changed, a budget re-rated)', async () => {
    const prefix = newPrefix('rerate');
    const settingsKey = `b_${prefix}:legacy_settings`;
    const redis = new Redis(redisUrl());
    try {
      const first = limiter(prefix, { perMinute: 20 });
      await first.schedule(async () => undefined);
      expect(Number(await redis.hget(settingsKey, 'minTime'))).toBe(spacingMs(20, WINDOW_MS, 250));
      await first.close();
      const second = limiter(prefix, { perMinute: 5 });
      await second.schedule(async () => undefined);
      expect(Number(await redis.hget(settingsKey, 'minTime'))).toBe(spacingMs(5, WINDOW_MS, 250));
      expect(second.stats().minTimeMs).toBe(spacingMs(5, WINDOW_MS, 250));
      // A one-off command's limiter (writeSettings: false) follows the spacing instead of setting it.
      const guest = limiter(prefix, { perMinute: 20, writeSettings: false });
      await guest.schedule(async () => undefined);
      expect(Number(await redis.hget(settingsKey, 'minTime'))).toBe(spacingMs(5, WINDOW_MS, 250));
    } finally {
      redis.disconnect();
    }
  });

  it('jobs carry an expiration, so a job stuck in a dead replica does not hold capacity forever', async () => {
    const prefix = newPrefix('expiration');
    const options = { maxConcurrent: 1, jobExpirationMs: 300 };
    const stuck = limiter(prefix, options);
    const healthy = limiter(prefix, options);
    const stuckJob = stuck.schedule(() => new Promise<never>(() => {})).catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 100));
    let ran = false;
    await healthy.schedule(async () => {
      ran = true;
    });
    expect(ran).toBe(true);
    expect(String(await stuckJob)).toMatch(/timed out/);
  });
});

describe('Bottleneck state lost in Redis (docs/architecture.md, "Traps we work around")', () => {
  it('is real: a bare Bottleneck 2.19.5 on Redis 7 stays broken after its keys vanish', async () => {
    const prefix = newPrefix('bare');
    const id = `${prefix}:bare`;
    const bare = new Bottleneck({ id, datastore: 'ioredis', clientOptions: { ...parseRedis(redisUrl()) }, minTime: 10 });
    bare.on('error', () => {});
    try {
      await bare.schedule(async () => 1);
      await deletePrefix(`b_${id}`);
      await expect(bare.schedule(async () => 2)).rejects.toThrow(/SETTINGS_KEY_NOT_FOUND/);
      await expect(bare.schedule(async () => 3)).rejects.toThrow(/SETTINGS_KEY_NOT_FOUND/);
    } finally {
      await bare.disconnect(false);
    }
  });

  it('keeps scheduling after its keys are deleted mid-run, and still keeps the limit', async () => {
    const prefix = newPrefix('wipe');
    const a = limiter(prefix);
    const b = limiter(prefix);
    const starts: number[] = [];
    let wiped = false;
    const job = async (): Promise<void> => {
      starts.push(performance.now());
      if (starts.length === 10 && !wiped) {
        wiped = true;
        // Only this test's keys, never a flush. The other limiter's jobs may write some back at once,
        // so what shows the state was lost is the rebuild below, not an empty prefix after this.
        expect(await deletePrefix(`b_${prefix}`)).toBeGreaterThan(0);
      }
    };
    const results = await Promise.allSettled(Array.from({ length: 30 }, (_, i) => (i % 2 === 0 ? a : b).schedule(job)));
    expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
    expect(starts).toHaveLength(30);
    expect(wiped).toBe(true);
    expect(a.stats().rebuilds + b.stats().rebuilds).toBeGreaterThanOrEqual(1);
    expect(maxInAnyWindow(starts, WINDOW_MS)).toBeLessThanOrEqual(PER_WINDOW);
    // Rebuilt state lives in Redis again.
    expect((await limiterKeys(prefix)).length).toBeGreaterThan(0);
  });

  it('recovers when only its client registration expired (ERR UNKNOWN_CLIENT)', async () => {
    const prefix = newPrefix('client');
    const a = limiter(prefix);
    await a.schedule(async () => undefined);
    const redis = new Redis(redisUrl());
    try {
      await redis.del(`b_${prefix}:legacy_client_last_seen`);
    } finally {
      redis.disconnect();
    }
    await expect(a.schedule(async () => 'after')).resolves.toBe('after');
    expect(a.stats().rebuilds).toBe(1);
  });

  it('never runs a job twice across a rebuild', async () => {
    const prefix = newPrefix('once');
    const a = limiter(prefix);
    const runs = new Map<number, number>();
    const job = (n: number) => async (): Promise<number> => {
      runs.set(n, (runs.get(n) ?? 0) + 1);
      if (n === 3) await deletePrefix(`b_${prefix}`);
      return n;
    };
    const values = await Promise.all(Array.from({ length: 12 }, (_, n) => a.schedule(job(n))));
    expect(values).toEqual(Array.from({ length: 12 }, (_, n) => n));
    expect([...runs.values()].every((count) => count === 1)).toBe(true);
    expect(a.stats().rebuilds).toBeGreaterThanOrEqual(1);
  });
});

describe('limiters of one process share its connections (connections.ts)', () => {
  const registries: LimiterConnections[] = [];

  /** Connections named `name` (each test's own), as Redis lists them. */
  const namedConnections = async (name: string): Promise<number> => (await connectionsByName(name))[name] ?? 0;

  function sharedConnections(name: string): LimiterConnections {
    const connections = createLimiterConnections({ redisUrl: redisUrl(), redisOptions: { connectionName: name } });
    registries.push(connections);
    return connections;
  }

  afterEach(async () => {
    await Promise.all(open.splice(0).map((l) => l.close()));
    await Promise.all(registries.splice(0).map((c) => c.close()));
  });

  it('twenty limiters hold two connections between them, each keeping its own spacing', async () => {
    const prefix = newPrefix('shared');
    const name = `lim-${prefix}`;
    const connections = sharedConnections(name);
    const limiters = Array.from({ length: 20 }, (_, i) => limiter(prefix, { name: `l${i}`, connections }));
    const starts = limiters.map(() => [] as number[]);
    const began = performance.now();
    await Promise.all(
      limiters.flatMap((l, i) => Array.from({ length: 3 }, () => l.schedule(async () => void starts[i]?.push(performance.now())))),
    );
    expect(await namedConnections(name)).toBe(2);
    expect(connections.openConnections()).toBe(2);
    const minTime = spacingMs(PER_WINDOW, WINDOW_MS, 250);
    for (const s of starts) expect(s).toHaveLength(3);
    // Each keeps its own state in Redis, at its own spacing (the window bound itself is tested above).
    const redis = new Redis(redisUrl());
    try {
      for (let i = 0; i < limiters.length; i++) expect(Number(await redis.hget(`b_${prefix}:l${i}_settings`, 'minTime'))).toBe(minTime);
    } finally {
      redis.disconnect();
    }
    // Side by side: one spacing for all of them would take 59 slots; half of that is a generous bound.
    expect(performance.now() - began).toBeLessThan(30 * minTime);
  });

  it('two live instances of one id (a re-rate) are on two connections, and each hears the capacity the other frees', async () => {
    const prefix = newPrefix('same-id');
    const name = `lim-${prefix}`;
    const connections = sharedConnections(name);
    const options = { maxConcurrent: 1, connections };
    const old = limiter(prefix, { ...options, perMinute: 20 });
    const renewed = limiter(prefix, { ...options, perMinute: 10 });
    await old.schedule(async () => undefined);
    await renewed.schedule(async () => undefined);
    expect(connections.openConnections()).toBe(4);
    expect(await namedConnections(name)).toBe(4);
    // One holds the one slot; the other's job can start only when it hears it freed. Both ways round.
    for (const [holder, waiter] of [
      [old, renewed],
      [renewed, old],
    ] as const) {
      let release = (): void => {};
      const holding = holder.schedule(() => new Promise<void>((resolve) => (release = resolve)));
      await sleep(200);
      let waited = false;
      const waiting = waiter.schedule(async () => {
        waited = true;
      });
      await sleep(300);
      expect(waited).toBe(false);
      release();
      await holding;
      await Promise.race([waiting, sleep(3000)]);
      expect(waited).toBe(true);
    }
    // The connection opened for the second instance closes with it; the shared pair stays.
    await old.close();
    await renewed.schedule(async () => undefined);
    expect(connections.openConnections()).toBe(4);
    await renewed.close();
    expect(connections.openConnections()).toBe(2);
    expect(await namedConnections(name)).toBe(2);
  });

  it('a rebuild on the shared connections leaves the other limiters alone, and the process back at two connections', async () => {
    const prefix = newPrefix('shared-wipe');
    const name = `lim-${prefix}`;
    const connections = sharedConnections(name);
    const wiped = limiter(prefix, { name: 'wiped', connections });
    const other = limiter(prefix, { name: 'other', connections });
    const starts: number[] = [];
    let done = false;
    const job = (n: number) => async (): Promise<void> => {
      starts.push(performance.now());
      if (n === 4 && !done) {
        done = true;
        await deletePrefix(`b_${prefix}:wiped`);
      }
    };
    const results = await Promise.allSettled([
      ...Array.from({ length: 12 }, (_, n) => wiped.schedule(job(n))),
      ...Array.from({ length: 6 }, () => other.schedule(async () => undefined)),
    ]);
    expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
    expect(wiped.stats().rebuilds).toBeGreaterThanOrEqual(1);
    expect(other.stats().rebuilds).toBe(0);
    expect(maxInAnyWindow(starts, WINDOW_MS)).toBeLessThanOrEqual(PER_WINDOW);
    // The retired instance has left its connection, so the rebuilt one is back on the shared pair.
    await sleep(200);
    await wiped.schedule(async () => undefined);
    expect(connections.openConnections()).toBeLessThanOrEqual(4);
    expect(await namedConnections(name)).toBe(connections.openConnections());
  });
});

describe('limiter lifecycle', () => {
  it('rejects work after close', async () => {
    const a = limiter(newPrefix('closed'));
    await a.schedule(async () => undefined);
    await a.close();
    await expect(a.schedule(async () => undefined)).rejects.toBeInstanceOf(LimiterClosedError);
  });

  it('fails fast when Redis is unreachable instead of hanging', async () => {
    const a = createLimiter({
      redisUrl: 'redis://127.0.0.1:1',
      prefix: newPrefix('down'),
      perMinute: 60,
      readyTimeoutMs: 300,
      redisOptions: { retryStrategy: () => 200, maxRetriesPerRequest: 1 },
    });
    try {
      const error = await a.schedule(async () => 'never').catch((e: unknown) => e);
      expect(error).toBeInstanceOf(Error);
      expect(error).not.toBe('never');
      expect([LimiterUnavailableError.name, 'MaxRetriesPerRequestError']).toContain((error as Error).name);
    } finally {
      await a.close();
    }
  });

  it('tracks scheduled, started and total wait', async () => {
    const a = limiter(newPrefix('stats'));
    await Promise.all(Array.from({ length: 5 }, () => a.schedule(async () => undefined)));
    const stats = a.stats();
    expect(stats).toMatchObject({ mode: 'redis', scheduled: 5, started: 5, waiting: 0, perWindow: PER_WINDOW, windowMs: WINDOW_MS });
    expect(stats.minTimeMs).toBeGreaterThanOrEqual(WINDOW_MS / PER_WINDOW);
    // Five starts spaced by minTime: at least 4 gaps were waited out by someone.
    expect(stats.waitMsTotal).toBeGreaterThanOrEqual(4 * (WINDOW_MS / PER_WINDOW));
  });

  it("retiring an instance the moment Redis is back leaves no rejection unhandled (ioredis's own re-subscription)", async () => {
    const proxy = await startTcpProxy(parseRedis(redisUrl()));
    const subscriber = new Redis(proxy.via(redisUrl()), { retryStrategy: () => 50 });
    subscriber.on('error', () => {});
    const unhandled: unknown[] = [];
    const record = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', record);
    try {
      await subscriber.subscribe(`b_${newPrefix('resubscribe')}:channel`);
      await proxy.cut();
      // What a connection of a retired instance goes through (connections.ts, dispose) when Redis is just back.
      const closedWithInFlight = new Promise<number>((resolve) =>
        subscriber.once('ready', () => {
          const inFlight = subscriber.commandQueue.length;
          catchInFlight(subscriber);
          subscriber.disconnect();
          resolve(inFlight);
        }),
      );
      await proxy.restore();
      // The re-subscription ioredis sent by itself was in flight when the connection closed.
      expect(await closedWithInFlight).toBeGreaterThan(0);
      // Reported once the microtasks after the close have run.
      await sleep(200);
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', record);
      subscriber.disconnect();
      await proxy.close();
    }
  });
});

function parseRedis(url: string): { host: string; port: number } {
  const u = new URL(url);
  return { host: u.hostname, port: Number(u.port || 6379) };
}

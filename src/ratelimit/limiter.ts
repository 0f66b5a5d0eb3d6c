/**
 * One request budget shared by every replica (invariant 7): Bottleneck clustered on Redis.
 *
 * Scheme: spacing, not a reservoir. Bottleneck's Redis scripts hand out start slots atomically from
 * one shared `nextRequest`, each at least `minTime = ceil((windowMs + safetyMs) / perWindow)` after
 * the previous one, whichever replica asks. Any `perWindow + 1` requests therefore span at least
 * `perWindow * minTime >= windowMs + safetyMs`, so no window of `windowMs` (sliding or fixed,
 * anchored anywhere) can hold more than `perWindow` of them, as long as the spread between slot and
 * arrival at the service (timer lateness, connect latency, clock skew between replicas; Bottleneck
 * passes each client's Date.now()) stays under `safetyMs`; when it does not (a busy event loop fires
 * a slot's timer late), the send ledger (send-ledger.ts) holds the request back, so the bound holds
 * either way and the spacing keeps the ledger from ever making anyone wait in steady use. A
 * reservoir refreshed every 60 s was
 * rejected: it lets a full reservoir go out just before a refresh and another just after, i.e. twice
 * the limit inside one sliding minute (and Redis mode refreshes only on a 5 s heartbeat).
 *
 * A 429 pauses everyone: `pauseFor(ms)` sets a Redis key with that TTL; every replica checks it before
 * queueing and again when its slot comes, and waits it out instead of sending.
 *
 * Trap (docs/architecture.md, "Traps we work around"): Bottleneck 2.19.5 never self-heals on Redis 7 because its scripts' errors
 * now start with `ERR `, so after a Redis restart/flush or when its client registration expires,
 * every call fails with `ERR SETTINGS_KEY_NOT_FOUND` / `ERR UNKNOWN_CLIENT`. We rebuild the instance
 * on those errors (from `schedule()` or from its heartbeat) and retry jobs that had not started. A
 * rebuilt limiter first pushes the shared `nextRequest` past any slot the lost state may still have
 * handed out ((maxConcurrent + 1) * minTime ahead), so the spacing holds across the rebuild too.
 *
 * Jobs carry an `expiration` so a job stuck in a dead process does not hold concurrency forever.
 *
 * Its Redis connections (the pause's, the ledger's, Bottleneck's) are the process's, shared by every
 * limiter in it (connections.ts), or its own when it is given none (a one-off command, a test).
 */
import { sleep, withTimeout } from '../ground/wait.js';
import Bottleneck from 'bottleneck';
import type { Redis, RedisOptions } from 'ioredis';
import type { Logger } from '../ground/log.js';
import { createLimiterConnections, type LimiterConnections } from './connections.js';
import type { GateScheduleOptions, GateSlot, RequestGate } from '../upstream/http.js';
import { localLedger, redisLedger, type SendLedger } from './send-ledger.js';

export type LimiterMode = 'redis' | 'memory' | 'off';

export interface LimiterOptions {
  /** `redis` (default): shared by all replicas. `memory`: this process only. `off`: no limit (benchmarks). */
  mode?: LimiterMode;
  /** Required for `redis` mode. */
  redisUrl?: string;
  /** Extra ioredis options for the limiter's connections (when it opens its own). */
  redisOptions?: RedisOptions;
  /**
   * The process's limiter connections (connections.ts), shared with its other limiters; the caller
   * closes them. Without them, the limiter opens its own and closes them with itself.
   */
  connections?: LimiterConnections;
  /** Per-install key prefix (e.g. the BullMQ prefix), so installs and test runs do not share a budget. */
  prefix?: string;
  /** Which budget inside the install; default `legacy`. Redis keys start with `b_<prefix>:<name>`. */
  name?: string;
  /** Requests allowed per window, all replicas together (API_RATE_LIMIT). */
  perMinute: number;
  /** Window length; 60 000 in production, shorter in tests. */
  windowMs?: number;
  /** Margin for slot-to-arrival spread; default 2 % of the window, at least 250 ms. */
  safetyMs?: number;
  /** Requests in flight at once, all replicas together; default 4. */
  maxConcurrent?: number;
  /** A job running longer than this releases its concurrency slot; default 120 s. */
  jobExpirationMs?: number;
  /** How long `schedule()` waits for Redis before failing; default 10 s (the HTTP path fails fast). */
  readyTimeoutMs?: number;
  /** Rebuilds one `schedule()` call may trigger before giving up; default 3. */
  maxRebuilds?: number;
  /**
   * Whether the first instance also pushes the shared next slot ahead (see header); default false:
   * rebuilt instances do, since only a lost state can have handed out slots the new one does not
   * know. At a start the state is either still in Redis (Bottleneck continues from its next slot) or
   * gone with the send ledger (then the push could not cover the window anyway); the push only
   * delayed every start by (maxConcurrent + 1) slots.
   */
  pushOnStart?: boolean;
  /**
   * Whether this instance writes its spacing to Redis when ready; default true. False for a one-off
   * command (`audit`) sharing the service's budget: it follows the spacing the service's limiter set
   * (which may have been re-rated since) instead of setting its own for everyone.
   */
  writeSettings?: boolean;
  logger?: Logger;
}

export interface LimiterStats {
  mode: LimiterMode;
  perWindow: number | null;
  windowMs: number;
  /** Spacing between request starts, all replicas together (0 when off). */
  minTimeMs: number;
  /** `schedule()` calls. */
  scheduled: number;
  /** Jobs that started. */
  started: number;
  /** Jobs not started yet in this process. */
  waiting: number;
  /** Sum over started jobs of the time from `schedule()` to start (queue, spacing, pauses). */
  waitMsTotal: number;
  /** `pauseFor` calls (429s reported by this process). */
  pauses: number;
  /** Times the Bottleneck instance was rebuilt after its Redis state was lost. */
  rebuilds: number;
  /** Times the send ledger held a request back because its slot came too late to keep the window (send-ledger.ts). */
  windowWaits: number;
}

export interface Limiter extends RequestGate {
  schedule<T>(fn: (slot?: GateSlot) => Promise<T>, options?: GateScheduleOptions): Promise<T>;
  /** Stops every replica from starting requests for `ms` (never shortens a longer pause). */
  pauseFor(ms: number): Promise<void>;
  /** Remaining shared pause, 0 when none. */
  pausedForMs(): Promise<number>;
  stats(): LimiterStats;
  close(): Promise<void>;
}

/**
 * Floor of the default safety margin. The spread it absorbs is absolute (a cold first fetch loading
 * undici, a TLS handshake, a GC pause, clock skew between hosts), not proportional to the window.
 */
const MIN_SAFETY_MS = 250;

/** How long close() waits for jobs already executing before dropping the connections. */
const CLOSE_WAIT_MS = 5_000;

export class LimiterClosedError extends Error {
  constructor() {
    super('rate limiter is closed');
    this.name = 'LimiterClosedError';
  }
}

export class LimiterUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'LimiterUnavailableError';
  }
}

/** The two errors Bottleneck's own recovery misses on Redis 7 (docs/architecture.md, "Traps we work around"). */
export function isLostStateError(error: unknown): boolean {
  return error instanceof Error && /\b(SETTINGS_KEY_NOT_FOUND|UNKNOWN_CLIENT)\b/.test(error.message);
}

/** Spacing that keeps `perWindow` requests per `windowMs` with `safetyMs` to spare (see header). */
export function spacingMs(perWindow: number, windowMs: number, safetyMs: number): number {
  return Math.ceil((windowMs + safetyMs) / perWindow);
}

/**
 * The largest number of timestamps inside any window of `windowMs` (closed on both ends, so it is
 * the strictest reading a service could use). Sorted input not required. Used by tests to prove the bound.
 */
export function maxInAnyWindow(timestamps: readonly number[], windowMs: number): number {
  const sorted = [...timestamps].sort((a, b) => a - b);
  let best = 0;
  let start = 0;
  for (let end = 0; end < sorted.length; end++) {
    while ((sorted[end] as number) - (sorted[start] as number) > windowMs) start++;
    best = Math.max(best, end - start + 1);
  }
  return best;
}

interface PauseStore {
  remainingMs(): Promise<number>;
  pauseFor(ms: number): Promise<void>;
}

function localPause(): PauseStore {
  let until = 0;
  return {
    remainingMs: async () => Math.max(0, until - Date.now()),
    pauseFor: async (ms) => {
      until = Math.max(until, Date.now() + ms);
    },
  };
}

// Extends, never shortens: PTTL is measured on the Redis clock, so replicas' clocks do not matter.
const EXTEND_PAUSE_LUA = `
local current = redis.call('pttl', KEYS[1])
if current < tonumber(ARGV[1]) then
  redis.call('set', KEYS[1], '1', 'PX', ARGV[1])
  return 1
end
return 0`;

function redisPause(client: Redis, key: string): PauseStore {
  return {
    async remainingMs() {
      const ttl = await client.pttl(key);
      return ttl > 0 ? ttl : 0;
    },
    async pauseFor(ms) {
      await client.eval(EXTEND_PAUSE_LUA, 1, key, String(Math.ceil(ms)));
    },
  };
}

// Moves Bottleneck's shared next start slot forward (never back). Internal field of 2.19.5's settings
// hash; pinned version, and a missing hash is left alone (Bottleneck recreates it).
const PUSH_NEXT_REQUEST_LUA = `
if redis.call('exists', KEYS[1]) == 0 then return 0 end
local current = tonumber(redis.call('hget', KEYS[1], 'nextRequest')) or 0
if current < tonumber(ARGV[1]) then
  redis.call('hset', KEYS[1], 'nextRequest', ARGV[1])
end
return 1`;

interface Generation {
  readonly bottleneck: Bottleneck;
  readonly dispose: () => Promise<void>;
  ready: Promise<void>;
  /** Set when `ready` rejected (e.g. Redis dropped mid-init): the instance is unusable. */
  failed: boolean;
  retired: boolean;
}

const PAUSED = Symbol('paused');
type JobOutcome<T> = typeof PAUSED | { value: T };

function validatePositiveInt(name: string, value: number): void {
  if (!Number.isInteger(value) || value <= 0) throw new TypeError(`limiter ${name} must be a positive integer, got ${value}`);
}

/** Settles with `promise`, or rejects with the abort reason as soon as `signal` aborts. */
function raceAbort<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    promise.catch(() => {});
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => {
      promise.catch(() => {});
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}

export function createLimiter(options: LimiterOptions): Limiter {
  const mode = options.mode ?? 'redis';
  const windowMs = options.windowMs ?? 60_000;
  validatePositiveInt('perMinute', options.perMinute);
  validatePositiveInt('windowMs', windowMs);
  if (mode === 'off') return createUnlimited(windowMs);
  const limiter = new SpacedLimiter(spacedSettings(options, mode, windowMs));
  // Methods bound, so callers may pass them around.
  return {
    schedule: (fn, scheduleOptions) => limiter.schedule(fn, scheduleOptions),
    pauseFor: (ms) => limiter.pauseFor(ms),
    pausedForMs: () => limiter.pausedForMs(),
    stats: () => limiter.stats(),
    close: () => limiter.close(),
  };
}

/** What a spaced limiter is built from: the options checked, and the spacing derived from them. */
interface SpacedSettings {
  mode: 'redis' | 'memory';
  perWindow: number;
  windowMs: number;
  minTime: number;
  maxConcurrent: number;
  /** Job expiration handed to Bottleneck. */
  expiration: number;
  readyTimeoutMs: number;
  maxRebuilds: number;
  pushOnStart: boolean;
  writeSettings: boolean;
  /** Bottleneck id (`<prefix>:<name>`); empty in memory mode. */
  id: string;
  /** Redis mode: the connections given (shared), or how to open the limiter's own. */
  redis: { shared: LimiterConnections } | { url: string; options: RedisOptions | undefined } | null;
  logger: Logger | undefined;
}

function spacedSettings(options: LimiterOptions, mode: 'redis' | 'memory', windowMs: number): SpacedSettings {
  const safetyMs = options.safetyMs ?? Math.max(MIN_SAFETY_MS, Math.ceil(windowMs / 50));
  const maxConcurrent = options.maxConcurrent ?? 4;
  validatePositiveInt('maxConcurrent', maxConcurrent);
  const minTime = spacingMs(options.perMinute, windowMs, safetyMs);
  let redis: SpacedSettings['redis'] = null;
  let id = '';
  if (mode === 'redis') {
    if (!options.connections && !options.redisUrl) throw new TypeError('limiter: redisUrl is required in redis mode');
    if (!options.prefix) throw new TypeError('limiter: prefix is required in redis mode');
    redis = options.connections ? { shared: options.connections } : { url: options.redisUrl as string, options: options.redisOptions };
    id = `${options.prefix}:${options.name ?? 'legacy'}`;
  }
  return {
    mode,
    perWindow: options.perMinute,
    windowMs,
    minTime,
    maxConcurrent,
    // Redis counts expiration from registration, which precedes the start by up to (maxConcurrent+1) slots.
    expiration: (options.jobExpirationMs ?? 120_000) + (maxConcurrent + 1) * minTime,
    readyTimeoutMs: options.readyTimeoutMs ?? 10_000,
    maxRebuilds: options.maxRebuilds ?? 3,
    pushOnStart: options.pushOnStart ?? false,
    writeSettings: options.writeSettings ?? true,
    id,
    redis,
    logger: options.logger,
  };
}

/** The `redis` and `memory` limiters: Bottleneck spacing (see header), rebuilt when its Redis state is lost. */
class SpacedLimiter {
  private readonly counters = { scheduled: 0, started: 0, waiting: 0, waitMsTotal: 0, pauses: 0, rebuilds: 0 };
  private closed = false;
  private lastWarnAt = 0;
  private readonly pause: PauseStore;
  private readonly ledger: SendLedger;
  /** Redis mode: the connections every instance, the pause and the ledger use. */
  private readonly connections: LimiterConnections | null;
  /** Whether `connections` are this limiter's own (closed with it) rather than the process's. */
  private readonly ownsConnections: boolean;
  private current: Generation;
  private readonly settings: SpacedSettings;

  constructor(settings: SpacedSettings) {
    this.settings = settings;
    const { redis } = settings;
    this.ownsConnections = redis !== null && !('shared' in redis);
    this.connections =
      redis === null
        ? null
        : 'shared' in redis
          ? redis.shared
          : createLimiterConnections({ redisUrl: redis.url, redisOptions: redis.options, onError: (error) => this.warnThrottled(error) });
    const ledgerSettings = {
      perWindow: settings.perWindow,
      windowMs: settings.windowMs,
      inFlightMs: settings.expiration,
      recheckMs: settings.minTime,
    };
    const client = this.connections?.commands;
    this.pause = client ? redisPause(client, `b_${settings.id}_pause`) : localPause();
    this.ledger = client ? redisLedger(client, `b_${settings.id}_ledger`, ledgerSettings) : localLedger(ledgerSettings);
    this.current = this.createGeneration(settings.pushOnStart);
  }

  private warnThrottled(error: unknown): void {
    const now = Date.now();
    if (now - this.lastWarnAt < 30_000) return;
    this.lastWarnAt = now;
    this.settings.logger?.warn({ limiter: this.settings.id || 'memory', err: error }, 'rate limiter error');
  }

  private createGeneration(push = true): Generation {
    const { minTime, maxConcurrent, id, writeSettings } = this.settings;
    const connections = this.connections;
    // Memory mode: no connections.
    if (!connections) {
      const bottleneck = new Bottleneck({ minTime, maxConcurrent });
      return { bottleneck, dispose: async () => {}, ready: Promise.resolve(), failed: false, retired: false };
    }
    const connection = connections.attach(id);
    const bottleneck = new Bottleneck({ id, datastore: 'ioredis', connection, minTime, maxConcurrent });
    const generation: Generation = {
      bottleneck,
      retired: false,
      failed: false,
      ready: Promise.resolve(),
      dispose: async () => {
        // An instance still starting subscribes and starts its heartbeat when it is ready: detach after that.
        await withTimeout(generation.ready, this.settings.readyTimeoutMs, () => new LimiterUnavailableError('not ready')).catch(() => {});
        await connections.detach(id, connection, bottleneck);
      },
    };
    bottleneck.on('error', (error: unknown) => this.onBottleneckError(generation, error));
    generation.ready = bottleneck.ready().then(async () => {
      // Bottleneck writes its settings to Redis only when the id has none, so a new rate under an id
      // Redis already holds (API_RATE_LIMIT changed, a budget re-rated) would keep the old spacing.
      // Typed as returning the limiter; it returns a promise of it (the Redis write).
      if (writeSettings) await Promise.resolve(bottleneck.updateSettings({ minTime, maxConcurrent }));
      // See header: a rebuilt state must not hand out a slot next to one the lost state issued.
      if (!push) return;
      await connections.commands.eval(PUSH_NEXT_REQUEST_LUA, 1, `b_${id}_settings`, String(Date.now() + (maxConcurrent + 1) * minTime));
    });
    // Surfaced to callers by currentGeneration(), which replaces a failed instance.
    generation.ready.catch(() => {
      generation.failed = true;
    });
    return generation;
  }

  private onBottleneckError(generation: Generation, error: unknown): void {
    if (generation.retired || this.closed) return;
    if (isLostStateError(error)) this.rebuild(generation, error);
    else this.warnThrottled(error);
  }

  /** Replaces `generation` unless someone already did; synchronous so concurrent callers rebuild once. */
  private rebuild(generation: Generation, cause: unknown): void {
    if (generation !== this.current || this.closed) return;
    generation.retired = true;
    this.counters.rebuilds += 1;
    this.settings.logger?.warn(
      { limiter: this.settings.id, reason: cause instanceof Error ? cause.message : String(cause) },
      'rate limiter state in Redis lost or unusable; rebuilding the Bottleneck instance (docs/architecture.md, "Traps we work around": Bottleneck 2.19.5 on Redis 7)',
    );
    this.current = this.createGeneration();
    void this.retire(generation);
  }

  /** Drops the old instance's waiting jobs (their callers retry on the new one) and closes its connections. */
  private async retire(generation: Generation, waitMs: number = this.settings.expiration): Promise<void> {
    generation.retired = true;
    try {
      await withTimeout(
        generation.bottleneck.stop({ dropWaitingJobs: true, dropErrorMessage: 'rate limiter instance retired' }),
        waitMs,
        () => new LimiterUnavailableError('retiring limiter timed out'),
      );
    } catch {
      // Executing jobs finish on their own; nothing else to wait for.
    }
    await generation.dispose().catch(() => {});
  }

  /** The usable instance; an instance whose start-up failed is replaced once per call. */
  private async currentGeneration(): Promise<Generation> {
    const { readyTimeoutMs } = this.settings;
    for (let attempt = 0; ; attempt++) {
      if (this.closed) throw new LimiterClosedError();
      const generation = this.current;
      try {
        await withTimeout(
          generation.ready,
          readyTimeoutMs,
          () => new LimiterUnavailableError(`rate limiter could not reach Redis within ${readyTimeoutMs} ms`),
        );
      } catch (error) {
        // A timeout means Redis is unreachable: fail fast. A rejected start-up would never recover.
        if (!generation.failed || attempt > 0) throw error;
        this.rebuild(generation, error);
        continue;
      }
      if (this.closed) throw new LimiterClosedError();
      return generation;
    }
  }

  private async waitWhilePaused(signal: AbortSignal | undefined): Promise<void> {
    for (;;) {
      const remaining = await this.pause.remainingMs();
      if (remaining <= 0) return;
      await sleep(remaining, signal);
    }
  }

  /** One pass through Bottleneck; rebuilds and retries when the shared state was lost before `fn` started. */
  private async runInSlot<T>(fn: () => Promise<T>, signal: AbortSignal | undefined, onStart: () => void): Promise<JobOutcome<T>> {
    for (let rebuildsLeft = this.settings.maxRebuilds; ;) {
      const generation = await this.currentGeneration();
      let started = false;
      try {
        const job = generation.bottleneck.schedule({ expiration: this.settings.expiration }, async (): Promise<JobOutcome<T>> => {
          if (generation.retired) throw new LimiterUnavailableError('rate limiter instance retired');
          // An abandoned job still takes its slot, but sends nothing.
          signal?.throwIfAborted();
          if ((await this.pause.remainingMs()) > 0) return PAUSED;
          const entry = await this.ledger.admit(signal);
          // A 429 may have paused everyone while it waited for room.
          if (entry.waited && (await this.pause.remainingMs()) > 0) {
            await entry.cancel();
            return PAUSED;
          }
          started = true;
          onStart();
          try {
            return { value: await fn() };
          } finally {
            await entry.ended();
          }
        });
        return await (signal ? raceAbort(job, signal) : job);
      } catch (error) {
        // Never run `fn` twice: once it started, its outcome is the caller's.
        if (started) throw error;
        if (this.closed) throw new LimiterClosedError();
        if (signal?.aborted) throw error;
        const recoverable = generation.retired || isLostStateError(error);
        if (!recoverable || rebuildsLeft <= 0) throw error;
        rebuildsLeft -= 1;
        this.rebuild(generation, error);
      }
    }
  }

  async schedule<T>(fn: () => Promise<T>, scheduleOptions?: { signal?: AbortSignal }): Promise<T> {
    if (this.closed) throw new LimiterClosedError();
    const signal = scheduleOptions?.signal;
    const queuedAt = performance.now();
    const counters = this.counters;
    counters.scheduled += 1;
    counters.waiting += 1;
    let counted = false;
    const onStart = (): void => {
      counted = true;
      counters.waiting -= 1;
      counters.started += 1;
      counters.waitMsTotal += performance.now() - queuedAt;
    };
    try {
      for (;;) {
        await this.waitWhilePaused(signal);
        const outcome = await this.runInSlot(fn, signal, onStart);
        if (outcome !== PAUSED) return outcome.value;
      }
    } finally {
      if (!counted) counters.waiting -= 1;
    }
  }

  async pauseFor(ms: number): Promise<void> {
    if (!(ms > 0)) return;
    this.counters.pauses += 1;
    await this.pause.pauseFor(ms);
  }

  pausedForMs(): Promise<number> {
    return this.pause.remainingMs();
  }

  stats(): LimiterStats {
    const { mode, perWindow, windowMs, minTime } = this.settings;
    return { mode, perWindow, windowMs, minTimeMs: minTime, ...this.counters, windowWaits: this.ledger.waits };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // Requests in flight have their own timeout; do not hold shutdown much longer for them.
    await this.retire(this.current, Math.min(this.settings.expiration, CLOSE_WAIT_MS));
    if (this.ownsConnections) await this.connections?.close();
  }
}

/** `rateLimit off`: no spacing, no Redis; still honours a 429's pause in this process. */
function createUnlimited(windowMs: number): Limiter {
  const pause = localPause();
  const counters = { scheduled: 0, started: 0, waiting: 0, waitMsTotal: 0, pauses: 0, rebuilds: 0 };
  let closed = false;
  return {
    async schedule<T>(fn: () => Promise<T>, options?: { signal?: AbortSignal }): Promise<T> {
      if (closed) throw new LimiterClosedError();
      const queuedAt = performance.now();
      counters.scheduled += 1;
      const remaining = await pause.remainingMs();
      if (remaining > 0) await sleep(remaining, options?.signal);
      options?.signal?.throwIfAborted();
      counters.started += 1;
      counters.waitMsTotal += performance.now() - queuedAt;
      return fn();
    },
    async pauseFor(ms) {
      if (!(ms > 0)) return;
      counters.pauses += 1;
      await pause.pauseFor(ms);
    },
    pausedForMs: () => pause.remainingMs(),
    stats: () => ({ mode: 'off', perWindow: null, windowMs, minTimeMs: 0, ...counters, windowWaits: 0 }),
    async close() {
      closed = true;
    },
  };
}

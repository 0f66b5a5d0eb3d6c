/**
 * The limiter's second guard (invariant 7): a ledger of the requests actually sent, checked when a
 * request is about to go out, so the budget holds however late a start slot's timer fires.
 *
 * Bottleneck's spacing (limiter.ts) hands out start slots `minTime` apart and trusts that each
 * request reaches the service within `safetyMs` of its slot. A busy event loop breaks that trust: a
 * slot's timer that fires late lets its request land next to later ones, one over the limit in a
 * window (seen on a machine loaded 20 on 2 cores). The ledger makes the bound independent of timing:
 *
 * - admission, just before the request is sent, reads the clock (Redis `TIME`, one clock for every
 *   replica) and records the request as in flight;
 * - when the answer arrives, its entry is stamped with that time (its end);
 * - a request is admitted only while fewer than `perWindow` entries end within the last `windowMs`
 *   (an entry in flight counts until it ends, or until `inFlightMs` if its process died).
 *
 * The service sees each request arrive between its admission and its end. For `perWindow + 1`
 * arrivals inside one window, take the one admitted last: every other one was admitted before it and
 * arrived at most `windowMs` before it was admitted, so it ended no earlier than that and was still
 * counted. The last one would not have been admitted. In steady use nothing waits: with the spacing,
 * the entry `perWindow` places back ended `safetyMs` minus its latency before the window.
 */
import { randomUUID } from 'node:crypto';
import { sleep } from '../ground/wait.js';
import type { Redis } from 'ioredis';

/** A request the ledger admitted; call `ended` once its answer (or failure) is in, `cancel` if it was never sent. */
export interface LedgerEntry {
  /** It had to wait for room: anything decided before (a pause) is worth checking again. */
  readonly waited: boolean;
  ended(): Promise<void>;
  cancel(): Promise<void>;
}

export interface SendLedger {
  /** Waits until one more request fits the window, then records it as in flight. */
  admit(signal?: AbortSignal): Promise<LedgerEntry>;
  /** Times `admit` had to wait (the spacing alone would have gone over the limit). */
  readonly waits: number;
}

export interface LedgerSettings {
  perWindow: number;
  windowMs: number;
  /** How long an entry whose process died counts as in flight (longer than any request can take). */
  inFlightMs: number;
  /** The longest single wait before asking again (an entry in flight may end any moment). */
  recheckMs: number;
}

/** Where the entries live: the three operations the Redis and the in-process ledgers differ in. */
interface EntryStore {
  /** One admission attempt: 0 when admitted, else how long until the oldest counted entry leaves the window. */
  admit(token: string): Promise<number>;
  /** Stamps the entry with its end time. */
  end(token: string): Promise<void>;
  remove(token: string): Promise<void>;
}

/** The ledger over `store`: waits for room (rechecking at most every `recheckMs`), then hands out the entry. */
function ledgerOver(store: EntryStore, settings: LedgerSettings): SendLedger {
  let waits = 0;
  return {
    get waits() {
      return waits;
    },
    async admit(signal) {
      const token = randomUUID();
      let waited = false;
      for (;;) {
        signal?.throwIfAborted();
        const waitMs = await store.admit(token);
        if (waitMs <= 0) break;
        if (!waited) waits += 1;
        waited = true;
        await sleep(Math.min(waitMs, settings.recheckMs), signal);
      }
      return { waited, ended: () => store.end(token), cancel: () => store.remove(token) };
    },
  };
}

// Scores are end times (ms on the Redis clock); an entry in flight scores its give-up time.
const ADMIT_LUA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - window))
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[4])
  redis.call('PEXPIRE', KEYS[1], window + tonumber(ARGV[3]))
  return 0
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return math.max(1, tonumber(oldest[2]) + window - now + 1)`;

const END_LUA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], 'XX', now, ARGV[1])
return 1`;

/** The ledger every replica shares, in one sorted set at `key`. */
export function redisLedger(client: Redis, key: string, settings: LedgerSettings): SendLedger {
  const { windowMs, perWindow, inFlightMs } = settings;
  return ledgerOver(
    {
      admit: async (token) => Number(await client.eval(ADMIT_LUA, 1, key, String(windowMs), String(perWindow), String(inFlightMs), token)),
      // Failing to stamp leaves the entry counting until `inFlightMs`: slower, never over.
      end: async (token) => void (await client.eval(END_LUA, 1, key, token).catch(() => undefined)),
      remove: async (token) => void (await client.zrem(key, token).catch(() => undefined)),
    },
    settings,
  );
}

/** The same ledger for one process (`memory` mode), on its monotonic clock. */
export function localLedger(settings: LedgerSettings, now: () => number = () => performance.now()): SendLedger {
  const entries = new Map<string, number>();
  return ledgerOver(
    {
      async admit(token) {
        const at = now();
        for (const [t, end] of entries) if (end < at - settings.windowMs) entries.delete(t);
        if (entries.size < settings.perWindow) {
          entries.set(token, at + settings.inFlightMs);
          return 0;
        }
        const oldest = Math.min(...entries.values());
        return Math.max(1, Math.ceil(oldest + settings.windowMs - at) + 1);
      },
      async end(token) {
        if (entries.has(token)) entries.set(token, now());
      },
      async remove(token) {
        entries.delete(token);
      },
    },
    settings,
  );
}

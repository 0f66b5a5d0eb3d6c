/**
 * Which worker replica reads which account (docs/architecture.md, "Accounts spread over replicas").
 *
 * Why: every replica ran every account's poll path (its limiter, sync worker, schedules, audit and
 * field refresh), so a replica's memory grew with all of the deployment's accounts however many
 * replicas there were, and which replica read whose pages was left to which one took the job first.
 * Now each live replica announces itself in Redis, and every replica derives the same assignment
 * from the same list of replicas: the accounts that read, in one fixed order, dealt out in turn.
 * With fewer accounts than replicas each account is read by several, whose passes still spread
 * between them through its queue, as one account's always did.
 *
 * Safe at every moment, not only once the replicas agree: while they disagree (one joined or left a
 * heartbeat ago) an account may be read by two replicas, which its pass locks make harmless, or by
 * none for at most a heartbeat, which its queue waits out.
 */
import type { Redis } from 'ioredis';
import type { Logger } from '../ground/log.js';
import { repeat, type Repeating } from '../ground/repeat.js';
import { sleep } from '../ground/wait.js';

/** How often a replica announces itself (and learns who else is there). */
export const HEARTBEAT_MS = 1_000;
/** A replica not heard from for this long is gone: its accounts go to the others. */
export const REPLICA_TTL_MS = 6_000;

/** The deployment's list of live worker replicas (a sorted set: replica id → last heartbeat, Redis's clock). */
export function replicasKey(namespace: string): string {
  return `${namespace}:worker-replicas`;
}

/** What each live replica reads (a hash: replica id → its accounts, comma-separated), for `status`. */
function readsKey(namespace: string): string {
  return `${namespace}:worker-replicas:reads`;
}

/**
 * Every account each live replica serves, read or not (a hash like the reads'): its consumer applies
 * the account's deliveries even where another replica reads it, so `accounts remove` asks this.
 */
function servesKey(namespace: string): string {
  return `${namespace}:worker-replicas:serves`;
}

// Redis's clock, not each replica's: replicas on hosts whose clocks differ still agree on who is live.
const REDIS_NOW_MS = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)`;

// A gone replica's entry leaves the list and both hashes together. '-': nothing to say this time.
const HEARTBEAT = `${REDIS_NOW_MS}
local cutoff = now - tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff)) do
  redis.call('HDEL', KEYS[2], gone)
  redis.call('HDEL', KEYS[3], gone)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', cutoff)
if ARGV[3] ~= '-' then redis.call('HSET', KEYS[2], ARGV[1], ARGV[3]) end
if ARGV[4] ~= '-' then redis.call('HSET', KEYS[3], ARGV[1], ARGV[4]) end
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
return redis.call('ZRANGE', KEYS[1], 0, -1)`;

/** An account list as the hashes hold it; '-' when there is none to publish. */
function listArg(accounts: readonly string[] | undefined): string {
  return accounts === undefined ? '-' : accounts.join(',');
}

/**
 * Announces `id` as live (and, when given, the accounts it reads and those it serves) and returns
 * every live replica's id (itself included), sorted.
 */
export async function heartbeat(
  redis: Redis,
  namespace: string,
  id: string,
  options: { ttlMs?: number; reads?: readonly string[]; serves?: readonly string[] } = {},
): Promise<string[]> {
  const ttlMs = options.ttlMs ?? REPLICA_TTL_MS;
  const keys = [replicasKey(namespace), readsKey(namespace), servesKey(namespace)];
  const live = (await redis.eval(HEARTBEAT, 3, ...keys, id, String(ttlMs), listArg(options.reads), listArg(options.serves))) as string[];
  return [...live].sort();
}

const LIVE_LISTS = `${REDIS_NOW_MS}
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], now - tonumber(ARGV[1]), '+inf')) do
  table.insert(out, id)
  table.insert(out, redis.call('HGET', KEYS[2], id) or '-')
end
return out`;

/** The live replicas and the list each published in `hash` (null: it has not said yet), by replica id. */
async function liveReplicaLists(redis: Redis, namespace: string, hash: string, ttlMs: number): Promise<Map<string, string[] | null>> {
  const flat = (await redis.eval(LIVE_LISTS, 2, replicasKey(namespace), hash, String(ttlMs))) as string[];
  const lists = new Map<string, string[] | null>();
  for (let i = 0; i + 1 < flat.length; i += 2) {
    const said = flat[i + 1] as string;
    lists.set(flat[i] as string, said === '-' ? null : said === '' ? [] : said.split(','));
  }
  return lists;
}

/**
 * The live worker replicas and what each one said it reads (null: it has not said yet), by
 * replica id: what `status` shows of who reads each account.
 */
export function liveReplicaReads(redis: Redis, namespace: string, ttlMs = REPLICA_TTL_MS): Promise<Map<string, string[] | null>> {
  return liveReplicaLists(redis, namespace, readsKey(namespace), ttlMs);
}

/**
 * The live worker replicas and every account each one serves (null: it has not said yet; a replica
 * says so with its first heartbeat), by replica id: what `accounts remove` waits to be empty of.
 */
export function liveReplicaServes(redis: Redis, namespace: string, ttlMs = REPLICA_TTL_MS): Promise<Map<string, string[] | null>> {
  return liveReplicaLists(redis, namespace, servesKey(namespace), ttlMs);
}

/**
 * The accounts some live replica serves and another does not (sorted), of those that said: replicas
 * whose ACCOUNTS differ deal the accounts out over different lists, so until they are restarted with
 * the same settings an account may be read by two replicas or by none.
 */
export function accountsDeclaredApart(serves: ReadonlyMap<string, readonly string[] | null>): string[] {
  const said = [...serves.values()].filter((accounts): accounts is readonly string[] => accounts !== null);
  const union = new Set(said.flat());
  return [...union].filter((account) => said.some((accounts) => !accounts.includes(account))).sort();
}

/**
 * The accounts replica `self` reads, of `accounts` (every replica passes them in the same order) among
 * the `replicas` live now. Account i goes to replica i mod R; with fewer accounts than replicas,
 * replica j also reads account j mod A, so that every replica reads one and every account is read.
 * A replica missing from the list (its heartbeat did not reach Redis) reads every account.
 */
export function accountsToRead<T>(accounts: readonly T[], replicas: readonly string[], self: string): T[] {
  const live = [...new Set(replicas)].sort();
  const j = live.indexOf(self);
  if (j < 0) return [...accounts];
  const r = live.length;
  const a = accounts.length;
  return accounts.filter((_, i) => i % r === j || (a > 0 && j % a === i));
}

/** What every heartbeat of a replica says besides that it is live. */
type Said = { ttlMs: number; serves?: readonly string[] };

/** How long a starting replica tries to announce itself before it reads every account instead. */
const FIRST_HEARTBEAT_WITHIN_MS = 5_000;

/** The first heartbeat, tried again for a few seconds: a client that fails fast may still be connecting. */
async function firstHeartbeat(redis: Redis, namespace: string, id: string, said: Said): Promise<string[]> {
  const deadline = Date.now() + FIRST_HEARTBEAT_WITHIN_MS;
  for (;;) {
    try {
      return await heartbeat(redis, namespace, id, said);
    } catch (error) {
      if (Date.now() >= deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

/** A starting replica takes the list of live replicas once this many heartbeats in a row found it unchanged... */
export const SETTLE_QUIET_HEARTBEATS = 3;
/** ...or after this many heartbeats, when replicas keep coming and going. */
export const SETTLE_HEARTBEATS_AT_MOST = 10;

/**
 * The list of live replicas once {@link SETTLE_QUIET_HEARTBEATS} heartbeats in a row found the list
 * `first` or the heartbeat before found (at most {@link SETTLE_HEARTBEATS_AT_MOST} heartbeats).
 *
 * Why: replicas started together (`docker compose up --scale worker=3`) do not reach their first
 * heartbeat together. Each migrates under a lock after the one before and then starts its accounts'
 * parts on a shared CPU: of three replicas spawned together on two cores, each was through its
 * migrations up to 0.6 s after the one before, and of three spawned 0.7 s apart, 2 s after. Waiting
 * one fixed heartbeat, the first ones dealt the accounts out among themselves, started reading,
 * and then handed accounts over to the last one, whose passes stop at a checkpoint and resume there
 * seconds later (docs/benchmarks.md, "accounts").
 */
export async function settledList(first: readonly string[], beat: () => Promise<string[]>, everyMs: number): Promise<string[]> {
  let list = [...first];
  let quiet = 0;
  for (let i = 0; i < SETTLE_HEARTBEATS_AT_MOST && quiet < SETTLE_QUIET_HEARTBEATS; i++) {
    await sleep(everyMs);
    const next = await beat();
    quiet = next.join('\n') === list.join('\n') ? quiet + 1 : 0;
    list = next;
  }
  return list;
}

export interface ReplicaSpread {
  /** Stops announcing this replica and takes it off the list, so that the others take its accounts at their next heartbeat. */
  leave(): Promise<void>;
}

export interface ReplicaSpreadOptions {
  redis: Redis;
  /** REDIS_PREFIX: one list per deployment. */
  namespace: string;
  /** This replica's id, unique among the deployment's processes. */
  id: string;
  /** Every account this replica serves (its declared ones, read here or not), published with each heartbeat. */
  serves?: readonly string[];
  logger: Logger;
  /**
   * Called with the live replicas (sorted, this one included) when the list changed, and with this
   * replica alone when Redis cannot be reached at the first heartbeat; answers with the accounts
   * this replica reads now, which its heartbeats publish. Calls never overlap; a list that changes
   * during one is handed over once it ended (only the latest).
   */
  onReplicas(replicas: readonly string[]): Promise<readonly string[]>;
  everyMs?: number;
  ttlMs?: number;
  /**
   * Whether to wait for the list to settle before the first hand-over (default true; see
   * {@link settledList}). Pointless when every replica reads the same accounts whatever the list (a
   * deployment with one account that reads).
   */
  settle?: boolean;
}

/**
 * Announces this replica every heartbeat and hands each new list of live replicas to `onReplicas`.
 * The heartbeat never waits for `onReplicas` (handing an account over waits for its passes to reach
 * a checkpoint): a replica busy with that must not look gone to the others.
 *
 * Resolves once the first list was handed over, which a replica that starts beside others waits
 * to settle first ({@link settledList}).
 */
export async function joinReplicas(options: ReplicaSpreadOptions): Promise<ReplicaSpread> {
  const { redis, id, logger, namespace } = options;
  const everyMs = options.everyMs ?? HEARTBEAT_MS;
  const ttlMs = options.ttlMs ?? REPLICA_TTL_MS;
  const said: Said = { ttlMs, ...(options.serves ? { serves: options.serves } : {}) };
  let left = false;
  let handed = '';
  let latest: readonly string[] = [id];
  // What this replica reads, as its heartbeats publish it (undefined until the first list is handed over).
  let reads: readonly string[] | undefined;
  let handing: Promise<void> | null = null;

  // One handing-over at a time, always of the latest list; a failed one is tried again with the next list.
  const runHandOver = async (): Promise<void> => {
    try {
      while (!left && latest.join('\n') !== handed) {
        const list = latest;
        handed = list.join('\n');
        reads = await options.onReplicas(list);
        // Published now rather than at the next heartbeat: `status` shows who reads what.
        latest = await heartbeat(redis, namespace, id, { ...said, reads }).catch(() => latest);
      }
    } catch (error) {
      handed = '';
      logger.warn({ err: error }, 'handing accounts between worker replicas failed; trying again at the next heartbeat');
    }
  };
  const handOver = (): Promise<void> => {
    // Set before the run starts: a run with nothing to do ends synchronously.
    if (handing === null) handing = runHandOver().finally(() => (handing = null));
    return handing;
  };
  let joined = false;
  const announce = async (): Promise<void> => {
    latest = await heartbeat(redis, namespace, id, { ...said, ...(reads ? { reads } : {}) });
    if (joined && !left) void handOver();
  };

  try {
    latest = await firstHeartbeat(redis, namespace, id, said);
    if (options.settle !== false) latest = await settledList(latest, () => heartbeat(redis, namespace, id, said), everyMs);
  } catch (error) {
    // Redis away at start: read every account (the pass locks keep that safe) until it answers.
    logger.warn({ err: error }, 'cannot announce this worker replica in Redis; it reads every account until Redis answers');
  }
  // Beating from here on, while the first accounts start (twenty of them take a few seconds).
  const beat: Repeating = repeat(announce, {
    firstDelayMs: everyMs,
    nextDelayMs: () => everyMs,
    // The last assignment stands while Redis is away: the others, no longer hearing from this
    // replica, take its accounts too, and the pass locks keep two replicas reading one account safe.
    onError: (error) => logger.debug({ err: error }, 'worker replica heartbeat failed; it keeps the accounts it reads'),
  });
  // The first list's failure is the start's (the caller reports it), not something to retry quietly.
  const first = latest;
  try {
    reads = await options.onReplicas(first);
  } catch (error) {
    beat.stop();
    await leaveList(redis, namespace, id);
    throw error;
  }
  handed = first.join('\n');
  joined = true;
  void handOver();
  return {
    async leave() {
      left = true;
      beat.stop();
      await handing;
      await leaveList(redis, namespace, id);
    },
  };
}

/** Takes `id` off the list and out of the hashes (best effort: gone from all within the time to live anyway). */
async function leaveList(redis: Redis, namespace: string, id: string): Promise<void> {
  await redis
    .multi()
    .zrem(replicasKey(namespace), id)
    .hdel(readsKey(namespace), id)
    .hdel(servesKey(namespace), id)
    .exec()
    .catch(() => null);
}

/**
 * The Redis connections of a process's limiters, shared by all of them (a worker serving 20
 * accounts opened some 500 connections, four per limiter, and each costs its process about 0.2 MB).
 *
 * - One command client carries every limiter's pause and send ledger, and Bottleneck's scripts.
 * - One Bottleneck connection (that client and one subscriber) carries every Bottleneck instance.
 *   Bottleneck 2.19.5 routes a channel of a connection to one instance, and every instance of an id
 *   listens on the same channel (`b_<id>`, where replicas announce freed capacity). Two live instances
 *   of one id (a rebuilt or re-rated limiter beside the one it replaces, limiter.ts) therefore never
 *   share a connection: the second goes on another, opened for it and closed once it is empty. At
 *   rest a process holds two connections, however many limiters and accounts it serves.
 *
 * Trap (docs/architecture.md, "Traps we work around"): Bottleneck's own removal of an instance from a
 * shared connection unsubscribes in a promise nobody holds (an unhandled rejection when Redis is
 * down) and deletes the channels' routes whichever instance they point at. `detach` removes its
 * own routes and waits for the unsubscription before the connection may take that id again.
 */
import Bottleneck from 'bottleneck';
import { Redis, type RedisOptions } from 'ioredis';

/** The parts of Bottleneck 2.19.5's IORedisConnection (lib/IORedisConnection.js) that `detach` needs. */
interface ConnectionInternals {
  client: Redis;
  subscriber: Redis;
  /** Channel to the instance its messages go to. */
  limiters: Record<string, Bottleneck | undefined>;
  terminated: boolean;
}

/** The parts of a Bottleneck 2.19.5 instance on Redis (lib/RedisDatastore.js) that `detach` needs. */
interface InstanceInternals {
  _store: { heartbeat?: ReturnType<typeof setInterval> };
  channel_client(): string;
}

const internals = (connection: Bottleneck.IORedisConnection) => connection as unknown as ConnectionInternals;

/**
 * Marks every command in flight on `redis` handled, so that closing the connection at once leaves no
 * rejection unhandled (docs/architecture.md, "Traps we work around": ioredis). The re-subscription
 * ioredis sends by itself when a subscriber's connection is back is a promise nobody holds: a
 * connection closed right then ended the worker with an unhandled rejection ("Connection is
 * closed."; found by the fault suite). The callers of every other command still get their rejection.
 */
export function catchInFlight(redis: Redis): void {
  for (const { command } of redis.commandQueue.toArray()) {
    // Typed as what the queue needs of it; each is an ioredis Command, whose promise its caller (if any) holds.
    const { promise } = command as { promise?: Promise<unknown> };
    promise?.catch(() => {});
  }
}

export interface LimiterConnectionsOptions {
  redisUrl: string;
  redisOptions?: RedisOptions;
  /** Connection errors, each as it happens (the caller throttles). */
  onError?: (error: unknown) => void;
}

export interface LimiterConnections {
  /** The client for pauses and send ledgers (plain commands, never blocking). */
  readonly commands: Redis;
  /** A Bottleneck connection on which no live instance of `id` is: the shared one unless one is. */
  attach(id: string): Bottleneck.IORedisConnection;
  /** Removes `instance` (of `id`) from `connection`; a connection opened for it closes once empty. */
  detach(id: string, connection: Bottleneck.IORedisConnection, instance: Bottleneck): Promise<void>;
  /** Connections open now, Bottleneck's subscribers and clients and the command client together. */
  openConnections(): number;
  close(): Promise<void>;
}

interface Slot {
  connection: Bottleneck.IORedisConnection;
  /** Ids with an instance on it, live or still detaching. */
  ids: Set<string>;
}

export function createLimiterConnections(options: LimiterConnectionsOptions): LimiterConnections {
  const redisOptions: RedisOptions = { maxRetriesPerRequest: 2, connectTimeout: 5_000, ...options.redisOptions };
  const onError = options.onError ?? (() => {});
  const commands = new Redis(options.redisUrl, redisOptions);
  commands.on('error', onError);
  const slots: Slot[] = [];
  let closed = false;

  const open = (client: Redis): Slot => {
    const connection = new Bottleneck.IORedisConnection({ client, Redis });
    connection.on('error', onError);
    const slot = { connection, ids: new Set<string>() };
    slots.push(slot);
    return slot;
  };

  const dispose = async (connection: Bottleneck.IORedisConnection): Promise<void> => {
    const { client, subscriber } = internals(connection);
    for (const redis of [client, subscriber]) catchInFlight(redis);
    await connection.disconnect(false);
  };

  return {
    commands,
    attach(id) {
      if (closed) throw new Error('limiter connections are closed');
      // The first slot shares the command client; another gets a client of its own, closed with it.
      const slot = slots.find((s) => !s.ids.has(id)) ?? open(slots.length === 0 ? commands : commands.duplicate());
      slot.ids.add(id);
      return slot.connection;
    },
    async detach(id, connection, instance) {
      const slot = slots.find((s) => s.connection === connection);
      if (!slot) return;
      const { limiters, subscriber, terminated } = internals(connection);
      const own = instance as unknown as InstanceInternals;
      clearInterval(own._store.heartbeat);
      const channels = [instance.channel(), own.channel_client()].filter((channel) => limiters[channel] === instance);
      for (const channel of channels) delete limiters[channel];
      // A connection down now re-subscribes these when it is back; their messages then go nowhere.
      if (channels.length > 0 && !terminated) await subscriber.unsubscribe(...channels).catch(() => {});
      slot.ids.delete(id);
      if (slot !== slots[0] && slot.ids.size === 0) {
        slots.splice(slots.indexOf(slot), 1);
        await dispose(connection);
      }
    },
    openConnections: () => 1 + slots.reduce((n, s) => n + (s === slots[0] ? 1 : 2), 0),
    async close() {
      if (closed) return;
      closed = true;
      const primary = slots[0];
      await Promise.all(slots.splice(0).map((slot) => dispose(slot.connection)));
      if (!primary) {
        catchInFlight(commands);
        commands.disconnect();
      }
    },
  };
}

/**
 * Per-client limits of the public listener (docs/operations.md, "Public surface"): one client must
 * not be able to take every socket or every request slot, so that another client's delivery is not
 * delayed by it (docs/security.md, "What is public").
 *
 * - **Connections** per socket remote address (`HTTP_MAX_CONNECTIONS_PER_CLIENT`): one more is
 *   closed as it is accepted. A peer that `TRUST_PROXY` trusts is a proxy carrying many clients: its
 *   connections count against `HTTP_MAX_CONNECTIONS` only (the proxy limits its own clients).
 * - **Requests** per client address (`HTTP_REQUEST_RATE_PER_CLIENT`, the address Fastify derives,
 *   so `TRUST_PROXY` applies as it does for the admin throttle): a token bucket of one second's
 *   worth, taken when the headers have arrived, before any body byte is read; an empty bucket is
 *   answered 429 with `Retry-After`. A request that turns out a signed delivery gives its token
 *   back, so a client that only sends valid deliveries is never refused (it cannot have more in
 *   flight than its connections, which the default keeps below the rate).
 *
 * Both are per process and in memory, like the admin throttle: they must hold while Redis is away.
 */
import type http from 'node:http';
import { BlockList, isIP, type Socket } from 'node:net';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { answerBeforeBody } from '../webhooks/early-answer.js';

/** TRUST_PROXY as the server takes it. */
export type TrustProxy = boolean | number | string[] | undefined;

/** Clients tracked at once by the request bucket; the oldest is forgotten beyond it (memory bound). */
const MAX_TRACKED_CLIENTS = 100_000;

// ---------------------------------------------------------------------------------------------
// Connections

/** Whether a socket peer is a proxy TRUST_PROXY trusts (a hop count trusts the nearest peer). */
export function trustedPeer(trustProxy: TrustProxy): (address: string) => boolean {
  if (trustProxy === true || (typeof trustProxy === 'number' && trustProxy > 0)) return () => true;
  if (!Array.isArray(trustProxy)) return () => false;
  const list = new BlockList();
  for (const entry of trustProxy) {
    const [address = '', bits] = entry.split('/');
    const family = isIP(address) === 6 ? 'ipv6' : 'ipv4';
    if (bits === undefined) list.addAddress(address, family);
    else list.addSubnet(address, Number(bits), family);
  }
  return (address) => {
    const plain = address.startsWith('::ffff:') && isIP(address.slice(7)) === 4 ? address.slice(7) : address;
    return list.check(plain, isIP(plain) === 6 ? 'ipv6' : 'ipv4');
  };
}

export interface ConnectionLimit {
  /** Open connections per address now (tests, metrics). */
  open(address: string): number;
}

/**
 * Closes a connection as it is accepted when its remote address already holds `max` (0: no limit).
 * Counting starts at accept and ends at close, whatever the socket did in between.
 *
 * The check runs before the HTTP server sees the socket (its `connection` event is intercepted), so
 * a refused connection costs no parser, timer nor listener: a client that reconnects as fast as it
 * is refused spends the server's accept loop, not its request handling. It is reset rather than
 * closed (no TIME_WAIT left behind on our side for each of them).
 */
export function limitConnectionsPerClient(
  server: http.Server,
  max: number,
  options: { exempt?: (address: string) => boolean; onRefused?: () => void } = {},
): ConnectionLimit {
  const counts = new Map<string, number>();
  const admit = (socket: Socket): boolean => {
    const address = socket.remoteAddress ?? '';
    if (options.exempt?.(address)) return true;
    const held = counts.get(address) ?? 0;
    if (held >= max) return false;
    counts.set(address, held + 1);
    socket.once('close', () => {
      const left = (counts.get(address) ?? 1) - 1;
      if (left <= 0) counts.delete(address);
      else counts.set(address, left);
    });
    return true;
  };
  if (max > 0) {
    const emit = server.emit.bind(server) as (event: string | symbol, ...args: unknown[]) => boolean;
    server.emit = (event: string | symbol, ...args: unknown[]): boolean => {
      if (event === 'connection' && !admit(args[0] as Socket)) {
        options.onRefused?.();
        (args[0] as Socket).resetAndDestroy();
        return false;
      }
      return emit(event, ...args);
    };
  }
  return { open: (address) => counts.get(address) ?? 0 };
}

// ---------------------------------------------------------------------------------------------
// Request rate

export interface RequestRate {
  /** Takes a token for `client`: true when it had one. */
  take(client: string): boolean;
  /** Gives a token back (the request was a signed delivery). */
  giveBack(client: string): void;
  /** Seconds until `client` has a token again (at least 1). */
  retryAfterSeconds(client: string): number;
}

interface Bucket {
  tokens: number;
  at: number;
}

/** A token bucket per client: `perSecond` tokens a second, holding at most one second's worth. */
export function createRequestRate(perSecond: number, now: () => number = Date.now): RequestRate {
  const buckets = new Map<string, Bucket>();
  const refill = (client: string): Bucket => {
    const t = now();
    const bucket = buckets.get(client);
    if (!bucket) {
      if (buckets.size >= MAX_TRACKED_CLIENTS) buckets.delete(buckets.keys().next().value as string);
      const fresh = { tokens: perSecond, at: t };
      buckets.set(client, fresh);
      return fresh;
    }
    bucket.tokens = Math.min(perSecond, bucket.tokens + ((t - bucket.at) / 1000) * perSecond);
    bucket.at = t;
    if (bucket.tokens >= perSecond) {
      // Full again: nothing to remember (and most recently seen last, for the eviction order).
      buckets.delete(client);
      buckets.set(client, bucket);
    }
    return bucket;
  };
  return {
    take(client) {
      const bucket = refill(client);
      if (bucket.tokens < 1) return false;
      bucket.tokens -= 1;
      return true;
    },
    giveBack(client) {
      const bucket = buckets.get(client);
      if (bucket) bucket.tokens = Math.min(perSecond, bucket.tokens + 1);
    },
    retryAfterSeconds(client) {
      const bucket = refill(client);
      return Math.max(1, Math.ceil((1 - bucket.tokens) / perSecond));
    },
  };
}

/**
 * Registers the request rate on `app` (0: no limit): a request without a token is answered 429
 * before its body is read; one that `welcome` says was a signed delivery gives its token back.
 */
export function limitRequestRatePerClient(
  app: FastifyInstance,
  perSecond: number,
  options: { welcome: (request: FastifyRequest, reply: FastifyReply) => boolean; onRefused?: () => void },
): void {
  if (perSecond <= 0) return;
  const rate = createRequestRate(perSecond);
  const counted = new WeakSet<FastifyRequest>();
  app.addHook('onRequest', async (request, reply) => {
    if (rate.take(request.ip)) {
      counted.add(request);
      return;
    }
    options.onRefused?.();
    answerBeforeBody(request, reply);
    return reply
      .code(429)
      .header('retry-after', String(rate.retryAfterSeconds(request.ip)))
      .send({ error: 'too many requests from this address, retry later' });
  });
  app.addHook('onResponse', async (request, reply) => {
    if (counted.has(request) && options.welcome(request, reply)) rate.giveBack(request.ip);
  });
}

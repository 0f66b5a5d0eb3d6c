/**
 * The HTTP listeners. The public one (PORT, bound to HOST) is the only port the internet reaches: the
 * webhook route and a bare health answer. The ops one (OPS_PORT, bound to OPS_HOST) serves /metrics,
 * /admin and the detailed /readyz; without OPS_PORT they are not served, unless ADMIN_ON_PUBLIC_PORT
 * puts them on PORT (development, the demo).
 *
 * Routes are registered by the modules that own them; this file builds the Fastify instances with
 * the listener limits and the health endpoints.
 */
import http from 'node:http';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Logger } from '../ground/log.js';
import type { Metrics } from '../ground/metrics.js';
import { withTimeout } from '../ground/wait.js';
import { limitConnectionsPerClient, limitRequestRatePerClient, trustedPeer } from './client-limits.js';

export interface ReadinessCheck {
  name: string;
  /** Resolves when healthy; throws (with a message safe to show on the ops port) when not. */
  check(): Promise<void>;
}

/**
 * Limits of a listener (docs/operations.md, "Public surface"). Every legitimate request (the service gives up
 * after 3 s, docs/upstream.md, "Delivery and retries") completes well within the timeouts; a client dripping bytes does not.
 */
export interface ListenerLimits {
  /** Time to receive the request headers. */
  headersTimeoutMs: number;
  /** Time to receive the whole request, body included. */
  requestTimeoutMs: number;
  /**
   * How long a kept-alive connection may sit idle between requests (Node's keepAliveTimeout,
   * announced as `Keep-Alive: timeout=…`), and a socket with no traffic at all during a request.
   */
  idleTimeoutMs: number;
  /** Connections beyond this are closed as they are accepted. */
  maxConnections: number;
  /** Connections per socket remote address beyond this are closed as they are accepted (0: none). */
  maxConnectionsPerClient?: number;
  /** Requests per second per client address; beyond, 429 before the body is read (0: none). */
  requestRatePerClient?: number;
}

/** The ops listener's (internal, never published): no per-client limits. */
export const DEFAULT_LISTENER_LIMITS: ListenerLimits = {
  headersTimeoutMs: 5_000,
  requestTimeoutMs: 10_000,
  idleTimeoutMs: 75_000,
  maxConnections: 1_000,
};

export interface ServerOptions {
  logger: Logger;
  readiness: ReadinessCheck[];
  /** Per-check time limit so /readyz answers even when a dependency hangs. */
  readinessTimeoutMs?: number;
  /**
   * How long a readiness result is reused (default 1 s): whatever the request rate, the checks run at
   * most once per this period, and concurrent callers share the run in flight.
   */
  readinessCacheMs?: number;
  /** The clock of the readiness cache (tests). */
  now?: () => number;
  metrics?: Metrics;
  limits?: ListenerLimits;
  /**
   * Public listener: /readyz answers only ready/unavailable, never which check failed nor why (the
   * reasons name hosts and addresses), and no /metrics. Default false (everything on one port).
   */
  public?: boolean;
  /** Name in logs and metrics ('public' or 'ops'). */
  name?: string;
  /** TRUST_PROXY: client address, protocol and host from X-Forwarded-* (Fastify's trustProxy). */
  trustProxy?: boolean | number | string[];
}

export function buildServer(options: ServerOptions): FastifyInstance {
  const limits = options.limits ?? DEFAULT_LISTENER_LIMITS;
  const app = Fastify({
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-assertion -- it sets Fastify's logger type parameter: without it the instance is not a plain FastifyInstance
    loggerInstance: options.logger.child({ component: 'http', listener: options.name ?? 'public' }) as FastifyBaseLogger,
    // One line per request at webhook rates would drown the logs; metrics count requests instead.
    logController: new LogController({ disableRequestLogging: true }),
    // Whoever closes an idle kept-alive connection races the other side's next request on it: a
    // request written as the server's FIN arrives ends with the connection closed and no answer (the
    // freshness benchmark saw a few in 5,000 with a 5 s keep-alive). So the client must close first:
    // the server keeps idle connections longer than clients and proxies do (their usual 60 s; 75 s is
    // nginx's own default), and says so in `Keep-Alive: timeout=…` for clients that read it.
    keepAliveTimeout: limits.idleTimeoutMs,
    return503OnClosing: true,
    trustProxy: trustProxyOption(options.trustProxy),
    serverFactory: (handler) => {
      const server = createLimitedServer(handler, limits);
      limitConnectionsPerClient(server, limits.maxConnectionsPerClient ?? 0, {
        exempt: trustedPeer(options.trustProxy),
        onRefused: () => options.metrics?.httpClientRefusals.inc({ limit: 'connections' }),
      });
      return server;
    },
  });
  // A POST answered 2xx is a stored delivery: it gives its token back (client-limits.ts).
  limitRequestRatePerClient(app, limits.requestRatePerClient ?? 0, {
    welcome: (request, reply) => request.method === 'POST' && reply.statusCode < 300,
    onRefused: () => options.metrics?.httpClientRefusals.inc({ limit: 'rate' }),
  });

  app.get('/healthz', async () => ({ status: 'ok' }));
  registerReadiness(app, options);

  const metrics = options.metrics;
  if (metrics) {
    app.addHook('onResponse', async (request, reply) => {
      const route = request.routeOptions.url ?? 'unmatched';
      metrics.httpRequests.inc({ method: request.method, route, status: String(reply.statusCode) });
      metrics.httpDuration.observe({ method: request.method, route }, reply.elapsedTime / 1000);
    });
    if (!options.public) {
      // Gauges that need SQL or Redis are refreshed on a timer (commands/gauges.ts), never per scrape: a
      // scrape must not be able to load the database.
      app.get('/metrics', async (_request, reply) => {
        reply.header('content-type', metrics.registry.contentType);
        return metrics.registry.metrics();
      });
    }
  }

  return app;
}

/** A hop count means: trust that many proxies nearest to us (Fastify's types take it as a function). */
function trustProxyOption(value: ServerOptions['trustProxy']): boolean | string[] | ((address: string, hop: number) => boolean) {
  if (typeof value === 'number') return (_address, hop) => hop < value;
  return value ?? false;
}

/**
 * Node's own limits, set on the server before Fastify wraps it: Fastify has no option for the
 * headers timeout nor for how often Node checks the request timeout (30 s by default, which would let
 * a dripping client live up to 30 s past the timeout).
 */
function createLimitedServer(handler: http.RequestListener, limits: ListenerLimits): http.Server {
  const server = http.createServer(
    {
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      keepAliveTimeout: limits.idleTimeoutMs,
      connectionsCheckingInterval: Math.min(1_000, limits.headersTimeoutMs),
    },
    handler,
  );
  server.maxConnections = limits.maxConnections;
  server.setTimeout(limits.idleTimeoutMs, (socket) => socket.destroy());
  return server;
}

interface CheckResult {
  name: string;
  ok: boolean;
  reason?: string;
}

/**
 * The readiness checks, run at most once per `cacheMs` whatever the request rate: callers while a run
 * is in flight share it, and callers within `cacheMs` of its start get its result. /readyz on the
 * public port must not let the internet set the database's load.
 */
function sharedReadiness(options: ServerOptions): () => Promise<CheckResult[]> {
  const cacheMs = options.readinessCacheMs ?? 1_000;
  const now = options.now ?? Date.now;
  let inFlight: Promise<CheckResult[]> | null = null;
  let cached: { at: number; results: CheckResult[] } | null = null;
  const runChecks = () =>
    Promise.all(
      options.readiness.map(async (r): Promise<CheckResult> => {
        try {
          await withTimeout(r.check(), options.readinessTimeoutMs ?? 2_000, () => new Error(`${r.name} did not answer in time`));
          return { name: r.name, ok: true };
        } catch (error) {
          return { name: r.name, ok: false, reason: (error as Error).message };
        }
      }),
    );
  return () => {
    if (inFlight) return inFlight;
    const at = now();
    if (cached && at >= cached.at && at - cached.at < cacheMs) return Promise.resolve(cached.results);
    inFlight = runChecks().then((results) => {
      cached = { at: now(), results };
      inFlight = null;
      return results;
    });
    return inFlight;
  };
}

function registerReadiness(app: FastifyInstance, options: ServerOptions): void {
  const readiness = sharedReadiness(options);
  app.get('/readyz', async (_request, reply) => {
    const results = await readiness();
    const ready = results.every((r) => r.ok);
    if (options.public) return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'unavailable' });
    if (!ready) return reply.code(503).send({ status: 'unavailable', checks: results });
    return { status: 'ready', checks: results };
  });
}

/** How often a closing listener closes the kept-alive connections that went idle since the last look. */
const REAP_IDLE_EVERY_MS = 50;

/**
 * Stops accepting connections and waits for requests in flight, at most `graceMs`; then closes every
 * connection still open (a client dripping an upload would otherwise hold the exit until the
 * shutdown deadline, and the process would exit 1).
 *
 * Fastify closes the connections idle when the close begins, once. A kept-alive connection whose
 * request was in flight then stays open after its answer, until the client's or the listener's idle
 * timeout (75 s here): under webhook load every connection is busy at that moment, so the drain took
 * the whole grace and a pass ran on past the SIGTERM it should have stopped at. Each one is closed
 * as soon as it is idle instead.
 */
export async function closeWithin(app: FastifyInstance, graceMs: number): Promise<'drained' | 'forced'> {
  const closing = app.close();
  const reaper = setInterval(() => app.server.closeIdleConnections(), REAP_IDLE_EVERY_MS);
  const outcome = await withTimeout(
    closing.then(() => 'drained' as const),
    graceMs,
    () => new Error('close timed out'),
  )
    .catch(() => 'forced' as const)
    .finally(() => clearInterval(reaper));
  if (outcome === 'forced') {
    app.server.closeAllConnections();
    await closing;
  }
  return outcome;
}

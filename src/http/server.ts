/**
 * The one HTTP server (PORT): webhook receiver, health, readiness, metrics, admin routes.
 * Routes are registered by the modules that own them; this file only builds the Fastify instance
 * and the health endpoints.
 */
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Logger } from '../log.js';
import type { Metrics } from './metrics.js';

export interface ReadinessCheck {
  name: string;
  /** Resolves when healthy; throws (with a message safe to show) when not. */
  check(): Promise<void>;
}

export interface ServerOptions {
  logger: Logger;
  readiness: ReadinessCheck[];
  /** Per-check time limit so /readyz answers even when a dependency hangs. */
  readinessTimeoutMs?: number;
  metrics?: Metrics;
  /** Refreshes gauges that are read from Postgres/Redis (queue depths, cursor age) before a scrape. */
  beforeScrape?: () => Promise<void>;
}

export function buildServer(options: ServerOptions): FastifyInstance {
  const app = Fastify({
    loggerInstance: options.logger.child({ component: 'http' }) as FastifyBaseLogger,
    // One line per request at webhook rates would drown the logs; metrics count requests instead.
    logController: new LogController({ disableRequestLogging: true }),
    // Behind a proxy the default 72 s keep-alive outlives the proxy's; keep it short and explicit.
    keepAliveTimeout: 5_000,
    return503OnClosing: true,
  });

  app.get('/healthz', async () => ({ status: 'ok' }));

  app.get('/readyz', async (_request, reply) => {
    const results = await Promise.all(
      options.readiness.map(async (r) => {
        try {
          await withTimeout(r.check(), options.readinessTimeoutMs ?? 2_000, `${r.name} did not answer in time`);
          return { name: r.name, ok: true as const };
        } catch (error) {
          return { name: r.name, ok: false as const, reason: (error as Error).message };
        }
      }),
    );
    const failing = results.filter((r) => !r.ok);
    if (failing.length > 0) {
      return reply.code(503).send({ status: 'unavailable', checks: results });
    }
    return { status: 'ready', checks: results };
  });

  const metrics = options.metrics;
  if (metrics) {
    app.addHook('onResponse', async (request, reply) => {
      const route = request.routeOptions.url ?? 'unmatched';
      metrics.httpRequests.inc({ method: request.method, route, status: String(reply.statusCode) });
      metrics.httpDuration.observe({ method: request.method, route }, reply.elapsedTime / 1000);
    });
    app.get('/metrics', async (_request, reply) => {
      if (options.beforeScrape) await withTimeout(options.beforeScrape(), 2_000, 'gauge refresh timed out').catch(() => {});
      reply.header('content-type', metrics.registry.contentType);
      return metrics.registry.metrics();
    });
  }

  return app;
}

export async function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(message)), ms);
      }),
    ]);
  } finally {
    if (timer) clearTimeout(timer);
  }
}

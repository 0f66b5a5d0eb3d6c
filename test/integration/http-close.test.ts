/**
 * Shutting a listener down (closeWithin): a kept-alive connection whose request was in flight when
 * the close began is closed once its answer is sent, so the drain ends then, not at the grace's end.
 */
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/ground/log.js';
import { createMetrics } from '../../src/ground/metrics.js';
import { buildServer, closeWithin, DEFAULT_LISTENER_LIMITS } from '../../src/http/server.js';

let app: FastifyInstance | undefined;

afterEach(async () => {
  await app?.close().catch(() => {});
  app = undefined;
});

/** Senders on kept-alive connections (fetch's own pool), each sending again as soon as it is answered, until refused. */
function keepSending(port: number, senders: number): { answered: () => number; done: Promise<void> } {
  let answered = 0;
  const send = async () => {
    for (;;) {
      try {
        const res = await fetch(`http://127.0.0.1:${port}/quick`);
        await res.arrayBuffer();
        answered += 1;
      } catch {
        return; // refused: the listener is gone
      }
    }
  };
  return { answered: () => answered, done: Promise.all(Array.from({ length: senders }, send)).then(() => {}) };
}

describe('closeWithin', () => {
  it('under load, closes each kept-alive connection as soon as it is idle: the drain does not wait out the grace', async () => {
    const { logger } = createLogger({ level: 'silent' });
    const server = buildServer({ logger, readiness: [], metrics: createMetrics(), public: true, limits: DEFAULT_LISTENER_LIMITS });
    server.get('/quick', async () => {
      await new Promise((resolve) => setTimeout(resolve, 5));
      return { ok: true };
    });
    await server.listen({ port: 0, host: '127.0.0.1' });
    app = server;
    const load = keepSending((server.server.address() as AddressInfo).port, 8);
    while (load.answered() < 50) await new Promise((resolve) => setTimeout(resolve, 10));
    const graceMs = 20_000;
    const closed = closeWithin(server, graceMs);
    const late = new Promise<'late'>((resolve) => setTimeout(() => resolve('late'), graceMs / 4).unref());
    expect(await Promise.race([closed, late])).toBe('drained');
    await load.done;
    app = undefined;
  });
});

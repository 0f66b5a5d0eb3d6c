/**
 * A flood of forged deliveries does not flood the log: 500 requests with a forged signature and a
 * 4 KiB Content-Type write a few sampled lines (values truncated) and one summary with the counts by
 * reason, at most 50 lines in all, where each used to write its own line with the header verbatim.
 */
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/ground/log.js';
import { buildServer } from '../../src/http/server.js';
import { registerWebhookRoute } from '../../src/webhooks/receiver.js';
import { signBody } from '../../src/webhooks/signature.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

const SECRET = 'rejections-static-secret-0001';
const FORGED = 500;

describe('rejected webhook requests in the log', () => {
  let database: TestDatabase;

  beforeAll(async () => {
    database = await createTestDatabase();
  });

  afterAll(async () => {
    await database?.drop();
  });

  it(`${FORGED} forged deliveries with a 4 KiB Content-Type write at most 50 short lines, the summary counting them`, async () => {
    const lines: string[] = [];
    const stream = new Writable({
      write(chunk, _enc, cb) {
        lines.push(...String(chunk).split('\n').filter(Boolean));
        cb();
      },
    });
    const { logger } = createLogger({ level: 'info', destination: stream, secrets: [SECRET] });
    const app = buildServer({ logger, readiness: [] });
    // The default period (60 s) outlasts the test; closing the app logs the summary of the period.
    registerWebhookRoute(app, {
      path: '/webhooks',
      maxBodyBytes: 64 * 1024,
      secrets: () => [SECRET],
      pool: database.pool,
      logger,
      secretsMissRefreshMs: 60_000,
    });
    await app.ready();
    const contentType = `application/json; ${'x'.repeat(4096)}`;
    const statuses = new Map<number, number>();
    for (let i = 0; i < FORGED; i += 1) {
      const body = JSON.stringify({ event: 'subscriber.updated', n: i });
      const res = await app.inject({
        method: 'POST',
        url: '/webhooks',
        payload: body,
        headers: { 'content-type': contentType, signature: signBody(body, 'attacker-secret-0123456789') },
      });
      statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1);
    }
    await app.close();
    expect(Object.fromEntries(statuses)).toEqual({ 401: FORGED });

    expect(lines.length).toBeLessThanOrEqual(50);
    expect(Math.max(...lines.map((l) => l.length))).toBeLessThan(1_000);
    const parsed = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    const samples = parsed.filter((l) => l.msg === 'webhook delivery rejected');
    expect(samples.length).toBeGreaterThan(0);
    expect(String(samples[0]?.contentType)).toMatch(/…\(4\d{3} chars\)$/);
    const summary = parsed.find((l) => l.msg === 'webhook requests rejected (summary)');
    expect(summary).toMatchObject({ total: FORGED, byReason: { '401 Signature matches no known secret': FORGED } });
  }, 120_000);
});

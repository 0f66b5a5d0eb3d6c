/**
 * The admin surface probed as an attacker would, against a running service (docs/security.md,
 * "Admin authentication"): wrong tokens pipelined on one connection and sent in parallel all count
 * for the throttle; a session value copied in Redis under a key of one's choosing is no session; the
 * ops port, where no proxy sits, ignores X-Forwarded-For whatever TRUST_PROXY says.
 */
import { createHash, randomBytes } from 'node:crypto';
import net from 'node:net';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { startService, type RunningService } from '../../src/commands/start.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';

const TOKEN = 'attack-admin-token-0123456789';

/** Sends `requests` pipelined on one connection; resolves to the status of each answer, in order. */
function pipelined(port: number, requests: string[]): Promise<number[]> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let received = '';
    const statuses = () => [...received.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      received += chunk;
      if (statuses().length >= requests.length) socket.end();
    });
    socket.on('error', reject);
    socket.on('close', () => resolve(statuses()));
    socket.write(requests.join(''));
  });
}

describe('admin under attack', () => {
  let database: TestDatabase;
  let service: RunningService;
  let redis: Redis;
  const prefix = uniquePrefix('attack');
  let ops = '';

  beforeAll(async () => {
    database = await createTestDatabase();
    redis = new Redis(redisUrl());
    const config = loadConfig(
      {
        DATABASE_URL: database.url,
        REDIS_URL: redisUrl(),
        REDIS_PREFIX: prefix,
        PORT: '0',
        OPS_PORT: '0',
        ADMIN_TOKEN: TOKEN,
        // Trusted for the public port; the ops port must not believe it.
        TRUST_PROXY: 'true',
        ADMIN_COOKIE_INSECURE: 'true',
        LOG_LEVEL: 'silent',
      },
      ['receive'],
    );
    service = await startService(config, 'receiver');
    ops = `http://127.0.0.1:${service.opsPort}`;
  });

  afterAll(async () => {
    await service?.stop('test over');
    redis?.disconnect();
    await database?.drop();
    await deleteInstallKeys(prefix);
  });

  it('counts every one of 100 wrong tokens pipelined on one connection: at most 5 are answered 401', async () => {
    const requests = Array.from(
      { length: 100 },
      (_, i) => `GET /admin/status HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer pipelined-guess-${i}-0123456789\r\n\r\n`,
    );
    const statuses = await pipelined(service.opsPort as number, requests);
    expect(statuses).toHaveLength(100);
    const unauthorized = statuses.filter((s) => s === 401).length;
    console.log(`pipelined wrong tokens: ${unauthorized} of 100 answered 401, ${statuses.filter((s) => s === 429).length} answered 429`);
    expect(unauthorized).toBeLessThanOrEqual(5);
    expect(statuses.filter((s) => s === 429)).toHaveLength(100 - unauthorized);
  });

  it('ignores X-Forwarded-For on the ops port: a client cannot pick a fresh address per guess', async () => {
    // The previous test throttled 127.0.0.1; a new forwarded address does not free it.
    const res = await fetch(`${ops}/admin/status`, {
      headers: { authorization: `Bearer ${TOKEN}`, 'x-forwarded-for': `203.0.113.${Math.floor(Math.random() * 200) + 1}` },
    });
    expect(res.status).toBe(429);
  });

  it('a session value copied under a key of one’s choosing is no session', async () => {
    // Whoever can write to Redis sees a session's key and value (the login itself is not needed:
    // any stored session will do) and plants the value under the hash of a cookie it chose.
    const minted = randomBytes(32).toString('base64url');
    const keys = await redis.keys(`${prefix}:admin-session:*`);
    const stored = await (async () => {
      if (keys.length > 0) return redis.get(keys[0] as string);
      // No session yet: one made by the service's own store, as a login would.
      const { createSessionStore } = await import('../../src/http/sessions.js');
      const store = createSessionStore(redis, { prefix, token: TOKEN });
      const real = await store.create();
      return redis.get(`${prefix}:admin-session:${createHash('sha256').update(real).digest('hex')}`);
    })();
    expect(stored).not.toBeNull();
    await redis.set(`${prefix}:admin-session:${createHash('sha256').update(minted).digest('hex')}`, stored as string, 'PX', 60_000);
    const res = await fetch(`${ops}/admin/status`, { headers: { cookie: `sm_admin=${minted}` } });
    expect(res.status).toBe(401);
  });
});

/**
 * How the suite finds Postgres and Redis on a fresh machine (test/helpers/global-setup.ts): the
 * service's defaults when nothing is set and they answer, and one clear line when nothing is there.
 */
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { answers, DEFAULT_DATABASE_URL, DEFAULT_REDIS_URL, localServices, missingServicesMessage } from '../helpers/global-setup.js';

const probeAll = (up: boolean) => async () => up;

describe('finding Postgres and Redis for the tests', () => {
  it('uses the service defaults when no variable is set and they answer', async () => {
    expect(await localServices({}, probeAll(true))).toEqual({ databaseUrl: DEFAULT_DATABASE_URL, redisUrl: DEFAULT_REDIS_URL });
    expect(DEFAULT_DATABASE_URL).toBe('postgres://postgres@127.0.0.1:5432/postgres');
    expect(DEFAULT_REDIS_URL).toBe('redis://127.0.0.1:6379');
  });

  it('prefers DATABASE_URL and REDIS_URL, and probes nothing for them', async () => {
    const probed: number[] = [];
    const choice = await localServices({ DATABASE_URL: 'postgres://x@db:1/y', REDIS_URL: 'redis://r:2' }, async (_h, port) => {
      probed.push(port);
      return true;
    });
    expect(choice).toEqual({ databaseUrl: 'postgres://x@db:1/y', redisUrl: 'redis://r:2' });
    expect(probed).toEqual([]);
  });

  it('leaves out what does not answer, and says in one line what to start or set', async () => {
    const choice = await localServices({}, async (_h, port) => port === 6379);
    expect(choice).toEqual({ redisUrl: DEFAULT_REDIS_URL });
    const message = missingServicesMessage(choice);
    expect(message).not.toContain('\n');
    expect(message).toContain('Postgres on 127.0.0.1:5432 (or set DATABASE_URL)');
    expect(message).not.toContain('REDIS_URL');
    expect(missingServicesMessage({})).toMatch(/Postgres .* and Redis on 127\.0\.0\.1:6379 \(or set REDIS_URL\)/);
  });

  it('probes a real port: open answers, closed does not', async () => {
    const server = net.createServer((s) => s.destroy());
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as net.AddressInfo).port;
    expect(await answers('127.0.0.1', port)).toBe(true);
    await new Promise<void>((resolve) => server.close(() => resolve()));
    expect(await answers('127.0.0.1', port)).toBe(false);
  });
});

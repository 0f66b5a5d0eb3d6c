/**
 * The receiver's credentials (docs/security.md, "Who reaches what"), since issue 37: the receiver
 * service holds a database role and nothing else. Started with a REDIS_URL that points at a listener
 * counting connections, it stores a signed delivery, answers 200 and reports ready without ever
 * connecting; a worker (another process's role, the same database) applies the delivery, woken by
 * the inbox's notification. Before issue 37 the receiver connected to Redis at start and queued an
 * apply job per delivery (its Redis user could run scripts on the queue's keys).
 */
import { createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { startService, type RunningService } from '../../src/commands/start.js';
import { signBody } from '../../src/webhooks/signature.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

const SECRET = 'whsec-receiver-credentials-0123';

describe("the receiver's credentials", () => {
  let database: TestDatabase;
  let fakeRedis: Server;
  const sockets: Socket[] = [];
  let receiver: RunningService;
  let worker: RunningService | undefined;
  const prefix = uniquePrefix('credentials');

  beforeAll(async () => {
    database = await createTestDatabase();
    fakeRedis = createServer((socket) => {
      sockets.push(socket);
      socket.destroy();
    });
    await new Promise<void>((resolve) => fakeRedis.listen(0, '127.0.0.1', resolve));
    const { port } = fakeRedis.address() as AddressInfo;
    const config = loadConfig(
      {
        DATABASE_URL: database.url,
        REDIS_URL: `redis://:not-a-receiver-secret@127.0.0.1:${port}`,
        PORT: '0',
        WEBHOOK_SECRETS: SECRET,
        LOG_LEVEL: 'silent',
      },
      ['receive'],
    );
    receiver = await startService(config, 'receiver');
  });

  afterAll(async () => {
    await receiver?.stop('test over');
    await worker?.stop('test over');
    await new Promise((resolve) => fakeRedis?.close(resolve));
    await database?.drop();
    await deleteInstallKeys(prefix);
  });

  it('stores a signed delivery and is ready without ever connecting to Redis', async () => {
    const body = JSON.stringify({
      type: 'subscriber.updated',
      subscriber: { id: '5', email: 'credentials@example.com', updated_at: '2024-06-01T00:00:00.000000Z' },
    });
    const res = await fetch(`http://127.0.0.1:${receiver.port}/webhooks`, {
      method: 'POST',
      body,
      headers: { signature: signBody(body, SECRET), 'content-type': 'application/json' },
    });
    expect(res.status).toBe(200);
    expect((await fetch(`http://127.0.0.1:${receiver.port}/readyz`)).status).toBe(200);
    const { rows } = await database.pool.query<{ status: string }>('select status from webhook_deliveries');
    expect(rows).toEqual([{ status: 'pending' }]);
    expect(sockets).toHaveLength(0);
  });

  it('leaves the delivery to a worker, which learns of it from the inbox', async () => {
    const config = loadConfig({ DATABASE_URL: database.url, REDIS_URL: redisUrl(), REDIS_PREFIX: prefix, PORT: '0', LOG_LEVEL: 'silent' }, [
      'reconcile',
    ]);
    worker = await startService(config, 'worker');
    await waitFor(
      'the worker to apply the delivery',
      async () =>
        (await database.pool.query<{ status: string }>('select status from webhook_deliveries')).rows[0]?.status === 'applied' || undefined,
      15_000,
      50,
    );
    const { rows } = await database.pool.query('select email from subscribers');
    expect(rows).toEqual([{ email: 'credentials@example.com' }]);
    expect(sockets).toHaveLength(0);
  });
});

/**
 * What the public /readyz costs the database (docs/operations.md, "Public surface"): 300 calls from
 * the internet, 30 at a time, run a bounded number of statements, because concurrent callers share
 * one check in flight and its result is kept briefly. Counted on the wire (a proxy in front of
 * Postgres), not by time.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { startService, type RunningService } from '../../src/commands/start.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { createPgStatementCounter, hostPort, startTcpProxy, type TcpProxy } from '../helpers/proxy.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

describe('public /readyz under load', () => {
  let database: TestDatabase;
  let proxy: TcpProxy;
  let service: RunningService;
  const statements = createPgStatementCounter();
  const prefix = uniquePrefix('readyz');

  beforeAll(async () => {
    database = await createTestDatabase();
    proxy = await startTcpProxy(hostPort(database.url, 5432), { onTargetData: statements.tap });
    const config = loadConfig(
      {
        DATABASE_URL: proxy.via(database.url),
        REDIS_URL: redisUrl(),
        REDIS_PREFIX: prefix,
        PORT: '0',
        METRICS_REFRESH_EVERY: '1h',
        // What the checks cost, not the per-client limits (300 calls from one address would meet the
        // request rate): those are client-limits.test.ts's.
        HTTP_MAX_CONNECTIONS_PER_CLIENT: '0',
        HTTP_REQUEST_RATE_PER_CLIENT: '0',
        LOG_LEVEL: 'silent',
      },
      ['receive'],
    );
    service = await startService(config, 'receiver');
  });

  afterAll(async () => {
    await service?.stop('test over');
    await proxy?.close();
    await database?.drop();
    await deleteInstallKeys(prefix);
  });

  it('300 calls, 30 at a time, cost at most 30 statements', async () => {
    const base = `http://127.0.0.1:${service.port}`;
    await waitFor('ready', async () => (await fetch(`${base}/readyz`)).status === 200, 20_000, 100);
    const before = statements.count();
    const statuses: number[] = [];
    for (let round = 0; round < 10; round += 1) {
      const answers = await Promise.all(Array.from({ length: 30 }, () => fetch(`${base}/readyz`)));
      for (const answer of answers) statuses.push(answer.status);
    }
    const spent = statements.count() - before;
    const ready = statuses.filter((s) => s === 200).length;
    console.log(`public /readyz: 300 calls cost ${spent} database statements (transactions); ${ready} answered ready`);
    expect(spent).toBeLessThanOrEqual(30);
    expect(ready).toBe(300);
  });
});

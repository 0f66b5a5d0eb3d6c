/**
 * A newcomer's first minute: `subscriber-mirror demo` (what `npm run demo` runs) prints no warning and
 * no error line for 60 s while the mirror fills up through both paths (the webhooks registered at
 * start verify from their first delivery), and it prints the status page's address.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startChildCli, type ChildService } from '../helpers/child-service.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { sleep, waitFor } from '../helpers/wait.js';

const WATCH_MS = 60_000;

/** A log line at warn or above, or any other line that says warning/error. */
function isWarningOrError(line: Record<string, unknown> | string): boolean {
  if (typeof line === 'string') return /\b(warn|warning|error|fatal)\b/i.test(line);
  return ['warn', 'error', 'fatal', 40, 50, 60].includes(line.level as string | number);
}

describe('npm run demo, first minute', () => {
  let database: TestDatabase;
  let demo: ChildService;
  let stderr = '';
  const prefix = uniquePrefix('demo');

  beforeAll(async () => {
    database = await createTestDatabase();
    demo = startChildCli(['demo', '--port', '0'], { DATABASE_URL: database.url, REDIS_URL: redisUrl(), REDIS_PREFIX: prefix }, () => null);
    demo.child.stderr?.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    await sleep(WATCH_MS);
  }, WATCH_MS + 60_000);

  afterAll(async () => {
    await demo?.stop();
    await database?.drop();
    await deleteInstallKeys(prefix);
  });

  it('prints no warning or error line in 60 s', () => {
    expect(demo.child.exitCode).toBeNull();
    expect(demo.lines.filter(isWarningOrError).map((l) => (typeof l === 'string' ? l : JSON.stringify(l)))).toEqual([]);
    expect(stderr).toBe('');
  });

  it('prints the status page address and fills the mirror through polls and webhooks', async () => {
    const text = demo.lines.filter((l): l is string => typeof l === 'string').join('\n');
    expect(text).toMatch(/status: +http:\/\/127\.0\.0\.1:\d+\/admin\/ +\(log in with the admin token \S{16,}\)/);
    const counts = await waitFor(
      'rows from both paths',
      async () => {
        const { rows } = await database.pool.query<{ via: string; n: number }>(
          `select mirrored_via as via, count(*)::int as n from subscribers group by 1`,
        );
        const byVia = Object.fromEntries(rows.map((r) => [r.via, r.n]));
        return byVia.poll && byVia.webhook ? byVia : null;
      },
      30_000,
      500,
    );
    expect(counts.poll).toBeGreaterThan(0);
    const { rows } = await database.pool.query<{ n: number }>(`select count(*)::int as n from webhook_deliveries where status = 'applied'`);
    expect(rows[0]?.n).toBeGreaterThan(0);
  });
});

describe('npm run demo -- --source current', () => {
  let database: TestDatabase;
  let demo: ChildService;
  const prefix = uniquePrefix('demo-current');

  beforeAll(async () => {
    database = await createTestDatabase();
    demo = startChildCli(
      ['demo', '--port', '0', '--source', 'current', '--subscribers', '1000'],
      { DATABASE_URL: database.url, REDIS_URL: redisUrl(), REDIS_PREFIX: prefix },
      () => null,
    );
  });

  afterAll(async () => {
    await demo?.stop();
    await database?.drop();
    await deleteInstallKeys(prefix);
  });

  it('reads the current API by cursor and receives webhooks, with no warning or error line', async () => {
    const counts = await waitFor(
      'rows from the current API and from webhooks',
      async () => {
        const { rows } = await database.pool.query<{ via: string; n: number }>(
          `select mirrored_via as via, count(*)::int as n from subscribers group by 1`,
        );
        const byVia = Object.fromEntries(rows.map((r) => [r.via, r.n]));
        return byVia.current && byVia.webhook ? byVia : null;
      },
      60_000,
      500,
    );
    expect(counts.poll).toBeUndefined();
    expect(demo.lines.filter((l) => typeof l === 'string').join('\n')).toContain('(current API,');
    expect(demo.lines.filter(isWarningOrError).map((l) => (typeof l === 'string' ? l : JSON.stringify(l)))).toEqual([]);
  }, 90_000);
});

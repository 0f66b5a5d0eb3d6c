/**
 * SIGTERM at every stage (docs/operations.md, "Public surface" and "Graceful shutdown"): during start-up (migrations
 * waiting, Redis unreachable) the process exits 0 at once instead of ignoring the signal until Docker
 * kills it; with a client dripping an upload, it still exits 0 within SHUTDOWN_TIMEOUT (a shutdown
 * that outlived it would exit 1).
 */
import net from 'node:net';
import type { ChildProcess } from 'node:child_process';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { spawnCli } from '../helpers/cli.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { deletePrefix, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

/** The key runMigrations locks (src/db/migrate.ts). */
const MIGRATION_LOCK_KEY = 727_110_001;

interface Spawned {
  child: ChildProcess;
  output: () => string;
  exit: Promise<number | null>;
}

const children: ChildProcess[] = [];
const databases: TestDatabase[] = [];
const prefix = uniquePrefix('signals');

afterAll(async () => {
  for (const c of children) c.kill('SIGKILL');
  for (const d of databases) await d.drop();
  await deletePrefix(prefix);
});

function start(role: string, env: Record<string, string>): Spawned {
  const child = spawnCli(['start', '--role', role], { REDIS_PREFIX: prefix, PORT: '0', LOG_LEVEL: 'info', ...env });
  children.push(child);
  let out = '';
  child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (out += d.toString()));
  const exit = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  return { child, output: () => out, exit };
}

/** The exit code, or a failure if the process outlives `ms` (it would have ignored the signal). */
async function exitWithin(s: Spawned, ms: number): Promise<number | null> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`still running ${ms} ms after SIGTERM; output:\n${s.output()}`)), ms);
  });
  try {
    return await Promise.race([s.exit, late]);
  } finally {
    clearTimeout(timer);
  }
}

async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe('SIGTERM during start-up', () => {
  it('while migrations wait for their lock: exits 0 at once', async () => {
    const database = await createTestDatabase({ migrated: false });
    databases.push(database);
    // Another replica "is migrating": it holds the lock, so this one waits inside start-up.
    const holder = new pg.Client({ connectionString: database.url });
    await holder.connect();
    try {
      await holder.query('select pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
      const service = start('receiver', { DATABASE_URL: database.url, REDIS_URL: redisUrl() });
      await waitFor(
        'migration waiting for the lock',
        async () => {
          const { rows } = await holder.query(
            `select count(*)::int as n from pg_locks where locktype = 'advisory' and not granted and objid = $1`,
            [MIGRATION_LOCK_KEY],
          );
          return (rows[0] as { n: number }).n > 0;
        },
        30_000,
        100,
      );
      service.child.kill('SIGTERM');
      expect(await exitWithin(service, 10_000)).toBe(0);
      expect(service.output()).toContain('stopped during start-up');
      expect(service.output()).not.toContain('service started');
    } finally {
      await holder.end();
    }
  });

  it('while Redis is unreachable: exits 0 at once', async () => {
    const database = await createTestDatabase();
    databases.push(database);
    const service = start('worker', {
      DATABASE_URL: database.url,
      REDIS_URL: `redis://127.0.0.1:${await closedPort()}`,
      MAILER_LEGACY_URL: 'http://127.0.0.1:9',
      MAILER_API_KEY: 'key-for-signals-test',
      SYNC_GROUPS: '1',
    });
    await waitFor('past migrations, waiting for Redis', async () => service.output().includes('migrations up to date'), 30_000, 100);
    // Give start-up time to block on Redis (the poll schedules are written there).
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(service.output()).not.toContain('service started');
    service.child.kill('SIGTERM');
    expect(await exitWithin(service, 10_000)).toBe(0);
    expect(service.output()).toContain('stopped during start-up');
  });
});

describe('SIGTERM with a dripping upload open', () => {
  it('closes the connection at the deadline and exits 0 within SHUTDOWN_TIMEOUT', async () => {
    const database = await createTestDatabase();
    databases.push(database);
    const service = start('receiver', {
      DATABASE_URL: database.url,
      REDIS_URL: redisUrl(),
      WEBHOOK_SECRETS: 'whsec-signals-test-0001',
      SHUTDOWN_TIMEOUT: '6s',
      // Longer than the shutdown deadline: the shutdown, not the request timeout, must end the upload.
      HTTP_REQUEST_TIMEOUT: '120s',
      HTTP_IDLE_TIMEOUT: '120s',
    });
    const port = await waitFor(
      'service started',
      async () => {
        const match = /"port":(\d+)[^\n]*"msg":"service started"/.exec(service.output());
        return match ? Number(match[1]) : null;
      },
      30_000,
      100,
    );

    const socket = net.connect(port, '127.0.0.1');
    socket.on('error', () => {});
    const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.write(
      `POST /webhooks HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${10 * 1024 * 1024}\r\nsignature: ${'0'.repeat(64)}\r\n\r\n{`,
    );
    const drip = setInterval(() => socket.write(' '), 200);
    try {
      await new Promise((resolve) => setTimeout(resolve, 500));
      service.child.kill('SIGTERM');
      // Exit code 0 means the shutdown finished before SHUTDOWN_TIMEOUT (past it, the process exits 1).
      expect(await exitWithin(service, 20_000)).toBe(0);
      await closed;
      expect(service.output()).toContain('closed HTTP connections still open at the shutdown deadline');
      expect(service.output()).not.toContain('graceful shutdown timed out');
    } finally {
      clearInterval(drip);
      socket.destroy();
    }
  });
});

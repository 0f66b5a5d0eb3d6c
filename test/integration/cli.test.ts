import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { runCli } from '../helpers/cli.js';
import { deletePrefix, uniquePrefix } from '../helpers/redis.js';

describe('subscriber-mirror CLI', () => {
  let database: TestDatabase;

  beforeAll(async () => {
    database = await createTestDatabase({ migrated: false });
  });

  afterAll(async () => {
    await database.drop();
  });

  it('exits 2 with usage on an unknown command', async () => {
    const result = await runCli(['frobnicate'], {});
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('unknown command "frobnicate"');
    expect(result.stderr).toContain('usage: subscriber-mirror');
  });

  it('exits 2 with usage on stderr when no command is given, and prints usage on stdout for --help', async () => {
    const none = await runCli([], {});
    expect(none.code).toBe(2);
    expect(none.stdout).toBe('');
    expect(none.stderr).toContain('no command given');
    expect(none.stderr).toContain('usage: subscriber-mirror');
    const help = await runCli(['--help'], {});
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('usage: subscriber-mirror');
    expect(help.stderr).toBe('');
  });

  it('exits 2 with usage on a bad flag', async () => {
    const result = await runCli(['migrate', '--nope'], {});
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/Unknown option '--nope'/);
  });

  it('exits 2 on a bad role', async () => {
    const result = await runCli(['start', '--role', 'janitor'], {});
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('--role must be one of all, worker, receiver');
  });

  it('start exits 2 on a weak webhook secret, naming WEBHOOK_SECRETS but not the secret', async () => {
    const result = await runCli(['start', '--role', 'receiver'], { WEBHOOK_SECRETS: 'Zq9weak', PORT: '0' });
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/WEBHOOK_SECRETS: each secret must be at least 16 characters/);
    expect(result.stderr).not.toContain('Zq9weak');
  });

  it('backfill exits 2 for a group or type that is not configured, naming the configured ones, and queues nothing', async () => {
    // REDIS_URL points nowhere: had the command tried to queue, it would fail with 1, not 2.
    const env = { SYNC_GROUPS: '111,222', SYNC_TYPES: 'active', REDIS_URL: 'redis://127.0.0.1:1' };
    const group = await runCli(['backfill', '--group', '333'], env);
    expect(group.code).toBe(2);
    expect(group.stderr).toContain('--group 333 is not configured; configured groups (SYNC_GROUPS): 111, 222');
    const type = await runCli(['backfill', '--group', '111', '--type', 'bounced'], env);
    expect(type.code).toBe(2);
    expect(type.stderr).toContain('--type bounced is not configured; configured types (SYNC_TYPES): active');
    const none = await runCli(['backfill', '--group', '111'], { REDIS_URL: 'redis://127.0.0.1:1' });
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('configured groups (SYNC_GROUPS): none');
  });

  it('exits 2 naming every bad variable, without echoing secrets', async () => {
    const result = await runCli(['start', '--role', 'worker'], {
      MAILER_API_KEY: 'secret-key-0001',
      SYNC_EVERY: 'often',
      PORT: 'eighty',
    });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('SYNC_EVERY: "often" is not a duration');
    expect(result.stderr).toContain('PORT: "eighty" is not a whole number');
    expect(result.stderr).toContain('MAILER_LEGACY_URL: required for polling');
    expect(result.stderr).toContain('SYNC_GROUPS: required for polling');
    expect(result.stderr).not.toContain('secret-key-0001');
  });

  it('start reading the current API without its token exits 2 naming MAILER_API_TOKEN (and prints no secret)', async () => {
    const result = await runCli(['start', '--role', 'worker'], {
      SYNC_SOURCE: 'current',
      MAILER_API_URL: 'http://127.0.0.1:1',
      MAILER_API_KEY: 'legacy-key-not-to-print',
      SYNC_GROUPS: '1',
    });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('MAILER_API_TOKEN: required for polling the current API');
    expect(result.stderr).not.toContain('legacy-key-not-to-print');
  });

  it('start with an unreachable DATABASE_URL exits non-zero with one clear line and no stack trace', async () => {
    const result = await runCli(['start', '--role', 'receiver'], {
      DATABASE_URL: 'postgres://postgres:pw-not-to-print@127.0.0.1:1/nowhere',
      PORT: '0',
    });
    expect(result.code).toBe(1);
    const lines = result.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^subscriber-mirror: cannot migrate the database: .*ECONNREFUSED/);
    expect(result.stderr).not.toMatch(/\n\s+at /);
    expect(result.stderr + result.stdout).not.toContain('pw-not-to-print');
  });

  it('start with a missing database exits non-zero with one clear line', async () => {
    const url = new URL(inject('databaseUrl'));
    url.pathname = '/sm_no_such_database';
    const result = await runCli(['start', '--role', 'receiver'], { DATABASE_URL: url.toString(), PORT: '0' });
    expect(result.code).toBe(1);
    expect(result.stderr.trim()).toBe(
      'subscriber-mirror: cannot migrate the database: database "sm_no_such_database" does not exist (3D000)',
    );
  });

  it('migrate applies the migrations, then reports the database up to date', async () => {
    const first = await runCli(['migrate'], { DATABASE_URL: database.url });
    expect(first.stderr).toBe('');
    expect(first.code).toBe(0);
    expect(first.stdout).toMatch(/^applied \d+ migration\(s\)\n$/);
    const second = await runCli(['migrate'], { DATABASE_URL: database.url });
    expect(second.code).toBe(0);
    expect(second.stdout).toBe('database is up to date\n');
  });

  // An earlier release's install: ADMIN_TOKEN without OPS_PORT, which `start` refuses with one line
  // naming the change; `migrate` serves nothing and reads only DATABASE_URL.
  it('migrate never refuses over a setting it does not use', async () => {
    const earlier = { DATABASE_URL: database.url, ADMIN_TOKEN: 'an-admin-token-of-earlier' };
    const start = await runCli(['start', '--role', 'receiver'], { ...earlier, DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' });
    expect(start.code).toBe(2);
    expect(start.stderr).toMatch(/ADMIN_TOKEN: the admin pages are served on OPS_PORT only; set OPS_PORT/);
    for (const env of [earlier, { ...earlier, SYNC_GROUPS: 'not-a-number', OPS_PORT: 'x' }]) {
      const migrate = await runCli(['migrate'], env);
      expect(migrate.stderr).toBe('');
      expect(migrate.code).toBe(0);
    }
  });

  it('webhooks commands name the missing management settings and exit 2', async () => {
    const result = await runCli(['webhooks', 'list'], { DATABASE_URL: database.url });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('MAILER_WEBHOOKS_URL: required for webhooks commands');
    expect(result.stderr).toContain('MAILER_WEBHOOKS_TOKEN: required for webhooks commands');
  });
});

describe('subscriber-mirror start', () => {
  let database: TestDatabase;

  beforeAll(async () => {
    database = await createTestDatabase({ migrated: false });
  });

  afterAll(async () => {
    await database.drop();
  });

  it('migrates first, serves /healthz and /readyz, and exits 0 on SIGTERM', async () => {
    const { spawnCli } = await import('../helpers/cli.js');
    const child = spawnCli(['start', '--role', 'receiver'], {
      DATABASE_URL: database.url,
      REDIS_URL: inject('redisUrl'),
      PORT: '0',
    });
    let stdout = '';
    const port = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no start line in ${stdout}`)), 30_000);
      child.stdout?.on('data', (d: Buffer) => {
        stdout += d.toString();
        const match = /"port":(\d+).*"msg":"service started"/.exec(stdout);
        if (match) {
          clearTimeout(timer);
          resolve(Number(match[1]));
        }
      });
    });
    const health = await fetch(`http://127.0.0.1:${port}/healthz`);
    expect(health.status).toBe(200);
    // Readiness may take a moment (Redis connects in the background), but must come.
    let ready = await fetch(`http://127.0.0.1:${port}/readyz`);
    for (let i = 0; i < 50 && ready.status !== 200; i++) {
      await new Promise((r) => setTimeout(r, 100));
      ready = await fetch(`http://127.0.0.1:${port}/readyz`);
    }
    expect(ready.status).toBe(200);
    expect(await ready.json()).toMatchObject({ status: 'ready' });
    const { rows } = await database.pool.query(`select to_regclass('public.subscribers') is not null as present`);
    expect(rows[0]).toEqual({ present: true });

    const exit = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
    child.kill('SIGTERM');
    expect(await exit).toBe(0);
  });
});

describe('subscriber-mirror webhooks replay', () => {
  let database: TestDatabase;
  const prefix = uniquePrefix('replay');

  beforeAll(async () => {
    database = await createTestDatabase();
  });

  afterAll(async () => {
    await database.drop();
    await deletePrefix(prefix);
  });

  it('puts failed deliveries back to pending, due at once, notifying the workers, and validates its flags', async () => {
    const { rows } = await database.pool.query<{ id: string }>(
      `insert into webhook_deliveries (body_sha256, body, status, error) values
         ('a1', '{"event":"subscriber.updated"}', 'failed', 'boom'),
         ('a2', '{"event":"subscriber.updated"}', 'applied', null)
       returning id::text as id`,
    );
    await database.pool.query(`update webhook_deliveries set tries = 8, next_attempt_at = now() + interval '1 hour' where id = $1`, [
      rows[0]!.id,
    ]);
    // What a worker hears: the notification the update sends when it commits.
    const listener = await database.pool.connect();
    const notified: string[] = [];
    listener.on('notification', (n) => notified.push(n.channel));
    await listener.query('listen subscriber_mirror_inbox');
    const env = { DATABASE_URL: database.url, REDIS_URL: inject('redisUrl'), REDIS_PREFIX: prefix };
    const first = await runCli(['webhooks', 'replay'], env);
    expect(first.stderr).toBe('');
    expect(first.code).toBe(0);
    expect(first.stdout).toBe('replaying 1 failed deliveries (a running worker applies them)\n');
    const { rows: after } = await database.pool.query<{ id: string; status: string }>(
      `select id::text as id, status from webhook_deliveries order by id`,
    );
    expect(after.map((r) => r.status)).toEqual(['pending', 'applied']);
    const { rows: due } = await database.pool.query<{ tries: number; due: boolean }>(
      `select tries, next_attempt_at is null as due from webhook_deliveries where id = $1`,
      [rows[0]!.id],
    );
    expect(due).toEqual([{ tries: 0, due: true }]);
    try {
      await expect.poll(() => notified).toEqual(['subscriber_mirror_inbox']);
    } finally {
      await listener.query('unlisten *');
      listener.release();
    }
    const second = await runCli(['webhooks', 'replay'], env);
    expect(second.stdout).toBe('no failed deliveries to replay\n');
    const bad = await runCli(['webhooks', 'replay', '--status', 'applied'], env);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--status must be failed or ignored, got "applied"');
    const badSince = await runCli(['webhooks', 'replay', '--since', 'yesterday'], env);
    expect(badSince.code).toBe(2);
  });
});

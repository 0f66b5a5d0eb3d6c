/**
 * The receiver's Redis credentials (docs/security.md, "Redis"), tried as whoever took the receiver
 * over: with the credentials compose gives the receiver (deploy/service/start.sh), the receiver does its job (a
 * signed delivery is stored and its apply job queued) but cannot create an admin session, pause a
 * sync, read the configuration or manage users. The user's rules are read from where compose reads them
 * (`deploy/redis/receiver.acl`, through `deploy/redis/start.sh`); the test makes a user of its own
 * with those rules on the test Redis (a unique name and key prefix) and deletes it afterwards.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { createSessionStore } from '../../src/http/sessions.js';
import { startService, type RunningService } from '../../src/commands/start.js';
import { deliveryJobId, EVENTS_QUEUE } from '../../src/webhooks/consumer.js';
import { signBody } from '../../src/webhooks/signature.js';
import { ROOT } from '../helpers/cli.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

const SECRET = 'whsec-receiver-acl-0123456789';
const ACL_FILE = 'deploy/redis/receiver.acl';

/**
 * The Redis user compose gives the receiver: `default` (the shared password) or a user of its own.
 * Its REDIS_URL is built by the receiver's entry point in compose, deploy/service/start.sh.
 */
function receiverRedisUser(): string {
  const start = readFileSync(path.join(ROOT, 'deploy/service/start.sh'), 'utf8');
  const url = /^ {2}receiver\)[\s\S]*?REDIS_URL="([^"]*)"/m.exec(start)?.[1] ?? '';
  return /^rediss?:\/\/([^:@/]*):/.exec(url)?.[1] || 'default';
}

/** The receiver's ACL rules for `prefix`, as deploy/redis/start.sh builds them. */
function receiverRules(prefix: string): string[] {
  return readFileSync(path.join(ROOT, ACL_FILE), 'utf8')
    .split('\n')
    .filter((line) => line.trim() !== '' && !line.trimStart().startsWith('#'))
    .join(' ')
    .replaceAll('{prefix}', prefix)
    .split(/\s+/)
    .filter(Boolean);
}

describe("the receiver's Redis credentials", () => {
  let database: TestDatabase;
  let admin: Redis;
  let receiverUrl = '';
  let service: RunningService;
  const prefix = uniquePrefix('acl');
  const user = `sm-test-receiver-${process.pid}-${randomBytes(3).toString('hex')}`;
  const password = randomBytes(18).toString('hex');

  beforeAll(async () => {
    database = await createTestDatabase();
    admin = new Redis(redisUrl());
    const composeUser = receiverRedisUser();
    if (composeUser === 'default') {
      // Compose hands the receiver the default user's password: the test does the same.
      receiverUrl = redisUrl();
    } else {
      expect(existsSync(path.join(ROOT, ACL_FILE)), ACL_FILE).toBe(true);
      await admin.call('ACL', 'SETUSER', user, 'reset', 'on', `>${password}`, ...receiverRules(prefix));
      const url = new URL(redisUrl());
      url.username = user;
      url.password = password;
      receiverUrl = url.toString();
    }
    const config = loadConfig(
      { DATABASE_URL: database.url, REDIS_URL: receiverUrl, REDIS_PREFIX: prefix, PORT: '0', WEBHOOK_SECRETS: SECRET, LOG_LEVEL: 'silent' },
      ['receive'],
    );
    service = await startService(config, 'receiver');
  });

  afterAll(async () => {
    await service?.stop('test over');
    await admin?.call('ACL', 'DELUSER', user).catch(() => {});
    admin?.disconnect();
    await database?.drop();
    await deleteInstallKeys(prefix);
  });

  it('lets the receiver store a delivery and queue its apply', async () => {
    const body = JSON.stringify({
      type: 'subscriber.updated',
      subscriber: { id: '5', email: 'acl@example.com', updated_at: '2024-06-01T00:00:00.000000Z' },
    });
    const res = await fetch(`http://127.0.0.1:${service.port}/webhooks`, {
      method: 'POST',
      body,
      headers: { signature: signBody(body, SECRET), 'content-type': 'application/json' },
    });
    expect(res.status).toBe(200);
    const { rows } = await database.pool.query<{ id: string }>('select id::text as id from webhook_deliveries');
    expect(rows).toHaveLength(1);
    const events = new Queue(EVENTS_QUEUE, { connection: { url: redisUrl() }, prefix });
    try {
      await waitFor('the apply job', async () => (await events.getJob(deliveryJobId(rows[0]!.id))) !== undefined, 10_000, 50);
    } finally {
      await events.close();
    }
  });

  it('cannot create an admin session, pause a sync, read the configuration or manage users', async () => {
    const taken = new Redis(receiverUrl, { maxRetriesPerRequest: 1 });
    try {
      const sessions = createSessionStore(taken, { prefix, token: 'any-admin-token-0123456789' });
      await expect(sessions.create()).rejects.toThrow(/NOPERM/);
      await expect(taken.hset(`${prefix}:sync:meta`, 'paused', '1')).rejects.toThrow(/NOPERM/);
      await expect(taken.set(`${prefix}:auth-pause:x`, '1')).rejects.toThrow(/NOPERM/);
      // Harmless probes of what FLUSHALL, CONFIG SET and ACL SETUSER belong to (never run for real
      // on the shared test Redis).
      await expect(taken.call('CONFIG', 'GET', 'maxmemory')).rejects.toThrow(/NOPERM/);
      await expect(taken.call('ACL', 'LIST')).rejects.toThrow(/NOPERM/);
      await expect(taken.call('ACL', 'DRYRUN', user, 'FLUSHALL')).rejects.toThrow(/NOPERM/);
      expect(await admin.keys(`${prefix}:admin-session:*`)).toEqual([]);
    } finally {
      taken.disconnect();
    }
  });
});

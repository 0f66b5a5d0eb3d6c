/**
 * A real Prometheus (Debian's `prometheus` binary) scrapes a running `subscriber-mirror start`
 * against the simulator with the shipped monitoring/prometheus.yml jobs and monitoring/alerts.yml.
 * Every PromQL expression of the alert rules and of the dashboard must return at least one series
 * through Prometheus's HTTP API: a misspelled metric or label returns none. Alert expressions are
 * asked with `bool` comparisons (test/helpers/promql.ts), since a healthy mirror fires nothing.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { startSimulator, type Simulator } from '../../src/simulator/index.js';
import { freePort, startChildCli, type ChildService } from '../helpers/child-service.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { MONITORING, shippedExpressions, withBool } from '../helpers/promql.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { requirePath, systemTool } from '../helpers/tools.js';
import { waitForFullPasses } from '../helpers/passes.js';
import { sleep, waitFor } from '../helpers/wait.js';

const prometheusTool = systemTool('prometheus', 'prometheus');

interface QueryAnswer {
  status: string;
  error?: string;
  data?: { result: Array<{ metric: Record<string, string> }> };
}

describe.skipIf(prometheusTool.skip)('a real Prometheus scraping subscriber-mirror', () => {
  let sim: Simulator;
  let database: TestDatabase;
  let service: ChildService;
  let prometheus: ChildProcess | undefined;
  let promUrl = '';
  let workdir = '';
  const prefix = uniquePrefix('prom');
  let promLog = '';

  const query = async (expr: string): Promise<QueryAnswer> => {
    const res = await fetch(`${promUrl}/api/v1/query?${new URLSearchParams({ query: expr }).toString()}`);
    return (await res.json()) as QueryAnswer;
  };

  beforeAll(async () => {
    const binary = requirePath(prometheusTool);
    sim = await startSimulator({ subscribers: 300, groups: 2, seed: 15, rateLimit: false, timeScale: 0.001 });
    database = await createTestDatabase();
    service = startChildCli(
      ['start', '--role', 'all'],
      {
        DATABASE_URL: database.url,
        REDIS_URL: redisUrl(),
        REDIS_PREFIX: prefix,
        MAILER_LEGACY_URL: sim.url,
        MAILER_API_KEY: sim.apiKey,
        SYNC_GROUPS: sim.world.groupIds().join(','),
        SYNC_EVERY: '30s',
        PORT: '0',
        // As in docker-compose.yml: /metrics on the ops listener, which Prometheus scrapes.
        OPS_PORT: '0',
        METRICS_REFRESH_EVERY: '1s',
        // The audit's first tick comes after one period: its accuracy gauge then exists. The budget
        // is raised (the simulator limits nothing) so that a 2 s period earns a pair every tick.
        AUDIT_EVERY: '2s',
        API_RATE_LIMIT: '1200',
        LOG_LEVEL: 'info',
        LOG_FORMAT: 'json',
      },
      (line) => (line.msg === 'service started' && typeof line.opsPort === 'number' ? line.opsPort : null),
    );
    const port = await service.port;

    // The shipped config, its two jobs pointed at the one `all` process, scraped every second.
    workdir = mkdtempSync(path.join(tmpdir(), 'sm-prom-'));
    const shipped = parse(readFileSync(path.join(MONITORING, 'prometheus.yml'), 'utf8')) as {
      global: Record<string, string>;
      scrape_configs: Array<{ job_name: string; metrics_path: string }>;
    };
    const config = {
      global: { scrape_interval: '1s', evaluation_interval: '1s' },
      rule_files: [path.join(MONITORING, 'alerts.yml')],
      scrape_configs: shipped.scrape_configs.map((job) => ({
        job_name: job.job_name,
        metrics_path: job.metrics_path,
        static_configs: [{ targets: [`127.0.0.1:${port}`] }],
      })),
    };
    writeFileSync(path.join(workdir, 'prometheus.yml'), stringify(config));
    const promPort = await freePort();
    promUrl = `http://127.0.0.1:${promPort}`;
    prometheus = spawn(
      binary,
      [
        `--config.file=${path.join(workdir, 'prometheus.yml')}`,
        `--storage.tsdb.path=${path.join(workdir, 'data')}`,
        `--web.listen-address=127.0.0.1:${promPort}`,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    prometheus.stderr?.on('data', (d: Buffer) => (promLog = (promLog + d.toString()).slice(-5_000)));

    // A complete pass of every configured group × type (the first ones are full: upstream counts known).
    await waitForFullPasses(database.pool, sim.world.groupIds());
    await waitFor('Prometheus ready', async () => (await fetch(`${promUrl}/-/ready`).catch(() => null))?.ok, 60_000, 250).catch(
      (e: Error) => {
        throw new Error(`${e.message}\n${promLog}`);
      },
    );
    // Both jobs up, and enough samples for rate() over a minute (a few scrapes after the pass).
    await waitFor(
      'both jobs scraped',
      async () => (await query('count(up == 1)')).data?.result.length === 1 && (await query('up == 1')).data?.result.length === 2,
      60_000,
      250,
    );
    // The audit's accuracy gauge, scraped (the first audit follows the first full passes).
    await waitFor(
      'the audit accuracy scraped',
      async () => ((await query('subscriber_mirror_audit_accuracy')).data?.result.length ?? 0) > 0,
      60_000,
      250,
    );
    await sleep(5_000);
  }, 240_000);

  afterAll(async () => {
    prometheus?.kill('SIGTERM');
    await service?.stop();
    await sim?.close();
    await database?.drop();
    await deleteInstallKeys(prefix);
    if (workdir) rmSync(workdir, { recursive: true, force: true });
  });

  it('loads every alert rule, all healthy', async () => {
    const res = (await (await fetch(`${promUrl}/api/v1/rules`)).json()) as {
      data: { groups: Array<{ rules: Array<{ name: string; health: string; lastError?: string }> }> };
    };
    const rules = res.data.groups.flatMap((g) => g.rules);
    const shipped = parse(readFileSync(path.join(MONITORING, 'alerts.yml'), 'utf8')) as { groups: Array<{ rules: unknown[] }> };
    expect(rules.length).toBe(shipped.groups.flatMap((g) => g.rules).length);
    for (const rule of rules)
      expect({ name: rule.name, health: rule.health, error: rule.lastError ?? '' }).toEqual({ name: rule.name, health: 'ok', error: '' });
  });

  it('fires no alert on a healthy mirror', async () => {
    const firing = await query('ALERTS{alertstate="firing"}');
    expect(firing.data?.result.map((r) => r.metric.alertname)).toEqual([]);
  });

  it('scrapes the gauges read from Postgres with their account (the only one here: default)', async () => {
    for (const metric of [
      'subscriber_mirror_sync_last_success_timestamp_seconds',
      'subscriber_mirror_sync_drift',
      'subscriber_mirror_sync_interval_seconds',
      'subscriber_mirror_audit_accuracy',
      'subscriber_mirror_webhook_inbox_deliveries',
    ]) {
      const accounts = new Set((await query(metric)).data?.result.map((r) => r.metric.account));
      expect([...accounts], metric).toEqual(['default']);
    }
  });

  it.each(shippedExpressions().map((e) => [e.source, e.expr] as const))('%s returns series', async (_source, expr) => {
    const answer = await query(withBool(expr));
    expect(answer.error ?? '').toBe('');
    expect(answer.status).toBe('success');
    expect(answer.data?.result.length, withBool(expr)).toBeGreaterThan(0);
  });
});

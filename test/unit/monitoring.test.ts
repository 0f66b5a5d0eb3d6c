/**
 * monitoring/: the alert rules are tested with Prometheus's own `promtool test rules` (every alert
 * fires on series that should fire it and stays silent on series that should not), the Prometheus
 * config is checked by `promtool check config`, and the dashboard, the compose profile and the runbook
 * of docs/operations.md agree with the rules. test/integration/prometheus.test.ts runs every expression against a
 * real scrape.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseRedisMemory } from '../../src/commands/gauges.js';
import { parse } from 'yaml';
import { ROOT } from '../helpers/cli.js';
import { createMetrics } from '../../src/ground/metrics.js';
import { alertRules, dashboard, groupings, MONITORING, selectors, withBool } from '../helpers/promql.js';
import { requirePath, systemTool } from '../helpers/tools.js';

const promtool = systemTool('promtool', 'prometheus');

function runPromtool(args: string[]): string {
  try {
    return execFileSync(requirePath(promtool), args, { cwd: MONITORING, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (error) {
    const e = error as { stdout?: string; stderr?: string; message: string };
    throw new Error(`promtool ${args.join(' ')} failed:\n${e.stdout ?? ''}${e.stderr ?? ''}${e.stdout || e.stderr ? '' : e.message}`);
  }
}

describe.skipIf(promtool.skip)('promtool', () => {
  it('passes the alert unit tests (monitoring/alerts.test.yml)', () => {
    expect(runPromtool(['test', 'rules', 'alerts.test.yml'])).toContain('SUCCESS');
  });

  it('accepts prometheus.yml and the rule file it loads', () => {
    const out = runPromtool(['check', 'config', 'prometheus.yml']);
    expect(out).toContain('SUCCESS: 1 rule files found');
  });
});

interface RuleTests {
  rule_files: string[];
  tests: Array<{ alert_rule_test?: Array<{ alertname: string; exp_alerts: unknown[] }> }>;
}

describe('alert rules', () => {
  const names = alertRules().map((r) => r.alert);
  const tests = parse(readFileSync(path.join(MONITORING, 'alerts.test.yml'), 'utf8')) as RuleTests;
  const cases = tests.tests.flatMap((t) => t.alert_rule_test ?? []);

  it('cover what the issue asks for', () => {
    expect(names).toEqual([
      'SyncPassStale',
      'UpstreamApiKeyRejected',
      'SyncDriftHigh',
      'WebhookDeliveriesFailing',
      'WebhookInboxBacklogGrowing',
      'ScrapeTargetDown',
      'ProcessRestarting',
      'RateLimiterSaturated',
      'DatabaseConnectionsShort',
      'FullPassesFailing',
      'MirrorInaccurate',
      'RedisMemoryNearlyFull',
    ]);
  });

  it.each(alertRules().map((r) => r.alert as string))('%s has a case that fires it and one that stays silent', (name) => {
    const mine = cases.filter((c) => c.alertname === name);
    expect(
      mine.some((c) => c.exp_alerts.length > 0),
      'a firing case',
    ).toBe(true);
    expect(
      mine.some((c) => c.exp_alerts.length === 0),
      'a silent case',
    ).toBe(true);
  });

  it.each(alertRules().map((r) => r.alert as string))('%s has a runbook line in docs/operations.md "Monitoring"', (name) => {
    const operations = readFileSync(path.join(ROOT, 'docs/operations.md'), 'utf8');
    const start = operations.indexOf('## Monitoring');
    expect(start, 'docs/operations.md needs a "## Monitoring" section').toBeGreaterThanOrEqual(0);
    const section = operations.slice(start);
    expect(section).toMatch(new RegExp(`\\*\\*${name}\\*\\*`));
  });
});

/** The metrics declared with an `account` label (src/ground/metrics.ts); a histogram's series by their suffixes too. */
const ACCOUNT_METRICS = new Set(
  createMetrics({ defaultMetrics: false })
    .registry.getMetricsAsArray()
    .filter((m) => (m as unknown as { labelNames: readonly string[] }).labelNames.includes('account'))
    .flatMap((m) => [m.name, `${m.name}_sum`, `${m.name}_count`, `${m.name}_bucket`]),
);

/** Whether a metric is an account's (labelled `account`) rather than the deployment's (`up`, Redis, the HTTP listeners, the process). */
const perAccount = (metric: string): boolean => ACCOUNT_METRICS.has(metric);

describe('every account apart (docs/operations.md, "Several accounts")', () => {
  const rules = alertRules() as Array<{ alert: string; expr: string; annotations?: { summary?: string } }>;

  it('knows which metrics are per account from their declarations', () => {
    expect(perAccount('subscriber_mirror_sync_drift')).toBe(true);
    expect(perAccount('subscriber_mirror_limiter_wait_seconds_sum')).toBe(true);
    expect(perAccount('subscriber_mirror_redis_memory_used_bytes')).toBe(false);
    expect(perAccount('up')).toBe(false);
  });

  it.each(rules.map((r) => [r.alert, r] as const))('%s fires per account and names it, or is about the deployment', (_name, rule) => {
    const accountMetrics = selectors(rule.expr).filter((s) => perAccount(s.metric));
    if (accountMetrics.length === 0) {
      expect(rule.annotations?.summary).not.toContain('$labels.account');
      return;
    }
    // An aggregation without `by` drops the account: the alert would fire once for all of them.
    expect(rule.expr).not.toMatch(/\b(sum|min|max|avg|count)\s*\(/);
    for (const g of groupings(rule.expr)) {
      if (g.kind === 'by') expect(g.labels, rule.expr).toContain('account');
      else expect(g.labels, rule.expr).not.toContain('account');
    }
    expect(rule.annotations?.summary).toContain('{{ $labels.account }}');
  });

  it('the dashboard chooses accounts with a multi-select variable that includes All', () => {
    const variable = dashboard().templating.list.find((v) => v.name === 'account');
    expect(variable).toMatchObject({ type: 'query', multi: true, includeAll: true, allValue: '.*' });
    // Listed from a series every declared account has from the first scrape (its inbox, at 0).
    expect(variable?.definition).toBe('label_values(subscriber_mirror_webhook_inbox_deliveries, account)');
  });

  it("every panel reads the chosen accounts only, and keeps each account's series apart", () => {
    const panels = dashboard().panels;
    const perAccountTargets = panels.flatMap((p) =>
      (p.targets ?? [])
        .map((t) => ({ where: `${p.title} ${t.refId}`, expr: t.expr }))
        .filter((t) => selectors(t.expr).some((s) => perAccount(s.metric))),
    );
    expect(perAccountTargets.length).toBeGreaterThan(10);
    for (const { where, expr } of perAccountTargets) {
      for (const s of selectors(expr).filter((x) => perAccount(x.metric)))
        expect(s.matchers, `${where}: ${s.metric}`).toContain('account=~"$account"');
      for (const g of groupings(expr)) if (g.kind === 'by') expect(g.labels, where).toContain('account');
    }
  });
});

describe('withBool (used to check every alert expression returns series)', () => {
  it('adds bool to comparisons outside label matchers and strings', () => {
    expect(withBool('up{job=~"a.*",x!="y"} == 0')).toBe('up{job=~"a.*",x!="y"} == bool 0');
    expect(withBool('a > 3 * b and c >= 1')).toBe('a > bool 3 * b and c >= bool 1');
    expect(withBool('a < bool 1')).toBe('a < bool 1');
    expect(withBool('sum(x{l="a>b"}) != 0')).toBe('sum(x{l="a>b"}) != bool 0');
  });
});

describe('Grafana and compose', () => {
  it('every dashboard panel uses the provisioned datasource', () => {
    const provisioned = parse(readFileSync(path.join(MONITORING, 'grafana/provisioning/datasources/prometheus.yml'), 'utf8')) as {
      datasources: Array<{ uid: string; url: string }>;
    };
    const uid = provisioned.datasources[0]?.uid;
    const panels = dashboard().panels as Array<{ datasource?: { uid: string }; targets?: unknown[] }>;
    expect(panels.length).toBeGreaterThan(5);
    for (const p of panels) {
      expect(p.datasource?.uid).toBe(uid);
      expect(p.targets?.length).toBeGreaterThan(0);
    }
    expect(provisioned.datasources[0]?.url).toBe('http://prometheus:9090');
  });

  it('the monitoring profile starts Prometheus and Grafana with files that exist', () => {
    const compose = parse(readFileSync(path.join(ROOT, 'docker-compose.yml'), 'utf8'), { merge: true }) as {
      services: Record<string, { profiles?: string[]; volumes?: string[]; command?: string[] }>;
    };
    const monitoring = Object.entries(compose.services).filter(([, s]) => s.profiles?.includes('monitoring'));
    expect(monitoring.map(([name]) => name).sort()).toEqual(['grafana', 'prometheus']);
    for (const [, service] of monitoring) {
      for (const volume of service.volumes ?? []) {
        const source = volume.split(':')[0] as string;
        if (source.startsWith('./')) expect(existsSync(path.join(ROOT, source)), volume).toBe(true);
      }
    }
    expect(compose.services.prometheus?.command).toContain('--config.file=/etc/prometheus/prometheus.yml');
    const prometheusYml = parse(readFileSync(path.join(MONITORING, 'prometheus.yml'), 'utf8')) as {
      scrape_configs: Array<{ job_name: string; static_configs?: Array<{ targets: string[] }>; dns_sd_configs?: Array<{ port: number }> }>;
    };
    expect(prometheusYml.scrape_configs.map((c) => c.job_name)).toEqual(['subscriber-mirror-receiver', 'subscriber-mirror-worker']);
    // /metrics is on the ops port of the receiver and of every worker replica.
    // The receiver's environment is a list of names and NAME=value entries.
    const ops = compose.services.receiver as { environment?: string[] } | undefined;
    const opsPort = ops?.environment?.find((entry) => entry.startsWith('OPS_PORT='))?.split('=')[1];
    expect(opsPort).toBe('9090');
    expect(prometheusYml.scrape_configs[0]?.static_configs?.[0]?.targets).toEqual([`receiver:${opsPort}`]);
    expect(prometheusYml.scrape_configs[1]?.dns_sd_configs?.[0]?.port).toBe(Number(opsPort));
  });
});

describe('Redis memory gauges', () => {
  it('reads used_memory and maxmemory from INFO memory, and nothing from a reply without them', () => {
    const info = '# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\nmaxmemory:134217728\r\nmaxmemory_policy:noeviction\r\n';
    expect(parseRedisMemory(info)).toEqual({ used: 1048576, max: 134217728 });
    expect(parseRedisMemory('used_memory:5\nmaxmemory:0\n')).toEqual({ used: 5, max: 0 });
    expect(parseRedisMemory('# Memory\r\nused_memory_rss:5\r\n')).toBeNull();
  });
});

/**
 * Every PromQL expression the project ships (alert rules and dashboard panels), and a rewrite that
 * makes an alert expression return its series whatever their values, so a test can tell "healthy,
 * no alert" from "misspelled metric or label, no data".
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parse } from 'yaml';
import { ROOT } from './cli.js';

export interface ShippedExpression {
  /** Where it comes from: `alert SyncPassStale`, `panel "Drift…" A`. */
  source: string;
  expr: string;
}

interface RuleFile {
  groups: Array<{ name: string; rules: Array<{ alert?: string; record?: string; expr: string }> }>;
}

export interface DashboardVariable {
  name: string;
  type: string;
  multi?: boolean;
  includeAll?: boolean;
  allValue?: string;
  definition?: string;
}

interface Dashboard {
  panels: Array<{ title: string; targets?: Array<{ refId: string; expr: string }> }>;
  templating: { list: DashboardVariable[] };
}

export const MONITORING = path.join(ROOT, 'monitoring');

export function alertRules(): RuleFile['groups'][number]['rules'] {
  const file = parse(readFileSync(path.join(MONITORING, 'alerts.yml'), 'utf8')) as RuleFile;
  return file.groups.flatMap((g) => g.rules);
}

export function dashboard(): Dashboard {
  return JSON.parse(readFileSync(path.join(MONITORING, 'grafana/dashboards/subscriber-mirror.json'), 'utf8')) as Dashboard;
}

/** Grafana's variables, as Grafana would fill them for a short range and every account (`All`: the variable's allValue). */
function grafanaVariables(expr: string): string {
  return expr
    .replaceAll('$__rate_interval', '1m')
    .replaceAll('$__interval', '15s')
    .replaceAll('$__range', '5m')
    .replaceAll('$account', '.*');
}

/**
 * Metrics that belong to the deployment rather than to an account: Prometheus's `up`, the one sync
 * queue every account's passes share, Redis, the HTTP listeners and the process. Every other metric
 * of ours is per account (labelled `account`).
 */
export const DEPLOYMENT_WIDE_METRICS: readonly RegExp[] = [
  /^up$/,
  /^subscriber_mirror_queue_depth$/,
  /^subscriber_mirror_redis_memory_/,
  /^subscriber_mirror_http_/,
  /^subscriber_mirror_admin_/,
  /^subscriber_mirror_process_/,
  /^subscriber_mirror_nodejs_/,
];

/** The metric selectors of an expression: each metric name with its `{…}` (empty when it has none). */
export function selectors(expr: string): Array<{ metric: string; matchers: string }> {
  const found: Array<{ metric: string; matchers: string }> = [];
  for (const m of expr.matchAll(/\b(up|subscriber_mirror_\w+)\s*(\{[^}]*\})?/g))
    found.push({ metric: m[1] as string, matchers: m[2] ?? '' });
  return found;
}

/** The label lists of every `by (…)` and `without (…)` of an expression. */
export function groupings(expr: string): Array<{ kind: 'by' | 'without'; labels: string[] }> {
  return [...expr.matchAll(/\b(by|without)\s*\(([^)]*)\)/g)].map((m) => ({
    kind: m[1] as 'by' | 'without',
    labels: (m[2] ?? '')
      .split(',')
      .map((l) => l.trim())
      .filter(Boolean),
  }));
}

export function shippedExpressions(): ShippedExpression[] {
  const alerts = alertRules().map((r) => ({ source: `alert ${r.alert ?? r.record}`, expr: r.expr.trim() }));
  const panels = dashboard().panels.flatMap((p) =>
    (p.targets ?? []).map((t) => ({ source: `panel "${p.title}" ${t.refId}`, expr: grafanaVariables(t.expr) })),
  );
  return [...alerts, ...panels];
}

/**
 * Adds `bool` after every comparison operator outside label matchers and strings, so `a > 3 * b`
 * returns every matched series (0 or 1) instead of only those over the threshold.
 */
export function withBool(expr: string): string {
  let out = '';
  let braces = 0;
  let quote: string | null = null;
  for (let i = 0; i < expr.length; i++) {
    const c = expr[i] as string;
    out += c;
    if (quote) {
      if (c === '\\') out += expr[++i] ?? '';
      else if (c === quote) quote = null;
      continue;
    }
    if (c === '"' || c === "'" || c === '`') quote = c;
    else if (c === '{') braces++;
    else if (c === '}') braces--;
    else if (braces === 0 && /[<>=!]/.test(c)) {
      const two = expr.slice(i, i + 2);
      const op = ['==', '!=', '>=', '<='].includes(two) ? two : c === '>' || c === '<' ? c : null;
      if (!op) continue;
      if (op.length === 2) out += expr[++i];
      if (!/^\s*bool\b/.test(expr.slice(i + 1))) out += ' bool';
    }
  }
  return out;
}

/**
 * What `status`, `status --json` and `/admin/status` show of one account and of several: one account
 * as a single-account install always showed it; several each under its name, every pair naming its
 * account, and what is per account (source, auth pause, rate budgets, audit schedule, webhooks) in a
 * section of its own.
 */
import { describe, expect, it } from 'vitest';
import type { AuditSchedule } from '../../src/audit/core.js';
import { formatStatusText, NOT_READ } from '../../src/commands/status.js';
import type { Queryable } from '../../src/ground/queryable.js';
import { collectReports, statusJson, type AccountReport, type AccountSource } from '../../src/http/status-report.js';
import type { StatusRow } from '../../src/sync/status.js';
import { statusRow } from '../helpers/status-row.js';

const NOW = Date.parse('2026-11-26T12:00:00Z');

const row = statusRow;

function report(over: Partial<AccountReport> = {}): AccountReport {
  return {
    account: 'default',
    source: 'legacy',
    notice: null,
    passEveryMs: 300_000,
    authPause: null,
    rateBudgets: null,
    readBy: null,
    audit: null,
    passes: [row()],
    webhooks: [],
    ...over,
  };
}

const stretched: AuditSchedule = { askedMs: 15_000, effectiveMs: 165_000, honoured: false, shareNeeded: 0.5 };
const pause = { until: NOW + 60_000, failures: 2, since: NOW - 60_000, message: 'Unauthenticated' };
const shop = report({
  account: 'shop',
  source: 'current',
  passEveryMs: 3_600_000,
  authPause: pause,
  audit: stretched,
  passes: [row({ account: 'shop', groupId: '7', mirrored: 5 })],
  webhooks: [{ id: '11', enabled: false, problems: ['disabled'], missingEvents: [], checkedAt: 'c', reenabledAt: null }],
});

describe('status as text', () => {
  it('one account: the table as a single-account install always printed it, with no header', () => {
    const text = formatStatusText([report()], 0.05);
    expect(text).not.toContain('ACCOUNT');
    expect(text.split('\n')[0]).toMatch(/^group\s+type\s+cursor/);
    expect(text).toMatch(/^1\s+active\s+2026-11-26 11:58:00Z/m);
  });

  it('several accounts: a header naming each, with its own pause, table, audit notice and webhooks under it', () => {
    const text = formatStatusText([report(), shop], 0.05);
    const [mine, theirs] = text.split(/^(?=ACCOUNT )/m);
    expect(mine?.split('\n')[0]).toBe('ACCOUNT default (legacy)');
    expect(theirs?.split('\n')[0]).toBe('ACCOUNT shop (current)');
    expect(mine).toMatch(/^1\s+active\s/m);
    expect(mine).not.toMatch(/POLLING PAUSED|AUDIT:|WEBHOOK/);
    expect(theirs).toMatch(/^7\s+active\s.*\s5\s/m);
    expect(theirs).toContain('POLLING PAUSED until 2026-11-26T12:01:00.000Z after 2 auth failure(s): Unauthenticated');
    expect(theirs).toContain('AUDIT: AUDIT_EVERY=15s is not honoured');
    expect(theirs).toContain('WEBHOOK 11: disabled');
    // One blank line between the accounts.
    expect(text).toContain('\n\nACCOUNT shop (current)\n\n');
  });

  it('says how many live worker replicas read each account, and above everything when none does', () => {
    const text = formatStatusText([report({ readBy: ['r1', 'r2'] }), { ...shop, readBy: [] }], 0.05);
    const [mine, theirs] = text.split(/^(?=ACCOUNT )/m);
    expect(mine?.split('\n')[0]).toBe('ACCOUNT default (legacy, read by 2 worker replicas)');
    expect(mine).not.toContain('NOT READ');
    expect(theirs?.split('\n').slice(0, 3)).toEqual(['ACCOUNT shop (current, read by 0 worker replicas)', '', NOT_READ]);
    // One account: no header, the warning alone on top.
    expect(formatStatusText([report({ readBy: [] })], 0.05).split('\n')[0]).toBe(NOT_READ);
    expect(formatStatusText([report({ readBy: ['r1'] })], 0.05).split('\n')[0]).toMatch(/^group\s+type\s+cursor/);
  });

  it('says which account reads nothing', () => {
    const text = formatStatusText([report(), report({ account: 'blog', source: null, notice: 'nothing reconciles', passes: [] })], 0.05);
    expect(text).toContain('ACCOUNT blog (webhooks only)\n\nnothing reconciles\n\nno groups configured and no passes recorded yet\n');
  });
});

describe('status as JSON', () => {
  it('one account: its fields at the top, as a single-account install always had them', () => {
    const json = statusJson([report({ audit: stretched })]);
    expect(Object.keys(json)).toEqual(['source', 'authPause', 'rateBudgets', 'audit', 'passes', 'webhooks']);
    expect(json).toMatchObject({ source: 'legacy', authPause: null, audit: stretched, passes: [{ account: 'default', groupId: '1' }] });
    expect(statusJson([report({ source: null, notice: 'nothing reconciles', passes: [] })])).toMatchObject({
      source: null,
      notice: 'nothing reconciles',
    });
  });

  it('several accounts: a section per account and every pair naming its account', () => {
    const json = statusJson([report(), shop]) as { accounts: Array<Record<string, unknown>>; passes: StatusRow[] };
    expect(Object.keys(json)).toEqual(['accounts', 'passes']);
    expect(json.accounts.map((a) => [a.account, a.source])).toEqual([
      ['default', 'legacy'],
      ['shop', 'current'],
    ]);
    expect(json.accounts[0]).toMatchObject({ authPause: null, audit: null, webhooks: [] });
    expect(json.accounts[1]).toMatchObject({ authPause: pause, audit: stretched, webhooks: [{ id: '11' }] });
    expect(json.passes.map((p) => [p.account, p.groupId, p.mirrored])).toEqual([
      ['default', '1', 990],
      ['shop', '7', 5],
    ]);
  });
});

describe('collecting the reports', () => {
  /** A database with no rows: what is tested here is what comes from the sources. */
  const empty: Queryable = { query: async () => ({ rows: [], rowCount: 0 }) };
  const source = (over: Partial<AccountSource> = {}): AccountSource => ({
    account: 'default',
    groups: ['1'],
    types: ['active'],
    source: 'legacy',
    passEveryMs: 300_000,
    ...over,
  });

  it("reads each account's pause and budgets through its own readers, and keeps a pause only while it lasts", async () => {
    const asked: string[] = [];
    const reports = await collectReports(
      empty,
      [
        source({
          authPause: async () => (asked.push('default pause'), { ...pause, until: NOW - 1 }),
          rateBudgets: async () => (asked.push('default budgets'), null),
        }),
        source({ account: 'shop', source: 'current', authPause: async () => (asked.push('shop pause'), pause), auditSchedule: stretched }),
        source({ account: 'blog', source: null, notice: 'nothing reconciles', groups: [] }),
      ],
      NOW,
    );
    expect(asked.sort()).toEqual(['default budgets', 'default pause', 'shop pause']);
    expect(reports.map((r) => [r.account, r.source, r.authPause?.failures ?? null, r.audit?.honoured ?? null, r.notice])).toEqual([
      ['default', 'legacy', null, null, null],
      ['shop', 'current', 2, false, null],
      ['blog', null, null, null, 'nothing reconciles'],
    ]);
    // Each account's configured pairs, marked with it, before any pass ran.
    expect(reports.map((r) => r.passes.map((p) => [p.account, p.groupId, p.type, p.lastStatus]))).toEqual([
      [['default', '1', 'active', null]],
      [['shop', '1', 'active', null]],
      [],
    ]);
    expect(reports[1]?.passes[0]?.auditPeriod).toEqual({ askedMs: 15_000, effectiveMs: 165_000, honoured: false });
  });
});

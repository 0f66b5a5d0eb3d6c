import { formatBudgetReport } from '../../src/ratelimit/budget-limiter.js';
import { describe, expect, it } from 'vitest';
import { escapeHtml, formatAge, freshness, renderStatusPage, type AccountPage } from '../../src/http/status-page.js';
import type { StatusRow } from '../../src/sync/status.js';
import { statusRow } from '../helpers/status-row.js';

const NOW = Date.parse('2026-11-26T12:00:00Z');
const EVERY = 300_000;

const row = statusRow;

function account(over: Partial<AccountPage> = {}): AccountPage {
  return {
    account: 'default',
    source: 'legacy',
    notice: null,
    passEveryMs: EVERY,
    passes: [row()],
    authPause: null,
    inbox: { pending: 0, failed: 0 },
    failed: [],
    ...over,
  };
}

/** The page of one account (a single-account install). */
function page(over: Partial<AccountPage> = {}): string {
  return renderStatusPage({ now: NOW, accounts: [account(over)], refreshSeconds: 15, links: [] }, 'n0nce');
}

describe('status page', () => {
  it('colours freshness against SYNC_EVERY: fresh to 1.5x, late to 3x (the alert), stale beyond', () => {
    const at = (ms: number) => new Date(NOW - ms).toISOString();
    expect(freshness(at(EVERY * 1.5), EVERY, NOW)).toBe('fresh');
    expect(freshness(at(EVERY * 1.5 + 1), EVERY, NOW)).toBe('late');
    expect(freshness(at(EVERY * 3), EVERY, NOW)).toBe('late');
    expect(freshness(at(EVERY * 3 + 1), EVERY, NOW)).toBe('stale');
    expect(freshness(null, EVERY, NOW)).toBe('never');
  });

  it('escapes everything it renders', () => {
    expect(escapeHtml(`<a href="x" onclick='y'>&</a>`)).toBe('&lt;a href=&quot;x&quot; onclick=&#39;y&#39;&gt;&amp;&lt;/a&gt;');
    const html = page({
      passes: [row({ groupId: '"><script>1</script>', lastError: '<img src=x onerror=alert(1)>' })],
      failed: [{ id: '7', kinds: ['<b>k</b>'], attempts: 1, error: '</td><script>2</script>', receivedAt: 'x' }],
      authPause: { until: NOW + 60_000, failures: 2, since: NOW - 60_000, message: '<i>Unauthenticated</i>' },
    });
    expect(html).not.toMatch(/<script>|<img|<b>k|<i>U/);
    expect(html).toContain('&lt;img src=x onerror=alert(1)&gt;');
    expect(html).toContain('id="auth-pause"');
  });

  it('shows drift as count and percent, marked above 1 %', () => {
    expect(page()).toContain('data-field="drift">10 (1.00 %)</td>');
    expect(page({ passes: [row({ drift: 11, mirrored: 989 })] })).toContain('class="num stale" data-field="drift">11 (1.10 %)');
    expect(page({ passes: [row({ drift: null, upstreamCount: null })] })).toContain('data-field="drift">–<');
  });

  it('shows no banner when the pause is over, and uses the nonce on its only style block', () => {
    expect(page({ authPause: { until: NOW - 1, failures: 1, since: NOW - 60_000, message: 'x' } })).not.toContain('auth-pause');
    const html = page();
    expect(html.match(/<style/g)).toHaveLength(1);
    expect(html).toContain('<style nonce="n0nce">');
    expect(html).not.toMatch(/ style="|<script|https?:\/\//);
  });

  it('formats ages for people', () => {
    expect(formatAge(59_000)).toBe('59 s');
    expect(formatAge(600_000)).toBe('10 min');
    expect(formatAge(5 * 3_600_000)).toBe('5 h');
    expect(formatAge(3 * 86_400_000)).toBe('3 d');
  });
});

describe('status page: removal proof', () => {
  it('shows the members awaiting proof and the step backs of the last full pass', () => {
    const html = page({ passes: [row({ awaitingProof: 17, stepBacks: 3 }), row({ type: 'junk', stepBacks: null })] });
    expect(html).toMatch(/data-type="active"[\s\S]*?data-field="awaiting-proof"[^>]*>17</);
    expect(html).toMatch(/data-type="active"[\s\S]*?data-field="step-backs"[^>]*>3</);
    expect(html).toMatch(/data-type="junk"[\s\S]*?data-field="step-backs"[^>]*>–</);
  });
});

describe('status page: the audit', () => {
  const audit = (over: Partial<StatusRow['audit']> = {}): StatusRow['audit'] => ({
    rowsChecked: 400,
    mismatches: { content: 5, missing: 1, extra: 0, count: 1 },
    accuracy: 394 / 400,
    unrepaired: 0,
    missedDeliveries: 0,
    lastAuditAt: '2026-11-26T11:55:00.000000Z',
    ...over,
  });

  it('shows the accuracy of the last 24 h, yellow when mismatches were found, red when one persisted after its repair', () => {
    expect(page()).toContain(
      'data-field="accuracy" title="last 24 h: 0 rows checked; content 0, missing 0, extra 0, count 0; not repaired 0">-</td>',
    );
    expect(page({ passes: [row({ audit: audit() })] })).toMatch(/class="num late" data-field="accuracy"[^>]*>98\.5% \(6\/400\)</);
    expect(page({ passes: [row({ audit: audit({ unrepaired: 1 }) })] })).toContain('class="num stale" data-field="accuracy"');
    expect(page({ passes: [row({ audit: audit({ mismatches: { content: 0, missing: 0, extra: 0, count: 0 }, accuracy: 1 }) })] })).toMatch(
      /class="num" data-field="accuracy"[^>]*>100\.0% \(0\/400\)</,
    );
  });

  it('lists the webhooks with what is wrong with them', () => {
    const html = page({
      webhooks: [
        { id: '11', enabled: false, problems: ['disabled'], missingEvents: [], checkedAt: 'c', reenabledAt: null },
        { id: '12', enabled: true, problems: [], missingEvents: [], checkedAt: 'c', reenabledAt: null },
      ],
    });
    expect(html).toContain('class="stale" data-webhook="11">disabled<');
    expect(html).toContain('class="fresh" data-webhook="12">ok<');
    expect(page()).toContain('Not read back yet');
  });
});

describe('status page: rate budgets', () => {
  const report = {
    model: 'endpoint' as const,
    fallbackUntil: null,
    windowMs: 60_000,
    budgets: [
      { budget: 'shared', perWindow: 60, announcedLimit: null },
      { budget: 'GET /api/v2/groups/1/subscribers/active', perWindow: 60, announcedLimit: 60 },
    ],
    endpoints: [],
    modelChanges: 1,
    at: '2026-11-27T00:00:00.000Z',
  };

  it('shows the learned model and each budget, escaped', () => {
    const html = page({
      rateBudgets: { ...report, budgets: [...report.budgets, { budget: 'GET /<x>', perWindow: 30, announcedLimit: 30 }] },
    });
    expect(html).toContain('<strong data-field="model">endpoint</strong>');
    expect(html).toContain('<code>GET /api/v2/groups/1/subscribers/active</code>');
    expect(html).toContain('GET /&lt;x&gt;');
    expect(html).not.toContain('GET /<x>');
  });

  it('says when nothing was learned yet, and the fallback after a 429', () => {
    expect(page({ rateBudgets: null })).toContain('No answer from the service read yet.');
    expect(page({ rateBudgets: { ...report, model: 'account', fallbackUntil: '2026-11-27T00:02:00.000Z' } })).toContain(
      'on the shared budget after a 429 until 2026-11-27T00:02:00.000Z',
    );
  });

  it('status prints the same as text', () => {
    const text = formatBudgetReport(report);
    expect(text).toContain('RATE BUDGETS');
    expect(text).toContain('model endpoint');
    expect(text).toContain('  shared: 60/min');
    expect(text).toContain('  GET /api/v2/groups/1/subscribers/active: 60/min (announced 60)');
  });
});

describe('status page: several accounts', () => {
  const twoAccounts = (over: { default?: Partial<AccountPage>; shop?: Partial<AccountPage> } = {}) =>
    renderStatusPage(
      {
        now: NOW,
        accounts: [
          account({ passes: [row()], ...over.default }),
          account({
            account: 'shop',
            source: 'current',
            // Full passes only, once an hour: a pass 50 minutes old is fresh there.
            passEveryMs: 3_600_000,
            passes: [row({ account: 'shop', lastSuccessAt: new Date(NOW - 50 * 60_000).toISOString(), mirrored: 7 })],
            inbox: { pending: 4, failed: 2 },
            ...over.shop,
          }),
        ],
        refreshSeconds: 15,
        links: [],
      },
      'n0nce',
    );

  it('shows one account as a single-account install always did: no section, no account heading, the ids as they were', () => {
    const html = page();
    expect(html).not.toContain('<section');
    expect(html).not.toContain('id="accounts"');
    expect(html).toContain('<table id="passes">');
    expect(html).toContain('<h2>Groups × types</h2>');
    expect(html).toContain('passes every 5 min: green within 1.5 intervals');
  });

  it('gives each account a section under its name, its ids prefixed with it, and an overview linking to them', () => {
    const html = twoAccounts();
    expect(html).toContain('<section id="account-default" data-account="default">');
    expect(html).toContain('<section id="account-shop" data-account="shop">');
    expect(html).toContain('<h2>Account shop</h2>');
    expect(html).toContain('<table id="shop-passes">');
    expect(html).toContain('<table id="default-passes">');
    expect(html).not.toContain('<table id="passes">');
    expect(html.match(/<h3>Groups × types<\/h3>/g)).toHaveLength(2);
    // Every id once: the two accounts' tables never share one.
    const ids = [...html.matchAll(/ id="([^"]+)"/g)].map((m) => m[1]);
    expect(new Set(ids).size).toBe(ids.length);
    expect(html).toMatch(/<tr data-account="shop"><td><a href="#account-shop">shop<\/a><\/td>\n<td>current API<\/td>/);
    expect(html).toMatch(/data-account="shop">[\s\S]*?data-field="pending">4<\/td><td class="num late" data-field="failed">2</);
  });

  it('colours each account against its own pass interval, and counts its pairs by freshness in the overview', () => {
    const html = twoAccounts();
    // 50 minutes after its last success: fresh for shop (hourly), the same age would be stale for default.
    expect(html).toMatch(/<tr data-account="shop" data-group="1" data-type="active">\n<td>1<\/td><td>active<\/td>\n<td class="fresh"/);
    expect(html).toContain('<p class="muted">current API · passes every 60 min</p>');
    expect(html).toMatch(/<tr data-account="shop">[\s\S]*?<td class="fresh" data-field="freshness">1 fresh<\/td>/);
    const stale = twoAccounts({ shop: { passEveryMs: 600_000 } });
    expect(stale).toMatch(/<tr data-account="shop">[\s\S]*?<td class="stale" data-field="freshness">1 stale<\/td>/);
  });

  it("shows a paused account's banner in its own section, naming that account's variables", () => {
    const pause = { until: NOW + 60_000, failures: 3, since: NOW - 60_000, message: 'Unauthenticated' };
    const html = twoAccounts({ shop: { authPause: pause } });
    expect(html).toContain('id="shop-auth-pause"');
    expect(html).not.toContain('id="default-auth-pause"');
    expect(html).toContain('<code>ACCOUNT_SHOP__MAILER_API_KEY</code>');
    expect(html).toContain('<code>ACCOUNT_SHOP__SYNC_SOURCE=current</code>');
    expect(html).toMatch(/<tr data-account="shop">[\s\S]*?<td class="stale" data-field="polling">paused</);
    expect(html).toMatch(/<tr data-account="default">[\s\S]*?<td data-field="polling">ok</);
    // The account `default` is set by the unprefixed variables.
    expect(page({ authPause: pause })).toContain('<code>MAILER_API_KEY</code>');
  });

  it('says in the overview how many live worker replicas read each account, and which one none reads', () => {
    const html = twoAccounts({ default: { readBy: ['r1', 'r2'] }, shop: { readBy: [] } });
    expect(html).toMatch(/<tr data-account="default">[\s\S]*?<td data-field="polling">ok · 2 replicas</);
    expect(html).toMatch(/<tr data-account="shop">[\s\S]*?<td class="stale" data-field="polling">not read</);
  });

  it('says which account reads nothing (webhooks only)', () => {
    const html = twoAccounts({ shop: { source: null, notice: 'webhook-only install', passes: [] } });
    expect(html).toContain('id="shop-notice">webhook-only install</div>');
    expect(html).toMatch(/<tr data-account="shop">[\s\S]*?<td>webhooks only<\/td><td data-field="freshness">no pairs<\/td>/);
  });
});

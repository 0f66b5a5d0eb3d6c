/**
 * The admin status page (GET /admin/): one server-rendered HTML page that answers "is my mirror fresh
 * and complete?" without reading JSON. No build step, no script, no external asset (it must work on a
 * machine without internet): inline CSS under a per-response nonce, and a meta refresh.
 *
 * Every value that reaches the HTML goes through `escapeHtml`: group ids, cursors and above all last
 * errors come from the network or from upstream messages.
 */
import { accountPrefix } from '../config.js';
import { DEFAULT_ACCOUNT } from '../db/client.js';
import type { WebhookHealth } from '../audit/state.js';
import { formatAccuracy, formatAuditPeriod, type StatusRow } from '../sync/status.js';
import type { BudgetReport } from '../ratelimit/budget-limiter.js';
import type { FailedDelivery } from '../webhooks/inbox/report.js';
import type { AccountReport } from './status-report.js';

/** One account's part of the page: its status (status-report.ts) and its webhook inbox. */
export interface AccountPage extends Pick<AccountReport, 'account' | 'source' | 'notice' | 'passes' | 'authPause'> {
  /** The live worker replicas that read it (empty: none does); absent or null when not known. */
  readBy?: readonly string[] | null;
  /** SYNC_EVERY (RECONCILE_EVERY on the current API) in ms: freshness is coloured against it. */
  passEveryMs: number;
  inbox: Readonly<Record<string, number>>;
  failed: readonly FailedDelivery[];
  /** The managed webhooks as the audit last read them back. */
  webhooks?: readonly WebhookHealth[];
  /** The rate budgets its limiter learned from the service's headers; null before any answer. */
  rateBudgets?: BudgetReport | null;
}

export interface StatusPageData {
  now: number;
  /** Every account, in the deployment's order: one is shown as a single-account install always was, several each under its name. */
  accounts: readonly AccountPage[];
  refreshSeconds: number;
  /** Links shown in the header (relative to /admin/). */
  links: ReadonlyArray<{ href: string; label: string }>;
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

export function escapeHtml(value: unknown): string {
  // eslint-disable-next-line @typescript-eslint/no-base-to-string -- any value a page shows, as String() renders it
  return String(value ?? '').replace(/[&<>"']/g, (c) => ESCAPES[c] ?? c);
}

export type Freshness = 'fresh' | 'late' | 'stale' | 'never';

/**
 * Fresh within 1.5 intervals (one pass may be running late), late up to 3 intervals, stale beyond:
 * the same 3 × SYNC_EVERY the SyncPassStale alert fires at.
 */
export function freshness(lastSuccessAt: string | null, everyMs: number, now: number): Freshness {
  if (!lastSuccessAt) return 'never';
  const age = now - Date.parse(lastSuccessAt);
  if (age <= 1.5 * everyMs) return 'fresh';
  if (age <= 3 * everyMs) return 'late';
  return 'stale';
}

export function formatAge(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return `${s} s`;
  if (s < 7_200) return `${Math.round(s / 60)} min`;
  if (s < 172_800) return `${Math.round(s / 3_600)} h`;
  return `${Math.round(s / 86_400)} d`;
}

function driftText(row: StatusRow): { text: string; bad: boolean } {
  if (row.drift === null || row.upstreamCount === null) return { text: '–', bad: false };
  const pct = row.upstreamCount === 0 ? (row.drift === 0 ? 0 : 100) : (100 * row.drift) / row.upstreamCount;
  // Above 1 % is what the SyncDriftHigh alert pages on.
  return { text: `${row.drift} (${pct.toFixed(2)} %)`, bad: Math.abs(pct) > 1 };
}

function passRow(row: StatusRow, everyMs: number, now: number): string {
  const state = freshness(row.lastSuccessAt, everyMs, now);
  const age = row.lastSuccessAt ? `${formatAge(now - Date.parse(row.lastSuccessAt))} ago` : 'never';
  const drift = driftText(row);
  const last = row.lastStatus ? `${row.lastStatus} ${row.lastMode ?? ''}`.trim() : 'not run yet';
  return `<tr data-account="${escapeHtml(row.account)}" data-group="${escapeHtml(row.groupId)}" data-type="${escapeHtml(row.type)}">
<td>${escapeHtml(row.groupId)}</td><td>${escapeHtml(row.type)}</td>
<td class="${state}" data-freshness="${state}" title="last success ${escapeHtml(row.lastSuccessAt ?? 'never')}">${escapeHtml(age)}</td>
<td>${escapeHtml(last)}${row.fullPassOpenAt !== null ? ` <small>(full pass open at offset ${escapeHtml(row.fullPassOpenAt)})</small>` : ''}</td>
<td><code>${escapeHtml(row.cursor ?? '–')}</code></td>
<td class="num" data-field="mirrored">${escapeHtml(row.mirrored)}</td>
<td class="num" data-field="upstream">${escapeHtml(row.upstreamCount ?? '–')}</td>
<td class="num${drift.bad ? ' stale' : ''}" data-field="drift">${escapeHtml(drift.text)}</td>
<td class="num" data-field="awaiting-proof" title="members the last full pass did not list; ended when a second pass confirms">${escapeHtml(row.awaitingProof)}</td>
<td class="num" data-field="step-backs" title="requests the last full pass spent stepping back (the list moved under it)">${escapeHtml(row.stepBacks ?? '–')}</td>
${accuracyCell(row)}
${auditPeriodCell(row)}
<td class="err">${escapeHtml(row.lastError ?? '')}</td>
</tr>`;
}

/** The audit's last 24 h: red when a mismatch persisted after its repair, yellow when any was found. */
function accuracyCell(row: StatusRow): string {
  const a = row.audit;
  const found = a.mismatches.content + a.mismatches.missing + a.mismatches.extra + a.mismatches.count;
  const state = a.unrepaired > 0 ? ' stale' : found > 0 ? ' late' : '';
  const title = `last 24 h: ${a.rowsChecked} rows checked; content ${a.mismatches.content}, missing ${a.mismatches.missing}, extra ${a.mismatches.extra}, count ${a.mismatches.count}; not repaired ${a.unrepaired}`;
  return `<td class="num${state}" data-field="accuracy" title="${escapeHtml(title)}">${escapeHtml(formatAccuracy(a))}</td>`;
}

/** The period the pair is really audited at: yellow when AUDIT_BUDGET stretches AUDIT_EVERY, red when it pays for no audit. */
function auditPeriodCell(row: StatusRow): string {
  const p = row.auditPeriod;
  const state = p === null || p.honoured ? '' : p.effectiveMs === null ? ' stale' : ' late';
  const title =
    p === null
      ? 'the audit is off'
      : p.honoured
        ? 'AUDIT_EVERY, honoured within AUDIT_BUDGET'
        : 'AUDIT_BUDGET cannot pay for AUDIT_EVERY: pairs take turns';
  return `<td class="num${state}" data-field="audit-period" title="${escapeHtml(title)}">${escapeHtml(formatAuditPeriod(p))}</td>`;
}

function webhookRows(webhooks: readonly WebhookHealth[] | undefined, id: Ids): string {
  if (!webhooks || webhooks.length === 0)
    return '<p class="muted">Not read back yet (the audit reads the webhooks each period when webhook management is configured).</p>';
  const rows = webhooks
    .map((w) => {
      const state = w.problems.length === 0 ? 'fresh' : 'stale';
      const problems =
        w.problems.length === 0 ? 'ok' : w.problems.join(', ') + (w.missingEvents.length > 0 ? ` (${w.missingEvents.join(', ')})` : '');
      return `<tr><td>${escapeHtml(w.id)}</td><td class="${state}" data-webhook="${escapeHtml(w.id)}">${escapeHtml(problems)}</td><td>${escapeHtml(w.checkedAt ?? '')}</td><td>${escapeHtml(w.reenabledAt ?? '')}</td></tr>`;
    })
    .join('\n');
  return `<table id="${id('webhooks')}"><thead><tr><th>webhook</th><th>health</th><th>checked</th><th>re-enabled</th></tr></thead><tbody>${rows}</tbody></table>`;
}

function budgetRows(report: BudgetReport | null | undefined, id: Ids): string {
  if (!report) return `<p class="muted" id="${id('rate-budgets')}">No answer from the service read yet.</p>`;
  const perMinute = (n: number): number => Math.round((n * 60_000) / report.windowMs);
  const rows = report.budgets
    .map(
      (b) =>
        `<tr><td><code>${escapeHtml(b.budget)}</code></td><td class="num">${escapeHtml(perMinute(b.perWindow))}</td><td class="num">${escapeHtml(b.announcedLimit ?? '–')}</td></tr>`,
    )
    .join('');
  const fallback = report.fallbackUntil ? ` · on the shared budget after a 429 until ${escapeHtml(report.fallbackUntil)}` : '';
  return `<p id="${id('rate-budgets')}">Model <strong data-field="model">${escapeHtml(report.model)}</strong>${fallback} · as of ${escapeHtml(report.at)}</p>
<table id="${id('budgets')}"><thead><tr><th>budget</th><th>requests/min used</th><th>announced limit</th></tr></thead><tbody>${rows}</tbody></table>`;
}

function pauseBanner(account: AccountPage, now: number, id: Ids): string {
  const pause = account.authPause;
  if (!pause || pause.until <= now) return '';
  // The message says what to fix: a rejected key or token, or a legacy key whose account has moved.
  return `<div class="banner" role="alert" id="${id('auth-pause')}"><strong>Polling is paused:</strong> the service rejected the read credential
(${escapeHtml(pause.failures)} failure${pause.failures === 1 ? '' : 's'} since ${escapeHtml(new Date(pause.since).toISOString())}).
Next try ${escapeHtml(new Date(pause.until).toISOString())}. <q>${escapeHtml(pause.message)}</q>
Fix the read settings (${readSettings(account.account)}) and restart the workers.</div>`;
}

/** The variables an account's read credential is set by: unprefixed for `default`, `ACCOUNT_<NAME>__…` for any other. */
function readSettings(account: string): string {
  const prefix = account === DEFAULT_ACCOUNT ? '' : accountPrefix(account);
  const code = (name: string) => `<code>${escapeHtml(prefix + name)}</code>`;
  return `${code('MAILER_API_KEY')}, or ${code('MAILER_API_TOKEN')} with ${code('SYNC_SOURCE=current')}`;
}

function failedRows(failed: readonly FailedDelivery[], id: Ids): string {
  if (failed.length === 0) return '<p>No failed deliveries.</p>';
  const rows = failed
    .map(
      (d) => `<tr><td>${escapeHtml(d.id)}</td><td>${escapeHtml(d.receivedAt)}</td><td>${escapeHtml(d.kinds.join(', '))}</td>
<td class="num">${escapeHtml(d.attempts)}</td><td class="err">${escapeHtml(d.error ?? '')}</td></tr>`,
    )
    .join('\n');
  return `<table id="${id('failed')}"><thead><tr><th>id</th><th>received</th><th>kinds</th><th>attempts</th><th>error</th></tr></thead>
<tbody>${rows}</tbody></table>`;
}

const CSS = `
body{font:14px/1.4 system-ui,sans-serif;margin:1.5rem;color:#1d232a;background:#fafbfc}
h1{font-size:1.3rem;margin:0 0 .3rem}h2{font-size:1.05rem;margin:1.5rem 0 .5rem}
nav a{margin-right:1rem}table{border-collapse:collapse;background:#fff;width:100%}
th,td{border:1px solid #d8dee4;padding:.3rem .5rem;text-align:left;vertical-align:top}
th{background:#f0f3f6}.num{text-align:right;font-variant-numeric:tabular-nums}
.fresh{background:#dafbe1}.late{background:#fff4c2}.stale,.never{background:#ffd8d3}
.err{color:#a40e26;max-width:28rem;overflow-wrap:anywhere}code{font-size:12px}
.banner{background:#a40e26;color:#fff;padding:.7rem 1rem;border-radius:4px;margin:1rem 0}
.banner code{color:#fff}.muted{color:#57606a}form{display:inline}.inbox{width:auto}
`;

/** An element id of one account's part: as it always was with one account, `NAME-` before it with several. */
type Ids = (base: string) => string;

export function renderStatusPage(data: StatusPageData, nonce: string): string {
  const links = data.links.map((l) => `<a href="${escapeHtml(l.href)}">${escapeHtml(l.label)}</a>`).join('');
  const [only, ...others] = data.accounts;
  const single = only !== undefined && others.length === 0 ? only : null;
  const intervals = single ? `passes every ${escapeHtml(formatAge(single.passEveryMs))}: ` : '';
  const body = single
    ? accountBody(single, data.now, (base) => base, 'h2')
    : `${accountsOverview(data.accounts, data.now)}\n${data.accounts.map((a) => accountSection(a, data.now)).join('\n')}`;
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="${escapeHtml(data.refreshSeconds)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>subscriber-mirror status</title>
<style nonce="${escapeHtml(nonce)}">${CSS}</style></head>
<body>
<h1>subscriber-mirror</h1>
<p class="muted">As of ${escapeHtml(new Date(data.now).toISOString())} · refreshes every ${escapeHtml(data.refreshSeconds)} s ·
${intervals}green within 1.5 intervals, yellow up to 3, red beyond.</p>
<nav>${links}<form method="post" action="logout"><button type="submit">Log out</button></form></nav>
${body}
</body></html>`;
}

/** Several accounts: one line each, linking to its section (the worst freshness of its pairs, its pause, its inbox). */
function accountsOverview(accounts: readonly AccountPage[], now: number): string {
  const rows = accounts
    .map((a) => {
      const states = a.passes.map((p) => freshness(p.lastSuccessAt, a.passEveryMs, now));
      const worst = WORST_FIRST.find((s) => states.includes(s)) ?? null;
      const counts = WORST_FIRST.filter((s) => states.includes(s))
        .map((s) => `${states.filter((x) => x === s).length} ${s}`)
        .join(', ');
      const polling = pollingState(a, now);
      return `<tr data-account="${escapeHtml(a.account)}"><td><a href="#account-${escapeHtml(a.account)}">${escapeHtml(a.account)}</a></td>
<td>${escapeHtml(sourceText(a))}</td><td${worst ? ` class="${worst}"` : ''} data-field="freshness">${escapeHtml(counts || 'no pairs')}</td>
<td${polling === 'paused' || polling === 'not read' ? ' class="stale"' : ''} data-field="polling">${escapeHtml(polling)}</td>
<td class="num" data-field="pending">${escapeHtml(a.inbox.pending ?? 0)}</td><td class="num${(a.inbox.failed ?? 0) > 0 ? ' late' : ''}" data-field="failed">${escapeHtml(a.inbox.failed ?? 0)}</td></tr>`;
    })
    .join('\n');
  return `<h2>Accounts</h2>
<table id="accounts"><thead><tr><th>account</th><th>reads</th><th>pairs</th><th>polling</th><th>pending deliveries</th><th>failed deliveries</th></tr></thead>
<tbody>${rows}</tbody></table>`;
}

const WORST_FIRST: readonly Freshness[] = ['stale', 'never', 'late', 'fresh'];

/** The overview's polling cell: paused, read by no live worker replica, or ok with how many read it. */
function pollingState(a: AccountPage, now: number): string {
  if (a.authPause !== null && a.authPause.until > now) return 'paused';
  if (a.source === null) return '–';
  if (a.readBy === undefined || a.readBy === null) return 'ok';
  if (a.readBy.length === 0) return 'not read';
  return `ok · ${a.readBy.length} replica${a.readBy.length === 1 ? '' : 's'}`;
}

function sourceText(a: AccountPage): string {
  if (a.source === null) return 'webhooks only';
  return a.source === undefined ? '–' : `${a.source} API`;
}

/** Several accounts: each under its name, its element ids prefixed with it. */
function accountSection(a: AccountPage, now: number): string {
  const id: Ids = (base) => escapeHtml(`${a.account}-${base}`);
  return `<section id="account-${escapeHtml(a.account)}" data-account="${escapeHtml(a.account)}">
<h2>Account ${escapeHtml(a.account)}</h2>
<p class="muted">${escapeHtml(sourceText(a))} · passes every ${escapeHtml(formatAge(a.passEveryMs))}</p>
${accountBody(a, now, id, 'h3')}
</section>`;
}

/** One account's banners and tables: the whole page's body with one account. */
function accountBody(a: AccountPage, now: number, id: Ids, heading: 'h2' | 'h3'): string {
  const h = (text: string) => `<${heading}>${text}</${heading}>`;
  const inbox = Object.entries(a.inbox)
    .map(([status, n]) => `<tr><td>${escapeHtml(status)}</td><td class="num" data-inbox="${escapeHtml(status)}">${escapeHtml(n)}</td></tr>`)
    .join('');
  return `${a.notice ? `<div class="banner" role="status" id="${id('notice')}">${escapeHtml(a.notice)}</div>` : ''}
${pauseBanner(a, now, id)}
${h('Groups × types')}
<table id="${id('passes')}"><thead><tr><th>group</th><th>type</th><th>last success</th><th>last run</th><th>cursor</th>
<th>mirrored</th><th>upstream</th><th>drift</th><th>awaiting proof</th><th>step backs</th><th title="the audit's last 24 h: rows that matched the service (mismatches/rows checked)">accuracy</th><th title="the period each pair is really audited at within AUDIT_BUDGET">audited every</th><th>last error</th></tr></thead>
<tbody>${a.passes.map((row) => passRow(row, a.passEveryMs, now)).join('\n')}</tbody></table>
${h('Rate budgets')}
${budgetRows(a.rateBudgets, id)}
${h('Webhooks')}
${webhookRows(a.webhooks, id)}
${h('Webhook inbox')}
<table id="${id('inbox')}" class="inbox"><thead><tr><th>status</th><th>deliveries</th></tr></thead><tbody>${inbox}</tbody></table>
${h('Latest failed deliveries')}
${failedRows(a.failed, id)}`;
}

export function renderLoginPage(nonce: string, message: string | null): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>subscriber-mirror admin: log in</title>
<style nonce="${escapeHtml(nonce)}">${CSS}</style></head>
<body>
<h1>subscriber-mirror admin</h1>
${message ? `<p class="err" role="alert">${escapeHtml(message)}</p>` : ''}
<form method="post" action="/admin/login">
<label>Admin token (<code>ADMIN_TOKEN</code>) <input type="password" name="token" autocomplete="current-password" required autofocus></label>
<button type="submit">Log in</button>
</form>
<p class="muted">Or use the browser's password dialog: <a href="/admin/basic">HTTP Basic login</a> (any user name, the token as password).</p>
</body></html>`;
}

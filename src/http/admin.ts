/**
 * Admin routes, registered only when ADMIN_TOKEN is set (otherwise they do not exist: 404), and only
 * on the ops listener unless ADMIN_ON_PUBLIC_PORT says otherwise.
 *
 * Every route, the status page and the BullMQ dashboard included, needs ADMIN_TOKEN, compared in
 * constant time, presented one of three ways:
 * - `Authorization: Bearer <token>` (scripts, the JSON API);
 * - `Authorization: Basic` with the token as password (curl -u, the browser's password dialog);
 * - a session cookie set by the login form: HttpOnly, SameSite=Strict, Path=/admin, Secure (unless
 *   ADMIN_COOKIE_INSECURE), naming a session kept in Redis (sessions.ts): logout and a new ADMIN_TOKEN
 *   end it server-side.
 * The token never travels in a URL. Browsers send Basic credentials and cookies on their own, so every
 * request that changes something (any method but GET/HEAD/OPTIONS), the dashboard's actions included,
 * must prove it comes from our own pages (Origin or Sec-Fetch-Site) unless it carries Bearer, which no
 * browser adds by itself: no CSRF; the dashboard, a browser's page, needs it even with Bearer, and
 * is read-only unless DASHBOARD_WRITE. Form bodies are accepted by the login and logout forms only, JSON
 * elsewhere. Failed credentials are throttled per client; every action and every failed login is
 * logged and counted. No /admin page may be framed.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { FastifyAdapter } from '@bull-board/fastify';
import type { Queue } from 'bullmq';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type pg from 'pg';
import type { Logger } from '../ground/log.js';
import type { Metrics } from '../ground/metrics.js';
import { SUBSCRIBER_TYPES, type SubscriberType } from '../db/schema.js';
import { enqueueBackfills } from '../sync/backfill.js';
import type { PassJobData, PassJobResult } from '../sync/schedule.js';
import type { AuthPause } from '../sync/auth-pause.js';
import type { BudgetReport } from '../ratelimit/budget-limiter.js';
import { DEFAULT_ACCOUNT } from '../db/client.js';
import { countDeliveriesOf, latestFailedDeliveriesOf } from '../webhooks/inbox/report.js';
import { SESSION_MS, type SessionStore } from './sessions.js';
import { renderLoginPage, renderStatusPage } from './status-page.js';
import { collectReports, statusJson, type AccountSource } from './status-report.js';
import { createLoginThrottle, type Attempt, type LoginThrottle } from './throttle.js';
import type { AuditSchedule } from '../audit/core.js';
import { UsageError } from '../ground/usage-error.js';

/** One account's sync queue and what it mirrors (SYNC_GROUPS and SYNC_TYPES: its backfills accept nothing else). */
export interface AdminAccount {
  name: string;
  syncQueue: Queue<PassJobData, PassJobResult>;
  configured: { groups: readonly string[]; types: readonly SubscriberType[] };
}

export interface AdminDeps {
  token: string;
  /** A pool serving the account the status page shows. */
  pool: pg.Pool;
  /** Every declared account, in order: backfills and jobs are of one of them, the dashboard shows each one's queue. */
  accounts: readonly AdminAccount[];
  /**
   * The account a request names (`account`), or the only one: its name. Throws a UsageError, answered
   * 400 with its message, for a name not declared or for none among several (`findAccount`'s rule).
   */
  chooseAccount(name: string | undefined): string;
  /** What the status page shows: the SYNC_GROUPS and SYNC_TYPES of its account, and its audit schedule. */
  configured: { groups: readonly string[]; types: readonly SubscriberType[]; auditSchedule?: AuditSchedule | null };
  /** The API-key pause of the poll path (null when not polling or not paused). */
  authPause?: () => Promise<AuthPause | null>;
  /** The rate budgets the poller learned (published in Redis by its limiter). */
  rateBudgets?: () => Promise<BudgetReport | null>;
  /** Shown above the status page and in /admin/status (a webhook-only install: nothing reconciles). */
  notice?: string;
  /** SYNC_EVERY in ms: the status page colours freshness against it. */
  syncEveryMs: number;
  /**
   * Every account the status page and /admin/status show (docs/operations.md, "Several accounts").
   * Absent: one, `default`, as `configured`, `authPause`, `rateBudgets`, `notice` and `syncEveryMs`
   * describe it.
   */
  statusSources?: readonly AccountSource[];
  sessions: SessionStore;
  logger: Logger;
  metrics?: Metrics;
  /** ADMIN_COOKIE_INSECURE: no `Secure` on the cookie of a plain-http request (local use). */
  cookieInsecure?: boolean;
  /** DASHBOARD_WRITE: the BullMQ dashboard may change queues (add, retry, empty, pause…); read-only otherwise. */
  dashboardWrite?: boolean;
  /**
   * Failed credentials allowed per client within the window before 429 (default 5 per minute), and
   * from all clients together (default 100 per minute, a backstop against guessers with many addresses).
   */
  loginThrottle?: { max: number; windowMs: number; maxPerProcess?: number };
}

const SESSION_COOKIE = 'sm_admin';
const REFRESH_SECONDS = 15;
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** Hashing both sides gives equal lengths, so timingSafeEqual never throws and length is not leaked. */
function sameSecret(presented: string, token: string): boolean {
  const a = createHash('sha256').update(presented).digest();
  const b = createHash('sha256').update(token).digest();
  return presented.length > 0 && timingSafeEqual(a, b);
}

type HeaderScheme = 'bearer' | 'basic';

/** The token from `Authorization: Bearer …` or as the password of `Authorization: Basic …`. */
function presentedToken(header: string | undefined): { scheme: HeaderScheme; token: string } | null {
  const bearer = /^Bearer\s+(.+)$/i.exec(header ?? '')?.[1]?.trim();
  if (bearer) return { scheme: 'bearer', token: bearer };
  const basic = /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(header ?? '')?.[1];
  if (!basic) return null;
  const decoded = Buffer.from(basic, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  return colon < 0 ? null : { scheme: 'basic', token: decoded.slice(colon + 1) };
}

function cookieValue(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/**
 * True when the request comes from a page of this origin. Browsers send Origin on every cross-site
 * POST and Sec-Fetch-Site on every request; a request with neither is not a browser's. The host is
 * the one the client asked for (X-Forwarded-Host behind a trusted proxy, TRUST_PROXY).
 */
export function sameOrigin(request: FastifyRequest): boolean {
  const site = request.headers['sec-fetch-site'];
  if (typeof site === 'string' && site !== 'same-origin' && site !== 'none') return false;
  const origin = request.headers.origin;
  // "null" is what a browser sends for opaque origins (and, under some referrer policies, for its
  // own forms): Sec-Fetch-Site decides then.
  if (origin !== undefined && origin !== 'null') {
    if (!URL.canParse(origin)) return false;
    return new URL(origin).host === request.host;
  }
  return typeof site === 'string';
}

type AuthMethod = HeaderScheme | 'cookie';

function wantsHtml(request: FastifyRequest): boolean {
  return request.method === 'GET' && /text\/html/.test(request.headers.accept ?? '');
}

/** Our own pages: a strict policy. Every other /admin answer gets framing headers in `onSend`. */
function sendHtml(reply: FastifyReply, status: number, render: (nonce: string) => string): FastifyReply {
  const nonce = randomBytes(16).toString('base64');
  return reply
    .code(status)
    .header('content-type', 'text/html; charset=utf-8')
    .header('cache-control', 'no-store')
    .header('referrer-policy', 'same-origin')
    .header(
      'content-security-policy',
      `default-src 'none'; style-src 'nonce-${nonce}'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`,
    )
    .send(render(nonce));
}

const OPEN_PATHS = new Set(['/admin/login']);
const DASHBOARD_PATH = '/admin/queues';
/** The only routes that take form bodies: our own login and logout forms. */
const FORM_PATHS = new Set(['/admin/login', '/admin/logout']);

const EXTERNAL_STYLESHEET = /<link\s+href="https:\/\/fonts\.googleapis\.com\/[^"]*"\s+rel="stylesheet">/g;

/** The account a request names (a body's `account`, a query's), or the only one; a message (400) otherwise. */
function chosenAccount(deps: AdminDeps, name: unknown): AdminAccount | string {
  if (name !== undefined && name !== null && typeof name !== 'string') return 'account must be an account name';
  let chosen: string;
  try {
    chosen = deps.chooseAccount(name ?? undefined);
  } catch (error) {
    if (error instanceof UsageError) return error.message;
    throw error;
  }
  return deps.accounts.find((a) => a.name === chosen) ?? `account ${chosen} is not served here`;
}

function parseBackfillBody(body: unknown, deps: AdminDeps): { account: AdminAccount; groupId: string; types: SubscriberType[] } | string {
  if (!body || typeof body !== 'object' || Array.isArray(body)) return 'body must be a JSON object {group, type?, account?}';
  const { group, type } = body as { group?: unknown; type?: unknown };
  const account = chosenAccount(deps, (body as { account?: unknown }).account);
  if (typeof account === 'string') return account;
  const configured = account.configured;
  const groupId = typeof group === 'number' && Number.isSafeInteger(group) ? String(group) : group;
  if (typeof groupId !== 'string' || !/^\d{1,30}$/.test(groupId)) return 'group must be a numeric group id';
  if (type !== undefined && type !== null && (typeof type !== 'string' || !(SUBSCRIBER_TYPES as readonly string[]).includes(type))) {
    return `type must be one of ${SUBSCRIBER_TYPES.join(', ')}`;
  }
  // Only what the service is configured to mirror: a backfill must not pull in another group's people.
  if (!configured.groups.includes(groupId)) {
    return `group ${groupId} is not configured; configured groups (SYNC_GROUPS): ${configured.groups.join(', ') || 'none'}`;
  }
  if (type === undefined || type === null) return { account, groupId, types: [...configured.types] };
  if (!(configured.types as readonly string[]).includes(type)) {
    return `type ${String(type)} is not configured; configured types (SYNC_TYPES): ${configured.types.join(', ')}`;
  }
  return { account, groupId, types: [type as SubscriberType] };
}

// ---------------------------------------------------------------------------------------------
// The audit trail: one line and one count per action or failed login

type AuditAction = 'login' | 'logout' | 'backfill' | 'queues' | 'auth';
type AuditOutcome = 'succeeded' | 'failed' | 'refused' | 'throttled' | 'rejected' | 'error';

interface AuditNote {
  via?: AuthMethod | 'form';
  /** False for the repeated refusals of a throttled client: counted, not logged. */
  log?: boolean;
  detail?: Record<string, unknown>;
}

function auditAction(request: FastifyRequest, path: string, credentialsPresented: boolean): AuditAction | null {
  if (path === '/admin/login') return request.method === 'POST' ? 'login' : credentialsPresented ? 'auth' : null;
  if (path === '/admin/logout') return 'logout';
  if (path === '/admin/backfill') return 'backfill';
  if (path.startsWith('/admin/queues') && !SAFE_METHODS.has(request.method)) return 'queues';
  if (!SAFE_METHODS.has(request.method)) return 'auth';
  return credentialsPresented ? 'auth' : null;
}

function auditOutcome(status: number): AuditOutcome {
  if (status < 400) return 'succeeded';
  if (status === 401) return 'failed';
  if (status === 403) return 'refused';
  if (status === 429) return 'throttled';
  return status < 500 ? 'rejected' : 'error';
}

const AUDIT_ACTIONS: AuditAction[] = ['login', 'logout', 'backfill', 'queues', 'auth'];
const AUDIT_OUTCOMES: AuditOutcome[] = ['succeeded', 'failed', 'refused', 'throttled', 'rejected', 'error'];

/** What the hooks and routes of the admin scope share. */
interface Guard {
  deps: AdminDeps;
  log: Logger;
  throttle: LoginThrottle;
  notes: WeakMap<FastifyRequest, AuditNote>;
}

function note(g: Guard, request: FastifyRequest, extra: AuditNote): void {
  g.notes.set(request, { ...g.notes.get(request), ...extra });
}

/** 429 for a refused attempt; the first refusal of a window is logged, the rest counted. */
async function refuse(g: Guard, request: FastifyRequest, reply: FastifyReply, attempt: Attempt & { allowed: false }): Promise<void> {
  note(g, request, { log: attempt.firstRefusal });
  await reply.code(429).header('retry-after', String(attempt.retryAfterSeconds)).send({ error: 'too many failed logins; try again later' });
}

/**
 * The method that authenticated the request, or null; answers 429 itself for a throttled client. The
 * attempt is reserved before anything is awaited (throttle.ts), so pipelined guesses all count.
 */
async function authenticate(g: Guard, request: FastifyRequest, reply: FastifyReply): Promise<AuthMethod | null> {
  const presented = presentedToken(request.headers.authorization);
  if (presented) {
    note(g, request, { via: presented.scheme });
    const attempt = g.throttle.reserve(request.ip);
    if (!attempt.allowed) {
      await refuse(g, request, reply, attempt);
      return null;
    }
    const right = sameSecret(presented.token, g.deps.token);
    attempt.settle(right ? 'succeeded' : 'failed');
    return right ? presented.scheme : null;
  }
  const cookie = cookieValue(request.headers.cookie, SESSION_COOKIE);
  if (cookie === undefined) return null;
  note(g, request, { via: 'cookie' });
  return (await g.deps.sessions.valid(cookie)) ? 'cookie' : null;
}

function sessionCookie(g: Guard, request: FastifyRequest, value: string, maxAgeSeconds: number): string {
  const secure = !g.deps.cookieInsecure || request.protocol === 'https' ? '; Secure' : '';
  return `${SESSION_COOKIE}=${value}; Path=/admin; HttpOnly; SameSite=Strict; Max-Age=${maxAgeSeconds}${secure}`;
}

export async function registerAdminRoutes(app: FastifyInstance, deps: AdminDeps): Promise<void> {
  const g: Guard = {
    deps,
    log: deps.logger.child({ component: 'admin' }),
    throttle: createLoginThrottle(deps.loginThrottle ?? { max: 5, windowMs: 60_000 }),
    notes: new WeakMap(),
  };
  for (const action of AUDIT_ACTIONS) for (const outcome of AUDIT_OUTCOMES) deps.metrics?.adminActions.inc({ action, outcome }, 0);

  await app.register(async (admin) => {
    // The login and logout forms post urlencoded; this parser exists only inside the admin scope, and
    // the guard refuses form bodies on every other route.
    admin.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string', bodyLimit: 4_096 }, (_request, body, done) => {
      done(null, Object.fromEntries(new URLSearchParams(body as string)));
    });
    admin.addHook('onRequest', async (request, reply) => guardRequest(g, request, reply));
    // Framing headers on every answer of the scope, the dashboard's pages and its errors included.
    admin.addHook('onSend', async (_request, reply, payload) => {
      reply.header('x-frame-options', 'DENY');
      reply.header('x-content-type-options', 'nosniff');
      if (!reply.hasHeader('content-security-policy')) reply.header('content-security-policy', "frame-ancestors 'none'");
      return payload;
    });
    admin.addHook('onResponse', async (request, reply) => audit(g, request, reply));
    registerSessionRoutes(admin, g);
    registerStatusRoutes(admin, g);
    await registerDashboard(admin, deps);
  });
}

/** Authentication, then for changes: same origin (unless Bearer) and a JSON body. */
async function guardRequest(g: Guard, request: FastifyRequest, reply: FastifyReply): Promise<void> {
  const path = request.url.split('?')[0] ?? '';
  if (OPEN_PATHS.has(path)) return;
  const method = await authenticate(g, request, reply);
  if (reply.sent) return;
  const changes = !SAFE_METHODS.has(request.method);
  const dashboard = path === DASHBOARD_PATH || path.startsWith(`${DASHBOARD_PATH}/`);
  // The dashboard is a browser's page: its writes need our own page even with Bearer (a script that
  // wants a pass uses /admin/backfill, which checks the scope).
  if (method && (method !== 'bearer' || dashboard) && changes && !sameOrigin(request)) {
    await reply.code(403).send({ error: 'cross-site request refused' });
    return;
  }
  if (method && changes && !acceptableBody(request, path)) {
    await reply.code(415).send({ error: 'send a JSON body (application/json)' });
    return;
  }
  if (method && dashboard && changes && !g.deps.dashboardWrite) {
    await reply.code(403).send({ error: 'the queue dashboard is read-only (DASHBOARD_WRITE=true allows changes); use /admin/backfill' });
    return;
  }
  if (method) return;
  if (path === '/admin/basic') {
    // Asks the browser for its password dialog; the token then goes as the Basic password.
    await reply
      .code(401)
      .header('www-authenticate', 'Basic realm="subscriber-mirror admin", charset="UTF-8"')
      .send({ error: 'unauthorized' });
  } else if (wantsHtml(request)) {
    await sendHtml(reply.header('www-authenticate', 'Bearer'), 401, (nonce) => renderLoginPage(nonce, null));
  } else {
    await reply.code(401).header('www-authenticate', 'Bearer').send({ error: 'unauthorized' });
  }
}

/** One line (never a token, a cookie or a body) and one count per action or failed login. */
function audit(g: Guard, request: FastifyRequest, reply: FastifyReply): void {
  const path = request.url.split('?')[0] ?? '';
  const n = g.notes.get(request);
  const action = auditAction(request, path, n?.via !== undefined);
  if (!action) return;
  const outcome = auditOutcome(reply.statusCode);
  // Safe requests are audited only when their credentials failed (a script polling with Bearer is no event).
  if (SAFE_METHODS.has(request.method) && outcome !== 'failed' && outcome !== 'throttled') return;
  g.deps.metrics?.adminActions.inc({ action, outcome });
  if (n?.log === false) return;
  const params =
    request.params && typeof request.params === 'object' && Object.keys(request.params).length > 0 ? request.params : undefined;
  const line = {
    action,
    outcome,
    status: reply.statusCode,
    method: request.method,
    route: request.routeOptions.url ?? path,
    via: n?.via ?? 'none',
    ip: request.ip,
    ...(params ? { params } : {}),
    ...n?.detail,
  };
  if (outcome === 'succeeded') g.log.info(line, 'admin action');
  else if (action === 'login' || action === 'auth') g.log.warn(line, 'admin login failed');
  else g.log.warn(line, 'admin action refused');
}

function registerSessionRoutes(admin: FastifyInstance, g: Guard): void {
  const { deps } = g;
  admin.get('/admin/login', async (request, reply) => {
    // Outside the guard (the form must show to anyone), so credentials sent here are throttled here:
    // otherwise this page would tell a guesser which token is right, at any rate.
    if (request.headers.authorization !== undefined) {
      const method = await authenticate(g, request, reply);
      if (reply.sent) return reply;
      if (method) return reply.redirect('/admin/', 303);
      return sendHtml(reply, 401, (nonce) => renderLoginPage(nonce, null));
    }
    if (await deps.sessions.valid(cookieValue(request.headers.cookie, SESSION_COOKIE))) return reply.redirect('/admin/', 303);
    return sendHtml(reply, 200, (nonce) => renderLoginPage(nonce, null));
  });

  admin.post('/admin/login', async (request, reply) => {
    note(g, request, { via: 'form' });
    if (!sameOrigin(request)) return reply.code(403).send({ error: 'cross-site login refused' });
    const attempt = g.throttle.reserve(request.ip);
    if (!attempt.allowed) {
      await refuse(g, request, reply, attempt);
      return reply;
    }
    const body = request.body as { token?: unknown } | undefined;
    const presented = typeof body?.token === 'string' ? body.token : '';
    const right = sameSecret(presented, deps.token);
    attempt.settle(right ? 'succeeded' : 'failed');
    if (!right) return sendHtml(reply, 401, (nonce) => renderLoginPage(nonce, 'Wrong token.'));
    let session: string;
    try {
      session = await deps.sessions.create();
    } catch {
      // Sessions live in Redis; Bearer and Basic do not need it.
      return sendHtml(reply, 503, (nonce) =>
        renderLoginPage(nonce, 'Cannot store the session now (Redis unavailable); try again, or use HTTP Basic.'),
      );
    }
    reply.header('set-cookie', sessionCookie(g, request, session, SESSION_MS / 1000));
    return reply.redirect('/admin/', 303);
  });

  admin.post('/admin/logout', async (request, reply) => {
    // Server-side: a copy of the cookie is worthless from now on.
    await deps.sessions.revoke(cookieValue(request.headers.cookie, SESSION_COOKIE));
    reply.header('set-cookie', sessionCookie(g, request, '', 0));
    return reply.redirect('/admin/login', 303);
  });

  admin.get('/admin/basic', async (_request, reply) => reply.redirect('/admin/', 303));
  admin.get('/admin', async (_request, reply) => reply.redirect('/admin/', 303));
}

/** The accounts the status shows; a reader of Redis that fails shows nothing for its part (the tables' status still shows). */
function statusSources(deps: AdminDeps): AccountSource[] {
  const sources: readonly AccountSource[] = deps.statusSources ?? [
    {
      account: DEFAULT_ACCOUNT,
      ...deps.configured,
      ...(deps.notice ? { source: null, notice: deps.notice } : {}),
      passEveryMs: deps.syncEveryMs,
      authPause: deps.authPause,
      rateBudgets: deps.rateBudgets,
    },
  ];
  return sources.map(({ authPause, rateBudgets, readBy, ...source }) => ({
    ...source,
    ...(authPause ? { authPause: () => authPause().catch(() => null) } : {}),
    ...(rateBudgets ? { rateBudgets: () => rateBudgets().catch(() => null) } : {}),
    ...(readBy ? { readBy: () => readBy().catch(() => null) } : {}),
  }));
}

function registerStatusRoutes(admin: FastifyInstance, g: Guard): void {
  admin.get('/admin/', async (_request, reply) => {
    const sources = statusSources(g.deps);
    const accounts = sources.map((s) => s.account);
    const now = Date.now();
    const [reports, inbox, failed] = await Promise.all([
      collectReports(g.deps.pool, sources, now),
      countDeliveriesOf(g.deps.pool, accounts),
      latestFailedDeliveriesOf(g.deps.pool, accounts, 10),
    ]);
    return sendHtml(reply, 200, (nonce) =>
      renderStatusPage(
        {
          now,
          accounts: reports.map((r) => ({ ...r, inbox: inbox.get(r.account) ?? {}, failed: failed.get(r.account) ?? [] })),
          refreshSeconds: REFRESH_SECONDS,
          links: [
            { href: '/admin/queues', label: 'Queues (BullMQ)' },
            { href: '/metrics', label: 'Metrics' },
            { href: '/admin/status', label: 'Status (JSON)' },
          ],
        },
        nonce,
      ),
    );
  });

  admin.post('/admin/backfill', async (request, reply) => {
    const parsed = parseBackfillBody(request.body, g.deps);
    if (typeof parsed === 'string') return reply.code(400).send({ error: parsed });
    note(g, request, { detail: { account: parsed.account.name, group: parsed.groupId, types: parsed.types } });
    const jobs = await enqueueBackfills(
      parsed.account.syncQueue,
      parsed.types.map((type) => ({ groupId: parsed.groupId, type })),
    );
    return reply.code(202).send({ account: parsed.account.name, jobs, jobId: jobs[0]?.jobId });
  });

  // A job id is its account's: `?account=NAME` (needed when several accounts are declared).
  admin.get<{ Params: { id: string }; Querystring: { account?: string } }>('/admin/jobs/:id', async (request, reply) => {
    const account = chosenAccount(g.deps, request.query.account);
    if (typeof account === 'string') return reply.code(400).send({ error: account });
    // State first, then the job: a job read while active and found completed a moment later would
    // carry no result (the same race as backfill --wait, src/sync/backfill.ts).
    const state = await account.syncQueue.getJobState(request.params.id);
    const job = await account.syncQueue.getJob(request.params.id);
    if (!job || state === 'unknown') return reply.code(404).send({ error: `job ${request.params.id} not found` });
    return {
      account: account.name,
      id: job.id,
      name: job.name,
      data: job.data,
      state,
      progress: job.progress,
      result: job.returnvalue ?? null,
      failedReason: job.failedReason ?? null,
      createdAt: new Date(job.timestamp).toISOString(),
      finishedAt: job.finishedOn ? new Date(job.finishedOn).toISOString() : null,
    };
  });

  admin.get('/admin/status', async () => statusJson(await collectReports(g.deps.pool, statusSources(g.deps))));
}

async function registerDashboard(admin: FastifyInstance, deps: AdminDeps): Promise<void> {
  // The dashboard's page links Google Fonts: without internet (where operators often run this) that
  // is a failed request and a console error on every load. Its own CSS falls back to system fonts.
  admin.addHook('onSend', async (request, reply, payload) => {
    if (typeof payload !== 'string' || !request.url.startsWith('/admin/queues')) return payload;
    if (!String(reply.getHeader('content-type') ?? '').startsWith('text/html')) return payload;
    return payload.replace(EXTERNAL_STYLESHEET, '');
  });

  const board = new FastifyAdapter();
  board.setBasePath(DASHBOARD_PATH);
  // Read-only also hides the buttons; the guard refuses the writes whatever the dashboard does.
  const readOnlyMode = !deps.dashboardWrite;
  // Every account's queue is named `sync`: with several, each is shown as `<account>-sync`.
  const several = deps.accounts.length > 1;
  createBullBoard({
    queues: deps.accounts.map((a) => new BullMQAdapter(a.syncQueue, { readOnlyMode, ...(several ? { prefix: `${a.name}-` } : {}) })),
    serverAdapter: board,
  });
  await admin.register(board.registerPlugin(), { prefix: DASHBOARD_PATH });
}

/** Form bodies on our own forms only; JSON (or no body) everywhere else. */
function acceptableBody(request: FastifyRequest, path: string): boolean {
  const length = request.headers['content-length'];
  const hasBody = request.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
  if (!hasBody) return true;
  const media = (request.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase();
  if (media === 'application/json') return true;
  return media === 'application/x-www-form-urlencoded' && FORM_PATHS.has(path);
}

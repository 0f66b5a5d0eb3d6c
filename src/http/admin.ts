/**
 * Admin routes, registered only when ADMIN_TOKEN is set (otherwise they do not exist: 404).
 *
 * Every route, the status page and the BullMQ dashboard included, needs ADMIN_TOKEN, compared in
 * constant time, presented one of three ways:
 * - `Authorization: Bearer <token>` (scripts, the JSON API);
 * - `Authorization: Basic` with the token as password (curl -u, the browser's password dialog);
 * - a session cookie set by the login form: HttpOnly, SameSite=Strict, Path=/admin, holding an expiry
 *   and an HMAC of it keyed by the token (never the token itself), so changing ADMIN_TOKEN ends every
 *   session.
 * The token never travels in a URL. Cookie-authenticated requests that change something must prove
 * they come from our own pages (Origin or Sec-Fetch-Site), on top of SameSite=Strict: no CSRF.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { FastifyAdapter } from '@bull-board/fastify';
import type { Queue } from 'bullmq';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type pg from 'pg';
import { SUBSCRIBER_TYPES, type SubscriberType } from '../db/schema.js';
import { enqueueBackfills } from '../sync/backfill.js';
import type { PassJobData, PassJobResult } from '../sync/schedule.js';
import { isPaused, type AuthPause } from '../sync/auth-pause.js';
import { collectStatus } from '../sync/status.js';
import { countDeliveriesByStatus, latestFailedDeliveries } from '../webhooks/inbox.js';
import { renderLoginPage, renderStatusPage } from './status-page.js';

export interface AdminDeps {
  token: string;
  pool: pg.Pool;
  syncQueue: Queue<PassJobData, PassJobResult>;
  /** Other queues shown on the dashboard (e.g. webhook deliveries). */
  extraQueues?: Queue[];
  configured: { groups: readonly string[]; types: readonly SubscriberType[] };
  /** The API-key pause of the poll path (null when not polling or not paused). */
  authPause?: () => Promise<AuthPause | null>;
  /** SYNC_EVERY in ms: the status page colours freshness against it. */
  syncEveryMs: number;
}

const SESSION_COOKIE = 'sm_admin';
const SESSION_MS = 12 * 3_600_000;
const REFRESH_SECONDS = 15;

/** Hashing both sides gives equal lengths, so timingSafeEqual never throws and length is not leaked. */
function sameSecret(presented: string, token: string): boolean {
  const a = createHash('sha256').update(presented).digest();
  const b = createHash('sha256').update(token).digest();
  return presented.length > 0 && timingSafeEqual(a, b);
}

/** The token from `Authorization: Bearer …` or as the password of `Authorization: Basic …`. */
export function tokenMatches(header: string | undefined, token: string): boolean {
  return sameSecret(presentedToken(header) ?? '', token);
}

function presentedToken(header: string | undefined): string | null {
  const bearer = /^Bearer\s+(.+)$/i.exec(header ?? '')?.[1]?.trim();
  if (bearer) return bearer;
  const basic = /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(header ?? '')?.[1];
  if (!basic) return null;
  const decoded = Buffer.from(basic, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  return colon < 0 ? null : decoded.slice(colon + 1);
}

function sessionMac(token: string, expires: number): string {
  return createHmac('sha256', token).update(`subscriber-mirror admin session ${expires}`).digest('base64url');
}

export function sessionValue(token: string, now = Date.now()): string {
  const expires = now + SESSION_MS;
  return `${expires}.${sessionMac(token, expires)}`;
}

export function sessionValid(value: string | undefined, token: string, now = Date.now()): boolean {
  const match = /^(\d{1,15})\.([A-Za-z0-9_-]{43})$/.exec(value ?? '');
  if (!match) return false;
  const expires = Number(match[1]);
  return expires > now && sameSecret(match[2] as string, sessionMac(token, expires));
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
 * POST and Sec-Fetch-Site on every request; a request with neither is not a browser's.
 */
export function sameOrigin(request: FastifyRequest): boolean {
  const site = request.headers['sec-fetch-site'];
  if (typeof site === 'string' && site !== 'same-origin' && site !== 'none') return false;
  const origin = request.headers.origin;
  // "null" is what a browser sends for opaque origins (and, under some referrer policies, for its
  // own forms): Sec-Fetch-Site decides then.
  if (origin !== undefined && origin !== 'null') {
    if (!URL.canParse(origin)) return false;
    return new URL(origin).host === request.headers.host;
  }
  return typeof site === 'string';
}

type AuthMethod = 'header' | 'cookie';

function authenticate(request: FastifyRequest, token: string): AuthMethod | null {
  if (tokenMatches(request.headers.authorization, token)) return 'header';
  if (sessionValid(cookieValue(request.headers.cookie, SESSION_COOKIE), token)) return 'cookie';
  return null;
}

function wantsHtml(request: FastifyRequest): boolean {
  return request.method === 'GET' && /text\/html/.test(request.headers.accept ?? '');
}

function sendHtml(reply: FastifyReply, status: number, render: (nonce: string) => string): FastifyReply {
  const nonce = randomBytes(16).toString('base64');
  return reply
    .code(status)
    .header('content-type', 'text/html; charset=utf-8')
    .header('cache-control', 'no-store')
    .header('x-content-type-options', 'nosniff')
    .header('referrer-policy', 'same-origin')
    .header(
      'content-security-policy',
      `default-src 'none'; style-src 'nonce-${nonce}'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`,
    )
    .send(render(nonce));
}

function sessionCookie(request: FastifyRequest, value: string, maxAgeSeconds: number): string {
  const secure = request.protocol === 'https' ? '; Secure' : '';
  return `${SESSION_COOKIE}=${value}; Path=/admin; HttpOnly; SameSite=Strict; Max-Age=${maxAgeSeconds}${secure}`;
}

const OPEN_PATHS = new Set(['/admin/login']);

const EXTERNAL_STYLESHEET = /<link\s+href="https:\/\/fonts\.googleapis\.com\/[^"]*"\s+rel="stylesheet">/g;

function parseBackfillBody(body: unknown, configured: AdminDeps['configured']): { groupId: string; types: SubscriberType[] } | string {
  if (!body || typeof body !== 'object' || Array.isArray(body)) return 'body must be a JSON object {group, type?}';
  const { group, type } = body as { group?: unknown; type?: unknown };
  const groupId = typeof group === 'number' && Number.isSafeInteger(group) ? String(group) : group;
  if (typeof groupId !== 'string' || !/^\d{1,30}$/.test(groupId)) return 'group must be a numeric group id';
  if (type === undefined || type === null) return { groupId, types: [...configured.types] };
  if (typeof type !== 'string' || !(SUBSCRIBER_TYPES as readonly string[]).includes(type)) {
    return `type must be one of ${SUBSCRIBER_TYPES.join(', ')}`;
  }
  return { groupId, types: [type as SubscriberType] };
}

export async function registerAdminRoutes(app: FastifyInstance, deps: AdminDeps): Promise<void> {
  await app.register(async (admin) => {
    // The login form posts urlencoded; this parser exists only inside the admin scope.
    admin.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string', bodyLimit: 4_096 }, (_request, body, done) => {
      done(null, Object.fromEntries(new URLSearchParams(body as string)));
    });

    admin.addHook('onRequest', async (request: FastifyRequest, reply: FastifyReply) => {
      const path = request.url.split('?')[0] ?? '';
      if (OPEN_PATHS.has(path)) return;
      const method = authenticate(request, deps.token);
      if (method === 'cookie' && !['GET', 'HEAD'].includes(request.method) && !sameOrigin(request)) {
        await reply.code(403).send({ error: 'cross-site request refused' });
        return;
      }
      if (method) return;
      if (path === '/admin/basic') {
        // Asks the browser for its password dialog; the token then goes as the Basic password.
        await reply.code(401).header('www-authenticate', 'Basic realm="subscriber-mirror admin", charset="UTF-8"').send({ error: 'unauthorized' });
      } else if (wantsHtml(request)) {
        await sendHtml(reply.header('www-authenticate', 'Bearer'), 401, (nonce) => renderLoginPage(nonce, null));
      } else {
        await reply.code(401).header('www-authenticate', 'Bearer').send({ error: 'unauthorized' });
      }
    });

    admin.get('/admin/login', async (request, reply) => {
      if (authenticate(request, deps.token)) return reply.redirect('/admin/', 303);
      return sendHtml(reply, 200, (nonce) => renderLoginPage(nonce, null));
    });

    admin.post('/admin/login', async (request, reply) => {
      if (!sameOrigin(request)) return reply.code(403).send({ error: 'cross-site login refused' });
      const body = request.body as { token?: unknown } | undefined;
      const presented = typeof body?.token === 'string' ? body.token : '';
      if (!sameSecret(presented, deps.token)) {
        return sendHtml(reply, 401, (nonce) => renderLoginPage(nonce, 'Wrong token.'));
      }
      reply.header('set-cookie', sessionCookie(request, sessionValue(deps.token), SESSION_MS / 1000));
      return reply.redirect('/admin/', 303);
    });

    admin.post('/admin/logout', async (request, reply) => {
      reply.header('set-cookie', sessionCookie(request, '', 0));
      return reply.redirect('/admin/login', 303);
    });

    admin.get('/admin/basic', async (_request, reply) => reply.redirect('/admin/', 303));
    admin.get('/admin', async (_request, reply) => reply.redirect('/admin/', 303));

    admin.get('/admin/', async (_request, reply) => {
      const [passes, authPause, inbox, failed] = await Promise.all([
        collectStatus(deps.pool, deps.configured),
        deps.authPause ? deps.authPause().catch(() => null) : null,
        countDeliveriesByStatus(deps.pool),
        latestFailedDeliveries(deps.pool, 10),
      ]);
      const now = Date.now();
      return sendHtml(reply, 200, (nonce) =>
        renderStatusPage(
          {
            now,
            everyMs: deps.syncEveryMs,
            passes,
            authPause: isPaused(authPause, now) ? authPause : null,
            inbox,
            failed,
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
      const parsed = parseBackfillBody(request.body, deps.configured);
      if (typeof parsed === 'string') return reply.code(400).send({ error: parsed });
      const jobs = await enqueueBackfills(
        deps.syncQueue,
        parsed.types.map((type) => ({ groupId: parsed.groupId, type })),
      );
      return reply.code(202).send({ jobs, jobId: jobs[0]?.jobId });
    });

    admin.get<{ Params: { id: string } }>('/admin/jobs/:id', async (request, reply) => {
      const job = await deps.syncQueue.getJob(request.params.id);
      if (!job) return reply.code(404).send({ error: `job ${request.params.id} not found` });
      return {
        id: job.id,
        name: job.name,
        data: job.data,
        state: await job.getState(),
        progress: job.progress,
        result: job.returnvalue ?? null,
        failedReason: job.failedReason ?? null,
        createdAt: new Date(job.timestamp).toISOString(),
        finishedAt: job.finishedOn ? new Date(job.finishedOn).toISOString() : null,
      };
    });

    admin.get('/admin/status', async () => ({
      authPause: deps.authPause ? await deps.authPause().catch(() => null) : null,
      passes: await collectStatus(deps.pool, deps.configured),
    }));

    // The dashboard's page links Google Fonts: without internet (where operators often run this) that
    // is a failed request and a console error on every load. Its own CSS falls back to system fonts.
    admin.addHook('onSend', async (request, reply, payload) => {
      if (typeof payload !== 'string' || !request.url.startsWith('/admin/queues')) return payload;
      if (!String(reply.getHeader('content-type') ?? '').startsWith('text/html')) return payload;
      return payload.replace(EXTERNAL_STYLESHEET, '');
    });

    const board = new FastifyAdapter();
    board.setBasePath('/admin/queues');
    createBullBoard({
      queues: [deps.syncQueue, ...(deps.extraQueues ?? [])].map((q) => new BullMQAdapter(q)),
      serverAdapter: board,
    });
    await admin.register(board.registerPlugin(), { prefix: '/admin/queues' });
  });
}

/**
 * Admin routes, registered only when ADMIN_TOKEN is set (otherwise they do not exist: 404).
 * Every route, the BullMQ dashboard included, checks `Authorization: Bearer <ADMIN_TOKEN>` in
 * constant time.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { FastifyAdapter } from '@bull-board/fastify';
import type { Queue } from 'bullmq';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type pg from 'pg';
import { SUBSCRIBER_TYPES, type SubscriberType } from '../db/schema.js';
import { enqueueBackfills } from '../sync/backfill.js';
import type { PassJobData, PassJobResult } from '../sync/schedule.js';
import { collectStatus } from '../sync/status.js';

export interface AdminDeps {
  token: string;
  pool: pg.Pool;
  syncQueue: Queue<PassJobData, PassJobResult>;
  /** Other queues shown on the dashboard (e.g. webhook deliveries). */
  extraQueues?: Queue[];
  configured: { groups: readonly string[]; types: readonly SubscriberType[] };
  /** Extra status facts (auth pause) merged into GET /admin/status. */
  statusExtras?: () => Promise<Record<string, unknown>>;
}

/** Hashing both sides gives equal lengths, so timingSafeEqual never throws and length is not leaked. */
export function tokenMatches(header: string | undefined, token: string): boolean {
  const presented = /^Bearer\s+(.+)$/i.exec(header ?? '')?.[1]?.trim() ?? '';
  const a = createHash('sha256').update(presented).digest();
  const b = createHash('sha256').update(token).digest();
  return presented.length > 0 && timingSafeEqual(a, b);
}

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
    admin.addHook('onRequest', async (request: FastifyRequest, reply: FastifyReply) => {
      if (!tokenMatches(request.headers.authorization, deps.token)) {
        await reply.code(401).header('www-authenticate', 'Bearer').send({ error: 'unauthorized' });
      }
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
      ...(deps.statusExtras ? await deps.statusExtras() : {}),
      passes: await collectStatus(deps.pool, deps.configured),
    }));

    const board = new FastifyAdapter();
    board.setBasePath('/admin/queues');
    createBullBoard({
      queues: [deps.syncQueue, ...(deps.extraQueues ?? [])].map((q) => new BullMQAdapter(q)),
      serverAdapter: board,
    });
    await admin.register(board.registerPlugin(), { prefix: '/admin/queues' });
  });
}

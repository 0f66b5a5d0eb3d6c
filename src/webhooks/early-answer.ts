/**
 * Answers sent before the request body is read: a 401 to a delivery without a `Signature` header
 * (nothing it could send would verify, so its body is not worth a byte of memory), a 429 to a client
 * over its request rate (`src/http/client-limits.ts`).
 */
import type { FastifyReply, FastifyRequest } from 'fastify';

/** Bodies up to this size are read and discarded after an early answer; larger ones close the connection. */
export const DRAIN_LIMIT_BYTES = 64 * 1024;

/**
 * Prepares an answer sent before the body is read. Node reads and discards what is left of a small
 * body after the answer and keeps the connection; a large or unannounced one is not worth
 * receiving, so the answer says `Connection: close` and the connection ends after it. Either way the
 * client gets the answer (it reads while it sends), and no byte of the body is buffered.
 */
export function answerBeforeBody(request: FastifyRequest, reply: FastifyReply): void {
  if (!hasBody(request)) return;
  const announced = request.headers['content-length'];
  const small = announced !== undefined && /^\d+$/.test(announced) && Number(announced) <= DRAIN_LIMIT_BYTES;
  if (!small) reply.header('connection', 'close');
}

function hasBody(request: FastifyRequest): boolean {
  const length = request.headers['content-length'];
  return request.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

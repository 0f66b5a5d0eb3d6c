/**
 * Answers sent before the request body is read (or while it is being read): a 401 to a delivery
 * without a `Signature` header (nothing it could send would verify, so its body is not worth a byte
 * of memory), a 429 to a client over its request rate (`src/http/client-limits.ts`), a 413 or 503
 * from the body reader (`body.ts`).
 */
import type { FastifyReply, FastifyRequest } from 'fastify';

/**
 * After an early answer, the rest of the body is read and discarded for at most this long; a
 * connection whose body is still coming then is closed. Apache lingers 2 s too.
 */
export const LINGER_MS = 2_000;

/**
 * Makes sure the client can read an answer sent before its body was read. Closing at once is not
 * enough: a client still sending meets a connection closed with its bytes unread, its kernel gets a
 * reset, and the reset can throw our answer away before the client reads it (RFC 9112, "Tear-down"). So
 * once the answer is out, what is left of the body is read and discarded, never buffered: a body
 * that ends within `lingerMs` keeps its kept-alive connection, one still coming after it (a drip, a
 * body of gigabytes) has its connection closed.
 */
export function answerBeforeBody(request: FastifyRequest, reply: FastifyReply, lingerMs = LINGER_MS): void {
  if (!hasBody(request)) return;
  // Fastify asks for a close after a body parser's error; the rest is discarded here instead.
  reply.removeHeader('connection');
  const raw = request.raw;
  reply.raw.once('finish', () => {
    if (raw.complete) return;
    const socket = raw.socket;
    const timer = setTimeout(() => socket.destroy(), lingerMs);
    timer.unref();
    // Both listeners go with the first of the two: a kept-alive connection serves many requests, and
    // a 'close' listener left on it per early answer would pile up for as long as it lives.
    const stop = () => {
      clearTimeout(timer);
      raw.off('end', stop);
      socket.off('close', stop);
    };
    raw.once('end', stop);
    socket.once('close', stop);
    // A body reader that gave up paused the stream; with no 'data' listener left, this discards.
    raw.resume();
  });
}

function hasBody(request: FastifyRequest): boolean {
  const length = request.headers['content-length'];
  return request.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

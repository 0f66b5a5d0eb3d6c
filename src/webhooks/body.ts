/**
 * Reading webhook bodies with bounded memory.
 *
 * The signature covers the whole body, so it has to be buffered before it can be checked: every
 * unauthenticated client can make us hold bytes. Two bounds keep that finite whatever clients
 * announce in Content-Length: each body is at most WEBHOOK_MAX_BODY (announced larger → 413 before a
 * byte is read), and all bodies being read at once share one byte budget (WEBHOOK_BODY_MEMORY).
 * Bytes are counted as they arrive, never reserved from the announcement, so a client announcing
 * 10 MiB and dripping holds what it sent, not 10 MiB (the listener's request timeout ends it).
 *
 * A flood of large forged bodies could keep the budget full; the last eighth is kept for small
 * bodies (deliveries are kilobytes), so a real delivery still finds room while big ones are refused.
 */
import type { Readable } from 'node:stream';

/** A body of at most this many bytes may use the reserve. */
export const SMALL_BODY_BYTES = 256 * 1024;

export interface BodyBudget {
  /** Takes `bytes` for a body that already holds `held`; false when they do not fit. */
  take(bytes: number, held: number): boolean;
  give(bytes: number): void;
  /** Bytes currently held by bodies being read. */
  used(): number;
  readonly total: number;
}

export function createBodyBudget(total: number): BodyBudget {
  const reserve = Math.floor(total / 8);
  let used = 0;
  return {
    total,
    take(bytes, held) {
      const limit = held + bytes <= SMALL_BODY_BYTES ? total : total - reserve;
      if (used + bytes > limit) return false;
      used += bytes;
      return true;
    },
    give(bytes) {
      used = Math.max(0, used - bytes);
    },
    used: () => used,
  };
}

/** Why a body could not be read; `status` is the answer the receiver gives. */
export class BodyError extends Error {
  override name = 'BodyError';
  constructor(
    message: string,
    readonly status: 400 | 413 | 503,
  ) {
    super(message);
  }
}

/**
 * Reads `stream` into one Buffer, or rejects with a BodyError: larger than `maxBytes` (413), more
 * than the shared budget allows right now (503: retry later), not the announced length or aborted
 * (400). The budget is given back once the returned `release` is called (after the request).
 */
export function readBody(
  stream: Readable,
  options: { maxBytes: number; budget: BodyBudget; announced: number | undefined },
): Promise<{ body: Buffer; release: () => void }> {
  const { maxBytes, budget, announced } = options;
  if (announced !== undefined && announced > maxBytes) {
    return Promise.reject(new BodyError('body larger than the limit', 413));
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let held = 0;
    let settled = false;
    const release = () => {
      budget.give(held);
      held = 0;
    };
    const fail = (error: BodyError) => {
      if (settled) return;
      settled = true;
      cleanup();
      release();
      chunks.length = 0;
      // Stop reading; the error handler answers and the connection is closed after it.
      stream.pause();
      reject(error);
    };
    const onData = (chunk: Buffer) => {
      if (held + chunk.length > maxBytes) return fail(new BodyError('body larger than the limit', 413));
      if (!budget.take(chunk.length, held)) return fail(new BodyError('too many bodies being received at once', 503));
      held += chunk.length;
      chunks.push(chunk);
    };
    const onEnd = () => {
      if (settled) return;
      if (announced !== undefined && held !== announced) return fail(new BodyError('body length differs from Content-Length', 400));
      settled = true;
      cleanup();
      resolve({ body: chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, held), release });
    };
    const onAbort = () => fail(new BodyError('upload aborted', 400));
    const onError = () => fail(new BodyError('upload failed', 400));
    function cleanup() {
      stream.off('data', onData);
      stream.off('end', onEnd);
      stream.off('aborted', onAbort);
      stream.off('close', onClose);
      stream.off('error', onError);
    }
    const onClose = () => {
      if (!settled) onAbort();
    };
    stream.on('data', onData);
    stream.on('end', onEnd);
    stream.on('aborted', onAbort);
    stream.on('close', onClose);
    stream.on('error', onError);
  });
}

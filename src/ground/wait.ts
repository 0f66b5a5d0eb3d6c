/**
 * Waiting, once for every layer: a sleep a caller can abort, and a deadline on a promise. Both clear
 * their timer and remove their abort listener however they end, so a long-lived signal (a worker's
 * shutdown) collects nothing across many waits.
 */

/**
 * Resolves after `ms` (at once when `ms <= 0`); rejects with the signal's reason as soon as `signal`
 * aborts, as `signal.throwIfAborted()` would.
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return Promise.reject(signal.reason as Error);
  if (ms <= 0) return Promise.resolve();
  return new Promise<void>((resolve, reject) => {
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason as Error);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Settles as `promise` does, or rejects with `timeoutError()` when it has not settled within `ms`.
 * The timer does not keep the process alive.
 */
export async function withTimeout<T>(promise: Promise<T>, ms: number, timeoutError: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(timeoutError()), ms);
    timer.unref();
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

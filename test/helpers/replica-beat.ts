/**
 * A stand-in worker replica for tests of what reads the replicas' list (`status`, `accounts remove`):
 * it beats every second while `run` runs, as a worker does. One heartbeat alone lives 6 s, which a
 * CLI run in a child process can outlast on a loaded machine.
 */
import type { Redis } from 'ioredis';
import { heartbeat } from '../../src/sync/replicas.js';

export async function whileReplicaBeats<T>(
  redis: Redis,
  namespace: string,
  id: string,
  said: { reads?: readonly string[]; serves?: readonly string[] },
  run: () => Promise<T>,
): Promise<T> {
  const beat = () => heartbeat(redis, namespace, id, said);
  await beat();
  const timer = setInterval(() => void beat().catch(() => {}), 1_000);
  try {
    return await run();
  } finally {
    clearInterval(timer);
  }
}

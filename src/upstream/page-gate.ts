/**
 * Room for list pages in memory, shared by every pass of the process (docs/architecture.md,
 * invariant 8, "bounded memory").
 *
 * Why: the passes of a group's types run side by side so that per-endpoint budgets are used in
 * full, but with the service answering faster than the mirror commits (a generous budget, a
 * backlog) each pass held its page and its read-ahead at once: five passes, ten pages of about
 * 4 MB each (body, parsed objects, rows), all outliving the young generation, and the peak RSS
 * grew with the number of types (docs/benchmarks.md, "memory").
 *
 * A read waits for room after the service's headers arrived and before its body is read (the
 * request is sent, so the rate the service sees does not change, and a body waiting in the socket
 * costs the kernel's buffer, not the heap); the room is freed when the page is committed. The
 * requests themselves, and the waits for their budget slots, stay side by side. Rooms are handed
 * out in arrival order, so a pass whose pages come fast cannot starve the others.
 */

/**
 * Pages a worker holds at once. Two: one commits while the next is parsed. Under any budget the
 * service grants (a page a second per endpoint at most) a page is committed long before the next
 * arrives, so the rooms cost no speed; they only bound how much a fast service can pile up.
 */
export const PAGES_IN_MEMORY = 2;

/** Frees one room; calling it again does nothing. */
export type Release = () => void;

export interface PageGate {
  /** Waits for a room (in arrival order) and takes it. */
  admit(): Promise<Release>;
  /** Takes a room without waiting, even past the capacity: for a read whose caller already holds a page and must not wait on itself. */
  take(): Release;
  stats(): PageGateStats;
}

export interface PageGateStats {
  capacity: number;
  /** Rooms taken (may exceed the capacity by the reads `take` let through). */
  held: number;
  waiting: number;
}

export function createPageGate(capacity: number): PageGate {
  if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`page gate: capacity must be an integer >= 1, got ${capacity}`);
  let held = 0;
  const waiting: Array<() => void> = [];

  const room = (): Release => {
    let freed = false;
    return () => {
      if (freed) return;
      freed = true;
      held -= 1;
      // Handed straight to the longest waiter (a newcomer cannot slip in between), unless a probe's
      // `take` left the gate at or past its capacity.
      if (held < capacity) waiting.shift()?.();
    };
  };

  return {
    admit() {
      if (held < capacity && waiting.length === 0) {
        held += 1;
        return Promise.resolve(room());
      }
      return new Promise<Release>((resolve) => {
        waiting.push(() => {
          held += 1;
          resolve(room());
        });
      });
    },
    take() {
      held += 1;
      return room();
    },
    stats: () => ({ capacity, held, waiting: waiting.length }),
  };
}

/**
 * One pass's use of the gate: every room it took is freed when the pass ends, whatever ended it (an
 * error, a stop between a read-ahead and its commit), so a forgotten release cannot shrink the gate.
 */
export interface PageAdmission {
  admit(): Promise<Release>;
  take(): Release;
  /** Frees every room still held. */
  close(): void;
}

export function admissionOf(gate: PageGate): PageAdmission {
  const held = new Set<Release>();
  const tracked = (release: Release): Release => {
    held.add(release);
    return () => {
      held.delete(release);
      release();
    };
  };
  return {
    admit: async () => tracked(await gate.admit()),
    take: () => tracked(gate.take()),
    close() {
      for (const release of held) release();
      held.clear();
    },
  };
}

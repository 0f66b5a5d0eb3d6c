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
 * requests themselves, and the waits for their budget slots, stay side by side.
 *
 * Fair between accounts by the bytes they bring (start-time fair queuing): each account of a worker
 * waits in its own line (`forAccount`), and a freed room goes to the page whose account has had the
 * fewest bytes admitted since no page last waited. Within one account rooms go in arrival order,
 * so a pass whose pages come fast cannot starve its account's others. In arrival order across
 * accounts, ten legacy accounts' pages of a thousand rows (five passes each) held a current
 * account's pages of a hundred, whose budget of two requests a second then went unspent
 * (docs/benchmarks.md, "accounts").
 */

/**
 * Pages a worker holds at once: one, however many accounts and passes it runs. A pass still asks
 * for its next page while this one commits (`readAhead` in sync/legacy-pass.ts), so the budget
 * loses no slot: the answer's body waits in the socket until the room is free. Under the budgets
 * the service grants (a page a second per endpoint at most) a page of a thousand members is parsed
 * and committed long before the next one is due, so one room costs no speed where the budget paces
 * the passes. A second room let a process reading several accounts at full speed hold two pages'
 * parsed objects at all times, and V8 grew the heap to fit them: the replicas of the accounts
 * benchmark peaked 15-30 MB higher with two (docs/benchmarks.md, "accounts").
 */
export const PAGES_IN_MEMORY = 1;

/**
 * What a body without a `Content-Length` (a chunked answer) counts for: the size of a page of a few
 * hundred subscribers, so such pages share the gate about page for page.
 */
export const UNKNOWN_BODY_BYTES = 256 * 1024;

/** Frees one room; calling it again does nothing. */
export type Release = () => void;

export interface PageGate {
  /** Waits for a room for a body of `bytes` (its `Content-Length`; null when unknown) and takes it. */
  admit(bytes?: number | null): Promise<Release>;
  /** Takes a room without waiting, even past the capacity: for a read whose caller already holds a page and must not wait on itself. */
  take(): Release;
  stats(): PageGateStats;
}

/** The process's gate: one line per account, rooms shared between them by bytes. */
export interface SharedPageGate extends PageGate {
  /** The gate as one account's passes use it (`admit` waits in that account's line). */
  forAccount(account: string): PageGate;
}

export interface PageGateStats {
  capacity: number;
  /** Rooms taken (may exceed the capacity by the reads `take` let through). */
  held: number;
  waiting: number;
}

/** A page waiting for a room: `tag` orders it among every account's (the fewest bytes first), `seq` breaks ties by arrival. */
interface Waiter {
  tag: number;
  seq: number;
  enter(): void;
}

/** The line the plain `admit` of a gate waits in (a worker of one account, tests). */
const NO_ACCOUNT = '';

export function createPageGate(capacity: number): SharedPageGate {
  if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`page gate: capacity must be an integer >= 1, got ${capacity}`);
  let held = 0;
  let seq = 0;
  const waiting: Waiter[] = [];
  // Start-time fair queuing: a page's tag is where its account's bytes end, or the tag of the page
  // last let in when the account has been quiet (an account that waited for nothing banks no turns).
  let lastTag = 0;
  const accountEnds = new Map<string, number>();

  const next = (): Waiter | undefined => {
    let best = -1;
    for (let i = 0; i < waiting.length; i++) {
      const w = waiting[i] as Waiter;
      const b = waiting[best];
      if (!b || w.tag < b.tag || (w.tag === b.tag && w.seq < b.seq)) best = i;
    }
    return best < 0 ? undefined : waiting.splice(best, 1)[0];
  };

  const room = (): Release => {
    let freed = false;
    return () => {
      if (freed) return;
      freed = true;
      held -= 1;
      // Handed straight to the next waiter (a newcomer cannot slip in between), unless a probe's
      // `take` left the gate at or past its capacity.
      if (held < capacity) next()?.enter();
    };
  };

  const tagFor = (account: string, bytes: number | null | undefined): number => {
    // Nobody waits: the turns counted so far decide nothing any more; restarting keeps the counts small.
    if (waiting.length === 0) {
      accountEnds.clear();
      lastTag = 0;
    }
    const cost = bytes !== null && bytes !== undefined && Number.isFinite(bytes) && bytes >= 0 ? bytes : UNKNOWN_BODY_BYTES;
    const tag = Math.max(lastTag, accountEnds.get(account) ?? 0);
    accountEnds.set(account, tag + cost);
    return tag;
  };

  const admit = (account: string, bytes?: number | null): Promise<Release> => {
    const tag = tagFor(account, bytes);
    if (held < capacity && waiting.length === 0) {
      held += 1;
      lastTag = tag;
      return Promise.resolve(room());
    }
    return new Promise<Release>((resolve) => {
      waiting.push({
        tag,
        seq: seq++,
        enter: () => {
          held += 1;
          lastTag = tag;
          resolve(room());
        },
      });
    });
  };

  const take = (): Release => {
    held += 1;
    return room();
  };
  const stats = (): PageGateStats => ({ capacity, held, waiting: waiting.length });

  return {
    admit: (bytes) => admit(NO_ACCOUNT, bytes),
    take,
    stats,
    forAccount: (account) => ({ admit: (bytes) => admit(account, bytes), take, stats }),
  };
}

/**
 * One pass's use of the gate: every room it took is freed when the pass ends, whatever ended it (an
 * error, a stop between a read-ahead and its commit), so a forgotten release cannot shrink the gate.
 */
export interface PageAdmission {
  admit(bytes?: number | null): Promise<Release>;
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
    admit: async (bytes) => tracked(await gate.admit(bytes)),
    take: () => tracked(gate.take()),
    close() {
      for (const release of held) release();
      held.clear();
    },
  };
}

/**
 * Failed admin logins per client: after `max` failures within `windowMs`, every attempt from that
 * client is answered 429 until the window ends, the right token included (otherwise a guesser would
 * still learn when it guessed right). Per process, in memory: a token of 16+ characters cannot be
 * guessed at a few attempts a minute per replica, and the throttle must work while Redis is down.
 *
 * An attempt counts from the moment it is reserved, before anything asynchronous happens, and is
 * settled afterwards: attempts pipelined on one connection or sent in parallel are all in flight at
 * once, and a check that only counted settled failures would let every one of them through
 * (docs/security.md, "Admin authentication"). As a backstop, `maxPerProcess` failures within a
 * window from any addresses at all throttle every client until that window ends.
 */
export type Attempt =
  | {
      allowed: true;
      /** Ends the attempt: a failure keeps counting, a success gives the reservation back. Once only. */
      settle(outcome: 'succeeded' | 'failed'): void;
    }
  | {
      allowed: false;
      retryAfterSeconds: number;
      /** True once per window and client: the first refusal (log it; count the rest only). */
      firstRefusal: boolean;
    };

export interface LoginThrottle {
  /** Call before any await: either an attempt to settle, or a refusal. */
  reserve(client: string): Attempt;
}

export interface ThrottleOptions {
  max: number;
  windowMs: number;
  /** Failures (and attempts in flight) of all clients together within a window (default 100). */
  maxPerProcess?: number;
  /** Clients tracked at once; the oldest is forgotten beyond it (memory bound under many addresses). */
  maxClients?: number;
  now?: () => number;
}

interface Window {
  startedAt: number;
  /** Failures plus attempts reserved and not settled yet. */
  counted: number;
  refusalLogged: boolean;
}

export const DEFAULT_MAX_PER_PROCESS = 100;

export function createLoginThrottle(options: ThrottleOptions): LoginThrottle {
  const now = options.now ?? Date.now;
  const maxClients = options.maxClients ?? 10_000;
  const maxPerProcess = options.maxPerProcess ?? DEFAULT_MAX_PER_PROCESS;
  const windows = new Map<string, Window>();
  let processWindow: Window = { startedAt: now(), counted: 0, refusalLogged: false };

  const current = (client: string): Window | undefined => {
    const w = windows.get(client);
    if (w && now() - w.startedAt >= options.windowMs) {
      windows.delete(client);
      return undefined;
    }
    return w;
  };
  const currentProcess = (): Window => {
    if (now() - processWindow.startedAt >= options.windowMs) processWindow = { startedAt: now(), counted: 0, refusalLogged: false };
    return processWindow;
  };
  const open = (client: string): Window => {
    let w = current(client);
    if (!w) {
      if (windows.size >= maxClients) windows.delete(windows.keys().next().value as string);
      w = { startedAt: now(), counted: 0, refusalLogged: false };
      windows.set(client, w);
    }
    return w;
  };
  const secondsLeft = (w: Window) => Math.max(1, Math.ceil((w.startedAt + options.windowMs - now()) / 1000));

  const refuse = (client: string, full: Window): Attempt => {
    // The first refusal per client and window is logged, whichever limit refused it.
    const w = open(client);
    const firstRefusal = !w.refusalLogged;
    w.refusalLogged = true;
    return { allowed: false, retryAfterSeconds: secondsLeft(full), firstRefusal };
  };

  return {
    reserve(client) {
      const w = current(client);
      if (w && w.counted >= options.max) return refuse(client, w);
      const all = currentProcess();
      if (all.counted >= maxPerProcess) return refuse(client, all);
      const mine = w ?? open(client);
      mine.counted += 1;
      all.counted += 1;
      let settled = false;
      return {
        allowed: true,
        settle(outcome) {
          if (settled || outcome === 'failed') {
            settled = true;
            return;
          }
          settled = true;
          // Only the windows this attempt was counted in give it back (a new window starts at 0).
          if (windows.get(client) === mine) mine.counted -= 1;
          if (processWindow === all) all.counted -= 1;
        },
      };
    },
  };
}

/**
 * Failed admin logins per client: after `max` failures within `windowMs`, every attempt from that
 * client is answered 429 until the window ends, the right token included (otherwise a guesser would
 * still learn when it guessed right). Per process, in memory: a token of 16+ characters cannot be
 * guessed at a few attempts a minute per replica, and the throttle must work while Redis is down.
 */
export interface LoginThrottle {
  /** Seconds until the client may try again, or 0 when it may try now. */
  retryAfterSeconds(client: string): number;
  /** Records a failed attempt. */
  failed(client: string): void;
  /** True once per window: the first refusal of a blocked client (log it; count the rest only). */
  firstRefusal(client: string): boolean;
}

export interface ThrottleOptions {
  max: number;
  windowMs: number;
  /** Clients tracked at once; the oldest is forgotten beyond it (memory bound under many addresses). */
  maxClients?: number;
  now?: () => number;
}

interface Window {
  startedAt: number;
  failures: number;
  refusalLogged: boolean;
}

export function createLoginThrottle(options: ThrottleOptions): LoginThrottle {
  const now = options.now ?? Date.now;
  const maxClients = options.maxClients ?? 10_000;
  const windows = new Map<string, Window>();

  const current = (client: string): Window | undefined => {
    const w = windows.get(client);
    if (w && now() - w.startedAt >= options.windowMs) {
      windows.delete(client);
      return undefined;
    }
    return w;
  };

  return {
    retryAfterSeconds(client) {
      const w = current(client);
      if (!w || w.failures < options.max) return 0;
      return Math.max(1, Math.ceil((w.startedAt + options.windowMs - now()) / 1000));
    },
    failed(client) {
      let w = current(client);
      if (!w) {
        if (windows.size >= maxClients) windows.delete(windows.keys().next().value as string);
        w = { startedAt: now(), failures: 0, refusalLogged: false };
        windows.set(client, w);
      }
      w.failures += 1;
    },
    firstRefusal(client) {
      const w = current(client);
      if (!w || w.refusalLogged) return false;
      w.refusalLogged = true;
      return true;
    },
  };
}

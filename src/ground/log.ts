/**
 * pino logs with secrets redacted (invariant 10): JSON by default, human-readable lines through pino's
 * own pretty transport (pino-pretty, in a worker thread) when a person reads them on a terminal.
 *
 * Two layers, because either alone leaks: `redact` removes well-known fields (auth headers, keys,
 * secrets) wherever they sit in a logged object, and a scrubber replaces the literal values of the
 * configured secrets inside any string (messages, error text, URLs), since an upstream error message
 * or a URL can carry a key no path list anticipates. Passwords in connection URLs are masked too.
 */
import { pino, type DestinationStream, type Logger, type LoggerOptions } from 'pino';

export type { Logger } from 'pino';

export const REDACTED = '[redacted]';

const SECRET_KEYS = [
  'apiKey',
  'api_key',
  'token',
  'secret',
  'secrets',
  'password',
  'authorization',
  'Authorization',
  'signature',
  'Signature',
  'x-service-apikey',
  'X-Service-ApiKey',
  'webhookSecrets',
  'adminToken',
];

const REDACT_PATHS = [
  ...SECRET_KEYS,
  ...SECRET_KEYS.map((k) => `*.${k}`),
  ...SECRET_KEYS.map((k) => `*.*.${k}`),
  'req.headers.authorization',
  'req.headers.signature',
  'req.headers["x-service-apikey"]',
  'headers.authorization',
  'headers.signature',
  'headers["x-service-apikey"]',
];

const URL_PASSWORD = /(\b[a-z][a-z0-9+.-]*:\/\/[^:/@\s]*:)([^@/\s]+)(@)/gi;

export interface SecretScrubber {
  (text: string): string;
  add(secret: string): void;
}

/** Replaces every known secret value (and URL passwords) inside a string. */
export function createScrubber(initial: Iterable<string> = []): SecretScrubber {
  const secrets = new Set<string>();
  const scrub = ((text: string): string => {
    let out = text.replace(URL_PASSWORD, `$1${REDACTED}$3`);
    // Longest first: a secret inside another must not leave the longer one's remainder in clear.
    for (const secret of [...secrets].sort((a, b) => b.length - a.length)) {
      if (out.includes(secret)) out = out.split(secret).join(REDACTED);
    }
    return out;
  }) as SecretScrubber;
  scrub.add = (secret: string) => {
    // Every configured secret, whatever its length: a short one may redact ordinary text too, which
    // is the lesser harm (config demands real-length secrets where it decides their length).
    if (secret.length > 0) secrets.add(secret);
  };
  for (const s of initial) scrub.add(s);
  return scrub;
}

function scrubDeep(value: unknown, scrub: SecretScrubber, depth = 0): unknown {
  if (depth > 8) return value;
  if (typeof value === 'string') return scrub(value);
  if (value instanceof Error) {
    return { type: value.name, message: scrub(value.message), stack: value.stack ? scrub(value.stack) : undefined };
  }
  if (Array.isArray(value)) return value.map((v) => scrubDeep(v, scrub, depth + 1));
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = scrubDeep(v, scrub, depth + 1);
    return out;
  }
  return value;
}

export interface LoggerSetup {
  level?: LoggerOptions['level'];
  secrets?: Iterable<string>;
  destination?: DestinationStream;
  name?: string;
  /** auto (default): pretty when stdout is a TTY and NODE_ENV is not production. */
  format?: 'auto' | 'json' | 'pretty';
}

/** Pretty output only for people: never when piped (log collectors) nor in production. */
export function usePretty(format: LoggerSetup['format'], stdoutIsTty: boolean, nodeEnv: string | undefined): boolean {
  if (format === 'pretty') return true;
  if (format === 'json') return false;
  return stdoutIsTty && nodeEnv !== 'production';
}

export interface AppLogger {
  logger: Logger;
  scrub: SecretScrubber;
}

export function createLogger(setup: LoggerSetup = {}): AppLogger {
  const scrub = createScrubber(setup.secrets ?? []);
  const options: LoggerOptions = {
    level: setup.level ?? 'info',
    base: { service: setup.name ?? 'subscriber-mirror' },
    redact: { paths: REDACT_PATHS, censor: REDACTED },
    timestamp: pino.stdTimeFunctions.isoTime,
    serializers: {
      err: (err: unknown) => scrubDeep(err, scrub),
      error: (err: unknown) => scrubDeep(err, scrub),
    },
    formatters: {
      level: (label) => ({ level: label }),
      log: (obj) => scrubDeep(obj, scrub) as Record<string, unknown>,
    },
    hooks: {
      logMethod(args, method) {
        const cleaned = args.map((a) => (typeof a === 'string' ? scrub(a) : a));
        method.apply(this, cleaned as Parameters<typeof method>);
      },
    },
  };
  if (!setup.destination && usePretty(setup.format, process.stdout.isTTY === true, process.env.NODE_ENV)) {
    // Redaction and scrubbing run above, in this thread; the transport only formats clean records.
    options.transport = {
      target: 'pino-pretty',
      options: { colorize: process.stdout.isTTY === true, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname,service' },
    };
  }
  const logger = setup.destination ? pino(options, setup.destination) : pino(options);
  return { logger, scrub };
}

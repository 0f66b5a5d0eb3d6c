/**
 * Distinctive secret values for a fault scenario, registered with the log collector as they are made,
 * so the final scan (invariant 10) looks for values that cannot occur in a log line by chance.
 */
import { randomBytes } from 'node:crypto';
import { registerSecret } from './collector.js';

export interface FaultSecrets {
  apiKey: string;
  webhooksToken: string;
  adminToken: string;
  /** Password in DATABASE_URL (Postgres here trusts 127.0.0.1, so any password connects). */
  dbPassword: string;
  /** Password in REDIS_URL, sent as `AUTH default <pw>` (the default user has nopass, so it is accepted). */
  redisPassword: string;
  /** A rotation secret in WEBHOOK_SECRETS. */
  staticWebhookSecret: string;
}

const ALPHANUMERIC = 'ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789';

/** Random letters and digits: no character that URL or JSON encoding would change. */
function randomTail(length = 14): string {
  const bytes = randomBytes(length);
  return Array.from(bytes, (b) => ALPHANUMERIC[b % ALPHANUMERIC.length]).join('');
}

export function makeSecrets(scenario: string): FaultSecrets {
  const secrets: FaultSecrets = {
    apiKey: `fault-apikey-${randomTail()}`,
    webhooksToken: `fault-whtoken-${randomTail()}`,
    adminToken: `fault-admintoken-${randomTail()}`,
    dbPassword: `faultdbpw${randomTail()}`,
    redisPassword: `faultredispw${randomTail()}`,
    staticWebhookSecret: `fault-whsecret-${randomTail()}`,
  };
  for (const [name, value] of Object.entries(secrets)) registerSecret(`${scenario}:${name}`, value);
  return secrets;
}

/** One more distinctive secret (`fault-<kind>-<random>`), registered under `label` as it is made. */
export function makeSecret(label: string, kind: string): string {
  const value = `fault-${kind}-${randomTail()}`;
  registerSecret(label, value);
  return value;
}

/** The URL with user and password set (for Postgres `postgres`, for Redis `default`). */
export function withCredentials(url: string, user: string, password: string): string {
  const u = new URL(url);
  u.username = user;
  u.password = password;
  return u.toString();
}

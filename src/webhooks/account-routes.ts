/**
 * Where each account's deliveries arrive (docs/operations.md, "Several accounts"): account `NAME` at
 * `WEBHOOK_PATH/NAME`, and account `default` also at `WEBHOOK_PATH` itself, the URL every install
 * registered before it had accounts. By name, not by place in ACCOUNTS: reordering the accounts
 * sends no account's deliveries to another's secrets. One receiver serves them all (receiver.ts):
 * one pool, one inbox writer, one secret cache, whatever the number of accounts.
 */
import type { FastifyInstance } from 'fastify';
import { DEFAULT_ACCOUNT } from '../db/client.js';
import { registerWebhookRoutes, type ReceiverOptions, type ReceiverRoute, type WebhookRoute } from './receiver.js';

/** What the routes are built from: Config has these fields (the commands pass it). */
export interface AccountRouteSettings {
  webhookPath: string;
  webhookMaxBodyBytes: number;
  webhookBodyMemoryBytes?: number;
  accounts: ReadonlyArray<{ readonly name: string; readonly webhookSecrets: readonly string[] }>;
}

/** The path account `account`'s deliveries arrive at: `WEBHOOK_PATH/<account>`. */
export function accountWebhookPath(webhookPath: string, account: string): string {
  return `${webhookPath.replace(/\/+$/, '')}/${account}`;
}

/** Every route of the declared accounts, account `default`'s bare `WEBHOOK_PATH` first when it is declared. */
export function accountRoutes(settings: Pick<AccountRouteSettings, 'webhookPath' | 'accounts'>): ReceiverRoute[] {
  if (settings.accounts.length === 0) throw new TypeError('no account is declared');
  const routeOf = (account: AccountRouteSettings['accounts'][number], path: string): ReceiverRoute => ({
    path,
    account: account.name,
    secrets: () => account.webhookSecrets,
  });
  const bare = settings.accounts.find((account) => account.name === DEFAULT_ACCOUNT);
  return [
    ...(bare ? [routeOf(bare, settings.webhookPath)] : []),
    ...settings.accounts.map((account) => routeOf(account, accountWebhookPath(settings.webhookPath, account.name))),
  ];
}

/**
 * The receiver of every declared account on `app`. `deps.pool` may serve any account or none: every
 * statement of the receiver names the account of its route.
 */
export function registerAccountRoutes(
  app: FastifyInstance,
  settings: AccountRouteSettings,
  deps: Omit<ReceiverOptions, 'maxBodyBytes' | 'bodyMemoryBytes'>,
): WebhookRoute {
  return registerWebhookRoutes(
    app,
    {
      ...deps,
      maxBodyBytes: settings.webhookMaxBodyBytes,
      ...(settings.webhookBodyMemoryBytes === undefined ? {} : { bodyMemoryBytes: settings.webhookBodyMemoryBytes }),
    },
    accountRoutes(settings),
  );
}

/**
 * The URL `webhooks register` gives the service for account `account`: `url` is the receiver's (public
 * URL + WEBHOOK_PATH, as a single-account install registers it), kept as it is for account `default`
 * and followed by `/<account>` for any other, unless it already ends with that account's path.
 */
export function accountWebhookUrl(url: string, account: string, settings: Pick<AccountRouteSettings, 'webhookPath'>): string {
  if (account === DEFAULT_ACCOUNT) return url;
  const parsed = new URL(url);
  const path = parsed.pathname.replace(/\/+$/, '');
  if (path.endsWith(accountWebhookPath(settings.webhookPath, account))) return url;
  parsed.pathname = `${path}/${account}`;
  return parsed.toString();
}

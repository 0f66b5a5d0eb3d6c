/**
 * Where each account's deliveries arrive (docs/operations.md, "Several accounts"): account `NAME` at
 * `WEBHOOK_PATH/NAME`, and the first declared account also at `WEBHOOK_PATH` itself, the URL every
 * install registered before it had accounts. One receiver serves them all (receiver.ts): one pool,
 * one inbox writer, one secret cache, whatever the number of accounts.
 */
import type { FastifyInstance } from 'fastify';
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

/** Every route of the declared accounts, the first account's bare `WEBHOOK_PATH` first. */
export function accountRoutes(settings: Pick<AccountRouteSettings, 'webhookPath' | 'accounts'>): ReceiverRoute[] {
  const [first] = settings.accounts;
  if (first === undefined) throw new TypeError('no account is declared');
  const routeOf = (account: AccountRouteSettings['accounts'][number], path: string): ReceiverRoute => ({
    path,
    account: account.name,
    secrets: () => account.webhookSecrets,
  });
  return [
    routeOf(first, settings.webhookPath),
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
 * URL + WEBHOOK_PATH, as a single-account install registers it), kept as it is for the first account
 * and followed by `/<account>` for any other, unless it already ends with that account's path.
 */
export function accountWebhookUrl(url: string, account: string, settings: Pick<AccountRouteSettings, 'webhookPath' | 'accounts'>): string {
  if (settings.accounts[0]?.name === account) return url;
  const parsed = new URL(url);
  const path = parsed.pathname.replace(/\/+$/, '');
  if (path.endsWith(accountWebhookPath(settings.webhookPath, account))) return url;
  parsed.pathname = `${path}/${account}`;
  return parsed.toString();
}

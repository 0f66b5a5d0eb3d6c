/**
 * `subscriber-mirror webhooks list|get|register|adopt|update|delete` (docs/architecture.md, "Management").
 *
 * {@link webhooksCommand} chooses the account (`--account`, docs/operations.md, "Several accounts"),
 * loads its config (need `manage-webhooks`), opens a pool of that account and calls
 * `runWebhooksCli`; `webhooks replay` is `replay.ts`. Bad arguments throw `UsageError` (exit 2, message printed as is, so it carries
 * its own usage text); failures throw an Error with one clear line (exit 1).
 *
 * Secrets never reach the output (invariant 10): nothing here formats a secret, `--json` is built
 * from an explicit list of fields, and every line still passes a scrubber holding the token and every
 * secret seen, in case a future message carries one.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import type pg from 'pg';
import { accountConfig, accountPrefix, ConfigError, findAccount, loadConfig, type Config } from '../config.js';
import { DEFAULT_ACCOUNT, openDatabase } from '../db/client.js';
import { createScrubber, type Logger, type SecretScrubber } from '../ground/log.js';
import { printable } from '../ground/terminal.js';
import { UsageError } from '../ground/usage-error.js';
import {
  createWebhooksApi,
  isWebhookId,
  WebhookAuthError,
  WebhookNotFoundError,
  type Webhook,
  type WebhooksApi,
  type WebhooksApiOptions,
  type WebhookUpdateBody,
} from '../upstream/webhooks-api.js';
import { accountWebhookUrl } from '../webhooks/account-routes.js';
import { EVENT_KINDS, isEventKind } from '../webhooks/payloads.js';
import {
  adoptWebhook,
  AlreadyRegisteredError,
  batchableViolations,
  deleteWebhook,
  getWebhook,
  listWebhooks,
  readEndpoint,
  registerWebhooks,
  ROLE_SPECS,
  updateWebhook,
  type AdoptResult,
  type ListResult,
  type RegisterAction,
} from '../webhooks/manage.js';
import type { Command } from './args.js';
import { replayCommand } from './replay.js';

export const WEBHOOKS_USAGE = `usage: subscriber-mirror webhooks <subcommand> [options] [--account NAME]

  list [--json]                      every webhook of the account; MANAGED = this install's (in webhook_endpoints):
                                     yes = register's own, adopted = taken over with adopt
  get ID [--json]                    one webhook (secrets are never shown)
  register --url URL [--name NAME] [--allow-http]
                                     create or update this install's two webhooks (real-time and batched);
                                     adopted webhooks are left alone. An http:// URL is refused unless its host
                                     is loopback or --allow-http is given (deliveries carry personal data)
  adopt ID                           manage a webhook created elsewhere (e.g. the service's dashboard): store its
                                     secret in webhook_endpoints so the receiver verifies its deliveries
  update ID [--url URL [--allow-http]] [--name NAME] [--events KIND,KIND...] [--enable | --disable] [--batchable true|false]
  delete ID                          delete a webhook upstream and forget its secret

--account NAME: the account to manage (needed when ACCOUNTS declares several). register gives the
service --url for account default, --url followed by /NAME for any other (where the receiver
takes NAME's deliveries).
needs MAILER_WEBHOOKS_URL and MAILER_WEBHOOKS_TOKEN (the account's, ACCOUNT_<NAME>__MAILER_WEBHOOKS_…).`;

/** Bad arguments: exit code 2, the message with this subcommand's usage. */
function usage(problem: string): UsageError {
  return new UsageError(`${problem}\n\n${WEBHOOKS_USAGE}`, { printUsage: false });
}

export interface WebhooksCliDeps {
  /** The config of the account managed (`accountConfig`): its management URL, token and name. */
  config: Config;
  /** A pool of that account. */
  pool: pg.Pool;
  /** One line of output (no newline); default stdout. */
  out?: (line: string) => void;
  /** Timeouts, retries, fetch (tests). */
  http?: WebhooksApiOptions['http'];
  logger?: Logger;
}

// ---------------------------------------------------------------------------------------------
// Argument parsing (pure)
// ---------------------------------------------------------------------------------------------

type Options = NonNullable<ParseArgsConfig['options']>;

function parse<T extends Options>(args: string[], options: T, positionals: number, what: string) {
  const parsed = (() => {
    try {
      return parseArgs({ args, options, strict: true, allowPositionals: positionals > 0 });
    } catch (error) {
      throw usage(`webhooks ${what}: ${(error as Error).message}`);
    }
  })();
  if (parsed.positionals.length > positionals) {
    throw usage(`webhooks ${what}: unexpected argument "${parsed.positionals[positionals] ?? ''}"`);
  }
  return parsed;
}

/**
 * `--account NAME` (or `--account=NAME`) anywhere in the arguments, and the rest: every subcommand
 * takes it, so it is taken out before the subcommand parses its own.
 */
export function takeAccountOption(args: readonly string[]): { account: string | undefined; rest: string[] } {
  const rest: string[] = [];
  let account: string | undefined;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    const inline = /^--account=(.*)$/s.exec(arg);
    if (arg !== '--account' && !inline) {
      rest.push(arg);
      continue;
    }
    const value = inline ? inline[1] : args[++i];
    if (value === undefined || value === '' || value.startsWith('--')) throw usage('webhooks: --account needs an account name');
    if (account !== undefined) throw usage('webhooks: --account is given twice');
    account = value;
  }
  return { account, rest };
}

function webhookIdArg(positionals: string[], what: string): string {
  const id = positionals[0];
  if (id === undefined) throw usage(`webhooks ${what} needs a webhook ID`);
  if (!isWebhookId(id)) throw usage(`webhooks ${what}: "${id}" is not a webhook id (digits, as \`webhooks list\` shows them)`);
  return id;
}

/** A loopback host (localhost, 127.0.0.0/8, ::1): plain HTTP never leaves the machine. */
function isLoopbackHost(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  return host === 'localhost' || host.endsWith('.localhost') || host === '::1' || /^127(\.\d{1,3}){3}$/.test(host);
}

/**
 * The receiver's URL. Deliveries carry personal data and a captured one lets an attacker work on the
 * webhook secret offline, so http:// to another host needs an explicit --allow-http (docs/compose.md, "HTTPS").
 */
function urlArg(value: string, what: string, allowHttp = false): string {
  const ok = URL.canParse(value) && ['http:', 'https:'].includes(new URL(value).protocol);
  if (!ok) throw usage(`webhooks ${what}: --url must be an http(s) URL, got "${value}"`);
  const url = new URL(value);
  if (url.protocol === 'http:' && !allowHttp && !isLoopbackHost(url.hostname)) {
    throw usage(
      `webhooks ${what}: --url ${value} is plain HTTP: deliveries (personal data) would cross the network in clear. ` +
        'Use https:// (docker compose --profile https: docs/compose.md, "HTTPS"), or add --allow-http for a private network.',
    );
  }
  return value;
}

/** `a,b` → known, deduplicated kinds; an unknown kind is named. */
export function parseEventsArg(value: string, what = 'update'): string[] {
  const kinds = [
    ...new Set(
      value
        .split(',')
        .map((k) => k.trim())
        .filter((k) => k !== ''),
    ),
  ];
  if (kinds.length === 0) throw usage(`webhooks ${what}: --events needs at least one event kind`);
  const unknown = kinds.filter((k) => !isEventKind(k));
  if (unknown.length > 0) {
    const names = unknown.map((k) => `"${k}"`).join(', ');
    throw usage(`webhooks ${what}: unknown event kind ${names} (known: ${EVENT_KINDS.join(', ')})`);
  }
  return kinds;
}

export interface RegisterArgs {
  url: string;
  name?: string;
}

export function parseRegisterArgs(args: string[]): RegisterArgs {
  const { values } = parse(args, { url: { type: 'string' }, name: { type: 'string' }, 'allow-http': { type: 'boolean' } }, 0, 'register');
  if (values.url === undefined)
    throw usage("webhooks register needs --url URL (where the service should deliver: this install's receiver)");
  const result: RegisterArgs = { url: urlArg(values.url, 'register', values['allow-http'] === true) };
  if (values.name !== undefined) {
    if (values.name.trim() === '') throw usage('webhooks register: --name must not be empty');
    result.name = values.name;
  }
  return result;
}

export interface UpdateArgs {
  id: string;
  patch: WebhookUpdateBody;
}

/**
 * Checks everything decidable from the arguments alone before any request: known kinds and the
 * batchable rule (docs/upstream.md, "Event kinds") when both --events and --batchable false are given. (With only one of
 * them, the rule depends on the webhook's current state; the service's 422 then says it.)
 */
export function parseUpdateArgs(args: string[]): UpdateArgs {
  const { values, positionals } = parse(
    args,
    {
      url: { type: 'string' },
      name: { type: 'string' },
      events: { type: 'string' },
      enable: { type: 'boolean' },
      disable: { type: 'boolean' },
      batchable: { type: 'string' },
      'allow-http': { type: 'boolean' },
    },
    1,
    'update',
  );
  const id = webhookIdArg(positionals, 'update');
  const patch: WebhookUpdateBody = {};
  if (values.name !== undefined) patch.name = values.name;
  if (values.url !== undefined) patch.url = urlArg(values.url, 'update', values['allow-http'] === true);
  if (values.events !== undefined) patch.events = parseEventsArg(values.events);
  if (values.enable && values.disable) throw usage('webhooks update: use either --enable or --disable, not both');
  if (values.enable) patch.enabled = true;
  if (values.disable) patch.enabled = false;
  if (values.batchable !== undefined) {
    if (values.batchable !== 'true' && values.batchable !== 'false') {
      throw usage(`webhooks update: --batchable must be true or false, got "${values.batchable}"`);
    }
    patch.batchable = values.batchable === 'true';
  }
  if (patch.events !== undefined && patch.batchable === false) {
    const violations = batchableViolations(patch.events, false);
    if (violations.length > 0) {
      throw usage(
        `webhooks update: ${violations.join(', ')} can only be delivered to a batchable webhook (docs/upstream.md, "Event kinds"); use --batchable true or drop them from --events`,
      );
    }
  }
  if (Object.keys(patch).length === 0) {
    throw usage('webhooks update: nothing to change; give at least one of --url, --name, --events, --enable/--disable, --batchable');
  }
  return { id, patch };
}

// ---------------------------------------------------------------------------------------------
// Output (pure)
// ---------------------------------------------------------------------------------------------

const yesNo = (value: boolean): string => (value ? 'yes' : 'no');

/** Up to three kinds by name, more as a count (`get` and `--json` show them all). */
export function describeEvents(events: readonly string[]): string {
  if (events.length === 0) return '(none)';
  return events.length <= 3 ? events.join(', ') : `${events.length} kinds`;
}

/** The public fields of a webhook: an allow-list, so a secret can never slip into `--json`. */
export function publicWebhook(webhook: Webhook): Omit<Webhook, 'secret'> {
  return {
    id: webhook.id,
    name: webhook.name,
    url: webhook.url,
    events: [...webhook.events],
    enabled: webhook.enabled,
    batchable: webhook.batchable,
    created_at: webhook.created_at,
    updated_at: webhook.updated_at,
  };
}

function table(header: string[], rows: string[][]): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]): string =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)];
}

/** The way out for a row whose webhook is gone upstream: register recreates only its own. */
function goneUpstreamHint(id: string, adopted: boolean): string {
  const forget = `\`webhooks delete ${id}\` forgets it`;
  return adopted ? `it was adopted, so \`webhooks register\` leaves it alone; ${forget}` : `\`webhooks register\` recreates it, ${forget}`;
}

/** MANAGED: `yes` for register's own (as before adopted rows were told apart), `adopted`, or `no`. */
function managedLabel(managed: boolean, adopted: boolean): string {
  if (!managed) return 'no';
  return adopted ? 'adopted' : 'yes';
}

export function formatWebhookList(result: ListResult): string[] {
  const lines: string[] = [];
  if (result.webhooks.length === 0) lines.push('no webhooks are registered with the service');
  else {
    const rows = result.webhooks.map(({ webhook, managed, adopted }) => [
      webhook.id,
      webhook.name,
      webhook.url,
      describeEvents(webhook.events),
      yesNo(webhook.enabled),
      yesNo(webhook.batchable),
      managedLabel(managed, adopted),
    ]);
    lines.push(...table(['ID', 'NAME', 'URL', 'EVENTS', 'ENABLED', 'BATCHABLE', 'MANAGED'], rows));
    const managed = result.webhooks.filter((w) => w.managed).length;
    const adopted = result.webhooks.filter((w) => w.adopted).length;
    const ofThem = adopted > 0 ? ` (${adopted} adopted)` : '';
    lines.push('', `${result.webhooks.length} webhook(s), ${managed} managed by this install${ofThem}`);
  }
  for (const row of result.missingUpstream) {
    lines.push(`note: webhook ${row.id} is in webhook_endpoints but no longer exists upstream; ${goneUpstreamHint(row.id, row.adopted)}`);
  }
  return lines;
}

export function formatWebhook(webhook: Webhook, managed: boolean, secretStored: boolean, adopted = false): string[] {
  return [
    `id:        ${webhook.id}`,
    `name:      ${webhook.name}`,
    `url:       ${webhook.url}`,
    `events:    ${webhook.events.join(', ') || '(none)'}`,
    `enabled:   ${yesNo(webhook.enabled)}`,
    `batchable: ${yesNo(webhook.batchable)}`,
    `created:   ${webhook.created_at ?? '-'}`,
    `updated:   ${webhook.updated_at ?? '-'}`,
    `managed:   ${!managed ? 'no' : adopted ? 'adopted (in webhook_endpoints; register leaves it alone)' : 'yes (in webhook_endpoints)'}`,
    `secret:    ${secretStored ? 'stored' : 'not stored'}`,
  ];
}

export function formatAdoptResult({ webhook, outcome }: AdoptResult): string {
  const what = `webhook ${webhook.id} "${webhook.name}" (${describeEvents(webhook.events)} → ${webhook.url}, enabled ${yesNo(webhook.enabled)})`;
  if (outcome === 'unchanged') return `${what} is already adopted; nothing changed`;
  if (outcome === 'updated') return `${what} was already adopted; refreshed its row and secret in webhook_endpoints`;
  return `adopted ${what}: secret stored in webhook_endpoints, the receiver verifies its deliveries`;
}

export function formatRegisterAction(action: RegisterAction): string {
  const label = ROLE_SPECS[action.webhook].label;
  const replaced = action.replaces !== undefined ? ` (replacing ${action.replaces}, which was deleted upstream)` : '';
  return `${action.action} ${label} webhook ${action.id}${replaced} for ${action.events.join(', ')} → ${action.url}`;
}

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

interface Context {
  api: WebhooksApi;
  pool: pg.Pool;
  config: Config;
  print: (line: string) => void;
  /** Remembers a secret so that no output line can carry it. */
  hide: (webhook: { secret?: string | undefined }) => void;
}

async function list(ctx: Context, args: string[]): Promise<number> {
  const { values } = parse(args, { json: { type: 'boolean', default: false } }, 0, 'list');
  const result = await listWebhooks(ctx.api, ctx.pool);
  for (const { webhook } of result.webhooks) ctx.hide(webhook);
  for (const row of result.missingUpstream) ctx.hide(row);
  if (values.json) {
    const json = {
      webhooks: result.webhooks.map(({ webhook, managed, adopted }) => ({ ...publicWebhook(webhook), managed, adopted })),
      missingUpstream: result.missingUpstream.map((row) => row.id),
    };
    ctx.print(JSON.stringify(json, null, 2));
  } else {
    for (const line of formatWebhookList(result)) ctx.print(line);
  }
  return 0;
}

/** A 404 for one of ours deserves the way out, not just the fact. */
async function notFoundHint(ctx: Context, error: unknown, id: string): Promise<unknown> {
  if (!(error instanceof WebhookNotFoundError)) return error;
  const row = await readEndpoint(ctx.pool, id);
  if (!row) return error;
  ctx.hide(row);
  return new Error(`${error.message} upstream, but it is still in webhook_endpoints: ${goneUpstreamHint(id, row.adopted)}`);
}

async function get(ctx: Context, args: string[]): Promise<number> {
  const { values, positionals } = parse(args, { json: { type: 'boolean', default: false } }, 1, 'get');
  const id = webhookIdArg(positionals, 'get');
  let result;
  try {
    result = await getWebhook(ctx.api, ctx.pool, id);
  } catch (error) {
    throw await notFoundHint(ctx, error, id);
  }
  ctx.hide(result.webhook);
  if (values.json) {
    const json = { ...publicWebhook(result.webhook), managed: result.managed, adopted: result.adopted, secretStored: result.secretStored };
    ctx.print(JSON.stringify(json, null, 2));
  } else {
    for (const line of formatWebhook(result.webhook, result.managed, result.secretStored, result.adopted)) ctx.print(line);
  }
  return 0;
}

async function register(ctx: Context, args: string[]): Promise<number> {
  const options = parseRegisterArgs(args);
  const url = accountWebhookUrl(options.url, ctx.config.account, ctx.config);
  const result = await registerWebhooks(ctx.api, ctx.pool, { ...options, url });
  for (const action of result.actions) ctx.print(formatRegisterAction(action));
  if (result.actions.some((a) => a.action === 'created')) {
    // docs/architecture.md, "Management": register first, then catch up; overlap is safe, a gap is not.
    const named = ctx.config.accounts.length > 1 ? ` --account ${ctx.config.account}` : '';
    ctx.print(`next: run \`subscriber-mirror backfill --all${named}\` to catch up on changes made before the webhooks existed`);
  }
  return 0;
}

async function adopt(ctx: Context, args: string[]): Promise<number> {
  const { positionals } = parse(args, {}, 1, 'adopt');
  const id = webhookIdArg(positionals, 'adopt');
  let result;
  try {
    result = await adoptWebhook(ctx.api, ctx.pool, id);
  } catch (error) {
    // A wrong id rather than a failure: exit 2, like the other bad arguments (the message says it all).
    if (error instanceof AlreadyRegisteredError) throw new UsageError(error.message, { printUsage: false });
    throw await notFoundHint(ctx, error, id);
  }
  ctx.hide(result.webhook);
  ctx.print(formatAdoptResult(result));
  return 0;
}

async function update(ctx: Context, args: string[]): Promise<number> {
  const { id, patch } = parseUpdateArgs(args);
  let result;
  try {
    result = await updateWebhook(ctx.api, ctx.pool, id, patch);
  } catch (error) {
    throw await notFoundHint(ctx, error, id);
  }
  const w = result.webhook;
  ctx.hide(w);
  const stored = result.managed ? '; stored in webhook_endpoints' : '';
  ctx.print(
    `updated webhook ${w.id}: name "${w.name}", url ${w.url}, events ${w.events.join(', ')}, ` +
      `enabled ${yesNo(w.enabled)}, batchable ${yesNo(w.batchable)}${stored}`,
  );
  return 0;
}

async function remove(ctx: Context, args: string[]): Promise<number> {
  const { positionals } = parse(args, {}, 1, 'delete');
  const id = webhookIdArg(positionals, 'delete');
  const result = await deleteWebhook(ctx.api, ctx.pool, id);
  if (!result.deletedUpstream) {
    ctx.print(`webhook ${id} was already gone upstream; removed it from webhook_endpoints`);
  } else {
    ctx.print(`deleted webhook ${id}${result.removedRow ? ' and removed it from webhook_endpoints' : ''}`);
  }
  return 0;
}

const SUBCOMMANDS: Record<string, (ctx: Context, args: string[]) => Promise<number>> = {
  list,
  get,
  register,
  adopt,
  update,
  delete: remove,
};

/** A per-account variable as account `account` reads it (the unprefixed name for `default`). */
function variableOf(account: string, name: string): string {
  return account === DEFAULT_ACCOUNT ? name : `${accountPrefix(account)}${name}`;
}

function apiFor(deps: WebhooksCliDeps): WebhooksApi {
  const { url, token } = deps.config.webhooksApi;
  const named = (name: string) => variableOf(deps.config.account, name);
  const missing = [
    url ? undefined : `${named('MAILER_WEBHOOKS_URL')}: required for webhooks commands`,
    token ? undefined : `${named('MAILER_WEBHOOKS_TOKEN')}: required for webhooks commands`,
  ].filter((p): p is string => p !== undefined);
  if (missing.length > 0 || !url || !token) throw new ConfigError(missing);
  return createWebhooksApi({ baseUrl: url, token, http: { timeoutMs: deps.config.upstreamTimeoutMs, ...deps.http }, logger: deps.logger });
}

function scrubbed(error: unknown, scrub: SecretScrubber, account: string): unknown {
  if (!(error instanceof Error) || error instanceof UsageError || error instanceof ConfigError) return error;
  const message = scrub(error.message);
  if (error instanceof WebhookAuthError) return new Error(`${message}; check ${variableOf(account, 'MAILER_WEBHOOKS_TOKEN')}`);
  if (message === error.message) return error;
  return new Error(message);
}

export async function runWebhooksCli(argv: string[], deps: WebhooksCliDeps): Promise<number> {
  const [sub, ...rest] = argv;
  const out = deps.out ?? ((line: string) => process.stdout.write(`${line}\n`));
  if (sub === 'help' || sub === '--help' || sub === '-h') {
    out(WEBHOOKS_USAGE);
    return 0;
  }
  if (sub === undefined) throw usage('webhooks needs a subcommand');
  const handler = SUBCOMMANDS[sub];
  if (!handler) throw usage(`unknown webhooks subcommand "${sub}"`);
  const scrub = createScrubber(deps.config.webhooksApi.token ? [deps.config.webhooksApi.token] : []);
  const ctx: Context = {
    api: apiFor(deps),
    pool: deps.pool,
    config: deps.config,
    print: (line) => out(printable(scrub(line))),
    hide: (webhook) => {
      if (webhook.secret) scrub.add(webhook.secret);
    },
  };
  try {
    return await handler(ctx, rest);
  } catch (error) {
    throw scrubbed(error, scrub, deps.config.account);
  }
}

/**
 * The config of the account the command manages: the one `--account` names, or the only one. An
 * account not declared, or none named among several, is refused (exit 2) before anything is opened.
 */
export function webhooksConfigFor(env: NodeJS.ProcessEnv, named: string | undefined): Config {
  const account = findAccount(loadConfig(env), named).name;
  return accountConfig(loadConfig(env, ['manage-webhooks'], account), account);
}

/** `webhooks …`: `replay` re-applies stored deliveries; the other subcommands manage the service-side webhooks. */
export const webhooksCommand: Command = async (args) => {
  if (args[0] === 'replay') return replayCommand(args.slice(1));
  const { account, rest } = takeAccountOption(args);
  if (rest[0] === 'help' || rest[0] === '--help' || rest[0] === '-h') {
    process.stdout.write(`${WEBHOOKS_USAGE}\n`);
    return 0;
  }
  const config = webhooksConfigFor(process.env, account);
  const database = openDatabase(config.databaseUrl, { max: 2, account: config.account });
  try {
    return await runWebhooksCli(rest, { config, pool: database.pool });
  } finally {
    await database.close();
  }
};

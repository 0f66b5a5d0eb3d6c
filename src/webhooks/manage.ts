/**
 * The service-side webhooks this install manages (docs/architecture.md, "Management"), kept in step with the
 * `webhook_endpoints` table whose secrets the receiver verifies deliveries with (docs/upstream.md, "Signature").
 *
 * `registerWebhooks` converges on two webhooks: a non-batchable one for the kinds that may be
 * delivered one by one, and a batchable one for the kinds the service only sends batched. The split
 * follows docs/upstream.md, "Webhook management", which requires `batchable` for subscriber.deleted as well as campaign.open and
 * campaign.click (stricter than the parameter table of docs/upstream.md, "Webhook management"), read from EVENT_REGISTRY.
 *
 * "Ours" means: has a row in `webhook_endpoints`. Register's own are the rows with `adopted` false; a
 * row `adoptWebhook` stored (a webhook made elsewhere, only to be verified) is never claimed, updated
 * or deleted by register (docs/operations.md, "Command line"). Running register again with the same
 * URL sends no write to the service and rewrites no row; a changed URL (or name) is one PUT; a webhook
 * deleted upstream is created again. The table is not a mirrored table, so plain parameterized SQL is used.
 */
import type pg from 'pg';
import { rowSelectSql, type RowOf } from '../db/columns.js';
import { webhookEndpoints } from '../db/schema.js';
import type { Queryable } from '../ground/queryable.js';
import { EVENT_KINDS, EVENT_REGISTRY, type EventKind } from './payloads.js';
import {
  WebhookNotFoundError,
  type Webhook,
  type WebhookCreateBody,
  type WebhooksApi,
  type WebhookUpdateBody,
} from '../upstream/webhooks-api.js';

// ---------------------------------------------------------------------------------------------
// The kinds split (docs/upstream.md, "Event kinds")
// ---------------------------------------------------------------------------------------------

/** Kinds the service delivers to a non-batchable webhook (campaign.sent included: it needs no batching). */
export const REALTIME_KINDS: readonly EventKind[] = EVENT_KINDS.filter((kind) => !EVENT_REGISTRY[kind].requiresBatchable);

/** Kinds that need `batchable: true` (docs/upstream.md, "Event kinds"): subscriber.deleted, campaign.click, campaign.open. */
export const BATCHED_KINDS: readonly EventKind[] = EVENT_KINDS.filter((kind) => EVENT_REGISTRY[kind].requiresBatchable);

export type ManagedRole = 'realtime' | 'batched';
export const MANAGED_ROLES: readonly ManagedRole[] = ['realtime', 'batched'];

export const ROLE_SPECS: Readonly<Record<ManagedRole, { events: readonly EventKind[]; batchable: boolean; label: string }>> = {
  realtime: { events: REALTIME_KINDS, batchable: false, label: 'real-time' },
  batched: { events: BATCHED_KINDS, batchable: true, label: 'batched' },
};

export const DEFAULT_WEBHOOK_NAME = 'subscriber-mirror';

/** Name given to the webhook of a role: `<name> (real-time)`, `<name> (batched)`. */
export function roleWebhookName(role: ManagedRole, name: string = DEFAULT_WEBHOOK_NAME): string {
  return `${name} (${ROLE_SPECS[role].label})`;
}

/**
 * Kinds among `events` that a webhook with this `batchable` flag may not subscribe to (docs/upstream.md, "Event kinds").
 * Empty when the combination is allowed.
 */
export function batchableViolations(events: readonly string[], batchable: boolean): EventKind[] {
  if (batchable) return [];
  return BATCHED_KINDS.filter((kind) => events.includes(kind));
}

function sameKinds(a: readonly string[], b: readonly string[]): boolean {
  const left = new Set(a);
  const right = new Set(b);
  return left.size === right.size && [...left].every((k) => right.has(k));
}

function isHttpUrl(value: string): boolean {
  if (!URL.canParse(value)) return false;
  const { protocol } = new URL(value);
  return protocol === 'http:' || protocol === 'https:';
}

// ---------------------------------------------------------------------------------------------
// webhook_endpoints
// ---------------------------------------------------------------------------------------------

/**
 * A row of `webhook_endpoints`, as drizzle infers it from the table. `secret`: never print it.
 * `adopted`: stored by `adoptWebhook`, so `registerWebhooks` leaves it alone.
 */
export type StoredEndpoint = RowOf<typeof webhookEndpoints>;

const SELECT_ENDPOINTS = `select ${rowSelectSql(webhookEndpoints)} from webhook_endpoints where account = mirror_account()`;

export async function readEndpoints(pool: Queryable): Promise<StoredEndpoint[]> {
  return (await pool.query<StoredEndpoint>(`${SELECT_ENDPOINTS} order by created_at, id`)).rows;
}

export async function readEndpoint(pool: Queryable, id: string): Promise<StoredEndpoint | undefined> {
  return (await pool.query<StoredEndpoint>(`${SELECT_ENDPOINTS} and id = $1`, [id])).rows[0];
}

export type StoreOutcome = 'inserted' | 'updated' | 'unchanged';

/**
 * Upserts the row of a webhook by id. An identical row is not rewritten (its updated_at stays), so a
 * second register or list changes nothing. `adopted` only applies to a new row: an existing row keeps
 * its kind (refreshing an adopted row from list/get/update must not hand it to register), and an
 * adopting store leaves a row of register's untouched ('unchanged'; `adoptWebhook` refuses it).
 * `disabledByOperator` records that an operator disabled it (true) or enabled it (false); without it
 * the row keeps what it had, and a webhook the service says is enabled is never marked.
 */
export async function storeEndpoint(
  pool: Queryable,
  webhook: Webhook,
  secret: string,
  { adopted = false, disabledByOperator }: { adopted?: boolean; disabledByOperator?: boolean } = {},
): Promise<StoreOutcome> {
  if (secret === '') throw new TypeError(`webhook ${webhook.id}: refusing to store an empty secret`);
  const byOperator = 'case when excluded.enabled then false else coalesce($9::boolean, e.disabled_by_operator) end';
  const { rows } = await pool.query<{ inserted: boolean }>(
    `insert into webhook_endpoints as e (id, name, url, events, enabled, batchable, secret, adopted, disabled_by_operator)
     values ($1, $2, $3, $4::text[], $5, $6, $7, $8, not $5 and coalesce($9::boolean, false))
     on conflict (account, id) do update
        set name = excluded.name, url = excluded.url, events = excluded.events, enabled = excluded.enabled,
            batchable = excluded.batchable, secret = excluded.secret, disabled_by_operator = ${byOperator}, updated_at = now()
      where (e.adopted or not excluded.adopted)
        and (e.name, e.url, e.events, e.enabled, e.batchable, e.secret, e.disabled_by_operator)
            is distinct from (excluded.name, excluded.url, excluded.events, excluded.enabled, excluded.batchable, excluded.secret, ${byOperator})
     returning (xmax = 0) as inserted`,
    [
      webhook.id,
      webhook.name === '' ? null : webhook.name,
      webhook.url,
      webhook.events,
      webhook.enabled,
      webhook.batchable,
      secret,
      adopted,
      disabledByOperator ?? null,
    ],
  );
  const row = rows[0];
  if (!row) return 'unchanged';
  return row.inserted ? 'inserted' : 'updated';
}

export async function removeEndpoint(pool: Queryable, id: string): Promise<boolean> {
  const { rowCount } = await pool.query('delete from webhook_endpoints where account = mirror_account() and id = $1', [id]);
  return (rowCount ?? 0) > 0;
}

// ---------------------------------------------------------------------------------------------
// register
// ---------------------------------------------------------------------------------------------

export interface RegisterOptions {
  /** Where the service should deliver: this install's receiver (public URL + WEBHOOK_PATH). */
  url: string;
  /** Base of the webhook names (default `subscriber-mirror`); when given, a different name is updated too. */
  name?: string;
}

export type RegisterActionKind = 'created' | 'updated' | 'unchanged';

export interface RegisterAction {
  webhook: ManagedRole;
  action: RegisterActionKind;
  id: string;
  name: string;
  url: string;
  events: string[];
  /** Id of the stored webhook this one replaces because it was deleted upstream. */
  replaces?: string;
}

export interface RegisterResult {
  actions: RegisterAction[];
}

/**
 * Session advisory lock: two concurrent registers of one account would both create (migrate.ts uses
 * 727_110_001). Taken with the account's hash as second key, so registers of two accounts run at once.
 */
export const REGISTER_LOCK_KEY = 727_110_005;

/**
 * Runs `fn` on one connection holding the lock; every statement of `fn` must use that connection,
 * since the CLI may open a pool of a single connection.
 */
async function withRegisterLock<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    const { rows } = await client.query<{ locked: boolean }>('select pg_try_advisory_lock($1::int, hashtext(mirror_account())) as locked', [
      REGISTER_LOCK_KEY,
    ]);
    if (!rows[0]?.locked) {
      throw new Error('another `webhooks register` is running for this account; run it again once that one has finished');
    }
    try {
      return await fn(client);
    } finally {
      await client.query('select pg_advisory_unlock($1::int, hashtext(mirror_account()))', [REGISTER_LOCK_KEY]).catch((error: unknown) => {
        // Closing the connection frees a session lock too; do not hide the original outcome.
        broken = error instanceof Error ? error : new Error(String(error));
      });
    }
  } finally {
    client.release(broken);
  }
}

/** Stored rows that may be the webhook of `role`, best match first. */
function candidatesFor(role: ManagedRole, stored: readonly StoredEndpoint[], url: string): StoredEndpoint[] {
  const spec = ROLE_SPECS[role];
  const score = (row: StoredEndpoint): number => (row.url === url ? 2 : 0) + (sameKinds(row.events, spec.events) ? 1 : 0);
  return stored.filter((row) => row.batchable === spec.batchable).sort((a, b) => score(b) - score(a));
}

function needsUpdate(current: Webhook, role: ManagedRole, url: string, name: string | undefined): boolean {
  const spec = ROLE_SPECS[role];
  return (
    current.url !== url ||
    !sameKinds(current.events, spec.events) ||
    !current.enabled ||
    current.batchable !== spec.batchable ||
    (name !== undefined && current.name !== roleWebhookName(role, name))
  );
}

async function storeCreated(pool: Queryable, webhook: Webhook, secret: string, role: ManagedRole): Promise<void> {
  try {
    await storeEndpoint(pool, webhook, secret);
  } catch (error) {
    // The webhook exists upstream but its secret is lost: deliveries to it would all fail to verify.
    throw new Error(
      `created the ${ROLE_SPECS[role].label} webhook ${webhook.id} but could not store it in webhook_endpoints ` +
        `(${(error as Error).message}); delete it with \`subscriber-mirror webhooks delete ${webhook.id}\` and register again`,
    );
  }
}

async function registerRole(
  api: WebhooksApi,
  pool: Queryable,
  role: ManagedRole,
  stored: readonly StoredEndpoint[],
  options: RegisterOptions,
): Promise<RegisterAction> {
  const spec = ROLE_SPECS[role];
  let replaces: string | undefined;
  for (const row of candidatesFor(role, stored, options.url)) {
    const current = await api.find(row.id);
    if (current === null) {
      // Deleted upstream: its secret signs nothing any more.
      await removeEndpoint(pool, row.id);
      replaces ??= row.id;
      continue;
    }
    if (!needsUpdate(current, role, options.url, options.name)) {
      // Keeps the row true to the service (a secret it rotated, a name changed elsewhere) without a PUT.
      await storeEndpoint(pool, current, current.secret ?? row.secret);
      return { webhook: role, action: 'unchanged', id: current.id, name: current.name, url: current.url, events: current.events };
    }
    const body: WebhookUpdateBody = { url: options.url, events: [...spec.events], enabled: true, batchable: spec.batchable };
    if (options.name !== undefined) body.name = roleWebhookName(role, options.name);
    const updated = await api.update(current.id, body);
    // A secret in the answer may be new; otherwise the one we know still holds.
    await storeEndpoint(pool, updated, updated.secret ?? current.secret ?? row.secret);
    return { webhook: role, action: 'updated', id: updated.id, name: updated.name, url: updated.url, events: updated.events };
  }
  // Created disabled, enabled once its secret is stored: the service delivers to an enabled webhook at
  // once, and a delivery signed with a secret we have not stored yet is rejected (401) and waits for
  // the service's retry. If enabling fails, the next register finds it disabled and enables it.
  const body: WebhookCreateBody = {
    name: roleWebhookName(role, options.name),
    url: options.url,
    events: [...spec.events],
    enabled: false,
    batchable: spec.batchable,
  };
  const created = await api.create(body);
  await storeCreated(pool, created, created.secret, role);
  const enabled = await api.update(created.id, { enabled: true });
  await storeEndpoint(pool, enabled, enabled.secret ?? created.secret);
  const action: RegisterAction = {
    webhook: role,
    action: 'created',
    id: enabled.id,
    name: enabled.name,
    url: enabled.url,
    events: enabled.events,
  };
  if (replaces !== undefined) action.replaces = replaces;
  return action;
}

/**
 * Creates or updates this install's two webhooks so that both are enabled, point at `url` and carry
 * the kinds of their role; stores them with their secrets. Idempotent.
 */
export async function registerWebhooks(api: WebhooksApi, pool: pg.Pool, options: RegisterOptions): Promise<RegisterResult> {
  if (!isHttpUrl(options.url)) throw new TypeError(`webhook URL must be an http(s) URL, got ${JSON.stringify(options.url)}`);
  return withRegisterLock(pool, async (client) => {
    // Adopted rows are webhooks made for some other purpose: never register's to claim, update or delete.
    const stored = (await readEndpoints(client)).filter((row) => !row.adopted);
    const actions: RegisterAction[] = [];
    const claimed = new Set<string>();
    for (const role of MANAGED_ROLES) {
      const action = await registerRole(
        api,
        client,
        role,
        stored.filter((row) => !claimed.has(row.id)),
        options,
      );
      claimed.add(action.id);
      actions.push(action);
    }
    return { actions };
  });
}

// ---------------------------------------------------------------------------------------------
// list / get / update / delete
// ---------------------------------------------------------------------------------------------

export interface ListedWebhook {
  webhook: Webhook;
  /** Has a row in webhook_endpoints. */
  managed: boolean;
  /** Its row was stored by `adopt` (register leaves it alone); false when not managed. */
  adopted: boolean;
}

export interface ListResult {
  webhooks: ListedWebhook[];
  /** Rows of webhook_endpoints whose webhook no longer exists upstream (left alone; `delete` or `register` fixes them). */
  missingUpstream: StoredEndpoint[];
}

/** Every upstream webhook, marked when it is ours; our rows are refreshed from what the service says. */
export async function listWebhooks(api: WebhooksApi, pool: Queryable): Promise<ListResult> {
  const [upstream, stored] = await Promise.all([api.list(), readEndpoints(pool)]);
  const storedById = new Map(stored.map((row) => [row.id, row]));
  for (const hook of upstream) {
    const row = storedById.get(hook.id);
    if (row) await storeEndpoint(pool, hook, hook.secret ?? row.secret);
  }
  const upstreamIds = new Set(upstream.map((hook) => hook.id));
  return {
    webhooks: upstream.map((webhook) => ({
      webhook,
      managed: storedById.has(webhook.id),
      adopted: storedById.get(webhook.id)?.adopted ?? false,
    })),
    missingUpstream: stored.filter((row) => !upstreamIds.has(row.id)),
  };
}

export interface GetResult {
  webhook: Webhook;
  managed: boolean;
  /** Its row was stored by `adopt` (register leaves it alone). */
  adopted: boolean;
  /** A secret for it is in webhook_endpoints (the receiver can verify its deliveries). */
  secretStored: boolean;
}

/** Throws WebhookNotFoundError when it does not exist upstream (its row, if any, is left alone). */
export async function getWebhook(api: WebhooksApi, pool: Queryable, id: string): Promise<GetResult> {
  const webhook = await api.get(id);
  const row = await readEndpoint(pool, id);
  if (row) await storeEndpoint(pool, webhook, webhook.secret ?? row.secret);
  return {
    webhook,
    managed: row !== undefined,
    adopted: row?.adopted ?? false,
    secretStored: row !== undefined && (webhook.secret ?? row.secret) !== '',
  };
}

export interface UpdateResult {
  webhook: Webhook;
  managed: boolean;
}

/**
 * PUT, then store the new state when the webhook is ours (a new secret in the answer included). An
 * operator's `enabled: false` is recorded as theirs, so WEBHOOKS_REENABLE leaves it disabled.
 */
export async function updateWebhook(api: WebhooksApi, pool: Queryable, id: string, patch: WebhookUpdateBody): Promise<UpdateResult> {
  const webhook = await api.update(id, patch);
  const row = await readEndpoint(pool, id);
  if (row)
    await storeEndpoint(
      pool,
      webhook,
      webhook.secret ?? row.secret,
      patch.enabled === undefined ? {} : { disabledByOperator: !patch.enabled },
    );
  return { webhook, managed: row !== undefined };
}

/**
 * WEBHOOKS_REENABLE: enables again a webhook of ours the service disabled, and stores what the
 * service answered, so the row (its `enabled`, whose secrets the receiver loads) says what was done.
 * One an operator disabled is left alone: returns null without a request.
 */
export async function reenableWebhook(api: WebhooksApi, pool: Queryable, id: string): Promise<Webhook | null> {
  const row = await readEndpoint(pool, id);
  if (!row || row.disabledByOperator) return null;
  const webhook = await api.update(id, { enabled: true });
  await storeEndpoint(pool, webhook, webhook.secret ?? row.secret);
  return webhook;
}

export interface DeleteResult {
  id: string;
  /** False when it was already gone upstream (only possible for one of ours). */
  deletedUpstream: boolean;
  /** Its webhook_endpoints row was removed. */
  removedRow: boolean;
}

/**
 * Deletes upstream and forgets the row. A webhook of ours already gone upstream is still forgotten
 * (the goal is reached); an id unknown to both throws WebhookNotFoundError.
 */
export async function deleteWebhook(api: WebhooksApi, pool: Queryable, id: string): Promise<DeleteResult> {
  const row = await readEndpoint(pool, id);
  let deletedUpstream = true;
  try {
    await api.delete(id);
  } catch (error) {
    if (!(error instanceof WebhookNotFoundError) || row === undefined) throw error;
    deletedUpstream = false;
  }
  const removedRow = row !== undefined && (await removeEndpoint(pool, id));
  return { id, deletedUpstream, removedRow };
}

// ---------------------------------------------------------------------------------------------
// adopt
// ---------------------------------------------------------------------------------------------

export interface AdoptResult {
  webhook: Webhook;
  /** `unchanged` when it was already adopted with the same state and secret (nothing rewritten). */
  outcome: StoreOutcome;
}

/**
 * The id is one of `webhooks register`'s own rows. Adopting it would take it away from register, which
 * would then create a second webhook for the same role, so it is refused and nothing changes
 * (the CLI exits 2: the argument is wrong, not the service or the database).
 */
export class AlreadyRegisteredError extends Error {
  override name = 'AlreadyRegisteredError';
  constructor(readonly id: string) {
    super(
      `webhook ${id} is already managed by \`webhooks register\` (it is one of its own rows in webhook_endpoints, ` +
        'its secret already stored); `webhooks adopt` is for webhooks created elsewhere. Nothing changed',
    );
  }
}

/**
 * Takes a webhook created elsewhere (the service's dashboard) under this install's management: its
 * row, secret included, goes into webhook_endpoints marked adopted, from which the receiver reloads
 * the secrets it verifies deliveries with, and which `registerWebhooks` leaves alone. This is the way
 * for secrets the service generates (10 characters, docs/upstream.md, "Webhook object"), which
 * WEBHOOK_SECRETS refuses as too short. Sends no write to the service. Throws WebhookNotFoundError for
 * an unknown id, AlreadyRegisteredError for one of register's rows (before any request); stores
 * nothing when the answer carries no secret.
 */
export async function adoptWebhook(api: WebhooksApi, pool: Queryable, id: string): Promise<AdoptResult> {
  const existing = await readEndpoint(pool, id);
  if (existing !== undefined && !existing.adopted) throw new AlreadyRegisteredError(id);
  const webhook = await api.get(id);
  if (webhook.secret === undefined || webhook.secret === '') {
    throw new Error(`the service returned no secret for webhook ${id}, so its deliveries could not be verified; nothing was stored`);
  }
  const outcome = await storeEndpoint(pool, webhook, webhook.secret, { adopted: true });
  if (outcome === 'unchanged') {
    // A register that stored this id since the check above: the store left its row alone.
    const row = await readEndpoint(pool, id);
    if (row !== undefined && !row.adopted) throw new AlreadyRegisteredError(id);
  }
  return { webhook, outcome };
}

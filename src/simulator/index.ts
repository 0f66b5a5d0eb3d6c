/**
 * The mailing-service simulator: a faithful fake of the legacy group-subscriber API, the
 * webhook management API and webhook delivery, over an in-memory world tests can seed and mutate.
 *
 *   const sim = await startSimulator({ subscribers: 10_000, groups: 3, largeIds: true, timeScale: 0.001 });
 *   // legacy: `${sim.url}/api/v2/groups/:id/subscribers` with header `X-Service-ApiKey: sim-key`
 *   // management: `${sim.url}/api/webhooks` with `Authorization: Bearer sim-token`
 *   sim.world.unsubscribe(id); await sim.deliveries.settle(5_000); await sim.close();
 */
import type { FastifyInstance } from 'fastify';
import { Churn, PageChurn } from './churn.js';
import type { PageChurnSettings } from './churn.js';
import { Deliveries } from './deliveries.js';
import { Faults } from './faults.js';
import type { FaultSettings } from './faults.js';
import { isBoundary } from './filters.js';
import type { Boundary } from './filters.js';
import { RateLimiter } from './rate-limit.js';
import type { RateLimitMode } from './rate-limit.js';
import { RequestLog } from './requests.js';
import type { RequestFilter, RequestRecord } from './requests.js';
import { buildServer } from './server.js';
import type { RateLimitScope, ServerConfig } from './server.js';
import { WebhookRegistry } from './webhooks.js';
import type { WebhookInput } from './webhooks.js';
import { World, defaultClock } from './world.js';
import type { WorldOptions } from './world.js';

export interface SimulatorOptions extends WorldOptions {
  /** Listening port (default 0: a free port). */
  port?: number;
  /** Listening address (default 127.0.0.1). */
  host?: string;
  /** Legacy API key (default `sim-key`). */
  apiKey?: string;
  /** Header carrying it (default `X-Service-ApiKey`). */
  apiKeyHeader?: string;
  /** Bearer token of the webhook management API (default `sim-token`). */
  webhooksToken?: string;
  /** How `filters[...][$gt]=D` meets stored times (default midnight). */
  boundary?: Boundary;
  /** Silently cap legacy pages at this many rows whatever `limit` asks (default none). */
  pageCap?: number | null;
  /** Order legacy lists by updated_at so updated rows move between pages (default false: hash order). */
  shiftingOrder?: boolean;
  /** Legacy requests per window per endpoint (default 60), or false for no limit. */
  rateLimit?: number | false;
  /** fixed (default) or sliding window. */
  rateLimitMode?: RateLimitMode;
  /** `endpoint` (default: one budget per endpoint), `account` (alias `global`: one for all legacy requests) or `mixed` (lists per endpoint, counts shared); see RateLimitScope. */
  rateLimitScope?: RateLimitScope;
  /** Rate-limit window in real ms (default 60 000 × timeScale). */
  rateLimitWindowMs?: number;
  /** Multiplies every service-side delay: batch interval, retry delays, rate-limit window (default 1). */
  timeScale?: number;
  /** Batch flush interval in real ms (default 60 000 × timeScale). */
  batchIntervalMs?: number;
  /** Most items in one batched body (default 100). */
  batchMaxEvents?: number;
  /** Per-attempt delivery timeout in real ms (default 3 000, not scaled). */
  deliveryTimeoutMs?: number;
  /** Retry delays in real ms (default 10 000, 100 000, 1 000 000 × timeScale). */
  retryDelaysMs?: readonly number[];
  /** Delivery requests in flight at once (default 8). */
  deliveryConcurrency?: number;
  /** A webhook whose deliveries keep failing this long is disabled, as the service does (default 3 days × timeScale; null never). */
  webhookDisableAfterMs?: number | null;
  /** Delivery attempts kept in `deliveries.attempts` (default 50 000). */
  deliveryLogLimit?: number;
  /** Random mutations per second of wall time (default 0). */
  churn?: number;
  /** Mutations between the pages of a pass (members leaving, joining, changing type), default none. */
  pageChurn?: PageChurnSettings;
  /** Current-API requests per window, one budget for the account (default 120; false: no limit; off too when `rateLimit` is false). */
  currentRateLimit?: number | false;
  /** Silently cap current-API member pages at this many rows whatever `limit` asks (default 100). */
  currentPageCap?: number | null;
  /** Every legacy group endpoint answers 404 `{"error":{"message":"Endpoint not found"}}` (an account moved to the current platform). */
  movedAccount?: boolean;
  /** Faults active from the start (default none). */
  faults?: FaultSettings;
  /** Webhooks registered before the server starts. */
  webhooks?: readonly WebhookInput[];
  /** Fastify request logging (default false). */
  logger?: boolean;
}

export interface Simulator {
  /** Base URL, e.g. http://127.0.0.1:40123 (legacy under /api/v2, management under /api/webhooks). */
  readonly url: string;
  readonly port: number;
  readonly apiKey: string;
  readonly apiKeyHeader: string;
  readonly webhooksToken: string;
  readonly accountId: number;
  readonly world: World;
  readonly webhooks: WebhookRegistry;
  readonly deliveries: Deliveries;
  /** Every request received, in arrival order (live array). */
  readonly requests: readonly RequestRecord[];
  /** Most requests (legacy ones unless a filter is given) in any window of windowMs. */
  maxRequestsInAnyWindow(windowMs: number, filter?: RequestFilter): number;
  clearRequests(): void;
  readonly faults: Faults;
  readonly churn: Churn;
  /** Mutations applied between the pages of a pass; `pageChurn.set({...})` while running. */
  readonly pageChurn: PageChurn;
  /** Silently caps legacy pages from now on (null: no cap), as a service could without notice. */
  setPageCap(cap: number | null): void;
  /** Silently caps current-API member pages from now on (null: no cap). */
  setCurrentPageCap(cap: number | null): void;
  /** Turns the moved-account mode of the legacy API on or off. */
  setMovedAccount(moved: boolean): void;
  /**
   * The legacy API accepts `key` from now on (null: `apiKey` again); any other key, `apiKey` too, is
   * refused with code 302 as a revoked key is. `apiKey` stays the key it started with.
   */
  setApiKey(key: string | null): void;
  /** The current API's rate limit, or null when disabled. */
  readonly currentRateLimit: { limit: number; windowMs: number } | null;
  /** The effective rate limit, or null when disabled. */
  readonly rateLimit: { limit: number; windowMs: number; mode: RateLimitMode; scope: RateLimitScope } | null;
  /** Stops churn, timers and the server; waits for deliveries in flight. */
  close(): Promise<void>;
}

const MINUTE_MS = 60_000;
const DAY_MS = 86_400_000;
/** The current platform's documented limit: 120 requests a minute per account. */
const CURRENT_RATE_LIMIT = 120;
/** Rows the current API serves at most per member page, whatever `limit` asks (its docs disagree on the maximum). */
const CURRENT_PAGE_CAP = 100;

function checkCap(cap: number): void {
  if (!(Number.isInteger(cap) && cap >= 1)) throw new RangeError(`page cap must be a whole number >= 1 or null, got ${cap}`);
}
const RETRY_DELAYS_S = [10, 100, 1000];

export async function startSimulator(options: SimulatorOptions = {}): Promise<Simulator> {
  const parts = assemble(options);
  const app = buildServer(parts.serverConfig);
  const host = options.host ?? '127.0.0.1';
  await app.listen({ port: options.port ?? 0, host });
  const address = app.server.address();
  const port = typeof address === 'object' && address !== null ? address.port : (options.port ?? 0);
  parts.deliveries.start();
  const churn = new Churn(parts.world, parts.seed);
  if (options.churn) churn.setRate(options.churn);
  return simulatorHandle(parts, { app, url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`, port, churn });
}

/** Everything the server is built from, made (and the options checked) before anything listens. */
interface Parts {
  seed: number;
  world: World;
  registry: WebhookRegistry;
  deliveries: Deliveries;
  /** Detaches the deliveries from the world's events. */
  stopListening: () => void;
  requests: RequestLog;
  faults: Faults;
  pageChurn: PageChurn;
  /** Mutable: the handle's setters change caps and modes while the server runs, which reads them per request. */
  serverConfig: ServerConfig;
}

/** The running server's side of the handle. */
interface Running {
  app: FastifyInstance;
  url: string;
  port: number;
  churn: Churn;
}

/** Checks the options and builds the parts, in the order that decides which bad option is reported first. */
function assemble(options: SimulatorOptions): Parts {
  const timeScale = positive(options.timeScale ?? 1, 'timeScale');
  const boundary = options.boundary ?? 'midnight';
  if (!isBoundary(boundary)) throw new RangeError(`boundary must be midnight or whole-day, got ${String(boundary)}`);
  const clock = options.clock ?? defaultClock;
  const seed = options.seed ?? 1;
  const world = new World({ ...options, clock, seed });
  const registry = new WebhookRegistry({ clock });
  for (const input of options.webhooks ?? []) registry.register(input);
  const deliveries = createDeliveries(registry, world.accountId, options, timeScale);
  const stopListening = world.onEvent((event) => deliveries.handle(event));
  const limits = rateLimits(options, timeScale);
  const requests = new RequestLog();
  const faults = new Faults(seed, options.faults);
  const pageChurn = new PageChurn(world, seed);
  if (options.pageChurn) pageChurn.set(options.pageChurn);
  const serverConfig: ServerConfig = {
    world,
    registry,
    requests,
    faults,
    ...limits,
    apiKey: options.apiKey ?? 'sim-key',
    apiKeyHeader: options.apiKeyHeader ?? 'X-Service-ApiKey',
    webhooksToken: options.webhooksToken ?? 'sim-token',
    boundary,
    pageCap: options.pageCap ?? null,
    shiftingOrder: options.shiftingOrder ?? false,
    logger: options.logger ?? false,
    onListPage: (served) => pageChurn.onPage(served),
    movedAccount: options.movedAccount ?? false,
    onCurrentPage: (served) => pageChurn.onPage(served),
  };
  return { seed, world, registry, deliveries, stopListening, requests, faults, pageChurn, serverConfig };
}

function createDeliveries(registry: WebhookRegistry, accountId: number, options: SimulatorOptions, timeScale: number): Deliveries {
  return new Deliveries(registry, {
    accountId,
    timeoutMs: positive(options.deliveryTimeoutMs ?? 3000, 'deliveryTimeoutMs'),
    retryDelaysMs: options.retryDelaysMs ?? RETRY_DELAYS_S.map((s) => s * 1000 * timeScale),
    batchIntervalMs: positive(options.batchIntervalMs ?? MINUTE_MS * timeScale, 'batchIntervalMs'),
    batchMaxEvents: positive(options.batchMaxEvents ?? 100, 'batchMaxEvents'),
    concurrency: positive(options.deliveryConcurrency ?? 8, 'deliveryConcurrency'),
    logLimit: options.deliveryLogLimit ?? 50_000,
    disableAfterMs:
      options.webhookDisableAfterMs === null
        ? null
        : positive(options.webhookDisableAfterMs ?? 3 * DAY_MS * timeScale, 'webhookDisableAfterMs'),
  });
}

type RateLimits = Pick<ServerConfig, 'limiter' | 'rateLimitScope' | 'currentLimiter' | 'currentPageCap'>;

/** The legacy and current APIs' limiters and the current API's page cap. */
function rateLimits(options: SimulatorOptions, timeScale: number): RateLimits {
  const windowMs = options.rateLimitWindowMs ?? MINUTE_MS * timeScale;
  const mode = options.rateLimitMode ?? 'fixed';
  const limiter = options.rateLimit === false ? null : new RateLimiter(options.rateLimit ?? 60, windowMs, mode);
  // rateLimit: false turns off every limit, the current API's too.
  const currentRate = options.rateLimit === false ? false : (options.currentRateLimit ?? CURRENT_RATE_LIMIT);
  const currentLimiter = currentRate === false ? null : new RateLimiter(currentRate, windowMs, mode);
  const currentPageCap = options.currentPageCap === undefined ? CURRENT_PAGE_CAP : options.currentPageCap;
  if (currentPageCap !== null) checkCap(currentPageCap);
  return { limiter, rateLimitScope: options.rateLimitScope ?? 'endpoint', currentLimiter, currentPageCap };
}

/** The public `Simulator` over the parts and the running server. */
function simulatorHandle(parts: Parts, running: Running): Simulator {
  const { world, requests, serverConfig: config } = parts;
  const { limiter, currentLimiter, rateLimitScope } = config;
  const startedWith = config.apiKey;
  let closing: Promise<void> | undefined;
  return {
    url: running.url,
    port: running.port,
    apiKey: config.apiKey,
    apiKeyHeader: config.apiKeyHeader,
    webhooksToken: config.webhooksToken,
    accountId: world.accountId,
    world,
    webhooks: parts.registry,
    deliveries: parts.deliveries,
    requests: requests.records,
    maxRequestsInAnyWindow: (windowMs, filter) => requests.maxInAnyWindow(windowMs, filter),
    clearRequests: () => requests.clear(),
    faults: parts.faults,
    churn: running.churn,
    pageChurn: parts.pageChurn,
    setPageCap(cap: number | null): void {
      if (cap !== null) checkCap(cap);
      config.pageCap = cap;
    },
    setCurrentPageCap(cap: number | null): void {
      if (cap !== null) checkCap(cap);
      config.currentPageCap = cap;
    },
    setMovedAccount(moved: boolean): void {
      config.movedAccount = moved;
    },
    setApiKey(key: string | null): void {
      config.apiKey = key ?? startedWith;
    },
    currentRateLimit: currentLimiter ? { limit: currentLimiter.limit, windowMs: currentLimiter.windowMs } : null,
    rateLimit: limiter ? { limit: limiter.limit, windowMs: limiter.windowMs, mode: limiter.mode, scope: rateLimitScope } : null,
    close(): Promise<void> {
      // Idempotent: a second close waits for the first.
      closing ??= (async () => {
        running.churn.stop();
        parts.stopListening();
        await parts.deliveries.close();
        await running.app.close();
      })();
      return closing;
    },
  };
}

function positive(value: number, name: string): number {
  if (!(typeof value === 'number' && value > 0 && Number.isFinite(value))) {
    throw new RangeError(`${name} must be a positive number, got ${String(value)}`);
  }
  return value;
}

export { World } from './world.js';
export type { WorldOptions, SubscriberView, CreateSubscriberInput, SendCampaignInput, Membership } from './world.js';
export { sign } from './deliveries.js';
export type { Deliveries, DeliveryAttempt, PendingCounts } from './deliveries.js';
export type { Faults, FaultSettings } from './faults.js';
export type { Churn, MutationName, PageChurn, PageChurnSettings } from './churn.js';
export type { RequestRecord, RequestFilter } from './requests.js';
export type { WebhookRegistry, Webhook, WebhookInput, PageEnvelope } from './webhooks.js';
export type { Boundary } from './filters.js';
export { ALL_EVENT_KINDS, BATCH_ONLY_KINDS, EVENT_KINDS, FIELD_KEYS, SUBSCRIBER_TYPES } from './kinds.js';
export type {
  EventKind,
  SubscriberType,
  WebhookSubscriber,
  LegacySubscriber,
  LegacyField,
  SubscriberFields,
  GroupInfo,
  AutomationInfo,
  CampaignInfo,
  WorldEvent,
} from './kinds.js';
export { isoMicros, parseIsoMicros, formatLocalDateTime, parseZone } from './time.js';
export { CURRENT_DEFAULT_LIMIT, decodeCursor, encodeCursor } from './current.js';
export { CURRENT_REQUESTS, LEGACY_REQUESTS } from './requests.js';

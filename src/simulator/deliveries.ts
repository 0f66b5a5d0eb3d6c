/**
 * Webhook delivery (docs/upstream.md, "Delivery and retries", "Signature", "Batched payloads"): one signed POST per event for plain webhooks, a batched body
 * per interval for batchable ones; an attempt fails on non-2xx or timeout and is retried with the
 * identical body after the retry delays, then given up. Every attempt is recorded for tests.
 */
import { createHmac } from 'node:crypto';
import type { EventKind, WorldEvent } from './kinds.js';
import { batchBody, directPayload, nestedItem } from './payloads.js';
import type { Payload } from './payloads.js';
import type { Webhook, WebhookRegistry } from './webhooks.js';

export interface DeliveryAttempt {
  /** Sequence number of this attempt across the simulator. */
  seq: number;
  /** Shared by all attempts carrying the same body. */
  deliveryId: number;
  webhookId: string;
  url: string;
  /** 1 for the first try, up to 1 + retries. */
  attempt: number;
  /** Epoch ms (fractional) when the request started and when its outcome was known. */
  startedAt: number;
  finishedAt: number;
  latencyMs: number;
  /** HTTP status, or null when no answer came (timeout, refused, reset). */
  status: number | null;
  ok: boolean;
  /** `timeout` or the network error text when status is null. */
  error: string | null;
  body: string;
  signature: string;
  kinds: EventKind[];
  batched: boolean;
  /** Delay before the next attempt when this one failed and one is left; null otherwise. */
  nextRetryInMs: number | null;
  /** This attempt failed and it was the last one. */
  gaveUp: boolean;
}

export interface DeliveryOptions {
  accountId: number;
  /** Per-attempt timeout (spec: 3 s). */
  timeoutMs: number;
  /** Delays before retries 1..n (spec: 10, 100, 1000 s, already scaled). */
  retryDelaysMs: readonly number[];
  /** How often batchable webhooks are flushed (spec: about a minute, already scaled). */
  batchIntervalMs: number;
  /** Largest number of items in one batched body; more go in several bodies. */
  batchMaxEvents: number;
  /** Requests in flight at once, across webhooks. */
  concurrency: number;
  /** Attempts kept in `attempts` (oldest dropped first). */
  logLimit: number;
  /**
   * A webhook whose deliveries failed without a success in between for this long is disabled by the
   * service (docs/upstream.md, "Delivery and retries": 3 days, already scaled); null never.
   */
  disableAfterMs?: number | null;
}

export interface PendingCounts {
  queued: number;
  inFlight: number;
  retrying: number;
  batchedEvents: number;
}

interface Job {
  deliveryId: number;
  webhookId: string;
  url: string;
  body: string;
  signature: string;
  kinds: EventKind[];
  batched: boolean;
  attempt: number;
}

interface PendingBatch {
  items: Payload[];
  kinds: EventKind[];
}

type AttemptListener = (attempt: DeliveryAttempt) => void;

export function sign(body: string, secret: string): string {
  return createHmac('sha256', secret).update(body, 'utf8').digest('hex');
}

export class Deliveries {
  private readonly log: DeliveryAttempt[] = [];
  private readonly queue: Job[] = [];
  private readonly inFlight = new Set<Promise<void>>();
  private readonly retryTimers = new Map<NodeJS.Timeout, Job>();
  private readonly batches = new Map<string, PendingBatch>();
  private readonly idleWaiters = new Set<() => void>();
  private readonly attemptListeners = new Set<AttemptListener>();
  private readonly disabledListeners = new Set<(webhookId: string) => void>();
  private batchTimer: NodeJS.Timeout | undefined;
  /** Per webhook, when its current run of failed attempts began. */
  private readonly failingSince = new Map<string, number>();
  private nextDeliveryId = 1;
  private nextSeq = 1;
  private closed = false;

  constructor(
    private readonly registry: WebhookRegistry,
    private readonly options: DeliveryOptions,
  ) {
    registry.onDelete((id) => this.forgetWebhook(id));
  }

  /** Every attempt so far (the most recent `logLimit`), oldest first. */
  get attempts(): readonly DeliveryAttempt[] {
    return this.log;
  }

  /** Attempts that carried the given kind (directly or inside a batch). */
  forKind(kind: EventKind): DeliveryAttempt[] {
    return this.log.filter((a) => a.kinds.includes(kind));
  }

  clear(): void {
    this.log.length = 0;
  }

  start(): void {
    this.batchTimer ??= setInterval(() => this.flush(), this.options.batchIntervalMs);
    this.batchTimer.unref();
  }

  /** Fans an event out to every enabled webhook subscribed to its kind. */
  handle(event: WorldEvent): void {
    if (this.closed) return;
    for (const hook of this.registry.subscribedTo(event.kind)) {
      if (hook.batchable) this.addToBatch(hook, event);
      else this.enqueueBody(hook, JSON.stringify(directPayload(event, this.options.accountId)), [event.kind], false);
    }
  }

  /** Sends every pending batch now instead of at the next interval. */
  flush(): void {
    for (const [webhookId, batch] of this.batches) {
      this.batches.delete(webhookId);
      const hook = this.registry.get(webhookId);
      if (!hook) continue;
      for (let i = 0; i < batch.items.length; i += this.options.batchMaxEvents) {
        const items = batch.items.slice(i, i + this.options.batchMaxEvents);
        const kinds = [...new Set(batch.kinds.slice(i, i + this.options.batchMaxEvents))];
        this.enqueueBody(hook, JSON.stringify(batchBody(items)), kinds, true);
      }
    }
    this.checkIdle();
  }

  pending(): PendingCounts {
    let batchedEvents = 0;
    for (const batch of this.batches.values()) batchedEvents += batch.items.length;
    return { queued: this.queue.length, inFlight: this.inFlight.size, retrying: this.retryTimers.size, batchedEvents };
  }

  isIdle(): boolean {
    const p = this.pending();
    return p.queued === 0 && p.inFlight === 0 && p.retrying === 0 && p.batchedEvents === 0;
  }

  /**
   * Resolves once nothing is queued, in flight, waiting for a retry or waiting in a batch. Pending
   * batches go out at the next interval; call flush() (or settle()) not to wait for it.
   */
  idle(timeoutMs?: number): Promise<void> {
    if (this.isIdle()) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const done = (): void => {
        if (timer) clearTimeout(timer);
        this.idleWaiters.delete(done);
        resolve();
      };
      this.idleWaiters.add(done);
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => {
          this.idleWaiters.delete(done);
          reject(new Error(`deliveries not idle after ${timeoutMs} ms: ${JSON.stringify(this.pending())}`));
        }, timeoutMs);
      }
    });
  }

  /** flush() then idle(). */
  settle(timeoutMs?: number): Promise<void> {
    this.flush();
    return this.idle(timeoutMs);
  }

  onAttempt(listener: AttemptListener): () => void {
    this.attemptListeners.add(listener);
    return () => this.attemptListeners.delete(listener);
  }

  /** Resolves with the first attempt (already recorded or future) matching the predicate. */
  waitFor(predicate: (attempt: DeliveryAttempt) => boolean, timeoutMs = 10_000): Promise<DeliveryAttempt> {
    const seen = this.log.find(predicate);
    if (seen) return Promise.resolve(seen);
    return new Promise<DeliveryAttempt>((resolve, reject) => {
      const timer = setTimeout(() => {
        off();
        reject(new Error(`no matching delivery attempt within ${timeoutMs} ms`));
      }, timeoutMs);
      const off = this.onAttempt((attempt) => {
        if (!predicate(attempt)) return;
        clearTimeout(timer);
        off();
        resolve(attempt);
      });
    });
  }

  /** Stops the batch timer and pending retries, drops queued work, waits for requests in flight. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.batchTimer) clearInterval(this.batchTimer);
    for (const timer of this.retryTimers.keys()) clearTimeout(timer);
    this.retryTimers.clear();
    this.queue.length = 0;
    this.batches.clear();
    await Promise.allSettled([...this.inFlight]);
    this.checkIdle();
  }

  private addToBatch(hook: Webhook, event: WorldEvent): void {
    const batch = this.batches.get(hook.id) ?? { items: [], kinds: [] };
    batch.items.push(nestedItem(event));
    batch.kinds.push(event.kind);
    this.batches.set(hook.id, batch);
  }

  private enqueueBody(hook: Webhook, body: string, kinds: EventKind[], batched: boolean): void {
    this.queue.push({
      deliveryId: this.nextDeliveryId++,
      webhookId: hook.id,
      url: hook.url,
      body,
      // Signed once: retries resend the identical bytes with the identical signature.
      signature: sign(body, hook.secret),
      kinds,
      batched,
      attempt: 1,
    });
    this.pump();
  }

  private pump(): void {
    while (!this.closed && this.inFlight.size < this.options.concurrency) {
      const job = this.queue.shift();
      if (!job) break;
      const running: Promise<void> = this.attempt(job).finally(() => {
        this.inFlight.delete(running);
        this.pump();
        this.checkIdle();
      });
      this.inFlight.add(running);
    }
  }

  private async attempt(job: Job): Promise<void> {
    const startedAt = preciseNow();
    const outcome = await post(job, this.options.timeoutMs);
    const finishedAt = preciseNow();
    const retryDelay = outcome.ok ? undefined : this.options.retryDelaysMs[job.attempt - 1];
    const record: DeliveryAttempt = {
      seq: this.nextSeq++,
      deliveryId: job.deliveryId,
      webhookId: job.webhookId,
      url: job.url,
      attempt: job.attempt,
      startedAt,
      finishedAt,
      latencyMs: finishedAt - startedAt,
      status: outcome.status,
      ok: outcome.ok,
      error: outcome.error,
      body: job.body,
      signature: job.signature,
      kinds: job.kinds,
      batched: job.batched,
      nextRetryInMs: retryDelay ?? null,
      gaveUp: !outcome.ok && retryDelay === undefined,
    };
    this.record(record);
    this.trackFailures(job.webhookId, outcome.ok, finishedAt);
    if (retryDelay !== undefined && !this.closed) this.scheduleRetry({ ...job, attempt: job.attempt + 1 }, retryDelay);
  }

  /** Disables a webhook that kept failing for `disableAfterMs`, as the service does; a success resets the run. */
  private trackFailures(webhookId: string, ok: boolean, at: number): void {
    if (ok) {
      this.failingSince.delete(webhookId);
      return;
    }
    const since = this.failingSince.get(webhookId) ?? at;
    this.failingSince.set(webhookId, since);
    const limit = this.options.disableAfterMs;
    if (limit === null || limit === undefined || at - since < limit) return;
    // Retries already queued still fail after the webhook was disabled: it is disabled once.
    if (this.registry.get(webhookId)?.enabled === false) return;
    this.failingSince.delete(webhookId);
    this.registry.update(webhookId, { enabled: false });
    this.disabledListeners.forEach((listener) => listener(webhookId));
  }

  /** Called with the id of each webhook the service disables after its deliveries kept failing. */
  onDisabled(listener: (webhookId: string) => void): () => void {
    this.disabledListeners.add(listener);
    return () => this.disabledListeners.delete(listener);
  }

  private scheduleRetry(job: Job, delayMs: number): void {
    const timer = setTimeout(() => {
      this.retryTimers.delete(timer);
      this.queue.push(job);
      this.pump();
      this.checkIdle();
    }, delayMs);
    timer.unref();
    this.retryTimers.set(timer, job);
  }

  private record(attempt: DeliveryAttempt): void {
    this.log.push(attempt);
    if (this.log.length > this.options.logLimit + Math.ceil(this.options.logLimit / 10)) {
      this.log.splice(0, this.log.length - this.options.logLimit);
    }
    for (const listener of this.attemptListeners) listener(attempt);
  }

  /** A deleted webhook receives nothing more: its batch, queued jobs and retries are dropped. */
  private forgetWebhook(id: string): void {
    this.batches.delete(id);
    for (let i = this.queue.length - 1; i >= 0; i--) if (this.queue[i]?.webhookId === id) this.queue.splice(i, 1);
    for (const [timer, job] of this.retryTimers) {
      if (job.webhookId !== id) continue;
      clearTimeout(timer);
      this.retryTimers.delete(timer);
    }
    this.checkIdle();
  }

  private checkIdle(): void {
    if (this.idleWaiters.size === 0 || !this.isIdle()) return;
    for (const resolve of [...this.idleWaiters]) resolve();
  }
}

interface Outcome {
  ok: boolean;
  status: number | null;
  error: string | null;
}

async function post(job: Job, timeoutMs: number): Promise<Outcome> {
  try {
    const response = await fetch(job.url, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Signature: job.signature },
      body: job.body,
      signal: AbortSignal.timeout(timeoutMs),
    });
    // Drain so the keep-alive connection can be reused; the status already decided the outcome.
    await response.arrayBuffer().catch(() => undefined);
    return { ok: response.status >= 200 && response.status < 300, status: response.status, error: null };
  } catch (error) {
    return { ok: false, status: null, error: describeFailure(error) };
  }
}

function describeFailure(error: unknown): string {
  if (error instanceof Error && (error.name === 'TimeoutError' || error.name === 'AbortError')) return 'timeout';
  if (error instanceof Error) {
    const cause = error.cause instanceof Error ? `: ${error.cause.message}` : '';
    return `${error.message}${cause}`;
  }
  return String(error);
}

function preciseNow(): number {
  return performance.timeOrigin + performance.now();
}

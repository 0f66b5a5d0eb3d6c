/**
 * Webhook resources (docs/upstream.md, "Webhook object" and "Webhook management"): registry, Laravel-style validation (422 shape in
 * docs/upstream.md, "Webhook management") and the Laravel page envelope (docs/upstream.md, "Page envelope").
 */
import { randomBytes } from 'node:crypto';
import { BATCH_ONLY_KINDS, isEventKind } from './kinds.js';
import type { EventKind } from './kinds.js';
import { formatUtcDateTime } from './time.js';

export interface Webhook {
  id: string;
  name: string;
  url: string;
  events: EventKind[];
  enabled: boolean;
  secret: string;
  created_at: string;
  updated_at: string;
  batchable: boolean;
}

/** Input of the programmatic `register`, same fields as the create body. */
export interface WebhookInput {
  name?: string;
  url: string;
  events: readonly EventKind[];
  enabled?: boolean;
  batchable?: boolean;
}

export type ValidationErrors = Record<string, string[]>;
export type WebhookResult = { ok: true; webhook: Webhook } | { ok: false; errors: ValidationErrors };

export const VALIDATION_MESSAGE = 'The given data was invalid.';
export const PER_PAGE = 50;

const FIRST_WEBHOOK_ID = 68_074_372_004_316_503n;
const SECRET_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

export interface WebhookRegistryOptions {
  clock: () => number;
  /** Secret generator (default: 10 random alphanumerics, like the real example). */
  makeSecret?: () => string;
}

export class WebhookRegistry {
  private readonly hooks = new Map<string, Webhook>();
  private readonly deleteListeners = new Set<(id: string) => void>();
  private created = 0;
  private readonly clock: () => number;
  private readonly makeSecret: () => string;

  constructor(options: WebhookRegistryOptions) {
    this.clock = options.clock;
    this.makeSecret = options.makeSecret ?? randomSecret;
  }

  /** All webhooks in creation (id) order, as copies. */
  list(): Webhook[] {
    return [...this.hooks.values()].map(copy);
  }

  get(id: string): Webhook | undefined {
    const hook = this.hooks.get(id);
    return hook ? copy(hook) : undefined;
  }

  /** Enabled webhooks subscribed to the kind (the live records: delivery reads them, never edits). */
  subscribedTo(kind: EventKind): readonly Webhook[] {
    return [...this.hooks.values()].filter((hook) => hook.enabled && hook.events.includes(kind));
  }

  create(body: unknown): WebhookResult {
    const fields = asRecord(body);
    const errors = validate(fields, true);
    const events = fields['events'];
    const batchable = toBoolean(fields['batchable']) ?? false;
    if (Object.keys(errors).length === 0 && Array.isArray(events)) {
      addBatchRuleErrors(errors, events as EventKind[], batchable);
    }
    if (Object.keys(errors).length > 0) return { ok: false, errors };
    const stamp = formatUtcDateTime(this.clock());
    const hook: Webhook = {
      id: (FIRST_WEBHOOK_ID + BigInt(this.created++) * 7919n).toString(),
      name: typeof fields['name'] === 'string' ? fields['name'] : '',
      url: String(fields['url']),
      events: dedupe(events as EventKind[]),
      enabled: toBoolean(fields['enabled']) ?? true,
      secret: this.makeSecret(),
      created_at: stamp,
      updated_at: stamp,
      batchable,
    };
    this.hooks.set(hook.id, hook);
    return { ok: true, webhook: copy(hook) };
  }

  /** undefined when the id does not exist (→ 404). */
  update(id: string, body: unknown): WebhookResult | undefined {
    const hook = this.hooks.get(id);
    if (!hook) return undefined;
    const fields = asRecord(body);
    const errors = validate(fields, false);
    const next: Webhook = {
      ...hook,
      name: 'name' in fields ? (typeof fields['name'] === 'string' ? fields['name'] : '') : hook.name,
      url: typeof fields['url'] === 'string' ? fields['url'] : hook.url,
      events: Array.isArray(fields['events']) ? dedupe(fields['events'] as EventKind[]) : hook.events,
      enabled: toBoolean(fields['enabled']) ?? hook.enabled,
      batchable: toBoolean(fields['batchable']) ?? hook.batchable,
    };
    // The rule is checked on the resulting webhook: switching events to campaign.open on a
    // non-batchable webhook must fail even when the body does not mention batchable.
    if (Object.keys(errors).length === 0) addBatchRuleErrors(errors, next.events, next.batchable);
    if (Object.keys(errors).length > 0) return { ok: false, errors };
    if (JSON.stringify(next) !== JSON.stringify(hook)) next.updated_at = formatUtcDateTime(this.clock());
    this.hooks.set(id, next);
    return { ok: true, webhook: copy(next) };
  }

  delete(id: string): boolean {
    const existed = this.hooks.delete(id);
    if (existed) for (const listener of this.deleteListeners) listener(id);
    return existed;
  }

  onDelete(listener: (id: string) => void): () => void {
    this.deleteListeners.add(listener);
    return () => this.deleteListeners.delete(listener);
  }

  /** Programmatic create for tests and the CLI; throws with the 422 errors when invalid. */
  register(input: WebhookInput): Webhook {
    const result = this.create(input);
    if (!result.ok) throw new Error(`invalid webhook: ${JSON.stringify(result.errors)}`);
    return result.webhook;
  }
}

function validate(fields: Record<string, unknown>, creating: boolean): ValidationErrors {
  const errors: ValidationErrors = {};
  const add = (key: string, message: string): void => {
    (errors[key] ??= []).push(message);
  };
  const has = (key: string): boolean => key in fields;

  if (has('name') && fields['name'] !== null && typeof fields['name'] !== 'string') add('name', 'The name must be a string.');
  if (creating || has('url')) {
    const url = fields['url'];
    if (url === undefined || url === null || url === '') add('url', 'The url field is required.');
    else if (!isHttpUrl(url)) add('url', 'The url must be a valid URL.');
  }
  if (creating || has('events')) {
    const events = fields['events'];
    if (events === undefined || events === null || (Array.isArray(events) && events.length === 0)) {
      add('events', 'The events field is required.');
    } else if (!Array.isArray(events)) {
      add('events', 'The events must be an array.');
    } else {
      events.forEach((kind: unknown, index) => {
        if (!isEventKind(kind)) add(`events.${index}`, `The selected events.${index} is invalid.`);
      });
    }
  }
  for (const key of ['enabled', 'batchable']) {
    if (has(key) && toBoolean(fields[key]) === undefined) add(key, `The ${key} field must be true or false.`);
  }
  return errors;
}

function addBatchRuleErrors(errors: ValidationErrors, events: readonly EventKind[], batchable: boolean): void {
  if (batchable) return;
  for (const kind of BATCH_ONLY_KINDS) {
    if (events.includes(kind)) (errors['batchable'] ??= []).push(`The batchable field must be true when events contains ${kind}.`);
  }
}

/** Laravel's `boolean` rule: true, false, 1, 0, "1", "0". */
function toBoolean(value: unknown): boolean | undefined {
  if (value === true || value === 1 || value === '1') return true;
  if (value === false || value === 0 || value === '0') return false;
  return undefined;
}

function isHttpUrl(value: unknown): boolean {
  if (typeof value !== 'string') return false;
  try {
    const url = new URL(value);
    return url.protocol === 'http:' || url.protocol === 'https:';
  } catch {
    return false;
  }
}

function asRecord(body: unknown): Record<string, unknown> {
  return typeof body === 'object' && body !== null && !Array.isArray(body) ? (body as Record<string, unknown>) : {};
}

function dedupe(kinds: readonly EventKind[]): EventKind[] {
  return [...new Set(kinds)];
}

function copy(hook: Webhook): Webhook {
  return { ...hook, events: [...hook.events] };
}

function randomSecret(): string {
  const bytes = randomBytes(10);
  return Array.from(bytes, (b) => SECRET_ALPHABET[b % SECRET_ALPHABET.length]).join('');
}

// ------------------------------------------------------------------ page envelope (docs/upstream.md, "Page envelope")

export interface PageLink {
  url: string | null;
  label: string;
  active: boolean;
}

export interface PageEnvelope<T> {
  data: T[];
  links: { first: string; last: string; prev: string | null; next: string | null };
  meta: {
    current_page: number;
    from: number | null;
    last_page: number;
    links: PageLink[];
    path: string;
    per_page: number;
    to: number | null;
    total: number;
  };
}

/** Laravel's LengthAwarePaginator JSON for `items`, page `page` (1-based), at `path`. */
export function pageEnvelope<T>(items: readonly T[], page: number, path: string): PageEnvelope<T> {
  const total = items.length;
  const lastPage = Math.max(1, Math.ceil(total / PER_PAGE));
  const start = (page - 1) * PER_PAGE;
  const data = items.slice(start, start + PER_PAGE);
  const url = (n: number): string => `${path}?page=${n}`;
  const prev = page > 1 ? url(page - 1) : null;
  const next = page < lastPage ? url(page + 1) : null;
  return {
    data,
    links: { first: url(1), last: url(lastPage), prev, next },
    meta: {
      current_page: page,
      from: data.length > 0 ? start + 1 : null,
      last_page: lastPage,
      links: [
        { url: prev, label: '&laquo; Previous', active: false },
        ...pageWindow(page, lastPage).map((n) =>
          n === null ? { url: null, label: '...', active: false } : { url: url(n), label: String(n), active: n === page },
        ),
        { url: next, label: 'Next &raquo;', active: false },
      ],
      path,
      per_page: PER_PAGE,
      to: data.length > 0 ? start + data.length : null,
      total,
    },
  };
}

/** Laravel's UrlWindow with onEachSide 3: page numbers, null for a "..." gap. */
export function pageWindow(current: number, lastPage: number): (number | null)[] {
  const onEachSide = 3;
  const range = (from: number, to: number): number[] => Array.from({ length: Math.max(0, to - from + 1) }, (_, i) => from + i);
  if (lastPage < onEachSide * 2 + 8) return range(1, lastPage);
  const window = onEachSide + 4;
  if (current <= window) return [...range(1, window + onEachSide), null, lastPage - 1, lastPage];
  if (current > lastPage - window) return [1, 2, null, ...range(lastPage - (window + (onEachSide - 1)), lastPage)];
  return [1, 2, null, ...range(current - onEachSide, current + onEachSide), null, lastPage - 1, lastPage];
}

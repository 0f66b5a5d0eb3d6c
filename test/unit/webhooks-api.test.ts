/**
 * The webhook management client without a network: 422 formatting, envelope and webhook validation,
 * `links.next` handling (loop guard, other hosts), and the 401/404 messages (no token in any).
 * HTTP is a fake `fetch`, so nothing leaves the process.
 */
import { describe, expect, it } from 'vitest';
import {
  createWebhooksApi,
  formatValidationError,
  nextPagePath,
  parseEnvelope,
  parseSingle,
  WebhookAuthError,
  WebhookNotFoundError,
  WebhookValidationError,
} from '../../src/upstream/webhooks-api.js';
import { UpstreamBodyError, UpstreamHttpError } from '../../src/upstream/errors.js';

const TOKEN = 'tok-unit-5f1c9a2e77';
const BASE = 'https://hooks.example.test';

function hook(id: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    id,
    name: `hook ${id}`,
    url: 'https://receiver.example/webhooks',
    events: ['subscriber.created'],
    enabled: true,
    secret: `secret-${id}`,
    created_at: '2022-10-04 21:59:40',
    updated_at: '2022-10-04 21:59:40',
    batchable: false,
    ...extra,
  };
}

function envelope(data: unknown[], next: string | null, page = 1): Record<string, unknown> {
  return {
    data,
    links: { first: `${BASE}/api/webhooks?page=1`, last: `${BASE}/api/webhooks?page=9`, prev: null, next },
    meta: { current_page: page, from: 1, last_page: 9, links: [], path: `${BASE}/api/webhooks`, per_page: 50, to: data.length, total: 99 },
  };
}

interface Call {
  method: string;
  url: string;
  authorization: string | null;
  body: string | undefined;
}

/** A fetch answering from `route(method, url)`: [status, body or undefined]. */
function fakeFetch(route: (method: string, url: URL) => [number, unknown]) {
  const calls: Call[] = [];
  const fetch = (async (input: string | URL | Request, init?: RequestInit) => {
    const url = new URL(String(input));
    const method = init?.method ?? 'GET';
    const headers = new Headers(init?.headers);
    calls.push({ method, url: url.toString(), authorization: headers.get('authorization'), body: init?.body as string | undefined });
    const [status, body] = route(method, url);
    return new Response(body === undefined ? null : JSON.stringify(body), {
      status,
      headers: { 'content-type': 'application/json' },
    });
  }) as typeof globalThis.fetch;
  return { fetch, calls };
}

function api(fetch: typeof globalThis.fetch, baseUrl = BASE) {
  return createWebhooksApi({ baseUrl, token: TOKEN, http: { fetch, retry: { retries: 0, minDelayMs: 1, maxDelayMs: 1, jitter: false } } });
}

async function rejection(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    return error as Error;
  }
  throw new Error('expected a rejection');
}

describe('formatValidationError (the 422 shape of docs/upstream.md, "Webhook management")', () => {
  it('lists every field with its messages on one line, without the generic top message', () => {
    const text = formatValidationError({
      message: 'The given data was invalid.',
      errors: {
        'events.0': ['The selected events.0 is invalid.'],
        url: ['The url field is required.', 'The url must be a valid URL.'],
      },
    });
    expect(text).toBe(
      'webhook API refused the request: events.0: The selected events.0 is invalid.; url: The url field is required. The url must be a valid URL.',
    );
    expect(text).not.toContain('\n');
  });

  it('the service example', () => {
    expect(
      formatValidationError({ message: 'The given data was invalid.', errors: { email: ['The email must be a valid email address.'] } }),
    ).toBe('webhook API refused the request: email: The email must be a valid email address.');
  });

  it('falls back to the message, then to a plain statement; collapses newlines', () => {
    expect(formatValidationError({ message: 'Nope.\n  Really.' })).toBe('webhook API refused the request: Nope. Really.');
    expect(formatValidationError({ message: 'x', errors: { url: [42] } })).toBe('webhook API refused the request: x');
    expect(formatValidationError(undefined)).toBe('webhook API refused the request (HTTP 422 without details)');
  });
});

describe('response validation (docs/upstream.md, "Webhook object" and "Page envelope")', () => {
  it('accepts the page envelope and normalizes ids and flags', () => {
    const page = parseEnvelope(
      envelope([hook('68074372004316503'), hook('2', { id: 2, enabled: 1, batchable: 0, name: null, secret: null })], null),
    );
    expect(page.data.map((w) => w.id)).toEqual(['68074372004316503', '2']);
    expect(page.data[1]).toMatchObject({ name: '', enabled: true, batchable: false, secret: undefined });
    expect(page.links.next).toBeNull();
  });

  it('rejects an envelope without links.next, naming the field', () => {
    const body = envelope([hook('1')], null);
    delete (body.links as Record<string, unknown>).next;
    expect(() => parseEnvelope(body)).toThrow(UpstreamBodyError);
    expect(() => parseEnvelope(body)).toThrow(/links\.next: expected the URL of the next page or null/);
  });

  it('rejects a bare array and a webhook of the wrong shape, naming the item', () => {
    expect(() => parseEnvelope([hook('1')])).toThrow(/unexpected page of webhooks/);
    expect(() => parseEnvelope(envelope([hook('1'), hook('2', { events: 'subscriber.created' })], null))).toThrow(/data\.1\.events/);
    expect(() => parseEnvelope(envelope([hook('1', { enabled: 'yes' })], null))).toThrow(/data\.0\.enabled: expected true or false/);
  });

  it('rejects a numeric id that has lost digits and an id that is not one', () => {
    expect(() => parseSingle({ data: hook('1', { id: 2 ** 60 }) })).toThrow(/data\.id/);
    expect(() => parseSingle({ data: hook('1', { id: '../1' }) })).toThrow(/data\.id/);
    expect(parseSingle({ data: hook('1', { id: '1261159647788771324' }) }).id).toBe('1261159647788771324');
  });
});

describe('nextPagePath', () => {
  it('keeps only path and query, whatever host the link names', () => {
    expect(nextPagePath(`${BASE}/api/webhooks?page=2`, BASE, '/api/webhooks')).toBe('/api/webhooks?page=2');
    expect(nextPagePath('http://internal:8000/api/webhooks?page=3', BASE, '/api/webhooks?page=2')).toBe('/api/webhooks?page=3');
    expect(nextPagePath('?page=4', BASE, '/api/webhooks?page=3')).toBe('/api/webhooks?page=4');
  });

  it('strips a base path prefix and refuses a link outside it', () => {
    expect(nextPagePath('https://h.test/mailer/api/webhooks?page=2', 'https://h.test/mailer', '/api/webhooks')).toBe(
      '/api/webhooks?page=2',
    );
    expect(() => nextPagePath('https://h.test/other/api/webhooks?page=2', 'https://h.test/mailer', '/api/webhooks')).toThrow(/outside/);
  });
});

describe('createWebhooksApi over a fake fetch', () => {
  it('list follows links.next over every page, sends the bearer token, and keeps each id once', async () => {
    const { fetch, calls } = fakeFetch((_m, url) => {
      const page = Number(url.searchParams.get('page') ?? '1');
      if (page === 1) return [200, envelope([hook('1'), hook('2')], `${BASE}/api/webhooks?page=2`)];
      if (page === 2) return [200, envelope([hook('2'), hook('3')], `${BASE}/api/webhooks?page=3`, 2)];
      return [200, envelope([hook('4')], null, 3)];
    });
    const hooks = await api(fetch).list();
    expect(hooks.map((h) => h.id)).toEqual(['1', '2', '3', '4']);
    expect(calls.map((c) => new URL(c.url).search)).toEqual(['', '?page=2', '?page=3']);
    expect(calls.every((c) => c.authorization === `Bearer ${TOKEN}`)).toBe(true);
  });

  it('list stops with a clear error when links.next points back to a page already read', async () => {
    const { fetch, calls } = fakeFetch((_m, url) => {
      const page = Number(url.searchParams.get('page') ?? '1');
      return [200, envelope([hook(String(page))], `${BASE}/api/webhooks?page=${page === 2 ? 1 : 2}`)];
    });
    const error = await rejection(api(fetch).list());
    expect(error).toBeInstanceOf(UpstreamBodyError);
    expect(error.message).toMatch(/points back to a page already read/);
    expect(calls.length).toBeLessThanOrEqual(3);
  });

  it('401 → one line naming the refusal, never the token', async () => {
    const { fetch } = fakeFetch(() => [401, { message: 'Unauthenticated.' }]);
    const error = await rejection(api(fetch).list());
    expect(error).toBeInstanceOf(WebhookAuthError);
    expect(error.message).toBe('webhook API rejected the token (401 Unauthenticated.)');
  });

  it('a server that echoes the token gets it scrubbed', async () => {
    const { fetch } = fakeFetch(() => [401, { message: `bad token ${TOKEN}` }]);
    const error = await rejection(api(fetch).get('5'));
    expect(error.message).not.toContain(TOKEN);
    expect(error.message).toContain('webhook API rejected the token (401 bad token');
  });

  it('404 on one webhook → "webhook N does not exist"; find → null; 404 on the list → base URL hint', async () => {
    const { fetch } = fakeFetch(() => [404, undefined]);
    const client = api(fetch);
    const error = await rejection(client.get('123'));
    expect(error).toBeInstanceOf(WebhookNotFoundError);
    expect(error.message).toBe('webhook 123 does not exist');
    expect(await client.find('123')).toBeNull();
    expect((await rejection(client.delete('123'))).message).toBe('webhook 123 does not exist');
    const listError = await rejection(client.list());
    expect(listError).toBeInstanceOf(UpstreamHttpError);
    expect(listError).not.toBeInstanceOf(WebhookNotFoundError);
    expect(listError.message).toMatch(/HTTP 404 .*check MAILER_WEBHOOKS_URL/);
  });

  it('422 → WebhookValidationError with the field errors', async () => {
    const { fetch } = fakeFetch(() => [
      422,
      { message: 'The given data was invalid.', errors: { 'events.0': ['The selected events.0 is invalid.'] } },
    ]);
    const error = await rejection(api(fetch).create({ url: 'https://x.test/h', events: ['nope'] }));
    expect(error).toBeInstanceOf(WebhookValidationError);
    expect((error as WebhookValidationError).fieldErrors).toEqual({ 'events.0': ['The selected events.0 is invalid.'] });
    expect(error.message).toBe('webhook API refused the request: events.0: The selected events.0 is invalid.');
  });

  it('create requires a secret in the answer; update and delete use the right method and path', async () => {
    const { fetch, calls } = fakeFetch((method) => {
      if (method === 'POST') return [200, { data: hook('9', { secret: null }) }];
      if (method === 'DELETE') return [204, undefined];
      return [200, { data: hook('9', { url: 'https://new.test/h' }) }];
    });
    const client = api(fetch);
    expect((await rejection(client.create({ url: 'https://x.test/h', events: ['subscriber.created'] }))).message).toMatch(
      /created webhook 9 but returned no secret/,
    );
    expect((await client.update('9', { url: 'https://new.test/h' })).url).toBe('https://new.test/h');
    await client.delete('9');
    expect(calls.slice(1).map((c) => `${c.method} ${new URL(c.url).pathname}`)).toEqual(['PUT /api/webhooks/9', 'DELETE /api/webhooks/9']);
    expect(JSON.parse(calls[1]?.body ?? '{}')).toEqual({ url: 'https://new.test/h' });
  });

  it('refuses an id that would change the path, before any request', async () => {
    const { fetch, calls } = fakeFetch(() => [200, {}]);
    await expect(api(fetch).get('../admin')).rejects.toThrow(TypeError);
    expect(calls).toHaveLength(0);
  });
});

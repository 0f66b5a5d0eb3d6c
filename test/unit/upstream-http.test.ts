/**
 * The upstream HTTP client (src/upstream/http.ts) in-process, with a fake fetch: lossless JSON,
 * Retry-After, response classification, secrets kept out of errors, retries and requests. The same
 * client over real sockets is upstream-http.sockets.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { classifyResponse, type ClassifyContext } from '../../src/upstream/classify.js';
import {
  isRetryable,
  UpstreamApiError,
  UpstreamAuthError,
  UpstreamBodyError,
  UpstreamHttpError,
  UpstreamMovedAccountError,
  UpstreamNetworkError,
  UpstreamRateLimitError,
  UpstreamTimeoutError,
} from '../../src/upstream/errors.js';
import { createHttpClient, type RequestGate } from '../../src/upstream/http.js';
import { parseJsonLossless } from '../../src/upstream/json.js';
import { parseRetryAfter } from '../../src/upstream/retry-after.js';
import { createScrubber } from '../../src/ground/log.js';

const API_KEY = 'sk-live-4f1c9a7e2b6d';

const ctx: ClassifyContext = {
  label: 'legacy API',
  method: 'GET',
  path: '/api/v2/groups/7/subscribers',
  credentialName: 'API key',
  scrub: createScrubber([API_KEY]),
  defaultRetryAfterMs: 60_000,
  nowMs: Date.parse('2024-05-01T12:00:00Z'),
};

function headers(init: Record<string, string> = {}): Headers {
  return new Headers(init);
}

function classify(status: number, body: string, init: Record<string, string> = {}) {
  return classifyResponse(ctx, status, headers(init), body);
}

function errorOf(status: number, body: string, init: Record<string, string> = {}) {
  const result = classify(status, body, init);
  if (result.ok) throw new Error(`expected an error for ${status}`);
  return result.error;
}

describe('lossless JSON (invariant 6)', () => {
  const text = '{"id":1261159647788771324,"sent":3,"opened_rate":0.25,"country_id":49,"neg":-9223372036854775807}';

  it('keeps ids above 2^53 exactly, as strings of digits', () => {
    const parsed = parseJsonLossless(text) as Record<string, unknown>;
    expect(parsed.id).toBe('1261159647788771324');
    // The trap this guards against: JSON.parse rounds the id.
    expect(String((JSON.parse(text) as { id: number }).id)).not.toBe('1261159647788771324');
    expect(parsed.neg).toBe('-9223372036854775807');
  });

  it('keeps everything else a number', () => {
    const parsed = parseJsonLossless(text) as Record<string, unknown>;
    expect(parsed.sent).toBe(3);
    expect(parsed.opened_rate).toBe(0.25);
    expect(parsed.country_id).toBe(49);
    expect(parseJsonLossless('[9007199254740991, 9007199254740992, 1e3, -0.5]')).toEqual([
      9007199254740991,
      '9007199254740992',
      1000,
      -0.5,
    ]);
  });

  it('does not let __proto__ keys pollute prototypes', () => {
    const parsed = parseJsonLossless('{"__proto__":{"polluted":true}}') as Record<string, unknown>;
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(Object.getPrototypeOf(parsed)).toBe(Object.prototype);
  });

  it('reads long digits exactly wherever they stand: values, strings, fractions, exponents', () => {
    const text =
      '{"a":[12345678901234567, -12345678901234567, 1234567890123456, 1.12345678901234567, 12345678901234567e2],' +
      ' "s":"x:12345678901234567", "t":"[12345678901234567]", "u":"a\\":12345678901234567", "id" : 12345678901234567}';
    expect(parseJsonLossless(text)).toEqual({
      a: ['12345678901234567', '-12345678901234567', 1234567890123456, 1.1234567890123457, 1234567890123456800],
      s: 'x:12345678901234567',
      t: '[12345678901234567]',
      u: 'a":12345678901234567',
      id: '12345678901234567',
    });
  });

  it('reads a body that is one long integer exactly', () => {
    expect(parseJsonLossless('12345678901234567')).toBe('12345678901234567');
    expect(parseJsonLossless(' -12345678901234567 ')).toBe('-12345678901234567');
    expect(parseJsonLossless('1234567890123456')).toBe(1234567890123456);
  });

  it('lets a later duplicate key win, on both paths', () => {
    expect(parseJsonLossless('{"a":1,"a":2}')).toEqual({ a: 2 });
    expect(parseJsonLossless('{"id":12345678901234567,"id":22345678901234567,"s":"x,12345678901234567"}')).toEqual({
      id: '22345678901234567',
      s: 'x,12345678901234567',
    });
  });

  it('rejects a long integer used as a key, and leading zeros', () => {
    expect(() => parseJsonLossless('{12345678901234567: 1}')).toThrow(SyntaxError);
    expect(() => parseJsonLossless('[-00000000000000000001]')).toThrow(SyntaxError);
  });

  it('rejects text that is not JSON', () => {
    expect(() => parseJsonLossless('<html>')).toThrow(SyntaxError);
    expect(() => parseJsonLossless('[1,2')).toThrow();
  });

  it('classifies a 2xx list with a big id as data, exactly', () => {
    const result = classify(200, '[{"id":1261159647788771324,"email":"a@b.c"}]');
    expect(result).toEqual({ ok: true, body: [{ id: '1261159647788771324', email: 'a@b.c' }] });
  });
});

describe('Retry-After parsing', () => {
  const now = Date.parse('2024-05-01T12:00:00Z');
  it.each([
    [{ 'X-RateLimit-Retry-After': '30' }, 30_000],
    [{ 'Retry-After': '5' }, 5_000],
    [{ 'Retry-After': '0' }, 0],
    [{ 'X-RateLimit-Retry-After': '1.5' }, 1_500],
    [{ 'X-RateLimit-Retry-After': '3', 'Retry-After': '10' }, 10_000],
    [{ 'X-RateLimit-Retry-After': '12', 'Retry-After': '10' }, 12_000],
    [{ 'Retry-After': 'Wed, 01 May 2024 12:00:42 GMT' }, 42_000],
    [{ 'Retry-After': 'Wed, 01 May 2024 11:00:00 GMT' }, 0],
    [{ 'X-RateLimit-Retry-After': String(now / 1000 + 20) }, 20_000],
    [{ 'X-RateLimit-Reset': '7', 'X-RateLimit-Remaining': '0' }, 7_000],
  ])('%j → %i ms', (init, expected) => {
    expect(parseRetryAfter(headers(init), now)).toBe(expected);
  });

  it.each([
    [{}],
    [{ 'Retry-After': 'soon' }],
    [{ 'X-RateLimit-Retry-After': '-3' }],
    [{ 'X-RateLimit-Reset': '7', 'X-RateLimit-Remaining': '12' }],
  ])('%j → undefined', (init) => {
    expect(parseRetryAfter(headers(init), now)).toBeUndefined();
  });

  it('a 429 carries what the service asked, or the default when it said nothing', () => {
    const named = errorOf(429, '', { 'X-RateLimit-Retry-After': '17' });
    expect(named).toBeInstanceOf(UpstreamRateLimitError);
    expect((named as UpstreamRateLimitError).retryAfterMs).toBe(17_000);
    expect((errorOf(429, '') as UpstreamRateLimitError).retryAfterMs).toBe(60_000);
  });
});

describe('response classification', () => {
  it.each([500, 502, 503, 504, 408])('HTTP %i is a retryable UpstreamHttpError', (status) => {
    const error = errorOf(status, '{"message":"oops"}');
    expect(error).toBeInstanceOf(UpstreamHttpError);
    expect((error as UpstreamHttpError).status).toBe(status);
    expect(isRetryable(error)).toBe(true);
  });

  it('HTTP 429 is retryable', () => {
    expect(isRetryable(errorOf(429, ''))).toBe(true);
  });

  it.each([400, 404, 409, 422])('HTTP %i is not retried', (status) => {
    const error = errorOf(status, '{"message":"bad"}');
    expect(error).toBeInstanceOf(UpstreamHttpError);
    expect(error).not.toBeInstanceOf(UpstreamAuthError);
    expect(isRetryable(error)).toBe(false);
  });

  it.each([401, 403])('HTTP %i is an auth error, not retried', (status) => {
    const error = errorOf(status, '{"message":"Unauthenticated."}');
    expect(error).toBeInstanceOf(UpstreamAuthError);
    expect(isRetryable(error)).toBe(false);
    expect(error.message).toContain('Unauthenticated.');
  });

  it.each([
    [200, 302, 'API-Key Unauthorized'],
    [401, 302, 'API-Key Unauthorized'],
    [500, 302, 'API-Key Unauthorized'],
    [200, 1, 'Unauthorized'],
    [401, 1, 'Unauthorized'],
  ])('status %i with body code %i is an auth error whatever the status (the body is authoritative)', (status, code, text) => {
    const error = errorOf(status, JSON.stringify({ error: { code, message: text } }));
    expect(error).toBeInstanceOf(UpstreamAuthError);
    expect((error as UpstreamAuthError).code).toBe(code);
    expect(isRetryable(error)).toBe(false);
    expect(error.message).toContain(`legacy API rejected the API key (code ${code}: ${text}`);
  });

  it('a 2xx with another error code is an API error, not data, not retried', () => {
    const error = errorOf(200, '{"error":{"code":123,"message":"Something else"}}');
    expect(error).toBeInstanceOf(UpstreamApiError);
    expect(isRetryable(error)).toBe(false);
  });

  it('a 2xx that is not JSON is an UpstreamBodyError', () => {
    const error = errorOf(200, '<html><body>Maintenance</body></html>');
    expect(error).toBeInstanceOf(UpstreamBodyError);
    expect(isRetryable(error)).toBe(false);
    expect(error.message).toContain('not JSON');
  });

  it('a 5xx that is not JSON is still a retryable HTTP error', () => {
    const error = errorOf(502, '<html>Bad gateway</html>');
    expect(error).toBeInstanceOf(UpstreamHttpError);
    expect(isRetryable(error)).toBe(true);
  });

  it('redirects are errors (the key header must not follow them)', () => {
    const error = errorOf(301, '');
    expect(error).toBeInstanceOf(UpstreamHttpError);
    expect(isRetryable(error)).toBe(false);
  });

  it('an empty 2xx/204 body is no data, not an error', () => {
    expect(classify(204, '')).toEqual({ ok: true, body: undefined });
  });

  it('network errors and timeouts are retryable; anything else is not', () => {
    const target = { label: 'x', method: 'GET', path: '/' };
    expect(isRetryable(new UpstreamNetworkError('reset', target, 'ECONNRESET'))).toBe(true);
    expect(isRetryable(new UpstreamTimeoutError('slow', target, 10))).toBe(true);
    expect(isRetryable(new Error('other'))).toBe(false);
    expect(isRetryable(new TypeError('fetch failed'))).toBe(false);
  });
});

describe('no secret in error text (invariant 10)', () => {
  it('scrubs the key when the service echoes it', () => {
    const cases = [
      errorOf(401, JSON.stringify({ error: { code: 302, message: `API-Key ${API_KEY} Unauthorized` } })),
      errorOf(500, `internal error for key ${API_KEY}`),
      errorOf(200, `not json ${API_KEY}`),
      errorOf(422, JSON.stringify({ message: `bad key ${API_KEY}` })),
    ];
    for (const error of cases) {
      expect(error.message).not.toContain(API_KEY);
      expect(error.message).toContain('[redacted]');
      expect(JSON.stringify(error)).not.toContain(API_KEY);
    }
    const withBody = errorOf(422, JSON.stringify({ message: 'invalid', errors: { url: [`bad ${API_KEY}`] } })) as UpstreamHttpError;
    expect(withBody.body).toEqual({ message: 'invalid', errors: { url: ['bad [redacted]'] } });
  });
});

// ---------------------------------------------------------------------------------------------
// Client behaviour with an injected fetch (no network)
// ---------------------------------------------------------------------------------------------

type Reply = { status: number; body?: string; headers?: Record<string, string> } | Error | 'hang';

function scriptedFetch(replies: Reply[]) {
  const calls: Array<{ url: string; init: RequestInit; at: number }> = [];
  const fetchImpl = (async (input: string | URL | Request, init?: RequestInit) => {
    calls.push({ url: String(input), init: init ?? {}, at: performance.now() });
    const reply = replies[Math.min(calls.length - 1, replies.length - 1)] as Reply;
    if (reply instanceof Error) throw reply;
    if (reply === 'hang') {
      return new Promise<Response>((_, reject) => {
        init?.signal?.addEventListener('abort', () => reject(init.signal?.reason), { once: true });
      });
    }
    return new Response(reply.body ?? null, { status: reply.status, headers: reply.headers });
  }) as typeof fetch;
  return { fetchImpl, calls };
}

const fast = { retries: 4, minDelayMs: 1, maxDelayMs: 5, jitter: true };

function client(replies: Reply[], extra: Partial<Parameters<typeof createHttpClient>[0]> = {}) {
  const { fetchImpl, calls } = scriptedFetch(replies);
  const http = createHttpClient({
    baseUrl: 'http://upstream.test/',
    label: 'legacy API',
    credentialName: 'API key',
    headers: { 'X-Service-ApiKey': API_KEY },
    retry: fast,
    fetch: fetchImpl,
    ...extra,
  });
  return { http, calls };
}

function resetError(): Error {
  return new TypeError('fetch failed', { cause: Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }) });
}

describe('http client retries', () => {
  it('retries 5xx and connection resets, then returns the data', async () => {
    const { http, calls } = client([{ status: 503 }, resetError(), { status: 500 }, { status: 200, body: '{"count":3}' }]);
    await expect(http.getJson('/api/v2/groups/1/subscribers/count')).resolves.toEqual({ count: 3 });
    expect(calls).toHaveLength(4);
    expect(http.stats()).toMatchObject({ requests: 4, retries: 3, failures: 0 });
  });

  it('gives up after the configured retries with the last error', async () => {
    const { http, calls } = client([{ status: 500 }], { retry: { ...fast, retries: 2 } });
    await expect(http.getJson('/x')).rejects.toBeInstanceOf(UpstreamHttpError);
    expect(calls).toHaveLength(3);
    expect(http.stats().failures).toBe(1);
  });

  it.each([
    ['401 code 302', { status: 401, body: '{"error":{"code":302,"message":"API-Key Unauthorized"}}' }, UpstreamAuthError],
    ['200 code 1', { status: 200, body: '{"error":{"code":1,"message":"Unauthorized"}}' }, UpstreamAuthError],
    ['403', { status: 403 }, UpstreamAuthError],
    ['404', { status: 404 }, UpstreamHttpError],
    ['400', { status: 400, body: '{"message":"bad"}' }, UpstreamHttpError],
    ['non-JSON 200', { status: 200, body: 'hello' }, UpstreamBodyError],
  ] as const)('%s fails after exactly one request', async (_name, reply, errorClass) => {
    const { http, calls } = client([reply, { status: 200, body: '[]' }]);
    await expect(http.getJson('/x')).rejects.toBeInstanceOf(errorClass);
    expect(calls).toHaveLength(1);
  });

  it('retries a timeout', async () => {
    const { http, calls } = client(['hang', { status: 200, body: '[]' }], { timeoutMs: 30 });
    await expect(http.getJson('/x')).resolves.toEqual([]);
    expect(calls).toHaveLength(2);
  });

  it('reports a timeout as UpstreamTimeoutError when retries run out', async () => {
    const { http } = client(['hang'], { timeoutMs: 20, retry: { ...fast, retries: 1 } });
    const error = await http.getJson('/x').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UpstreamTimeoutError);
    expect((error as Error).message).toContain('did not answer within 20 ms');
  });

  it('a caller abort stops at once and is not retried', async () => {
    const { http, calls } = client(['hang']);
    const controller = new AbortController();
    const pending = http.request({ path: '/x', signal: controller.signal });
    setTimeout(() => controller.abort(new Error('shutting down')), 10);
    await expect(pending).rejects.toThrow('shutting down');
    expect(calls).toHaveLength(1);
  });

  it('waits at least what a 429 asks before retrying, and pauses the gate for everyone', async () => {
    const paused: number[] = [];
    let scheduled = 0;
    const gate: RequestGate = {
      schedule: (fn) => {
        scheduled += 1;
        return fn();
      },
      pauseFor: async (ms) => {
        paused.push(ms);
      },
    };
    const { http, calls } = client(
      [
        { status: 429, headers: { 'X-RateLimit-Retry-After': '0.2' } },
        { status: 200, body: '[]' },
      ],
      { gate },
    );
    await expect(http.getJson('/x')).resolves.toEqual([]);
    expect(calls).toHaveLength(2);
    expect((calls[1]?.at as number) - (calls[0]?.at as number)).toBeGreaterThanOrEqual(200 - 5);
    expect(paused).toEqual([200]);
    expect(scheduled).toBe(2); // every attempt passes through the limiter
    expect(http.stats()).toMatchObject({ rateLimited: 1, retries: 1, retryAfterWaitMs: 200 });
  });

  it('ends the budget slot with the headers: the body waits for its room outside it, and its wait is not the service time', async () => {
    let slotsOpen = 0;
    const openWhenBodyWaited: number[] = [];
    const gate: RequestGate = {
      schedule: async (fn) => {
        slotsOpen += 1;
        try {
          return await fn();
        } finally {
          slotsOpen -= 1;
        }
      },
    };
    const durations: number[] = [];
    const { http } = client([{ status: 200, body: '[1]' }], {
      gate,
      hooks: { onResponse: (info) => void durations.push(info.durationMs) },
    });
    const beforeBody = async () => {
      openWhenBodyWaited.push(slotsOpen);
      await new Promise((resolve) => setTimeout(resolve, 120));
      return () => {};
    };
    await expect(http.request({ path: '/x', beforeBody })).resolves.toMatchObject({ body: [1] });
    expect(openWhenBodyWaited).toEqual([0]);
    expect(durations).toHaveLength(1);
    expect(durations[0]).toBeLessThan(100);
  });

  it('does not wait out a 429 longer than maxRetryAfterMs in-process', async () => {
    const paused: number[] = [];
    const gate: RequestGate = { schedule: (fn) => fn(), pauseFor: async (ms) => void paused.push(ms) };
    const { http, calls } = client([{ status: 429, headers: { 'Retry-After': '600' } }], { gate, maxRetryAfterMs: 1000 });
    const error = await http.getJson('/x').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UpstreamRateLimitError);
    expect((error as UpstreamRateLimitError).retryAfterMs).toBe(600_000);
    expect(calls).toHaveLength(1);
    expect(paused).toEqual([600_000]);
  });

  it('does not retry a POST on 5xx (it may have been applied) but does on 429', async () => {
    const first = client([{ status: 500 }, { status: 200, body: '{}' }]);
    await expect(first.http.request({ method: 'POST', path: '/api/webhooks', body: { a: 1 } })).rejects.toBeInstanceOf(UpstreamHttpError);
    expect(first.calls).toHaveLength(1);
    const second = client([
      { status: 429, headers: { 'Retry-After': '0' } },
      { status: 200, body: '{"data":{}}' },
    ]);
    await expect(second.http.request({ method: 'POST', path: '/api/webhooks', body: { a: 1 } })).resolves.toMatchObject({ status: 200 });
    expect(second.calls).toHaveLength(2);
  });

  it('calls the hooks for requests and retries', async () => {
    const events: string[] = [];
    const { http } = client([{ status: 502 }, { status: 200, body: '[]' }], {
      hooks: {
        onRequest: (i) => events.push(`request ${i.attempt}`),
        onResponse: (i) => events.push(`response ${i.status}`),
        onRetry: (i) => events.push(`retry ${i.error.name}`),
      },
    });
    await http.getJson('/x');
    expect(events).toEqual(['request 1', 'response 502', 'retry UpstreamHttpError', 'request 2', 'response 200']);
  });
});

describe('http client requests', () => {
  it('sends the credential header, JSON content type and the query; follows no redirects', async () => {
    const { http, calls } = client([{ status: 200, body: '[]' }]);
    await http.request({ path: '/api/v2/groups/5/subscribers', query: { limit: 10, offset: 0, skip: undefined } });
    const call = calls[0];
    expect(call?.url).toBe('http://upstream.test/api/v2/groups/5/subscribers?limit=10&offset=0');
    const sent = new Headers(call?.init.headers);
    expect(sent.get('x-service-apikey')).toBe(API_KEY);
    expect(sent.get('content-type')).toBe('application/json');
    expect(call?.init.redirect).toBe('manual');
  });

  it('supports bearer auth (webhook management) and scrubs the bare token', async () => {
    const token = 'tok_1234567890abcdef';
    const { http, calls } = client([{ status: 401, body: JSON.stringify({ message: `token ${token} Unauthenticated.` }) }], {
      label: 'webhooks API',
      credentialName: 'token',
      headers: { Authorization: `Bearer ${token}` },
    });
    const error = await http.request({ method: 'PUT', path: '/api/webhooks/1', body: { enabled: true } }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UpstreamAuthError);
    expect((error as Error).message).toMatch(/^webhooks API rejected the token \(HTTP 401: token \[redacted\] Unauthenticated\./);
    expect((error as Error).message).not.toContain(token);
    expect(calls[0]?.init.body).toBe('{"enabled":true}');
  });

  it('never puts the key or headers into any error message', async () => {
    const replies: Reply[][] = [
      [{ status: 401, body: '{"error":{"code":302,"message":"API-Key Unauthorized"}}' }],
      [{ status: 500, body: 'boom' }],
      [{ status: 429, headers: { 'Retry-After': '9999' } }],
      [resetError()],
      ['hang'],
      [{ status: 200, body: 'nope' }],
    ];
    for (const reply of replies) {
      const { http } = client(reply, { retry: { ...fast, retries: 0 }, timeoutMs: 10 });
      const error = (await http.getJson('/api/v2/groups/1/subscribers').catch((e: unknown) => e)) as Error;
      expect(error).toBeInstanceOf(Error);
      expect(error.message).not.toContain(API_KEY);
      expect(error.message).not.toMatch(/x-service-apikey/i);
      expect(JSON.stringify(error)).not.toContain(API_KEY);
    }
  });

  it('names the code and the service in the auth message', async () => {
    const { http } = client([{ status: 401, body: '{"error":{"code":302,"message":"API-Key Unauthorized"}}' }]);
    const error = (await http.getJson('/api/v2/groups/1/subscribers').catch((e: unknown) => e)) as UpstreamAuthError;
    expect(error.message).toBe(
      'legacy API rejected the API key (code 302: API-Key Unauthorized; HTTP 401 on GET /api/v2/groups/1/subscribers)',
    );
    expect(error.code).toBe(302);
    expect(error.status).toBe(401);
  });
});

describe('a legacy 404 without a code: the account moved to the current platform', () => {
  const moved = '{"error":{"message":"Endpoint not found"}}';

  it('is a moved-account error on the group endpoints: an auth error (polling pauses) naming the settings to use', () => {
    for (const path of ['/api/v2/groups/7/subscribers?limit=100&offset=0', '/api/v2/groups/7/subscribers/active/count']) {
      const error = classifyResponse({ ...ctx, path }, 404, headers(), moved);
      if (error.ok) throw new Error('expected an error');
      expect(error.error).toBeInstanceOf(UpstreamMovedAccountError);
      expect(error.error).toBeInstanceOf(UpstreamAuthError);
      expect(error.error.retryable).toBe(false);
      expect(error.error.message).toMatch(/Endpoint not found/);
      expect(error.error.message).toMatch(/current platform/);
      for (const setting of ['MAILER_API_URL', 'MAILER_API_TOKEN', 'SYNC_SOURCE=current']) expect(error.error.message).toContain(setting);
    }
  });

  it('is an ordinary HTTP error with a code, without an error object, or elsewhere than the legacy group endpoints', () => {
    expect(errorOf(404, '{"error":{"code":404,"message":"Group not found"}}')).not.toBeInstanceOf(UpstreamAuthError);
    expect(errorOf(404, '{"message":"Not Found"}')).not.toBeInstanceOf(UpstreamAuthError);
    expect(errorOf(404, '')).not.toBeInstanceOf(UpstreamAuthError);
    const elsewhere = classifyResponse({ ...ctx, path: '/api/groups/7/subscribers' }, 404, headers(), moved);
    if (elsewhere.ok) throw new Error('expected an error');
    expect(elsewhere.error).toBeInstanceOf(UpstreamHttpError);
    expect(elsewhere.error).not.toBeInstanceOf(UpstreamAuthError);
  });
});

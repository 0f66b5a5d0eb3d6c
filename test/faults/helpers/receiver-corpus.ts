/**
 * The bad-input corpus for the webhook receiver (invariant 9), generated as a table: each case is
 * the exact bytes and headers to send and the answer it must get. A 200 names the inbox status the
 * delivery must end in: `ignored` (no known kind) or `failed` (signed but not a shape we can apply);
 * nothing in this corpus may ever be applied.
 *
 * Realistic bodies of all 14 kinds come from a private simulator world (its own ids), so a case that
 * was wrongly applied would add rows the mirror snapshot catches.
 */
import { createHmac } from 'node:crypto';
import { ALL_EVENT_KINDS, BATCH_ONLY_KINDS, World, type EventKind, type WorldEvent } from '../../../src/simulator/index.js';
import { batchBody, directPayload, nestedItem, type Payload } from '../../../src/simulator/payloads.js';

export type StoredAs = 'ignored' | 'failed';

export interface ReceiverCase {
  name: string;
  category: string;
  method: string;
  path: string;
  body: Buffer;
  headers: Record<string, string>;
  /** Send the body as a chunked stream (no Content-Length). */
  chunked?: boolean;
  expect: { status: number; stored?: StoredAs };
}

export interface CorpusOptions {
  secret: string;
  path: string;
  maxBodyBytes: number;
}

const hmac = (body: Buffer, secret: string) => createHmac('sha256', secret).update(body).digest('hex');
const JSON_TYPE = 'application/json';

/** One realistic delivery body per event kind, as the service sends it (batch-only kinds batched). */
export function realisticBodies(): Map<EventKind, Payload> {
  const world = new World({ subscribers: 30, groups: 2, largeIds: true, seed: 4242 });
  // Active members: every mutation below then really changes something and emits its event.
  const ids = world.members(world.groupIds()[0] as string, 'active');
  const [a, b, c, d, e] = ids as [string, string, string, string, string];
  const group = world.groupIds()[1] as string;
  const automation = world.automations()[0]?.id;
  world.updateFields(a, { city: 'Vilnius' });
  world.unsubscribe(a);
  world.bounce(b);
  world.markJunk(c);
  world.markUnconfirmed(d);
  world.activate(d);
  world.addToGroup(e, group);
  world.removeFromGroup(e, group);
  world.triggerAutomation(e, automation);
  world.completeAutomation(e, automation);
  const campaign = world.sendCampaign({ name: 'Corpus campaign' });
  world.open(e, campaign.id);
  world.click(e, { campaignId: campaign.id, url: 'https://example.com/x' });
  world.createSubscriber({ groups: [group] });
  world.deleteSubscriber(c);
  const first = new Map<EventKind, WorldEvent>();
  for (const event of world.events) if (!first.has(event.kind)) first.set(event.kind, event);
  const bodies = new Map<EventKind, Payload>();
  for (const kind of ALL_EVENT_KINDS) {
    const event = first.get(kind);
    if (!event) throw new Error(`the corpus world emitted no ${kind}`);
    bodies.set(kind, BATCH_ONLY_KINDS.includes(kind) ? batchBody([nestedItem(event)]) : directPayload(event, world.accountId));
  }
  return bodies;
}

export function buildReceiverCorpus(options: CorpusOptions): ReceiverCase[] {
  const cases: ReceiverCase[] = [];
  let serial = 0;
  const sign = (body: Buffer) => hmac(body, options.secret);
  const bytes = (body: Buffer | string | Payload): Buffer =>
    Buffer.isBuffer(body) ? body : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body), 'utf8');
  /** A key no schema knows, so every stored body is unique (no case is a duplicate of another). */
  const unique = (payload: Payload): Payload => ({ ...payload, x_case: `c${++serial}` });

  const add = (
    category: string,
    name: string,
    body: Buffer | string | Payload,
    expect: ReceiverCase['expect'],
    options2: { signature?: string | null; headers?: Record<string, string>; method?: string; path?: string; chunked?: boolean } = {},
  ) => {
    const raw = bytes(body);
    const headers: Record<string, string> = { 'content-type': JSON_TYPE, ...options2.headers };
    const signature = options2.signature === undefined ? sign(raw) : options2.signature;
    if (signature !== null) headers.signature = signature;
    for (const [k, v] of Object.entries(headers)) if (v === '\u0000omit') delete headers[k];
    cases.push({
      name: `${category}: ${name}`,
      category,
      method: options2.method ?? 'POST',
      path: options2.path ?? options.path,
      body: raw,
      headers,
      ...(options2.chunked ? { chunked: true } : {}),
      expect,
    });
  };
  const unknownKind = (extra: Payload = {}): Payload => unique({ event: 'mystery.kind', ...extra });
  const IGNORED = { status: 200, stored: 'ignored' } as const;
  const FAILED = { status: 200, stored: 'failed' } as const;
  const E400 = { status: 400 } as const;
  const E401 = { status: 401 } as const;
  const E404 = { status: 404 } as const;
  const E413 = { status: 413 } as const;

  // 1. Forged: every kind, realistic body, six ways of getting the signature wrong.
  const realistic = realisticBodies();
  for (const [kind, payload] of realistic) {
    const raw = bytes(payload);
    const good = sign(raw);
    add('forged', `${kind}, no Signature header`, raw, E401, { signature: null });
    add('forged', `${kind}, signed with another secret`, raw, E401, { signature: hmac(raw, `${options.secret}-not`) });
    add('forged', `${kind}, one hex digit changed`, raw, E401, {
      signature: `${good.slice(0, 10)}${good[10] === 'a' ? 'b' : 'a'}${good.slice(11)}`,
    });
    add('forged', `${kind}, body changed after signing`, Buffer.concat([raw.subarray(0, raw.length - 1), Buffer.from(' }')]), E401, {
      signature: good,
    });
    add('forged', `${kind}, body truncated after signing`, raw.subarray(0, Math.floor(raw.length / 2)), E401, { signature: good });
    add('forged', `${kind}, signature of the empty body`, raw, E401, { signature: hmac(Buffer.alloc(0), options.secret) });
  }

  // 2. Signature header shapes (on a body that would otherwise be stored as ignored).
  const sigBody = () => bytes(unknownKind());
  const variants: Array<[string, (good: string) => string, ReceiverCase['expect']]> = [
    ['empty', () => '', E401],
    ['blank', () => '   ', E401],
    ['"sha256=" prefix', (g) => `sha256=${g}`, E401],
    ['odd length', (g) => g.slice(0, 63), E401],
    ['31 bytes', (g) => g.slice(0, 62), E401],
    ['33 bytes', (g) => `${g}00`, E401],
    ['doubled', (g) => `${g}${g}`, E401],
    ['base64 of the digest', (g) => Buffer.from(g, 'hex').toString('base64'), E401],
    ['non-hex letters', (g) => `${g.slice(0, 62)}zz`, E401],
    ['all zeros', () => '0'.repeat(64), E401],
    ['10 kB of hex', () => 'ab'.repeat(5_000), E401],
    ['two values joined', (g) => `${g}, ${g}`, E401],
    ['upper-case hex (hex is case-insensitive)', (g) => g.toUpperCase(), IGNORED],
    ['surrounding spaces (tolerated)', (g) => `  ${g}  `, IGNORED],
  ];
  for (const [name, make, expect] of variants) {
    const raw = sigBody();
    add('signature header', name, raw, expect, { signature: make(sign(raw)) });
  }
  {
    const raw = sigBody();
    add('signature header', 'under another header name (X-Signature)', raw, E401, {
      signature: null,
      headers: { 'x-signature': sign(raw) },
    });
  }

  // 3. Malformed JSON, correctly signed: 400.
  const malformed: Array<[string, string]> = [
    ['empty body', ''],
    ['only whitespace', ' \n\t '],
    ['lone "{"', '{'],
    ['lone "}"', '}'],
    ['missing value', '{"event":}'],
    ['trailing comma', '{"event":"subscriber.updated",}'],
    ['single quotes', "{'event':'subscriber.updated'}"],
    ['NaN', '{"event":"mystery.kind","n":NaN}'],
    ['Infinity', '{"event":"mystery.kind","n":Infinity}'],
    ['undefined', '{"event":"mystery.kind","n":undefined}'],
    ['comment', '// hello\n{"event":"mystery.kind"}'],
    ['two objects', '{"event":"mystery.kind"}{"event":"mystery.kind"}'],
    ['trailing garbage', '{"event":"mystery.kind"} x'],
    ['unterminated string', '{"event":"mystery.kind'],
    ['bad escape', '{"event":"mystery\\x.kind"}'],
    ['short unicode escape', '{"event":"\\u12"}'],
    ['leading zero', '{"event":"mystery.kind","n":01}'],
    ['bare decimal point', '{"event":"mystery.kind","n":.5}'],
    ['plus sign', '{"event":"mystery.kind","n":+1}'],
    ['raw newline in a string', '{"event":"mystery\nkind"}'],
    ['raw NUL byte', '{"event":"mystery.kind"}\u0000'],
    ['unquoted key', '{event:"mystery.kind"}'],
    ['XML', '<?xml version="1.0"?><event>subscriber.updated</event>'],
    ['form encoded', 'event=subscriber.updated&id=1'],
    ['HTML', '<!DOCTYPE html><html><body>hi</body></html>'],
  ];
  for (const [name, text] of malformed) add('malformed JSON', name, text, E400);
  const template = bytes(realistic.get('subscriber.updated') as Payload);
  for (const fraction of [0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95, 0.999]) {
    const cut = Math.max(1, Math.floor(template.length * fraction));
    add('truncated', `subscriber.updated cut at ${Math.round(fraction * 1000) / 10}% and signed as cut`, template.subarray(0, cut), E400);
  }
  add(
    'encoding',
    'UTF-16LE with BOM',
    Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(JSON.stringify(unknownKind()), 'utf16le')]),
    E400,
  );

  // 4. Valid JSON that is not an object: 400.
  const nonObjects: Array<[string, string]> = [
    ['empty array', '[]'],
    ['array of events', JSON.stringify([realistic.get('subscriber.updated')])],
    ['string', '"subscriber.updated"'],
    ['number', '42'],
    ['negative zero', '-0'],
    ['huge number', '1e400'],
    ['null', 'null'],
    ['true', 'true'],
    ['false', 'false'],
    ['empty string literal', '""'],
  ];
  for (const [name, text] of nonObjects) add('not an object', name, text, E400);

  // 5. Content types: the signature, not the label, decides (the service always sends JSON).
  for (const type of [
    'text/plain',
    'application/x-www-form-urlencoded',
    'multipart/form-data; boundary=x',
    'application/xml',
    'application/json; charset=latin1',
    'application/json; charset=utf-16',
    '*/*',
    'no/such;;;type',
  ]) {
    add('content type', `signed, labelled ${type}`, unknownKind(), IGNORED, { headers: { 'content-type': type } });
    add('content type', `forged, labelled ${type}`, unknownKind(), E401, { headers: { 'content-type': type }, signature: '0'.repeat(64) });
  }
  add('content type', 'signed, no content type at all', unknownKind(), IGNORED, { headers: { 'content-type': '\u0000omit' } });

  // 6. Size: checked before the signature.
  const padded = (size: number): Buffer => {
    const head = JSON.stringify(unknownKind({ pad: '' }));
    const fill = size - Buffer.byteLength(head);
    return Buffer.from(head.replace('"pad":""', `"pad":"${'x'.repeat(Math.max(0, fill))}"`));
  };
  add('size', 'exactly the limit, signed', padded(options.maxBodyBytes), IGNORED);
  add('size', 'one byte over the limit, signed', padded(options.maxBodyBytes + 1), E413);
  add('size', 'one MB, signed', padded(1024 * 1024), E413);
  add('size', 'one MB, forged', padded(1024 * 1024), E413, { signature: '0'.repeat(64) });
  add('size', 'one MB, unsigned', padded(1024 * 1024), E413, { signature: null });
  add('size', 'chunked, twice the limit, no Content-Length', padded(options.maxBodyBytes * 2), E413, { chunked: true });
  add('size', 'chunked, under the limit', padded(1_000), IGNORED, { chunked: true });
  {
    const many: Payload = {};
    for (let i = 0; i < 2_000; i++) many[`k${i}`] = i;
    add('size', '2000 keys', unknownKind({ many }), IGNORED);
  }
  add('size', 'a 10 kB key', unknownKind({ ['k'.repeat(10_000)]: 1 }), IGNORED);

  // 7. Nesting well within any sane limit (a body nested deeper than Postgres can store: see the
  // separate test; depths in between are not pinned, a receiver may refuse them).
  for (const depth of [10, 50, 100]) {
    const json = JSON.stringify(unknownKind({ deep: 0 })).replace('"deep":0', `"deep":${'['.repeat(depth)}${']'.repeat(depth)}`);
    add('nesting', `arrays ${depth} deep`, json, IGNORED);
  }
  {
    let nested = '1';
    for (let i = 0; i < 100; i++) nested = `{"a":${nested}}`;
    add('nesting', 'objects 100 deep', JSON.stringify(unknownKind({ deep: 0 })).replace('"deep":0', `"deep":${nested}`), IGNORED);
  }

  // 8. Numbers beyond 2^53 (invariant 6): digits would be lost, so never applied.
  const flat = (patch: Payload, drop: string[] = []): Payload => {
    const base = { ...(realistic.get('subscriber.updated') as Payload), ...patch };
    for (const key of drop) delete base[key];
    return unique(base);
  };
  const BIG = '1261159647788771324';
  add('beyond 2^53', 'subscriber id as a JSON number', JSON.stringify(flat({ id: 0 })).replace('"id":0', `"id":${BIG}`), FAILED);
  add('beyond 2^53', 'sent = 2^53 + 1', JSON.stringify(flat({ sent: 0 })).replace('"sent":0', '"sent":9007199254740993'), FAILED);
  add(
    'beyond 2^53',
    'opens_count = 1e300',
    JSON.stringify(flat({ opens_count: 0 })).replace('"opens_count":0', '"opens_count":1e300'),
    FAILED,
  );
  {
    const nested = { ...(realistic.get('subscriber.added_to_group') as Payload) };
    add(
      'beyond 2^53',
      'group id as a JSON number',
      JSON.stringify(unique({ ...nested, group: { id: 0, name: 'g' } })).replace('"id":0', `"id":${BIG}`),
      FAILED,
    );
    add(
      'beyond 2^53',
      'nested subscriber id as a JSON number',
      JSON.stringify(unique({ ...nested, subscriber: { ...(nested.subscriber as Payload), id: 0 } })).replace('"id":0', `"id":${BIG}`),
      FAILED,
    );
  }
  add(
    'beyond 2^53',
    'account_id as a JSON number, unknown kind',
    JSON.stringify(unknownKind({ account_id: 0 })).replace('"account_id":0', `"account_id":${BIG}`),
    IGNORED,
  );

  // 9. Wrong field types in an otherwise realistic subscriber.updated (flat): stored failed.
  const wrong: Array<[string, Payload, string[]?]> = [
    ['id is an object', { id: {} }],
    ['id is negative', { id: -1 }],
    ['id is a fraction', { id: 1.5 }],
    ['id has letters', { id: 'abc' }],
    ['id is empty', { id: '' }],
    ['id is blank', { id: '   ' }],
    ['id is true', { id: true }],
    ['id is null', { id: null }],
    ['id is an array', { id: ['1'] }],
    ['id missing', {}, ['id']],
    ['email is a number', { email: 5 }],
    ['email is an object', { email: { a: 1 } }],
    ['status is a number', { status: 7 }],
    ['sent is a string', { sent: 'many' }],
    ['sent is a fraction', { sent: 1.5 }],
    ['opens_count is a numeric string', { opens_count: '3' }],
    ['clicks_count is a boolean', { clicks_count: true }],
    ['open_rate is a string', { open_rate: '5%' }],
    ['click_rate is an array', { click_rate: [1] }],
    ['ip_address is an array', { ip_address: ['1.2.3.4'] }],
    ['subscribed_at is prose', { subscribed_at: 'yesterday' }],
    ['subscribed_at has no zone', { subscribed_at: '2026-01-01 10:00:00' }],
    ['updated_at is a number', { updated_at: 1_700_000_000 }],
    ['updated_at year 99999', { updated_at: '99999-01-01T00:00:00Z' }],
    ['no updated_at nor created_at', {}, ['updated_at', 'created_at']],
    ['fields is an array', { fields: [] }],
    ['fields is a string', { fields: 'city=Vilnius' }],
    ['fields value is an object', { fields: { city: { name: 'Vilnius' } } }],
    ['fields value is an array', { fields: { city: ['Vilnius'] } }],
    ['optin_ip is a number', { optin_ip: 127001 }],
  ];
  for (const [name, patch, drop] of wrong) add('wrong field type', name, flat(patch, drop), FAILED);
  // Dates that match the pattern but do not exist: stored, then refused by the consumer (never applied).
  for (const [name, value] of [
    ['February 30', '2026-02-30T10:00:00.000000Z'],
    ['month 13', '2026-13-01T10:00:00.000000Z'],
    ['hour 25', '2026-01-01T25:00:00.000000Z'],
  ] as const) {
    add('impossible date', `updated_at on ${name}`, flat({ updated_at: value }), FAILED);
  }
  const nestedWrong: Array<[EventKind, string, (p: Payload) => Payload]> = [
    ['subscriber.added_to_group', 'group is a string', (p) => ({ ...p, group: 'g' })],
    ['subscriber.added_to_group', 'group missing', (p) => ({ ...p, group: undefined })],
    ['subscriber.added_to_group', 'group id has letters', (p) => ({ ...p, group: { id: 'abc', name: 'g' } })],
    ['subscriber.added_to_group', 'subscriber is an array', (p) => ({ ...p, subscriber: [] })],
    ['subscriber.added_to_group', 'subscriber is null', (p) => ({ ...p, subscriber: null })],
    ['subscriber.automation_triggered', 'automation missing', (p) => ({ ...p, automation: undefined })],
    ['subscriber.automation_triggered', 'automation id is an object', (p) => ({ ...p, automation: { id: {} } })],
    ['campaign.sent', 'campaign id has letters', (p) => ({ ...p, id: 'x1' })],
    ['campaign.sent', 'total_recipients is a string', (p) => ({ ...p, total_recipients: 'many' })],
    ['campaign.sent', 'date has no zone', (p) => ({ ...p, date: '2026-01-01 10:00:00' })],
  ];
  for (const [kind, name, mutate] of nestedWrong) {
    add('wrong field type', `${kind}: ${name}`, unique(mutate({ ...(realistic.get(kind) as Payload) })), FAILED);
  }
  const batchItem = (kind: EventKind): Payload => ((realistic.get(kind) as Payload).events as Payload[])[0] as Payload;
  add(
    'wrong field type',
    'campaign.click: link_url is a number',
    unique(batchBody([{ ...batchItem('campaign.click'), link_url: 5 }])),
    FAILED,
  );
  add(
    'wrong field type',
    'campaign.open: campaign missing',
    unique(batchBody([{ ...batchItem('campaign.open'), campaign: undefined }])),
    FAILED,
  );
  add(
    'wrong field type',
    'subscriber.deleted sent flat',
    unique({ ...(batchItem('subscriber.deleted').subscriber as Payload), event: 'subscriber.deleted' }),
    FAILED,
  );

  // 10. Kinds.
  for (const kind of [
    'subscriber.exploded',
    'order.created',
    'SUBSCRIBER.UPDATED',
    ' subscriber.updated',
    'subscriber.updated ',
    'constructor',
    'toString',
    'hasOwnProperty',
    '__proto__',
    'subscriber',
  ]) {
    add('unknown kind', JSON.stringify(kind), unique({ ...(realistic.get('subscriber.updated') as Payload), event: kind }), IGNORED);
  }
  add(
    'unknown kind',
    'nested type unknown',
    unique({ type: 'subscriber.teleported', subscriber: { id: '1', updated_at: '2026-01-01T00:00:00Z' } }),
    IGNORED,
  );
  add('unknown kind', 'batch of unknown kinds', unique(batchBody([{ type: 'a.b' }, { type: 'c.d' }])), IGNORED);
  for (const [name, value] of [
    ['empty kind', ''],
    ['kind is a number', 5],
    ['kind is an object', { name: 'subscriber.updated' }],
    ['kind is an array', ['subscriber.updated']],
    ['kind is true', true],
  ] as const) {
    add('bad kind', name, unique({ ...(realistic.get('subscriber.updated') as Payload), event: value }), FAILED);
  }
  add('bad kind', 'no kind at all', unique({ id: '1', updated_at: '2026-01-01T00:00:00Z' }), FAILED);
  add('bad kind', 'event and type both null', unique({ event: null, type: null }), FAILED);
  add('bad kind', 'empty object', unique({}), FAILED);

  // 11. Duplicated keys: the last one wins (JSON.parse), consistently everywhere.
  const upd = JSON.stringify(unique(realistic.get('subscriber.updated') as Payload));
  add(
    'duplicated keys',
    'event twice at the start, known then unknown',
    `{"event":"subscriber.updated",${JSON.stringify(unknownKind()).slice(1)}`,
    IGNORED,
  );
  add('duplicated keys', 'event twice, known then unknown', upd.slice(0, -1) + ',"event":"mystery.kind"}', IGNORED);
  add('duplicated keys', 'id twice, valid then an object', upd.slice(0, -1) + ',"id":{}}', FAILED);
  add('duplicated keys', 'updated_at twice, valid then prose', upd.slice(0, -1) + ',"updated_at":"soon"}', FAILED);
  add(
    'duplicated keys',
    'events twice in a batch, last not an array',
    `{"events":[],"total":0,"x_case":"c${++serial}","events":"none"}`,
    FAILED,
  );

  // 12. Prototype pollution: refused outright (Fastify's safe parser), never stored.
  const pollutions: Array<[string, string]> = [
    ['top-level __proto__', '{"__proto__":{"polluted":true},"event":"subscriber.updated","id":"1","updated_at":"2026-01-01T00:00:00Z"}'],
    ['escaped __proto__', '{"\\u005f_proto__":{"polluted":true},"event":"mystery.kind"}'],
    [
      '__proto__ in the subscriber',
      '{"type":"subscriber.updated","subscriber":{"__proto__":{"isAdmin":true},"id":"1","updated_at":"2026-01-01T00:00:00Z"}}',
    ],
    ['__proto__ in fields', '{"event":"subscriber.updated","id":"1","updated_at":"2026-01-01T00:00:00Z","fields":{"__proto__":{"x":"y"}}}'],
    [
      '__proto__ in a batch item',
      '{"events":[{"type":"subscriber.updated","__proto__":{"polluted":true},"subscriber":{"id":"1","updated_at":"2026-01-01T00:00:00Z"}}]}',
    ],
    ['constructor.prototype', '{"event":"mystery.kind","constructor":{"prototype":{"polluted":true}}}'],
    [
      'constructor.prototype in the subscriber',
      '{"type":"subscriber.updated","subscriber":{"constructor":{"prototype":{"x":1}},"id":"1","updated_at":"2026-01-01T00:00:00Z"}}',
    ],
    ['__proto__ as an array', '{"__proto__":[1,2],"event":"mystery.kind"}'],
  ];
  for (const [name, text] of pollutions) add('prototype pollution', name, text, E400);
  add('prototype pollution', '"constructor" as a plain string key (harmless)', unknownKind({ constructor: 'x' }), IGNORED);

  // 13. Batches.
  add('batch', 'events is a string', unique({ events: 'x' }), FAILED);
  add('batch', 'events holds numbers', unique({ events: [1, 2] }), FAILED);
  add('batch', 'events holds an empty object', unique({ events: [{}] }), FAILED);
  add('batch', 'events empty', unique({ events: [], total: 0 }), IGNORED);
  add('batch', 'total is a string', unique({ ...(realistic.get('campaign.open') as Payload), total: '1' }), FAILED);
  add(
    'batch',
    'one good item and one bad: nothing applied',
    unique(batchBody([batchItem('campaign.open'), { type: 'subscriber.updated', subscriber: { id: {} } }])),
    FAILED,
  );
  add('batch', 'events holds null', unique({ events: [null] }), FAILED);
  add('batch', 'events holds arrays', unique({ events: [[batchItem('campaign.open')]] }), FAILED);

  // 14. Methods and paths other than POST on the route.
  for (const method of ['GET', 'PUT', 'DELETE', 'PATCH']) {
    add('method', method, method === 'GET' ? '' : JSON.stringify(unknownKind()), E404, { method });
  }
  for (const path of [`${options.path}/`, `${options.path}/extra`, options.path.toUpperCase(), `${options.path}.json`, '/webhook']) {
    if (path === options.path) continue;
    add('path', path, unknownKind(), E404, { path });
  }
  add('path', 'query string (ignored by the route)', unknownKind(), IGNORED, { path: `${options.path}?x=1&event=subscriber.updated` });
  return cases;
}

/**
 * Signed deliveries, otherwise valid, whose `email` holds bytes that are not UTF-8 (RFC 8259 §8.1:
 * JSON text is UTF-8, so these are malformed JSON: invariant 9 says 400, and nothing applied).
 */
export function invalidUtf8Cases(options: CorpusOptions, base: Payload): ReceiverCase[] {
  const out: ReceiverCase[] = [];
  let serial = 0;
  const make = (name: string, build: (marker: string) => Buffer) => {
    const body = build(`u${++serial}`);
    out.push({
      name: `invalid UTF-8: ${name}`,
      category: 'invalid UTF-8',
      method: 'POST',
      path: options.path,
      body,
      headers: { 'content-type': JSON_TYPE, signature: hmac(body, options.secret) },
      expect: { status: 400 },
    });
  };
  const inString = (bad: number[]) => (marker: string) => {
    const text = JSON.stringify({ ...base, x_case: marker, email: '@@' });
    const [head, tail] = text.split('@@') as [string, string];
    return Buffer.concat([Buffer.from(head), Buffer.from(bad), Buffer.from(tail)]);
  };
  make('0xFF 0xFE in a string', inString([0xff, 0xfe]));
  make('Latin-1 é (0xE9) in a string', inString([0x43, 0x61, 0x66, 0xe9]));
  make('overlong "/" (0xC0 0xAF)', inString([0xc0, 0xaf]));
  make('UTF-8 encoded surrogate (0xED 0xA0 0x80)', inString([0xed, 0xa0, 0x80]));
  make('truncated 3-byte sequence', inString([0xe2, 0x82]));
  make('lone continuation byte', inString([0x80]));
  return out;
}

/** A signed unknown-kind body with arrays nested `depth` deep. */
export function deeplyNested(options: CorpusOptions, depth: number, marker: string): ReceiverCase {
  const body = Buffer.from(`{"event":"mystery.kind","x_case":"${marker}","deep":${'['.repeat(depth)}${']'.repeat(depth)}}`);
  return {
    name: `nesting: arrays ${depth} deep`,
    category: 'nesting',
    method: 'POST',
    path: options.path,
    body,
    headers: { 'content-type': JSON_TYPE, signature: hmac(body, options.secret) },
    expect: { status: 400 },
  };
}

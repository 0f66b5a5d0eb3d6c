import { describe, expect, test } from 'vitest';
import {
  deliveryKinds,
  EVENT_KINDS,
  EVENT_REGISTRY,
  parseDelivery,
  PayloadError,
  peekKinds,
  type WebhookEvent,
} from '../../src/webhooks/payloads.js';
import { fixture, loadFixtures } from '../fixtures/webhooks/index.js';

type Json = Record<string, unknown>;

const fixtures = loadFixtures();

/** The items of a fixture as plain JSON, for comparing against what the parser returns. */
function itemsOf(body: Json): Json[] {
  return Array.isArray(body.events) ? (body.events as Json[]) : [body];
}

describe('registry', () => {
  test('has exactly the 14 kinds of docs/upstream.md "Event kinds"', () => {
    expect([...EVENT_KINDS].sort()).toEqual(
      [
        'subscriber.created',
        'subscriber.updated',
        'subscriber.unsubscribed',
        'subscriber.added_to_group',
        'subscriber.removed_from_group',
        'subscriber.bounced',
        'subscriber.automation_triggered',
        'subscriber.automation_completed',
        'subscriber.spam_reported',
        'subscriber.deleted',
        'subscriber.active',
        'campaign.sent',
        'campaign.click',
        'campaign.open',
      ].sort(),
    );
  });

  test('docs/upstream.md "Event kinds": deleted, open and click need batchable webhooks', () => {
    const batchOnly = EVENT_KINDS.filter((k) => EVENT_REGISTRY[k].requiresBatchable).sort();
    expect(batchOnly).toEqual(['campaign.click', 'campaign.open', 'subscriber.deleted']);
  });

  test('fixtures cover every kind in every shape it may arrive in, and batched', () => {
    const have = new Set(fixtures.map((f) => `${f.kind}.${f.shape}`));
    const want = EVENT_KINDS.flatMap((kind) => {
      const shapes: string[] = EVENT_REGISTRY[kind].shapes.map((s) => (s === 'campaign' ? 'flat' : s));
      return [...shapes, 'batched'].map((s) => `${kind}.${s}`);
    });
    expect([...have].sort()).toEqual([...new Set(want)].sort());
  });
});

describe('parseDelivery: every fixture', () => {
  test.each(fixtures.map((f) => [f.name, f] as const))('%s', (_name, f) => {
    const body = JSON.parse(f.body) as Json;
    const items = itemsOf(body);
    const parsed = parseDelivery(body);

    expect(parsed.unknownKinds).toEqual([]);
    expect(parsed.batched).toBe(f.shape === 'batched');
    expect(parsed.events).toHaveLength(items.length);
    expect(deliveryKinds(parsed)).toEqual([f.kind]);
    if (f.shape !== 'batched') expect(parsed.events).toHaveLength(1);

    parsed.events.forEach((event, i) => {
      const item = items[i] as Json;
      expect(event.kind).toBe(f.kind);
      expect(event.index).toBe(i);
      expect(event.batched).toBe(f.shape === 'batched');
      // Batched items carry no account_id (docs/upstream.md, "Batched payloads"); top-level deliveries do.
      expect(event.accountId).toBe(f.shape === 'batched' ? null : '412873');
      const carries: readonly string[] = EVENT_REGISTRY[f.kind].carries;
      if ('subscriber' in event) {
        const expected = (event.shape === 'flat' ? item : item.subscriber) as Json;
        expect(typeof event.subscriber.id).toBe('string');
        expect(event.subscriber.id).toBe(expected.id);
        expect(event.subscriber.updated_at).toBe(expected.updated_at);
        expect(event.subscriber.fields).toEqual(expected.fields);
        // The flat shape's framing keys are not subscriber data.
        expect(event.subscriber).not.toHaveProperty('event');
        expect(event.subscriber).not.toHaveProperty('account_id');
      } else {
        expect(carries).not.toContain('subscriber');
      }
      if ('group' in event) expect(event.group).toEqual(item.group);
      if ('automation' in event) expect(event.automation).toEqual(item.automation);
      if ('campaign' in event) {
        const expected = event.shape === 'campaign' ? { ...item, event: undefined, account_id: undefined } : item.campaign;
        expect(JSON.parse(JSON.stringify(event.campaign))).toEqual(JSON.parse(JSON.stringify(expected)));
      }
      if ('linkUrl' in event) expect(event.linkUrl).toBe(item.link_url);
      for (const part of carries) expect(event).toHaveProperty(part);
    });
  });

  test('ids above 2^53 arrive as strings and stay exact', () => {
    const [event] = parseDelivery(JSON.parse(fixture('subscriber.updated', 'flat').body)).events;
    expect(event?.kind === 'subscriber.updated' && event.subscriber.id).toBe('1261159647788771324');
  });

  test('the kind narrows the event type', () => {
    const [event] = parseDelivery(JSON.parse(fixture('campaign.click', 'nested').body)).events as [WebhookEvent];
    if (event.kind !== 'campaign.click') throw new Error('expected a click');
    // Compiles only because the union is discriminated by kind.
    expect([event.campaign.id, event.subscriber.id, event.linkUrl]).toEqual([
      '122511863480109157',
      '1261159647788771324',
      'https://shop.example.com/summer-sale?utm_source=newsletter&utm_campaign=june',
    ]);
  });
});

const subscriber = { id: '130742518836315811', email: 'a@example.com', updated_at: '2024-06-03T14:02:11.318204Z' };

describe('parseDelivery: liberal where harmless', () => {
  test('the spec example batch (two identical campaign.open items)', () => {
    const body = {
      events: [
        { type: 'campaign.open', subscriber, campaign: { id: '1', name: 'C' } },
        { type: 'campaign.open', subscriber, campaign: { id: '1', name: 'C' } },
      ],
      total: 2,
    };
    expect(parseDelivery(body).events.map((e) => e.kind)).toEqual(['campaign.open', 'campaign.open']);
  });

  test('a batch mixing kinds and shapes', () => {
    const parsed = parseDelivery({
      events: [
        { type: 'subscriber.added_to_group', subscriber, group: { id: '7', name: 'G' } },
        { type: 'campaign.click', subscriber, campaign: { id: '9' }, link_url: 'https://x.example/' },
        { type: 'subscriber.created', subscriber },
        { event: 'subscriber.updated', ...subscriber },
        { event: 'campaign.sent', id: '9', name: 'C', total_recipients: 3 },
      ],
      total: 5,
    });
    expect(parsed.events.map((e) => [e.kind, e.shape])).toEqual([
      ['subscriber.added_to_group', 'nested'],
      ['campaign.click', 'nested'],
      ['subscriber.created', 'nested'],
      ['subscriber.updated', 'flat'],
      ['campaign.sent', 'campaign'],
    ]);
  });

  test('an empty batch is valid and has no events', () => {
    expect(parseDelivery({ events: [], total: 0 })).toEqual({ events: [], unknownKinds: [], batched: true });
  });

  test('unknown keys are kept: in the subscriber (flat), in extra (nested), in nested objects', () => {
    const [flat] = parseDelivery({ event: 'subscriber.updated', ...subscriber, country_id: 49, account_id: 1 }).events;
    expect(flat).toMatchObject({ accountId: '1', extra: {}, subscriber: { country_id: 49 } });
    const [nested] = parseDelivery({
      type: 'subscriber.added_to_group',
      subscriber: { ...subscriber, opened_rate: 0 },
      group: { id: '7', name: 'G', active_count: 3 },
      webhook_id: '68074372004316503',
    }).events;
    expect(nested).toMatchObject({
      extra: { webhook_id: '68074372004316503' },
      subscriber: { opened_rate: 0 },
      group: { active_count: 3 },
    });
  });

  test('safe integer ids and account ids become strings; ids are canonical decimals', () => {
    const [event] = parseDelivery({
      type: 'subscriber.added_to_group',
      subscriber: { ...subscriber, id: 42 },
      group: { id: ' 0007 ' },
      account_id: 5,
    }).events;
    expect(event).toMatchObject({ accountId: '5', subscriber: { id: '42' }, group: { id: '7' } });
  });

  test('an account_id beyond 2^53 (imprecise once parsed) gives null instead of failing', () => {
    const [event] = parseDelivery({ event: 'subscriber.updated', ...subscriber, account_id: 1261159647788771325 }).events;
    expect(event?.accountId).toBeNull();
  });

  test('"event" wins over "type" and a flat subscriber keeps its own "type" key', () => {
    const [event] = parseDelivery({ event: 'subscriber.bounced', type: 'bounced', ...subscriber }).events;
    expect(event).toMatchObject({ kind: 'subscriber.bounced', subscriber: { type: 'bounced' } });
  });

  test('flat subscriber kinds also arrive nested; a click without link_url has linkUrl null', () => {
    expect(parseDelivery({ type: 'subscriber.active', subscriber }).events[0]?.shape).toBe('nested');
    const [click] = parseDelivery({ type: 'campaign.click', subscriber, campaign: { id: '1' } }).events;
    expect(click).toMatchObject({ linkUrl: null });
  });

  test('timestamps: nulls, empty strings, a space separator, other fractions and offsets are accepted', () => {
    const s = {
      ...subscriber,
      updated_at: '2024-06-03 14:02:11Z',
      created_at: '2024-06-03T14:02:11.5+02:00',
      subscribed_at: '2024-06-03t14:02:11.123456789-0530',
      deleted_at: null,
      forget_at: '',
    };
    expect(parseDelivery({ event: 'subscriber.updated', ...s }).events).toHaveLength(1);
  });

  test('created_at alone is enough to order a version', () => {
    const { updated_at: _omitted, ...rest } = subscriber;
    const s = { ...rest, created_at: '2024-06-03T14:02:11.318204Z' };
    expect(parseDelivery({ type: 'subscriber.created', subscriber: s }).events).toHaveLength(1);
  });
});

describe('parseDelivery: unknown kinds are reported, not errors', () => {
  test('a single delivery of an unknown kind', () => {
    expect(parseDelivery({ event: 'subscriber.merged', id: '1' })).toEqual({
      events: [],
      unknownKinds: ['subscriber.merged'],
      batched: false,
    });
  });

  test('a batch with known and unknown kinds keeps the known events', () => {
    const parsed = parseDelivery({
      events: [
        { type: 'form.submitted', form: {} },
        { type: 'subscriber.created', subscriber },
        { type: 'form.submitted', form: {} },
        { type: 'Subscriber.Created', subscriber },
      ],
      total: 4,
    });
    expect(parsed.events.map((e) => e.kind)).toEqual(['subscriber.created']);
    expect(parsed.unknownKinds).toEqual(['form.submitted', 'Subscriber.Created']);
    expect(deliveryKinds(parsed)).toEqual(['subscriber.created', 'form.submitted', 'Subscriber.Created']);
  });
});

describe('parseDelivery: garbage is a PayloadError with a clear message', () => {
  test.each<[string, unknown, RegExp]>([
    ['an array', [subscriber], /must be a JSON object, got an array/],
    ['a number', 42, /must be a JSON object, got a number/],
    ['a string', '{"event":"subscriber.created"}', /must be a JSON object, got a string/],
    ['null', null, /must be a JSON object, got null/],
    ['no kind at all', { id: '1' }, /no event kind \("event" or "type"\) and no "events" array/],
    ['a numeric kind', { event: 3, id: '1' }, /event: the event kind must be a non-empty string, got a number/],
    ['an empty kind', { type: '', subscriber }, /type: the event kind must be a non-empty string/],
    [
      'flat subscriber without id',
      { event: 'subscriber.created', email: 'a@example.com' },
      /invalid subscriber\.created payload: id: id is missing/,
    ],
    [
      'nested subscriber without id',
      { type: 'subscriber.deleted', subscriber: { email: 'a@example.com' } },
      /subscriber\.id: id is missing/,
    ],
    ['an empty id', { event: 'subscriber.created', id: '' }, /id: id must be a string of digits, got an empty string/],
    ['a non-numeric id', { event: 'subscriber.created', id: 'abc-1' }, /id: id must be a string of digits, got other characters/],
    ['a negative id', { event: 'subscriber.created', id: -5 }, /not a non-negative safe integer/],
    [
      'an id that lost digits (> 2^53)',
      { event: 'subscriber.created', id: 1261159647788771324 },
      /not a non-negative safe integer \(digits are lost beyond 2\^53\)/,
    ],
    ['a fractional id', { event: 'subscriber.created', id: 1.5 }, /not a non-negative safe integer/],
    ['an object id', { event: 'subscriber.created', id: { n: 1 } }, /id must be a string of digits, got an object/],
    [
      'no updated_at nor created_at',
      { type: 'subscriber.created', subscriber: { id: '1', email: 'a@example.com' } },
      /subscriber\.updated_at: the subscriber has neither updated_at nor created_at/,
    ],
    [
      'a timestamp without zone',
      { event: 'subscriber.updated', ...subscriber, updated_at: '2024-06-03 14:02:11' },
      /updated_at: expected an ISO 8601 timestamp with a zone/,
    ],
    ['sent as a string', { event: 'subscriber.updated', ...subscriber, sent: '5' }, /sent: expected an integer or null/],
    ['fractional opens_count', { event: 'subscriber.updated', ...subscriber, opens_count: 1.5 }, /opens_count: expected an integer/],
    ['email as a number', { event: 'subscriber.updated', ...subscriber, email: 7 }, /email: expected a string or null/],
    [
      'fields as an array',
      { event: 'subscriber.updated', ...subscriber, fields: [{ key: 'name', value: 'x' }] },
      /fields: fields must be an object/,
    ],
    [
      'a nested field value',
      { event: 'subscriber.updated', ...subscriber, fields: { name: { first: 'x' } } },
      /fields\.name: custom field values must be strings/,
    ],
    [
      'a date that is no timestamp',
      { event: 'subscriber.updated', ...subscriber, updated_at: 'yesterday' },
      /updated_at: expected an ISO 8601 timestamp/,
    ],
    [
      'a numeric timestamp',
      { event: 'subscriber.updated', ...subscriber, updated_at: 1717400000 },
      /updated_at: expected a timestamp string or null/,
    ],
    [
      'account_id as an object',
      { event: 'subscriber.updated', ...subscriber, account_id: {} },
      /account_id: account_id must be an integer or a string, got an object/,
    ],
    ['subscriber as a string', { type: 'subscriber.created', subscriber: 'x' }, /subscriber: subscriber must be an object, got a string/],
    ['added_to_group without group', { type: 'subscriber.added_to_group', subscriber }, /group: group is missing/],
    [
      'added_to_group with a group without id',
      { type: 'subscriber.added_to_group', subscriber, group: { name: 'G' } },
      /group\.id: id is missing/,
    ],
    [
      'automation_triggered without automation',
      { type: 'subscriber.automation_triggered', subscriber },
      /automation: automation is missing/,
    ],
    ['campaign.open without campaign', { type: 'campaign.open', subscriber }, /campaign: campaign is missing/],
    [
      'campaign.click with a numeric link_url',
      { type: 'campaign.click', subscriber, campaign: { id: '1' }, link_url: 5 },
      /link_url: link_url must be a string or null/,
    ],
    ['campaign.sent without id', { event: 'campaign.sent', name: 'C' }, /invalid campaign\.sent payload: id: id is missing/],
    [
      'campaign.sent with a string total',
      { event: 'campaign.sent', id: '1', total_recipients: '100' },
      /total_recipients: expected an integer/,
    ],
    [
      'campaign.sent nested with a subscriber',
      { type: 'campaign.sent', subscriber },
      /campaign\.sent arrives flat campaign .*, got nested/,
    ],
    [
      'added_to_group flat',
      { event: 'subscriber.added_to_group', ...subscriber },
      /subscriber\.added_to_group arrives nested .*, got flat/,
    ],
    ['events not an array', { events: { 0: {} }, total: 1 }, /events: expected an array, got an object/],
    ['a non-integer total', { events: [], total: '0' }, /total: expected an integer, got a string/],
    [
      'a batch item that is no object',
      { events: [{ type: 'subscriber.created', subscriber }, 5], total: 2 },
      /events\[1\]: expected an event object, got a number/,
    ],
    ['a batch item without kind', { events: [{ subscriber }], total: 1 }, /events\[0\]: no event kind \("event" or "type"\)$/],
    [
      'a batch item without subscriber id',
      { events: [{ type: 'campaign.open', subscriber: {}, campaign: { id: '1' } }], total: 1 },
      /events\[0\]\.subscriber\.id: id is missing/,
    ],
  ])('%s', (_name, body, message) => {
    let error: unknown;
    try {
      parseDelivery(body);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(PayloadError);
    expect((error as PayloadError).message).toMatch(message);
  });

  test('every problem is listed, with its path, and no value is echoed', () => {
    const secretLooking = 'person@private.example';
    const body = { event: 'subscriber.updated', id: '1', email: 5, sent: secretLooking, fields: { city: [secretLooking] } };
    const error = (() => {
      try {
        parseDelivery(body);
      } catch (e) {
        return e as PayloadError;
      }
      throw new Error('expected a PayloadError');
    })();
    expect(error.issues.map((i) => i.path).sort()).toEqual(['email', 'fields.city', 'sent']);
    expect(error.message).not.toContain(secretLooking);
  });

  test('peekKinds reads the claimed kinds of an invalid delivery', () => {
    expect(peekKinds({ events: [{ type: 'campaign.open' }, { type: 'campaign.open' }, { type: 'x.y' }, 5], total: 4 })).toEqual([
      'campaign.open',
      'x.y',
    ]);
    expect(peekKinds({ event: 'subscriber.created' })).toEqual(['subscriber.created']);
    expect(peekKinds([1])).toEqual([]);
  });
});

import { describe, expect, test } from 'vitest';
import { parse as losslessParse, parseNumberAndBigInt, LosslessNumber } from 'lossless-json';
import {
  erasePersonalData,
  normalizeAutomation,
  normalizeCampaign,
  normalizeGroup,
  normalizeId,
  normalizeLegacySubscriber,
  normalizeWebhookSubscriber,
  NormalizeError,
  SUBSCRIBER_FIELDS,
} from '../../src/mirror/normalize.js';
import { fixtureText, legacySubscriber, webhookSubscriber } from '../fixtures/mirror/rows.js';

const UTC = { sourceTimezone: 'UTC' };

function legacyExample(): Record<string, unknown> {
  return losslessParse(fixtureText('legacy-single-subscriber.json')) as Record<string, unknown>;
}

function catchError(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  throw new Error('expected a throw');
}

describe('normalizeLegacySubscriber: the real example', () => {
  test('maps every documented key and keeps the 64-bit id exactly', () => {
    const row = normalizeLegacySubscriber(legacyExample(), UTC);
    expect(row.via).toBe('poll');
    expect(row.values).toEqual({
      id: '1261159647788771324',
      email: 'mail@whatever.com',
      name: '',
      status: 'active',
      source: null,
      sent: 0,
      opensCount: 0,
      clicksCount: 0,
      openRate: 0,
      clickRate: 0,
      ipAddress: '88.23.20.209',
      subscribedAt: '2022-04-05T22:39:05.000000Z',
      unsubscribedAt: null,
      createdAt: '2022-04-05T22:39:05.000000Z',
      updatedAt: '2022-04-05T22:39:05.000000Z',
      deletedAt: null,
      forgetAt: null,
      optedInAt: '2022-04-05T22:39:05.000000Z',
      optinIp: '88.23.20.209',
      fields: { name: '', last_name: '', company: '', country: '', city: '', phone: '', state: '', zip: '' },
      extra: { country_id: new LosslessNumber('49'), webform_subscribe_date: null, user_agent: null },
    });
  });

  test('provides what legacy carries and never source, deleted_at, forget_at', () => {
    const row = normalizeLegacySubscriber(legacyExample(), UTC);
    expect(row.provided).not.toContain('source');
    expect(row.provided).not.toContain('deletedAt');
    expect(row.provided).not.toContain('forgetAt');
    expect(row.provided).toEqual(SUBSCRIBER_FIELDS.filter((f) => !['source', 'deletedAt', 'forgetAt'].includes(f)));
  });

  test('accepts the id as bigint, safe number or string, canonicalized', () => {
    const asBigInt = losslessParse(fixtureText('legacy-single-subscriber.json'), null, parseNumberAndBigInt) as Record<string, unknown>;
    expect(typeof asBigInt.id).toBe('bigint');
    expect(normalizeLegacySubscriber(asBigInt, UTC).values.id).toBe('1261159647788771324');
    expect(normalizeLegacySubscriber(legacySubscriber({ id: 42 }), UTC).values.id).toBe('42');
    expect(normalizeLegacySubscriber(legacySubscriber({ id: '0042' }), UTC).values.id).toBe('42');
  });

  test('a lossy JSON.parse id is rejected, naming the field and the cause', () => {
    const lossy = JSON.parse(fixtureText('legacy-single-subscriber.json')) as Record<string, unknown>;
    const err = catchError(() => normalizeLegacySubscriber(lossy, UTC));
    expect(err).toBeInstanceOf(NormalizeError);
    expect((err as NormalizeError).field).toBe('id');
    expect((err as NormalizeError).message).toMatch(/2\^53.*lossless/);
  });

  test.each([['abc'], ['12a'], [-5], [1.5], [null], [undefined], [{}]])('non-numeric id %j is rejected', (id) => {
    const err = catchError(() => normalizeLegacySubscriber(legacySubscriber({ id }), UTC));
    expect(err).toBeInstanceOf(NormalizeError);
    expect((err as NormalizeError).field).toBe('id');
  });
});

describe('normalizeLegacySubscriber: timestamps in the source zone', () => {
  test('+14 and -12 zones shift every Y-m-d H:i:s value', () => {
    const plus14 = normalizeLegacySubscriber(legacySubscriber(), { sourceTimezone: 'Pacific/Kiritimati' }).values;
    expect(plus14.updatedAt).toBe('2024-05-27T20:30:29.000000Z');
    expect(plus14.createdAt).toBe('2024-05-07T18:26:04.000000Z');
    expect(plus14.optedInAt).toBe('2024-05-07T18:26:04.000000Z');
    const minus12 = normalizeLegacySubscriber(legacySubscriber(), { sourceTimezone: 'Etc/GMT+12' }).values;
    expect(minus12.updatedAt).toBe('2024-05-28T22:30:29.000000Z');
    expect(minus12.subscribedAt).toBe('2024-05-08T20:26:04.000000Z');
  });

  test('DST: summer and winter offsets differ', () => {
    const summer = normalizeLegacySubscriber(legacySubscriber({ date_updated: '2024-07-01 12:00:00' }), {
      sourceTimezone: 'Europe/Berlin',
    });
    const winter = normalizeLegacySubscriber(legacySubscriber({ date_updated: '2024-01-01 12:00:00' }), {
      sourceTimezone: 'Europe/Berlin',
    });
    expect(summer.values.updatedAt).toBe('2024-07-01T10:00:00.000000Z');
    expect(winter.values.updatedAt).toBe('2024-01-01T11:00:00.000000Z');
  });

  test('subscribedAt prefers signup_timestamp, else date_subscribe at 00:00 in the zone', () => {
    const both = normalizeLegacySubscriber(legacySubscriber({ date_subscribe: '2024-05-09' }), UTC);
    expect(both.values.subscribedAt).toBe('2024-05-08T08:26:04.000000Z');
    expect(both.values.extra.date_subscribe).toBe('2024-05-09'); // not lost
    const dayOnly = normalizeLegacySubscriber(legacySubscriber({ signup_timestamp: null, date_subscribe: '2024-05-09' }), {
      sourceTimezone: 'Asia/Kolkata',
    });
    expect(dayOnly.values.subscribedAt).toBe('2024-05-08T18:30:00.000000Z');
    expect(dayOnly.values.extra).not.toHaveProperty('date_subscribe');
    const neither = normalizeLegacySubscriber(legacySubscriber({ signup_timestamp: null, date_subscribe: null }), UTC);
    expect(neither.values.subscribedAt).toBeNull();
    expect(neither.provided).toContain('subscribedAt');
  });

  test('date_unsubscribe accepts a timestamp or a day; zero dates are null', () => {
    expect(normalizeLegacySubscriber(legacySubscriber({ date_unsubscribe: '2024-06-01 10:00:00' }), UTC).values.unsubscribedAt).toBe(
      '2024-06-01T10:00:00.000000Z',
    );
    expect(normalizeLegacySubscriber(legacySubscriber({ date_unsubscribe: '2024-06-01' }), UTC).values.unsubscribedAt).toBe(
      '2024-06-01T00:00:00.000000Z',
    );
    expect(normalizeLegacySubscriber(legacySubscriber({ date_unsubscribe: '0000-00-00 00:00:00' }), UTC).values.unsubscribedAt).toBeNull();
  });

  test('missing date_updated falls back to date_created; neither is an error', () => {
    expect(normalizeLegacySubscriber(legacySubscriber({ date_updated: null }), UTC).values.updatedAt).toBe('2024-05-08T08:26:04.000000Z');
    const err = catchError(() => normalizeLegacySubscriber(legacySubscriber({ date_updated: undefined, date_created: null }), UTC));
    expect(err).toBeInstanceOf(NormalizeError);
    expect((err as NormalizeError).field).toBe('date_updated');
    expect((err as NormalizeError).objectId).toBe('100000000000000000');
  });

  test.each([
    ['date_updated', '2024-02-30 10:00:00'],
    ['date_created', '28/05/2024'],
    ['confirmation_timestamp', 1716892229],
    ['signup_timestamp', 'soon'],
  ])('malformed %s → NormalizeError naming it', (field, value) => {
    const err = catchError(() => normalizeLegacySubscriber(legacySubscriber({ [field]: value }), UTC));
    expect(err).toBeInstanceOf(NormalizeError);
    expect((err as NormalizeError).field).toBe(field);
    expect((err as NormalizeError).message).toContain(String(value));
  });

  test('an unknown zone is a NormalizeError on sourceTimezone', () => {
    const err = catchError(() => normalizeLegacySubscriber(legacySubscriber(), { sourceTimezone: 'Nowhere/Land' }));
    expect(err).toBeInstanceOf(NormalizeError);
    expect((err as NormalizeError).field).toBe('sourceTimezone');
  });
});

describe('normalizeLegacySubscriber: fields, extra, types', () => {
  test('fields array → object without the email key; later duplicates win; scalars become strings', () => {
    const row = normalizeLegacySubscriber(
      legacySubscriber({
        fields: [
          { key: 'email', value: 'x@example.com', type: 'TEXT' },
          { key: 'name', value: 'A', type: 'TEXT' },
          { key: 'score', value: 12, type: 'NUMBER' },
          { key: 'score', value: new LosslessNumber('13'), type: 'NUMBER' },
          { key: 'birthday', value: null, type: 'DATE' },
        ],
      }),
      UTC,
    );
    expect(row.values.fields).toEqual({ name: 'A', score: '13', birthday: null });
  });

  test('unknown keys land in extra as received', () => {
    const row = normalizeLegacySubscriber(legacySubscriber({ country_id: 49, nested: { a: [1, 'b'] }, status: 'x' }), UTC);
    expect(row.values.extra).toEqual({
      country_id: 49,
      nested: { a: [1, 'b'] },
      status: 'x',
      webform_subscribe_date: null,
      user_agent: 'Mozilla/5.0',
    });
    expect(row.values.status).toBe('active'); // legacy status is `type`; a `status` key is unknown
  });

  test('numbers arrive as numbers, numeric strings or lossless numbers', () => {
    const row = normalizeLegacySubscriber(
      legacySubscriber({ sent: '7', opened: new LosslessNumber('3'), opened_rate: '0.25', clicked_rate: new LosslessNumber('0.5') }),
      UTC,
    );
    expect(row.values).toMatchObject({ sent: 7, opensCount: 3, openRate: 0.25, clickRate: 0.5 });
  });

  test.each([
    ['sent', 'many'],
    ['sent', 1.5],
    ['sent', 2 ** 40],
    ['opened_rate', 'NaN%'],
    ['email', 42],
    ['type', { a: 1 }],
    ['fields', 'name=John'],
  ])('wrong type for %s → NormalizeError', (field, value) => {
    const err = catchError(() => normalizeLegacySubscriber(legacySubscriber({ [field]: value }), UTC));
    expect(err).toBeInstanceOf(NormalizeError);
    expect((err as NormalizeError).field).toBe(field);
  });

  test('personal values are not quoted in error text', () => {
    const err = catchError(() =>
      normalizeLegacySubscriber(legacySubscriber({ fields: [{ key: 'secret', value: { x: 'private@example.com' } }] }), UTC),
    );
    expect(err).toBeInstanceOf(NormalizeError);
    expect((err as Error).message).not.toContain('private@example.com');
  });

  test('NUL characters are stripped (Postgres rejects them)', () => {
    const row = normalizeLegacySubscriber(legacySubscriber({ name: 'Jo\u0000hn', odd: 'a\u0000b' }), UTC);
    expect(row.values.name).toBe('John');
    expect(row.values.extra.odd).toBe('ab');
  });

  test('absent keys are not provided (so the store keeps stored values)', () => {
    const raw = legacySubscriber();
    delete raw.signup_ip;
    delete raw.fields;
    delete raw.name;
    const row = normalizeLegacySubscriber(raw, UTC);
    expect(row.provided).not.toContain('ipAddress');
    expect(row.provided).not.toContain('fields');
    expect(row.provided).not.toContain('name');
    expect(row.provided).toContain('updatedAt');
    expect(row.provided).toContain('extra');
  });
});

describe('normalizeWebhookSubscriber', () => {
  const batched = losslessParse(fixtureText('webhook-batched-campaign-open.json')) as {
    events: Array<{ type: string; subscriber: Record<string, unknown> }>;
  };

  test('the documented batched payload items', () => {
    expect(batched.events).toHaveLength(2);
    for (const item of batched.events) {
      const row = normalizeWebhookSubscriber(item.subscriber);
      expect(row.via).toBe('webhook');
      expect(row.values).toEqual({
        id: '100000000000000000',
        email: 'john.doe@example.com',
        name: '',
        status: 'active',
        source: 'ecommerce',
        sent: 5,
        opensCount: 0,
        clicksCount: 0,
        openRate: 0,
        clickRate: 0,
        ipAddress: null,
        subscribedAt: '2024-05-08T08:26:04.000000Z',
        unsubscribedAt: null,
        createdAt: '2024-05-08T08:26:04.000000Z',
        updatedAt: '2024-05-28T10:30:29.000000Z',
        deletedAt: null,
        forgetAt: null,
        optedInAt: null,
        optinIp: null,
        fields: { name: '', last_name: '', company: '', country: '', city: '', phone: '', state: '', zip: '' },
        extra: {},
      });
      expect(row.provided).toEqual(SUBSCRIBER_FIELDS);
    }
  });

  test('microseconds survive exactly', () => {
    const row = normalizeWebhookSubscriber(
      webhookSubscriber({ updated_at: '2024-05-28T10:30:29.000001Z', deleted_at: '2024-05-28T10:30:29.999999Z' }),
    );
    expect(row.values.updatedAt).toBe('2024-05-28T10:30:29.000001Z');
    expect(row.values.deletedAt).toBe('2024-05-28T10:30:29.999999Z');
  });

  test('name comes from fields.name; a top-level name wins', () => {
    expect(normalizeWebhookSubscriber(webhookSubscriber()).values.name).toBe('John');
    expect(normalizeWebhookSubscriber(webhookSubscriber({ name: 'Johnny' })).values.name).toBe('Johnny');
    const noName = normalizeWebhookSubscriber(webhookSubscriber({ fields: { city: 'Vilnius' } }));
    expect(noName.provided).not.toContain('name');
  });

  test('flat payload envelope keys are dropped, unknown keys kept in extra', () => {
    const row = normalizeWebhookSubscriber(webhookSubscriber({ event: 'subscriber.created', account_id: 123, tags: ['vip'] }));
    expect(row.values.extra).toEqual({ tags: ['vip'] });
  });

  test('a webhook without legacy keys does not provide them; absent keys are not provided', () => {
    const raw = webhookSubscriber();
    delete raw.deleted_at;
    delete raw.ip_address;
    const row = normalizeWebhookSubscriber(raw);
    expect(row.provided).not.toContain('deletedAt');
    expect(row.provided).not.toContain('ipAddress');
    expect(row.provided).toContain('source');
  });

  test('missing updated_at falls back to created_at; neither is an error', () => {
    expect(normalizeWebhookSubscriber(webhookSubscriber({ updated_at: null })).values.updatedAt).toBe('2024-05-08T08:26:04.000000Z');
    const err = catchError(() => normalizeWebhookSubscriber(webhookSubscriber({ updated_at: undefined, created_at: undefined })));
    expect((err as NormalizeError).field).toBe('updated_at');
  });

  test.each([
    ['updated_at', '2024-05-28 10:30:29'],
    ['forget_at', 'tomorrow'],
    ['created_at', 12],
    ['opens_count', 'x'],
    ['fields', [1, 2]],
    ['id', 'abc'],
  ])('garbage %s → NormalizeError naming it', (field, value) => {
    const err = catchError(() => normalizeWebhookSubscriber(webhookSubscriber({ [field]: value })));
    expect(err).toBeInstanceOf(NormalizeError);
    expect((err as NormalizeError).field).toMatch(new RegExp(`^${field}`));
  });

  test('a non-object is a NormalizeError', () => {
    expect(() => normalizeWebhookSubscriber(null as unknown as Record<string, unknown>)).toThrow(NormalizeError);
    expect(() => normalizeWebhookSubscriber([] as unknown as Record<string, unknown>)).toThrow(NormalizeError);
  });
});

describe('groups, automations, campaigns', () => {
  test('group and automation', () => {
    expect(normalizeGroup({ id: '7', name: 'VIP' })).toEqual({ id: '7', name: 'VIP' });
    expect(normalizeAutomation({ id: 8, name: 'Welcome' })).toEqual({ id: '8', name: 'Welcome' });
    expect(() => normalizeGroup({ name: 'no id' })).toThrow(NormalizeError);
  });

  test('campaign from an event and from a flat campaign.sent payload', () => {
    const campaign = {
      id: '100000000000000000',
      name: 'Campaign Example',
      total_recipients: 100,
      preview_url: 'https://preview_url',
      date: '2024-05-28T07:11:08.000000Z',
    };
    expect(normalizeCampaign(campaign)).toEqual({
      id: '100000000000000000',
      name: 'Campaign Example',
      totalRecipients: 100,
      previewUrl: 'https://preview_url',
      date: '2024-05-28T07:11:08.000000Z',
      sentAt: null,
    });
    const sent = normalizeCampaign({ ...campaign, event: 'campaign.sent', account_id: 1 }, { sent: true });
    expect(sent.sentAt).toBe('2024-05-28T07:11:08.000000Z');
    expect(() => normalizeCampaign({ ...campaign, date: '28.05.2024' })).toThrow(NormalizeError);
  });
});

describe('normalizeId and erasePersonalData', () => {
  test('ids', () => {
    expect(normalizeId(new LosslessNumber('1261159647788771324'))).toBe('1261159647788771324');
    expect(normalizeId(1261159647788771324n)).toBe('1261159647788771324');
    expect(() => normalizeId(1261159647788771324)).toThrow(/lossless/);
  });

  test('erase keeps id, status and timestamps', () => {
    const v = normalizeWebhookSubscriber(webhookSubscriber({ tags: ['x'], optin_ip: '1.2.3.4' })).values;
    const erased = erasePersonalData(v);
    expect(erased).toMatchObject({ email: null, name: null, ipAddress: null, optinIp: null, fields: {}, extra: {} });
    expect(erased).toMatchObject({ id: v.id, status: v.status, updatedAt: v.updatedAt, createdAt: v.createdAt, sent: v.sent });
  });
});

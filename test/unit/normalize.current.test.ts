import { parse as losslessParse } from 'lossless-json';
import { describe, expect, test } from 'vitest';
import { normalizeCurrentSubscriber, normalizeWebhookSubscriber, NormalizeError } from '../../src/mirror/normalize.js';
import { World } from '../../src/simulator/index.js';

const UTC = { sourceTimezone: 'UTC' };

function currentRow(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    id: '1261159647788771324',
    email: 'ada@example.com',
    status: 'active',
    source: 'api',
    sent: 3,
    opens_count: 1,
    clicks_count: 0,
    open_rate: 33.33,
    click_rate: 0,
    ip_address: null,
    subscribed_at: '2024-05-28 10:30:29',
    unsubscribed_at: null,
    created_at: '2024-05-28 10:30:29',
    updated_at: '2024-06-01 08:00:00',
    fields: { name: 'Ada', last_name: null, z_i_p: '99999' },
    opted_in_at: null,
    optin_ip: null,
    ...overrides,
  };
}

describe('normalizeCurrentSubscriber', () => {
  test('maps a listed member like its webhook payload, with second-granular dates and via current', () => {
    const world = new World({ subscribers: 5, largeIds: true, seed: 7 });
    const id = [...world.ids()][2] as string;
    const listed = losslessParse(JSON.stringify(world.renderCurrent(id))) as Record<string, unknown>;
    const current = normalizeCurrentSubscriber(listed, UTC);
    const webhook = normalizeWebhookSubscriber(world.renderWebhook(id) as unknown as Record<string, unknown>);
    expect(current.via).toBe('current');
    expect(current.values.id).toBe(id);
    const seconds = (t: string | null) => (t === null ? null : `${t.slice(0, 19)}.000000Z`);
    expect(current.values).toEqual({
      ...webhook.values,
      subscribedAt: seconds(webhook.values.subscribedAt),
      unsubscribedAt: seconds(webhook.values.unsubscribedAt),
      createdAt: seconds(webhook.values.createdAt),
      updatedAt: seconds(webhook.values.updatedAt),
      optedInAt: seconds(webhook.values.optedInAt),
    });
    // A list never carries deleted_at/forget_at: those columns keep what the webhooks stored.
    expect(current.provided).toEqual(webhook.provided.filter((f) => f !== 'deletedAt' && f !== 'forgetAt'));
  });

  test('keeps ids above 2^53 exact, whether sent as a string or a lossless number', () => {
    expect(normalizeCurrentSubscriber(currentRow(), UTC).values.id).toBe('1261159647788771324');
    const parsed = losslessParse(JSON.stringify(currentRow()).replace('"1261159647788771324"', '1261159647788771324')) as Record<
      string,
      unknown
    >;
    expect(normalizeCurrentSubscriber(parsed, UTC).values.id).toBe('1261159647788771324');
  });

  test('reads zoneless list dates in the source timezone, and dates with a zone by their own', () => {
    const row = normalizeCurrentSubscriber(currentRow({ updated_at: '2024-06-01 08:00:00' }), { sourceTimezone: 'Pacific/Kiritimati' });
    expect(row.values.updatedAt).toBe('2024-05-31T18:00:00.000000Z');
    const iso = normalizeCurrentSubscriber(currentRow({ updated_at: '2024-06-01T08:00:00.123456Z' }), UTC);
    expect(iso.values.updatedAt).toBe('2024-06-01T08:00:00.123456Z');
    expect(normalizeCurrentSubscriber(currentRow(), UTC).values.fields).toEqual({ name: 'Ada', last_name: null, z_i_p: '99999' });
  });

  test('rejects a malformed date, a missing clock, a bad id or an unknown zone with a NormalizeError naming the field', () => {
    const cases: Array<[Record<string, unknown>, string, string]> = [
      [currentRow({ updated_at: '01/06/2024' }), 'UTC', 'updated_at'],
      [currentRow({ updated_at: null, created_at: null }), 'UTC', 'updated_at'],
      [currentRow({ id: 12.5 }), 'UTC', 'id'],
      [currentRow(), 'Mars/Olympus', 'sourceTimezone'],
    ];
    for (const [raw, zone, field] of cases) {
      let error: unknown;
      try {
        normalizeCurrentSubscriber(raw, { sourceTimezone: zone });
      } catch (e) {
        error = e;
      }
      expect(error, field).toBeInstanceOf(NormalizeError);
      expect((error as NormalizeError).field).toBe(field);
    }
  });
});

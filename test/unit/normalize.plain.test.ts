/**
 * The plain reading of a legacy member (`legacySubscriberRowOf`, what a pass runs for every member)
 * against the zod schema it stands in for: on every input it gives the schema's row, key order
 * included, or null where the schema refuses (the caller then asks the schema, for its error).
 */
import { describe, expect, test } from 'vitest';
import { legacySubscriberRowOf, legacySubscriberRowSchema } from '../../src/mirror/schemas.js';
import { World } from '../../src/simulator/world.js';
import { parseJsonLossless } from '../../src/upstream/json.js';

const ZONES = ['UTC', 'America/New_York', 'Asia/Kolkata'];

/** The plain row and the schema's, or null for each where it refused. */
function both(raw: Record<string, unknown>, zone: string): { plain: string | null; schema: string | null } {
  const plain = legacySubscriberRowOf(raw, zone);
  const parsed = legacySubscriberRowSchema(zone).safeParse(raw);
  return { plain: plain === null ? null : JSON.stringify(plain), schema: parsed.success ? JSON.stringify(parsed.data) : null };
}

function expectAgreement(raw: Record<string, unknown>, zone: string): void {
  const { plain, schema } = both(raw, zone);
  // Plain may refer a row to the schema, never accept one the schema refuses or give another row.
  if (plain !== null) expect(plain).toBe(schema);
}

describe('legacySubscriberRowOf: the schema, without zod', () => {
  test('simulated members of every type, small and large ids, in three zones: the same rows', () => {
    for (const largeIds of [false, true]) {
      const world = new World({ subscribers: 600, groups: 2, seed: 7, largeIds });
      const groupId = world.groupIds()[0] ?? '';
      const ids = world.members(groupId);
      expect(ids.length).toBeGreaterThan(100);
      for (const zone of ZONES) {
        for (const id of ids) {
          const raw = parseJsonLossless(world.renderLegacyJson(id)) as Record<string, unknown>;
          const { plain, schema } = both(raw, zone);
          expect(schema).not.toBeNull();
          expect(plain).toBe(schema);
        }
      }
    }
  });

  const base = (): Record<string, unknown> => ({
    id: 1261159647788771324n.toString(),
    email: 'ada@example.com',
    name: 'Ada',
    sent: '3',
    opened: 1,
    opened_rate: '33.3',
    clicked: 0,
    clicked_rate: 0,
    type: 'active',
    signup_ip: null,
    signup_timestamp: '2024-05-28 10:30:29',
    confirmation_ip: '',
    confirmation_timestamp: '0000-00-00 00:00:00',
    date_subscribe: '2024-05-28',
    date_unsubscribe: null,
    date_created: '2024-05-28 10:30:29',
    date_updated: '2024-06-01 08:00:00',
    fields: [
      { key: 'email', value: 'ada@example.com', type: 'TEXT' },
      { key: 'name', value: 'Ada', type: 'TEXT' },
      { key: 'zip', value: 12345, type: 'NUMBER' },
    ],
    country_id: 49,
    unknown_key: { nested: ['a\u0000b'] },
  });

  /** Each edit of one key: odd but valid values, and values the schema refuses. */
  const EDITS: Array<[string, unknown]> = [
    ['id', 42],
    ['id', ' 0042 '],
    ['id', -1],
    ['id', 'x1'],
    ['id', undefined],
    ['email', null],
    ['email', 'a\u0000b@example.com'],
    ['email', 5],
    ['name', ''],
    ['sent', ''],
    ['sent', '1.5'],
    ['sent', '99999999999'],
    ['sent', 'many'],
    ['opened', null],
    ['opened_rate', '1e2'],
    ['opened_rate', 'NaN'],
    ['clicked_rate', Number.POSITIVE_INFINITY],
    ['type', 'unsubscribed'],
    ['signup_timestamp', null],
    ['signup_timestamp', '2024-05-28'],
    ['signup_timestamp', '2024-02-30 10:00:00'],
    ['signup_timestamp', 20240528],
    ['date_subscribe', null],
    ['date_unsubscribe', '2024-07-01 00:00:00'],
    ['date_updated', null],
    ['date_updated', ''],
    ['date_updated', '0000-00-00 00:00:00'],
    ['date_updated', 'yesterday'],
    ['date_created', null],
    ['confirmation_timestamp', '2024-03-10 02:30:00'],
    ['fields', null],
    ['fields', { city: 'Paris', email: 'x@example.com', n: 1, b: true }],
    [
      'fields',
      [
        { key: 'a\u0000', value: 'x\u0000', type: 'TEXT' },
        { key: 'a', value: 'later wins' },
      ],
    ],
    ['fields', [{ key: '', value: 'x' }]],
    ['fields', [{ key: 'k', value: { no: 1 } }]],
    ['fields', 'text'],
    ['fields', { bad: [1] }],
    ['extra\u0000key', 'v\u0000'],
    ['another', [1, 'two', null]],
  ];

  test('odd values and refused ones: the same row, or the schema decides', () => {
    let agreedRows = 0;
    let referred = 0;
    for (const zone of ZONES) {
      for (const [key, value] of EDITS) {
        const raw = base();
        if (value === undefined) delete raw[key];
        else raw[key] = value;
        expectAgreement(raw, zone);
        const { plain, schema } = both(raw, zone);
        if (schema === null) expect(plain).toBeNull();
        if (plain === null) referred += 1;
        else agreedRows += 1;
      }
      // Both clocks gone: the schema refuses, so must the plain reading.
      const clockless = base();
      delete clockless.date_updated;
      delete clockless.date_created;
      expect(both(clockless, zone)).toEqual({ plain: null, schema: null });
    }
    expect(agreedRows).toBeGreaterThan(ZONES.length * 20);
    expect(referred).toBeGreaterThan(ZONES.length * 8);
  });

  test('a __proto__ key goes to the schema, and pollutes nothing', () => {
    const raw = JSON.parse(`{"id":1,"date_updated":"2024-06-01 08:00:00","__proto__":{"polluted":true}}`) as Record<string, unknown>;
    expect(legacySubscriberRowOf(raw, 'UTC')).toBeNull();
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });
});

/**
 * The registry of `subscribers` columns (src/db/schema.ts) and what derives from it without a
 * database: every data column is filled from upstream, and every key of a webhook subscriber is
 * either kept or emptied by a redaction (none is both).
 */
import { getTableColumns } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { subscribers } from '../../src/db/schema.js';
import { PERSONAL_FIELDS, SUBSCRIBER_COLUMN_NAMES, SUBSCRIBER_FIELDS, SUBSCRIBER_TABLE_COLUMNS } from '../../src/db/subscriber-columns.js';
import { SUBSCRIBER_EMPTIED, SUBSCRIBER_KEPT_KEYS, SUBSCRIBER_MARKER_KEYS } from '../../src/mirror/personal-data.js';
import { upstreamKeysOf, WEBHOOK_ENVELOPE_KEYS, WEBHOOK_KNOWN_KEYS } from '../../src/mirror/schemas.js';
import { emptyValues, erasePersonalData } from '../../src/mirror/normalize.js';

describe('the subscribers registry', () => {
  it('lists every column of the table once, in table order', () => {
    // All but the account, which no statement of the store names: rows take the session's.
    expect(SUBSCRIBER_COLUMN_NAMES).toEqual(
      Object.values(getTableColumns(subscribers))
        .map((c) => c.name)
        .filter((name) => name !== 'account'),
    );
    expect(new Set(SUBSCRIBER_TABLE_COLUMNS.map((c) => c.field)).size).toBe(SUBSCRIBER_TABLE_COLUMNS.length);
  });

  it('fills every data column from some upstream key (extra collects the unknown ones)', () => {
    const unfilled = SUBSCRIBER_FIELDS.filter((f) => f !== 'extra' && upstreamKeysOf([f]).length === 0);
    expect(unfilled, 'data columns no upstream key fills (map them in src/mirror/schemas.ts)').toEqual([]);
  });

  it('empties exactly the personal fields', () => {
    const values = { ...emptyValues('1', '2024-01-01T00:00:00.000000Z') } as Record<string, unknown>;
    for (const f of SUBSCRIBER_FIELDS) values[f] = f === 'fields' || f === 'extra' ? { k: 'v' } : 'x';
    const erased = erasePersonalData(values as never) as unknown as Record<string, unknown>;
    for (const f of SUBSCRIBER_FIELDS) {
      const personal = PERSONAL_FIELDS.includes(f);
      expect(erased[f], f).toEqual(personal ? (f === 'fields' || f === 'extra' ? {} : null) : values[f]);
    }
  });
});

describe('personal data in delivery bodies', () => {
  it('classifies every known key of a webhook subscriber as kept or emptied, never both', () => {
    const subscriberKeys = [...WEBHOOK_KNOWN_KEYS].filter((k) => !WEBHOOK_ENVELOPE_KEYS.has(k));
    const emptied = Object.keys(SUBSCRIBER_EMPTIED);
    expect(subscriberKeys.filter((k) => !SUBSCRIBER_KEPT_KEYS.has(k) && !emptied.includes(k))).toEqual([]);
    expect(emptied.filter((k) => SUBSCRIBER_KEPT_KEYS.has(k))).toEqual([]);
    expect(SUBSCRIBER_MARKER_KEYS.every((k) => emptied.includes(k))).toBe(true);
    expect(SUBSCRIBER_MARKER_KEYS).not.toContain('name');
  });
});

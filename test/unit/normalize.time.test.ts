import { describe, expect, test } from 'vitest';
import { parseIsoTimestamp, parseLegacyTimestamp, TimestampError, TimezoneError } from '../../src/ground/time.js';

describe('parseLegacyTimestamp', () => {
  test.each([
    ['UTC', '2022-04-05 22:39:05', '2022-04-05T22:39:05.000000Z'],
    // +14: the wall clock runs 14 h ahead of UTC, so UTC shows 14 h earlier (the previous day for early times).
    ['Pacific/Kiritimati', '2022-04-05 22:39:05', '2022-04-05T08:39:05.000000Z'],
    ['Pacific/Kiritimati', '2022-04-05 03:00:00', '2022-04-04T13:00:00.000000Z'],
    // Etc/GMT+12 is UTC-12 (POSIX sign): UTC is 12 h later, crossing into the next day.
    ['Etc/GMT+12', '2022-04-05 22:39:05', '2022-04-06T10:39:05.000000Z'],
    ['Asia/Kolkata', '2022-04-05 00:00:00', '2022-04-04T18:30:00.000000Z'],
    ['Europe/Berlin', '2024-01-15 12:00:00', '2024-01-15T11:00:00.000000Z'],
    ['Europe/Berlin', '2024-07-15 12:00:00', '2024-07-15T10:00:00.000000Z'],
  ])('%s %s', (zone, text, expected) => {
    expect(parseLegacyTimestamp(text, zone)).toBe(expected);
  });

  test('DST gap: a skipped wall time moves forward by the gap', () => {
    // 2024-03-10 02:00 EST → 03:00 EDT in New York; 02:30 does not exist and reads as 03:30 EDT.
    expect(parseLegacyTimestamp('2024-03-10 02:30:00', 'America/New_York')).toBe('2024-03-10T07:30:00.000000Z');
    expect(parseLegacyTimestamp('2024-03-31 02:30:00', 'Europe/Berlin')).toBe('2024-03-31T01:30:00.000000Z');
    // Around the gap the offsets are the plain ones.
    expect(parseLegacyTimestamp('2024-03-10 01:59:59', 'America/New_York')).toBe('2024-03-10T06:59:59.000000Z');
    expect(parseLegacyTimestamp('2024-03-10 03:00:00', 'America/New_York')).toBe('2024-03-10T07:00:00.000000Z');
  });

  test('DST overlap: a repeated wall time resolves to the earlier instant', () => {
    expect(parseLegacyTimestamp('2024-11-03 01:30:00', 'America/New_York')).toBe('2024-11-03T05:30:00.000000Z');
    expect(parseLegacyTimestamp('2024-10-27 02:30:00', 'Europe/Berlin')).toBe('2024-10-27T00:30:00.000000Z');
    // Half-hour DST (Lord Howe): 01:45 happens twice on 2024-04-07, first at +11.
    expect(parseLegacyTimestamp('2024-04-07 01:45:00', 'Australia/Lord_Howe')).toBe('2024-04-06T14:45:00.000000Z');
  });

  test('day-only values read as 00:00 in the zone', () => {
    expect(parseLegacyTimestamp('2022-04-05', 'UTC')).toBe('2022-04-05T00:00:00.000000Z');
    expect(parseLegacyTimestamp('2022-04-05', 'Pacific/Kiritimati')).toBe('2022-04-04T10:00:00.000000Z');
  });

  test('zero dates and empty strings mean none', () => {
    expect(parseLegacyTimestamp('0000-00-00 00:00:00', 'UTC')).toBeNull();
    expect(parseLegacyTimestamp('0000-00-00', 'Europe/Berlin')).toBeNull();
    expect(parseLegacyTimestamp('', 'UTC')).toBeNull();
  });

  test('a value that carries its own zone is read by it', () => {
    expect(parseLegacyTimestamp('2022-04-05T22:39:05.123456Z', 'Pacific/Kiritimati')).toBe('2022-04-05T22:39:05.123456Z');
  });

  test.each(['2022-02-30 00:00:00', '2022-04-05 24:00:00', '2022-13-01 00:00:00', '05/04/2022', '2022-4-5', 'yesterday'])(
    'garbage %s throws',
    (text) => {
      expect(() => parseLegacyTimestamp(text, 'UTC')).toThrow(TimestampError);
    },
  );

  test('leap day is valid only in leap years', () => {
    expect(parseLegacyTimestamp('2024-02-29 00:00:00', 'UTC')).toBe('2024-02-29T00:00:00.000000Z');
    expect(() => parseLegacyTimestamp('2023-02-29 00:00:00', 'UTC')).toThrow(TimestampError);
  });

  test('unknown zone throws TimezoneError', () => {
    expect(() => parseLegacyTimestamp('2022-04-05 00:00:00', 'Mars/Olympus_Mons')).toThrow(TimezoneError);
  });
});

describe('parseLegacyTimestamp: property over a year of wall times', () => {
  /** The wall time an instant shows in a zone, as "Y-m-d H:i:s" (an independent Intl formatting). */
  function wallOf(epochMs: number, zone: string): string {
    const parts = new Intl.DateTimeFormat('en-CA', {
      timeZone: zone,
      hourCycle: 'h23',
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
      hour: '2-digit',
      minute: '2-digit',
      second: '2-digit',
    }).formatToParts(epochMs);
    const get = (type: string) => parts.find((p) => p.type === type)?.value ?? '';
    return `${get('year')}-${get('month')}-${get('day')} ${get('hour')}:${get('minute')}:${get('second')}`;
  }

  test.each([
    'America/New_York',
    'Europe/Berlin',
    'Australia/Lord_Howe',
    'America/Santiago',
    'America/St_Johns',
    'Africa/Casablanca',
    'Pacific/Chatham',
  ])('%s: every sampled wall time maps to an instant showing it (gaps shift forward, overlaps take the earlier)', (zone) => {
    let gaps = 0;
    for (let day = 0; day < 366; day++) {
      // Early-morning samples hit every zone's transition hour (00:00–03:45); the rest cover the day.
      for (const minutes of [15, 45, 135, 150, 165, 270, 630, 990, 1350]) {
        const local = new Date(Date.UTC(2024, 0, 1 + day, 0, minutes));
        const wall = local.toISOString().slice(0, 19).replace('T', ' ');
        const instant = Date.parse(parseLegacyTimestamp(wall, zone) as string);
        const shown = wallOf(instant, zone);
        if (shown === wall) {
          // The earlier of two occurrences: half an hour or an hour before, the wall time differs.
          expect(wallOf(instant - 1_800_000, zone)).not.toBe(wall);
          expect(wallOf(instant - 3_600_000, zone)).not.toBe(wall);
        } else {
          gaps++;
          const shift = Date.parse(`${shown.replace(' ', 'T')}Z`) - local.getTime();
          expect({ wall, shift }).toEqual({ wall, shift: expect.toSatisfy((n: number) => n === 1_800_000 || n === 3_600_000) });
        }
      }
    }
    // Each of these zones skips wall time once in 2024 (a spring-forward night): some samples fall in it.
    expect(gaps).toBeGreaterThan(0);
  });
});

describe('parseIsoTimestamp', () => {
  test('keeps all six fractional digits', () => {
    expect(parseIsoTimestamp('2024-05-28T10:30:29.123456Z')).toBe('2024-05-28T10:30:29.123456Z');
    expect(parseIsoTimestamp('2024-05-28T10:30:29.000001Z')).toBe('2024-05-28T10:30:29.000001Z');
    expect(parseIsoTimestamp('2024-05-28T10:30:29.999999Z')).toBe('2024-05-28T10:30:29.999999Z');
  });

  test('pads short fractions and truncates beyond microseconds', () => {
    expect(parseIsoTimestamp('2024-05-28T10:30:29Z')).toBe('2024-05-28T10:30:29.000000Z');
    expect(parseIsoTimestamp('2024-05-28T10:30:29.5Z')).toBe('2024-05-28T10:30:29.500000Z');
    expect(parseIsoTimestamp('2024-05-28T10:30:29.1234569Z')).toBe('2024-05-28T10:30:29.123456Z');
  });

  test('converts offsets to UTC without touching the microseconds', () => {
    expect(parseIsoTimestamp('2024-05-28T00:30:29.654321+02:00')).toBe('2024-05-27T22:30:29.654321Z');
    expect(parseIsoTimestamp('2024-05-28T23:30:29.000007-05:00')).toBe('2024-05-29T04:30:29.000007Z');
  });

  test.each(['2024-05-28 10:30:29', '2024-05-28T10:30:29', '2024-05-32T10:30:29Z', 'not a date', '2024-05-28T10:30:29.Z'])(
    'rejects %s',
    (text) => {
      expect(() => parseIsoTimestamp(text)).toThrow(TimestampError);
    },
  );
});

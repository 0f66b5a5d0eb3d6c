import { describe, expect, it } from 'vitest';
import {
  addDays,
  formatLocalDate,
  formatLocalDateTime,
  formatUtcDateTime,
  isoMicros,
  parseIsoMicros,
  parseYmd,
  parseZone,
  startOfLocalDay,
} from '../../src/simulator/time.js';

describe('simulator time: zones', () => {
  it.each([
    ['UTC', 0],
    ['Z', 0],
    ['+14:00', 14 * 60],
    ['-12:00', -12 * 60],
    ['+05:30', 330],
    ['-0930', -570],
    ['UTC+3', 180],
  ])('parses fixed zone %s', (name, offset) => {
    expect(parseZone(name).offsetMinutesAt(Date.UTC(2024, 0, 1))).toBe(offset);
  });

  it('reads IANA offsets through Intl, including DST', () => {
    const berlin = parseZone('Europe/Berlin');
    expect(berlin.offsetMinutesAt(Date.UTC(2024, 0, 15, 12))).toBe(60);
    expect(berlin.offsetMinutesAt(Date.UTC(2024, 6, 15, 12))).toBe(120);
    expect(parseZone('Pacific/Kiritimati').offsetMinutesAt(Date.UTC(2024, 0, 1))).toBe(14 * 60);
  });

  it.each(['Mars/Olympus', '+15:00', '+01:75', 'nonsense'])('rejects %s', (name) => {
    expect(() => parseZone(name)).toThrow(RangeError);
  });
});

describe('simulator time: calendar days', () => {
  it('parses strict YYYY-MM-DD calendar dates only', () => {
    expect(parseYmd('2024-02-29')).toEqual({ y: 2024, m: 2, d: 29 });
    for (const bad of ['2023-02-29', '2024-13-01', '2024-1-01', '2024-01-01T00:00', '', '20240101', '2024-00-10']) {
      expect(parseYmd(bad)).toBeNull();
    }
  });

  it('adds days across months and years', () => {
    expect(addDays({ y: 2024, m: 12, d: 31 }, 1)).toEqual({ y: 2025, m: 1, d: 1 });
    expect(addDays({ y: 2024, m: 3, d: 1 }, -1)).toEqual({ y: 2024, m: 2, d: 29 });
  });

  it('finds local midnight in fixed offsets at the edges of ±14 h', () => {
    const day = { y: 2024, m: 3, d: 10 };
    expect(new Date(startOfLocalDay(day, parseZone('+14:00'))).toISOString()).toBe('2024-03-09T10:00:00.000Z');
    expect(new Date(startOfLocalDay(day, parseZone('-12:00'))).toISOString()).toBe('2024-03-10T12:00:00.000Z');
    expect(new Date(startOfLocalDay(day, parseZone('UTC'))).toISOString()).toBe('2024-03-10T00:00:00.000Z');
  });

  it('starts a day whose midnight was skipped by DST when the gap ends', () => {
    // Brazil moved clocks from 00:00 to 01:00 on 2018-11-04.
    const start = startOfLocalDay({ y: 2018, m: 11, d: 4 }, parseZone('America/Sao_Paulo'));
    expect(new Date(start).toISOString()).toBe('2018-11-04T03:00:00.000Z');
  });

  it('handles ordinary DST days in IANA zones', () => {
    const ny = parseZone('America/New_York');
    expect(new Date(startOfLocalDay({ y: 2024, m: 3, d: 10 }, ny)).toISOString()).toBe('2024-03-10T05:00:00.000Z');
    expect(new Date(startOfLocalDay({ y: 2024, m: 3, d: 11 }, ny)).toISOString()).toBe('2024-03-11T04:00:00.000Z');
  });
});

describe('simulator time: renderings', () => {
  const instant = Date.UTC(2024, 2, 9, 10, 0, 0, 999);

  it('renders legacy Y-m-d H:i:s in the zone, truncated to whole seconds', () => {
    expect(formatLocalDateTime(instant, parseZone('UTC'))).toBe('2024-03-09 10:00:00');
    expect(formatLocalDateTime(instant, parseZone('+14:00'))).toBe('2024-03-10 00:00:00');
    expect(formatLocalDateTime(instant, parseZone('-12:00'))).toBe('2024-03-08 22:00:00');
    expect(formatLocalDate(instant, parseZone('+14:00'))).toBe('2024-03-10');
  });

  it('renders webhook ISO timestamps with six fractional digits and parses them back', () => {
    const us = Date.UTC(2024, 4, 28, 10, 30, 29) * 1000 + 123_456;
    expect(isoMicros(us)).toBe('2024-05-28T10:30:29.123456Z');
    expect(parseIsoMicros('2024-05-28T10:30:29.123456Z')).toBe(us);
    expect(isoMicros(Date.UTC(2024, 4, 8, 8, 26, 4) * 1000)).toBe('2024-05-08T08:26:04.000000Z');
  });

  it('renders webhook resource stamps as YYYY-MM-DD HH:MM:SS UTC', () => {
    expect(formatUtcDateTime(Date.UTC(2022, 9, 4, 21, 59, 40, 700))).toBe('2022-10-04 21:59:40');
  });
});

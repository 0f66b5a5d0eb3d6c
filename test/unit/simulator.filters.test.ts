import { describe, expect, it } from 'vitest';
import { QueryError, compileFilters, parseListQuery } from '../../src/simulator/filters.js';
import { parseZone } from '../../src/simulator/time.js';

const utc = parseZone('UTC');
const midnight = Date.UTC(2024, 2, 10) / 1000;
const nextMidnight = Date.UTC(2024, 2, 11) / 1000;

describe('simulator filters: parsing', () => {
  it('reads nested filters, limit and offset from the raw query', () => {
    const query = parseListQuery(
      'filters%5Bdate_updated%5D%5B%24gte%5D=2024-03-10&filters[date_updated][$lt]=2024-03-11&limit=25&offset=50',
    );
    expect(query.limit).toBe(25);
    expect(query.offset).toBe(50);
    expect(query.filters.map((f) => [f.key, f.op, f.text])).toEqual([
      ['date_updated', '$gte', '2024-03-10'],
      ['date_updated', '$lt', '2024-03-11'],
    ]);
  });

  it('defaults to limit 100, offset 0, no filters', () => {
    expect(parseListQuery('')).toEqual({ filters: [], limit: 100, offset: 0 });
  });

  it.each([
    ['filters[date_sent][$gt]=2024-01-01', /filter key: date_sent/],
    ['filters[date_updated][$eq]=2024-01-01', /filter operator: \$eq/],
    ['filters[date_updated][$gt]=2024-02-30', /Invalid date/],
    ['filters[date_updated][$gt]=2024-01-01T00:00:00', /Invalid date/],
    ['filters[date_updated][$gt]=yesterday', /Invalid date/],
    ['filters[date_updated]=2024-01-01', /Invalid filter parameter/],
    ['filters=x', /Invalid filter parameter/],
    ['limit=ten', /Invalid limit/],
    ['offset=-1', /Invalid offset/],
  ])('rejects %s', (raw, message) => {
    expect(() => parseListQuery(raw)).toThrow(QueryError);
    expect(() => parseListQuery(raw)).toThrow(message);
  });
});

describe('simulator filters: boundary semantics', () => {
  const single = (op: string, boundary: 'midnight' | 'whole-day') =>
    compileFilters(parseListQuery(`filters[date_created][${op}]=2024-03-10`).filters, boundary, utc)[0];

  it.each([
    ['$gt', { fromSec: midnight + 1, toSec: Infinity }],
    ['$gte', { fromSec: midnight, toSec: Infinity }],
    ['$lt', { fromSec: -Infinity, toSec: midnight }],
    ['$lte', { fromSec: -Infinity, toSec: midnight + 1 }],
  ])('midnight: %s compares with D 00:00:00', (op, range) => {
    expect(single(op, 'midnight')).toMatchObject({ key: 'date_created', ...range });
  });

  it.each([
    ['$gt', { fromSec: nextMidnight, toSec: Infinity }],
    ['$gte', { fromSec: midnight, toSec: Infinity }],
    ['$lt', { fromSec: -Infinity, toSec: midnight }],
    ['$lte', { fromSec: -Infinity, toSec: nextMidnight }],
  ])('whole-day: %s compares calendar days', (op, range) => {
    expect(single(op, 'whole-day')).toMatchObject({ key: 'date_created', ...range });
  });

  it('intersects two operators on one key into a range and keeps keys apart', () => {
    const ranges = compileFilters(
      parseListQuery('filters[date_created][$gte]=2024-03-10&filters[date_created][$lt]=2024-03-11&filters[date_updated][$gt]=2024-03-01')
        .filters,
      'whole-day',
      utc,
    );
    expect(ranges).toEqual([
      { key: 'date_created', fromSec: midnight, toSec: nextMidnight },
      { key: 'date_updated', fromSec: Date.UTC(2024, 2, 2) / 1000, toSec: Infinity },
    ]);
  });

  it('interprets the date in the configured zone', () => {
    const [plus14] = compileFilters(parseListQuery('filters[date_updated][$gte]=2024-03-10').filters, 'midnight', parseZone('+14:00'));
    const [minus12] = compileFilters(parseListQuery('filters[date_updated][$gte]=2024-03-10').filters, 'midnight', parseZone('-12:00'));
    expect(plus14?.fromSec).toBe(Date.UTC(2024, 2, 9, 10) / 1000);
    expect(minus12?.fromSec).toBe(Date.UTC(2024, 2, 10, 12) / 1000);
  });
});

/**
 * The project's one date module: timestamp parsing for the mirror, and the day arithmetic of the
 * poll's date filters. Every timestamp leaves this module as a canonical UTC string
 * `YYYY-MM-DDTHH:MM:SS.ffffffZ` (exactly six fractional digits).
 *
 * Strings, not `Date`: a JS Date keeps milliseconds only, while webhook `updated_at` values carry
 * microseconds and invariant 2 orders versions by them. The canonical form also sorts
 * lexicographically in time order (years 0001–9999), which the store relies on to deduplicate a
 * batch without a round trip.
 *
 * Legacy `Y-m-d H:i:s` values have no zone (docs/upstream.md, "Legacy Single Subscriber": configurable, UTC by default); they are
 * read in an IANA zone with `Intl.DateTimeFormat`, so no tz database dependency is needed.
 */

/** Thrown for a value that is not a timestamp of the expected shape; the caller names the field. */
export class TimestampError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TimestampError';
  }
}

/** Thrown for a timezone name `Intl` does not know. */
export class TimezoneError extends Error {
  constructor(readonly timeZone: string) {
    super(`unknown timezone "${timeZone}" (expected an IANA name such as UTC or Europe/Berlin)`);
    this.name = 'TimezoneError';
  }
}

/** Matches the canonical form produced here. */
export const CANONICAL_TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;

export function isCanonicalTimestamp(value: unknown): value is string {
  return typeof value === 'string' && CANONICAL_TIMESTAMP.test(value);
}

const DAY_MS = 86_400_000;

interface CivilTime {
  year: number;
  month: number;
  day: number;
  hour: number;
  minute: number;
  second: number;
}

/** Epoch milliseconds of a civil time read as UTC; `Date.UTC` would map years 0–99 to 1900–1999. */
function civilToUtcMs(t: CivilTime): number {
  const d = new Date(0);
  d.setUTCFullYear(t.year, t.month - 1, t.day);
  d.setUTCHours(t.hour, t.minute, t.second, 0);
  return d.getTime();
}

const MONTH_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31] as const;

function daysInMonth(year: number, month: number): number {
  if (month === 2) return isLeap(year) ? 29 : 28;
  return MONTH_DAYS[month - 1] ?? 0;
}

function isLeap(year: number): boolean {
  return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
}

function checkCivil(t: CivilTime): string | null {
  if (t.year < 1 || t.year > 9999) return 'year out of range 0001-9999';
  if (t.month < 1 || t.month > 12) return 'month out of range';
  if (t.day < 1 || t.day > daysInMonth(t.year, t.month)) return 'day out of range';
  if (t.hour > 23 || t.minute > 59 || t.second > 59) return 'time of day out of range';
  return null;
}

const pad2 = (n: number) => String(n).padStart(2, '0');
const pad4 = (n: number) => String(n).padStart(4, '0');

function formatCivil(t: CivilTime, micros: string): string {
  return `${pad4(t.year)}-${pad2(t.month)}-${pad2(t.day)}T${pad2(t.hour)}:${pad2(t.minute)}:${pad2(t.second)}.${micros}Z`;
}

/** Canonical string of an epoch-milliseconds instant (microseconds `ms*1000`). */
export function formatEpochMs(ms: number): string {
  const iso = new Date(ms).toISOString();
  if (iso.length !== 24) throw new TimestampError(`instant ${ms} is outside years 0001-9999`);
  return `${iso.slice(0, 23)}000Z`;
}

// ---------------------------------------------------------------------------------------------
// Zones

/** `null` marks a zone that is UTC at every instant (fast path: no Intl calls). */
const zoneCache = new Map<string, Intl.DateTimeFormat | null>();
const UTC_NAMES = new Set(['UTC', 'Etc/UTC', 'Etc/GMT', 'GMT', 'Etc/Universal', 'Etc/Zulu', 'Universal', 'Zulu']);

/**
 * A formatter whose parts are the zone's wall clock (24-hour, with the era so years before 1 stay
 * right), for {@link zoneOffsetMs}. Throws Intl's RangeError for a zone it does not know.
 */
export function wallClockFormat(timeZone: string): Intl.DateTimeFormat {
  return new Intl.DateTimeFormat('en-US', {
    timeZone,
    hourCycle: 'h23',
    year: 'numeric',
    month: 'numeric',
    day: 'numeric',
    hour: 'numeric',
    minute: 'numeric',
    second: 'numeric',
    era: 'short',
  });
}

/** Validates a zone name once and caches its formatter. Throws {@link TimezoneError}. */
export function zoneFormatter(timeZone: string): Intl.DateTimeFormat | null {
  const cached = zoneCache.get(timeZone);
  if (cached !== undefined) return cached;
  let fmt: Intl.DateTimeFormat;
  try {
    fmt = wallClockFormat(timeZone);
  } catch {
    throw new TimezoneError(timeZone);
  }
  const value = UTC_NAMES.has(fmt.resolvedOptions().timeZone) ? null : fmt;
  zoneCache.set(timeZone, value);
  return value;
}

/** Throws {@link TimezoneError} unless `timeZone` is a zone `Intl` knows. */
export function assertTimeZone(timeZone: string): void {
  zoneFormatter(timeZone);
}

/** Offset (local − UTC, in ms) of a {@link wallClockFormat} zone at an instant, to the second. */
export function zoneOffsetMs(fmt: Intl.DateTimeFormat, epochMs: number): number {
  const t: CivilTime = { year: 0, month: 1, day: 1, hour: 0, minute: 0, second: 0 };
  let bc = false;
  for (const part of fmt.formatToParts(epochMs)) {
    switch (part.type) {
      case 'year':
        t.year = Number(part.value);
        break;
      case 'month':
        t.month = Number(part.value);
        break;
      case 'day':
        t.day = Number(part.value);
        break;
      case 'hour':
        t.hour = Number(part.value);
        break;
      case 'minute':
        t.minute = Number(part.value);
        break;
      case 'second':
        t.second = Number(part.value);
        break;
      case 'era':
        bc = part.value.startsWith('B');
        break;
      default:
        break;
    }
  }
  if (bc) t.year = 1 - t.year;
  return civilToUtcMs(t) - Math.floor(epochMs / 1000) * 1000;
}

/** Per zone: local day number → the zone's offset through that day, or null near a transition. */
const dayOffsetCache = new Map<Intl.DateTimeFormat, Map<number, number | null>>();
const DAY_CACHE_LIMIT = 10_000;

/**
 * The offset that holds for every wall time of the local day containing `localMs`, or null when a
 * transition is near (then the exact path runs). Any wall time of day D maps to an instant within
 * D−14 h … D+38 h, so equal offsets at D−1 d and D+2 d mean no transition in between (the same
 * "no two transitions within days" assumption as {@link zonedToEpochMs}). Saves ~4 Intl calls per
 * timestamp for the clustered `date_updated` values of a poll page.
 */
function steadyDayOffset(fmt: Intl.DateTimeFormat, localMs: number): number | null {
  let days = dayOffsetCache.get(fmt);
  if (!days) dayOffsetCache.set(fmt, (days = new Map<number, number | null>()));
  const day = Math.floor(localMs / DAY_MS);
  let offset = days.get(day);
  if (offset === undefined) {
    const before = zoneOffsetMs(fmt, day * DAY_MS - DAY_MS);
    offset = before === zoneOffsetMs(fmt, day * DAY_MS + 2 * DAY_MS) ? before : null;
    if (days.size >= DAY_CACHE_LIMIT) days.clear();
    days.set(day, offset);
  }
  return offset;
}

/**
 * The instant at which the wall clock of `fmt`'s zone shows `localMs` (a civil time encoded as if
 * it were UTC). Disambiguation follows Temporal's `'compatible'`: a time repeated by a backward
 * transition resolves to the earlier instant; a time skipped by a forward transition is moved
 * forward by the gap (02:30 on a spring-forward night becomes 03:30 of the new offset).
 */
function zonedToEpochMs(fmt: Intl.DateTimeFormat, localMs: number): number {
  // Offsets a day either side bracket any transition near this civil time (zones are within ±14 h).
  const before = zoneOffsetMs(fmt, localMs - DAY_MS);
  const after = zoneOffsetMs(fmt, localMs + DAY_MS);
  let best: number | undefined;
  for (const offset of before === after ? [before] : [before, after]) {
    const instant = localMs - offset;
    if (zoneOffsetMs(fmt, instant) === offset && (best === undefined || instant < best)) best = instant;
  }
  return best ?? localMs - before;
}

// ---------------------------------------------------------------------------------------------
// Parsers

const LEGACY_RE = /^(\d{4})-(\d{2})-(\d{2})(?:[ T](\d{2}):(\d{2})(?::(\d{2}))?)?$/;
const ISO_RE = /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}(?::?\d{2})?)$/;
/** MySQL "zero dates" the legacy API is known to emit for "never". */
const ZERO_DATE_RE = /^0000-00-00(?:[ T]00:00(?::00)?)?$/;

/**
 * Parses a legacy `Y-m-d H:i:s` (also `Y-m-d H:i` and day-only `Y-m-d`, read as 00:00) wall-clock
 * value in `timeZone`. A MySQL zero date (`0000-00-00 00:00:00`) and the empty string mean "none"
 * and give `null`. A value that already carries a zone (ISO 8601 with `Z` or an offset) is accepted
 * and read by its own zone. Throws {@link TimestampError} / {@link TimezoneError}.
 */
export function parseLegacyTimestamp(text: string, timeZone: string): string | null {
  const trimmed = text.trim();
  if (trimmed === '' || ZERO_DATE_RE.test(trimmed)) return null;
  const fmt = zoneFormatter(timeZone);
  const m = LEGACY_RE.exec(trimmed);
  if (!m) {
    if (ISO_RE.test(trimmed)) return parseIsoTimestamp(trimmed);
    throw new TimestampError('expected "Y-m-d H:i:s" or "Y-m-d"');
  }
  const t: CivilTime = {
    year: Number(m[1]),
    month: Number(m[2]),
    day: Number(m[3]),
    hour: Number(m[4] ?? 0),
    minute: Number(m[5] ?? 0),
    second: Number(m[6] ?? 0),
  };
  const problem = checkCivil(t);
  if (problem) throw new TimestampError(problem);
  if (fmt === null) return formatCivil(t, '000000');
  const localMs = civilToUtcMs(t);
  const steady = steadyDayOffset(fmt, localMs);
  return formatEpochMs(steady === null ? zonedToEpochMs(fmt, localMs) : localMs - steady);
}

/**
 * Parses an ISO 8601 timestamp with a zone designator (`Z` or `±HH:MM`) into the canonical UTC
 * form, keeping the fractional digits exactly: fewer than six are zero-padded, more than six are
 * truncated (Postgres stores microseconds). A value without a zone is rejected: guessing a zone
 * for a webhook timestamp would silently reorder versions. Throws {@link TimestampError}.
 */
export function parseIsoTimestamp(text: string): string {
  const m = ISO_RE.exec(text.trim());
  if (!m) throw new TimestampError('expected ISO 8601 with a zone, e.g. 2024-05-28T10:30:29.000000Z');
  const t: CivilTime = {
    year: Number(m[1]),
    month: Number(m[2]),
    day: Number(m[3]),
    hour: Number(m[4]),
    minute: Number(m[5]),
    second: Number(m[6]),
  };
  const problem = checkCivil(t);
  if (problem) throw new TimestampError(problem);
  const micros = (m[7] ?? '').padEnd(6, '0').slice(0, 6);
  const zone = m[8] as string;
  const offsetMinutes = zoneOffsetMinutes(zone);
  if (offsetMinutes === null) throw new TimestampError('offset out of range');
  if (offsetMinutes === 0) return formatCivil(t, micros);
  const whole = formatEpochMs(civilToUtcMs(t) - offsetMinutes * 60_000);
  return `${whole.slice(0, 20)}${micros}Z`;
}

function zoneOffsetMinutes(zone: string): number | null {
  if (zone === 'Z' || zone === 'z') return 0;
  const sign = zone.startsWith('-') ? -1 : 1;
  const digits = zone.slice(1).replace(':', '');
  const hours = Number(digits.slice(0, 2));
  const minutes = digits.length > 2 ? Number(digits.slice(2, 4)) : 0;
  if (hours > 18 || minutes > 59) return null;
  return sign * (hours * 60 + minutes);
}

// ---------------------------------------------------------------------------------------------
// Days and comparisons

export { DAY_MS };

/** The latest of canonical timestamps (they compare correctly as text); null when all are null. */
export function latestTimestamp(...values: ReadonlyArray<string | null | undefined>): string | null {
  let latest: string | null = null;
  for (const v of values) if (v !== null && v !== undefined && (latest === null || v > latest)) latest = v;
  return latest;
}

const YMD = /^(\d{4})-(\d{2})-(\d{2})$/;

/** True for a `YYYY-MM-DD` that names a real day (2024-02-29 yes, 2023-02-29 and 2024-02-30 no). */
export function isRealDate(text: string): boolean {
  const match = YMD.exec(text);
  if (!match) return false;
  const t: CivilTime = { year: Number(match[1]), month: Number(match[2]), day: Number(match[3]), hour: 0, minute: 0, second: 0 };
  return checkCivil(t) === null;
}

/** The `YYYY-MM-DD` day of an instant in an IANA zone. */
export function dayInZone(epochMs: number, timeZone: string): string {
  const parts = new Intl.DateTimeFormat('en-CA', {
    timeZone,
    year: 'numeric',
    month: '2-digit',
    day: '2-digit',
  }).formatToParts(new Date(epochMs));
  const get = (type: string) => parts.find((p) => p.type === type)?.value ?? '';
  return `${get('year')}-${get('month')}-${get('day')}`;
}

/** `day` (`YYYY-MM-DD`) moved by a whole number of days. */
export function addDays(day: string, days: number): string {
  const ms = Date.parse(`${day}T00:00:00Z`) + days * DAY_MS;
  return new Date(ms).toISOString().slice(0, 10);
}

/**
 * Date math for the simulator: timezones (IANA via Intl, or fixed offsets such as `+14:00`),
 * the legacy `Y-m-d H:i:s` rendering and the webhook ISO-with-microseconds rendering.
 *
 * Internally every subscriber timestamp is an epoch in microseconds held in a JS number: exact up to
 * 2^53 µs (year 2255), so no bigint is needed and a Float64Array can store a whole column.
 */
import { wallClockFormat, zoneOffsetMs } from '../ground/time.js';

export interface Zone {
  readonly name: string;
  /** Offset of local time from UTC, in minutes, at the given instant. */
  offsetMinutesAt(epochMs: number): number;
}

export interface Ymd {
  readonly y: number;
  readonly m: number;
  readonly d: number;
}

const FIXED_OFFSET = /^(?:UTC|GMT)?([+-])(\d{1,2})(?::?(\d{2}))?$/;
const MAX_OFFSET_MINUTES = 14 * 60;

/** Parses `UTC`, `Z`, `+14:00`, `-12:00`, `+0530` or an IANA name; throws RangeError on anything else. */
export function parseZone(name: string): Zone {
  const trimmed = name.trim();
  if (trimmed === '' || /^(?:utc|z|gmt)$/i.test(trimmed)) return fixedZone('UTC', 0);
  const fixed = FIXED_OFFSET.exec(trimmed);
  if (fixed) return fixedZone(trimmed, fixedOffsetMinutes(fixed, trimmed));
  return ianaZone(trimmed);
}

function fixedOffsetMinutes(match: RegExpExecArray, original: string): number {
  const sign = match[1] === '-' ? -1 : 1;
  const hours = Number(match[2]);
  const minutes = Number(match[3] ?? '0');
  const total = hours * 60 + minutes;
  if (minutes >= 60 || total > MAX_OFFSET_MINUTES) {
    throw new RangeError(`timezone offset out of range (±14:00): ${original}`);
  }
  return sign * total;
}

function fixedZone(name: string, offsetMinutes: number): Zone {
  return { name, offsetMinutesAt: () => offsetMinutes };
}

function ianaZone(name: string): Zone {
  let format: Intl.DateTimeFormat;
  try {
    format = wallClockFormat(name);
  } catch {
    throw new RangeError(`unknown timezone: ${name}`);
  }
  // Offsets only change on quarter-hour boundaries in every real zone, so one lookup per
  // 15-minute bucket is exact and keeps formatToParts out of the per-row hot path.
  const cache = new Map<number, number>();
  const bucketMs = 15 * 60 * 1000;
  return {
    name: format.resolvedOptions().timeZone,
    offsetMinutesAt(epochMs: number): number {
      const bucket = Math.floor(epochMs / bucketMs);
      const hit = cache.get(bucket);
      if (hit !== undefined) return hit;
      const offset = Math.round(zoneOffsetMs(format, bucket * bucketMs) / 60_000);
      if (cache.size > 10_000) cache.clear();
      cache.set(bucket, offset);
      return offset;
    },
  };
}

const YMD = /^(\d{4})-(\d{2})-(\d{2})$/;

/** Strict `YYYY-MM-DD` with a real calendar date; null otherwise. */
export function parseYmd(text: string): Ymd | null {
  const match = YMD.exec(text);
  if (!match) return null;
  const y = Number(match[1]);
  const m = Number(match[2]);
  const d = Number(match[3]);
  const probe = new Date(Date.UTC(y, m - 1, d));
  if (probe.getUTCFullYear() !== y || probe.getUTCMonth() !== m - 1 || probe.getUTCDate() !== d) return null;
  return { y, m, d };
}

export function addDays(date: Ymd, days: number): Ymd {
  const probe = new Date(Date.UTC(date.y, date.m - 1, date.d + days));
  return { y: probe.getUTCFullYear(), m: probe.getUTCMonth() + 1, d: probe.getUTCDate() };
}

/** Epoch ms of the first instant of the local calendar day `date` in `zone`. */
export function startOfLocalDay(date: Ymd, zone: Zone): number {
  const wall = Date.UTC(date.y, date.m - 1, date.d);
  // Local midnight lies within ±14 h of UTC midnight, so at most two offsets are in play:
  // the one before and the one after any transition nearby.
  const offsets = new Set([zone.offsetMinutesAt(wall - 36 * 3_600_000), zone.offsetMinutesAt(wall + 36 * 3_600_000)]);
  const candidates = [...offsets].map((offset) => ({ offset, at: wall - offset * 60_000 }));
  const valid = candidates.filter((c) => zone.offsetMinutesAt(c.at) === c.offset).map((c) => c.at);
  // Both valid = midnight repeats (fall back): the day starts at the first one. None valid =
  // midnight was skipped (spring forward): the day starts when the gap ends, the later candidate.
  if (valid.length > 0) return Math.min(...valid);
  return Math.max(...candidates.map((c) => c.at));
}

function pad(value: number, width: number): string {
  return String(value).padStart(width, '0');
}

function wallClock(epochMs: number, zone: Zone): Date {
  return new Date(epochMs + zone.offsetMinutesAt(epochMs) * 60_000);
}

/** Legacy `Y-m-d H:i:s` in `zone`, truncated to whole seconds as the legacy API stores them. */
export function formatLocalDateTime(epochMs: number, zone: Zone): string {
  const seconds = Math.floor(epochMs / 1000) * 1000;
  const w = wallClock(seconds, zone);
  return (
    `${pad(w.getUTCFullYear(), 4)}-${pad(w.getUTCMonth() + 1, 2)}-${pad(w.getUTCDate(), 2)} ` +
    `${pad(w.getUTCHours(), 2)}:${pad(w.getUTCMinutes(), 2)}:${pad(w.getUTCSeconds(), 2)}`
  );
}

/** Legacy `Y-m-d` in `zone`. */
export function formatLocalDate(epochMs: number, zone: Zone): string {
  return formatLocalDateTime(epochMs, zone).slice(0, 10);
}

/** `YYYY-MM-DD HH:MM:SS` in UTC, the webhook resource's created_at / updated_at format. */
export function formatUtcDateTime(epochMs: number): string {
  return new Date(Math.floor(epochMs / 1000) * 1000).toISOString().slice(0, 19).replace('T', ' ');
}

/** Webhook payload format: ISO 8601 UTC with six fractional digits, e.g. `2024-05-28T10:30:29.123456Z`. */
export function isoMicros(epochUs: number): string {
  const ms = Math.floor(epochUs / 1000);
  const seconds = Math.floor(ms / 1000);
  const fraction = epochUs - seconds * 1_000_000;
  return `${new Date(seconds * 1000).toISOString().slice(0, 19)}.${pad(fraction, 6)}Z`;
}

/** Inverse of isoMicros, for tests that compare payloads with stored stamps. */
export function parseIsoMicros(text: string): number {
  const match = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,6}))?Z$/.exec(text);
  if (!match) throw new RangeError(`not an ISO UTC timestamp: ${text}`);
  const seconds = Date.parse(`${match[1]}Z`) / 1000;
  const fraction = Number((match[2] ?? '').padEnd(6, '0'));
  return seconds * 1_000_000 + fraction;
}

/**
 * The validation rules of upstream values, each written once as a zod schema whose output is the
 * canonical value the mirror stores. The payload schemas of both paths (`schemas.ts`: the legacy
 * Single Subscriber of the poll, the subscriber object (docs/upstream.md) of flat, nested and batched webhook payloads, the
 * group, automation and campaign objects of docs/upstream.md) are built from these, so the receiver's validation and the
 * rows the store writes can never disagree.
 *
 * Every rule but the id's is optional: an absent key stays absent (`undefined`), so the row builders
 * can tell "not carried" (the store keeps the stored column) from "carried as null". Messages name what was
 * expected and the type received, never the value: payloads hold personal data.
 */
import { isLosslessNumber } from 'lossless-json';
import { z } from 'zod';
import { parseIsoTimestamp, parseLegacyTimestamp, TimestampError } from '../ground/time.js';

/** The type of a value, never the value itself. */
export function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (isLosslessNumber(value)) return 'a number';
  if (typeof value === 'number' && !Number.isFinite(value)) return 'a non-finite number';
  if (typeof value === 'string') return value.trim() === '' ? 'an empty string' : 'a string';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

/** Removes NUL characters: Postgres `text` and `jsonb` reject them, and one bad row would fail its page forever. */
export function stripNul(text: string): string {
  return text.includes('\u0000') ? text.replaceAll('\u0000', '') : text;
}

type Ctx = z.core.$RefinementCtx;

/** The data of a nested parse, or its issues added to `ctx` (paths relative to the value `ctx` checks). */
export function forward<T>(ctx: Ctx, result: z.ZodSafeParseResult<T>): T {
  if (result.success) return result.data;
  for (const i of result.error.issues)
    ctx.addIssue({ code: 'custom', message: i.message, path: [...i.path], input: (i as { input?: unknown }).input });
  return z.NEVER;
}

function issue(ctx: Ctx, value: unknown, message: string): never {
  ctx.addIssue({ code: 'custom', message, input: value });
  return z.NEVER;
}

// ---------------------------------------------------------------------------------------------
// The same checks as plain functions (the hot path of a pass)

/** What a rule does to a value, written once: `ctx.addIssue` marks the value bad. */
export type RuleCheck<T> = (value: unknown, ctx: Ctx) => T;

/** A rule's check, and whether an absent value skips it (`.optional()`). */
export interface PlainRule {
  check: RuleCheck<unknown>;
  optional: boolean;
}

const PLAIN_RULES = new WeakMap<z.ZodType, PlainRule>();

/**
 * The rule as a zod schema, its check also kept as a plain function (`plainRuleOf`). Zod's wrapping
 * of every value in payload objects was most of what a pass allocated per member (docs/benchmarks.md,
 * "memory"); `schemas.ts` runs the plain checks for a page's members and asks the schema only for a
 * member they refuse, so the error is zod's, word for word.
 */
function rule<T>(check: RuleCheck<T>, optional = true): z.ZodType<T | undefined> {
  const base = z.unknown().transform(check);
  const schema = optional ? base.optional() : base;
  PLAIN_RULES.set(schema, { check, optional });
  return schema as z.ZodType<T | undefined>;
}

/** The plain check of a rule made by `rule`; undefined for any other schema. */
export function plainRuleOf(schema: z.ZodType): PlainRule | undefined {
  return PLAIN_RULES.get(schema);
}

// ---------------------------------------------------------------------------------------------
// Ids (invariant 6)

const DIGITS = /^\d+$/;
const LOSSY_NUMBER =
  'id is a number that is not a non-negative safe integer (digits are lost beyond 2^53); ids must be strings, or the body parsed losslessly (lossless-json)';

/**
 * A canonical decimal id (no sign, no leading zeros) from a string of digits, a non-negative safe
 * integer, a bigint or a lossless-json number. A JS number beyond 2^53 has already lost digits.
 */
export const idRule = rule((value, ctx): string => {
  if (typeof value === 'string' || isLosslessNumber(value)) {
    const text = typeof value === 'string' ? value.trim() : value.value;
    if (DIGITS.test(text)) return BigInt(text).toString();
    if (typeof value !== 'string') return issue(ctx, value, LOSSY_NUMBER);
    return issue(ctx, value, `id must be a string of digits, got ${text === '' ? 'an empty string' : 'other characters'}`);
  }
  if (typeof value === 'bigint') return value >= 0n ? value.toString() : issue(ctx, value, LOSSY_NUMBER);
  if (typeof value === 'number') return Number.isSafeInteger(value) && value >= 0 ? String(value) : issue(ctx, value, LOSSY_NUMBER);
  if (value === null || value === undefined) return issue(ctx, value, 'id is missing');
  return issue(ctx, value, `id must be a string of digits, got ${describeValue(value)}`);
}, false) as z.ZodType<string>;

/** What `String.prototype.trim` removes (the rule trims a string id first), as a regex class body. */
const TRIMMED = '\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff';

/**
 * {@link idRule} in SQL, over a text expression: the canonical id of a string of digits (trimmed, no
 * leading zeros), null where the rule would refuse it. Erasure compares the ids it finds in stored
 * bodies through it, so a body spelling an id `007` is the subscriber `7`, as the normalizer read it.
 */
export function canonicalIdSql(expr: string): string {
  return `substring(${expr} from '^[${TRIMMED}]*0*([0-9]+)[${TRIMMED}]*$')`;
}

/** {@link idRule} for a value found anywhere in a body: the canonical id, or null for what is no id. */
export function canonicalIdOrNull(value: unknown): string | null {
  const result = idRule.safeParse(value);
  return result.success ? result.data : null;
}

// ---------------------------------------------------------------------------------------------
// Timestamps (invariant 2: they order versions, so they keep their microseconds)

/** ISO 8601 with a zone → canonical UTC (`2024-05-28T10:30:29.000000Z`); `""` and null are null. */
export const isoTimestampRule = z
  .unknown()
  .transform((value, ctx): string | null | undefined => {
    if (value === undefined) return undefined;
    if (value === null || value === '') return null;
    if (typeof value !== 'string') return issue(ctx, value, 'expected a timestamp string or null');
    try {
      return parseIsoTimestamp(value);
    } catch (err) {
      if (!(err instanceof TimestampError)) throw err;
      return issue(ctx, value, `expected an ISO 8601 timestamp with a zone, like 2024-05-28T10:30:29.000000Z (${err.message})`);
    }
  })
  .optional();

const legacyTimestampRules = new Map<string, z.ZodType<string | null | undefined>>();

/**
 * A legacy `Y-m-d H:i:s` (or day-only) wall-clock value read in `timeZone` → canonical UTC; a MySQL
 * zero date and `""` are null. The zone must have been checked (`assertTimeZone`).
 */
export function legacyTimestampRule(timeZone: string): z.ZodType<string | null | undefined> {
  let cached = legacyTimestampRules.get(timeZone);
  if (!cached) {
    cached = rule((value, ctx): string | null | undefined => {
      if (value === undefined) return undefined;
      if (value === null) return null;
      if (typeof value !== 'string') return issue(ctx, value, 'expected a "Y-m-d H:i:s" string');
      try {
        return parseLegacyTimestamp(value, timeZone);
      } catch (err) {
        if (!(err instanceof TimestampError)) throw err;
        return issue(ctx, value, err.message);
      }
    });
    legacyTimestampRules.set(timeZone, cached);
  }
  return cached;
}

// ---------------------------------------------------------------------------------------------
// Counters, rates, text

const INT4_MIN = -2_147_483_648;
const INT4_MAX = 2_147_483_647;
const INTEGER_TEXT = /^-?\d+$/;
const NUMBER_TEXT = /^-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;

/**
 * How numbers may arrive: the webhook spec (docs/upstream.md, "Subscriber object") sends JSON numbers; the legacy API also sends
 * numeric strings, and `""` for none.
 */
export interface NumberForm {
  numericStrings: boolean;
}

function numericText(value: unknown, form: NumberForm): string | undefined {
  if (isLosslessNumber(value)) return value.value.trim();
  if (form.numericStrings && typeof value === 'string') return value.trim();
  return undefined;
}

interface NumberKind {
  /** What a numeric string must look like. */
  text: RegExp;
  /** The noun of the messages: "an integer", "a number". */
  noun: string;
  /** Why an otherwise numeric value does not fit the column, or null when it does. */
  misfit: (n: number) => string | null;
}

function numberRule(kind: NumberKind, form: NumberForm): z.ZodType<number | null | undefined> {
  return rule((value, ctx): number | null | undefined => {
    if (value === null || (form.numericStrings && value === '')) return null;
    const text = numericText(value, form);
    let n: number;
    if (typeof value === 'number') n = value;
    else if (typeof value === 'bigint') n = Number(value);
    else if (text !== undefined && kind.text.test(text)) n = Number(text);
    else return issue(ctx, value, text !== undefined ? `expected ${kind.noun}` : `expected ${kind.noun} or null`);
    const misfit = kind.misfit(n);
    return misfit === null ? n : issue(ctx, value, misfit);
  });
}

const INT4: NumberKind = {
  text: INTEGER_TEXT,
  noun: 'an integer',
  misfit: (n) => (!Number.isInteger(n) ? 'expected an integer' : n < INT4_MIN || n > INT4_MAX ? 'expected a 32-bit integer' : null),
};
const FLOAT8: NumberKind = { text: NUMBER_TEXT, noun: 'a number', misfit: (n) => (Number.isFinite(n) ? null : 'expected a finite number') };

/** A Postgres `integer` column (counters, `total_recipients`). */
export function int4Rule(form: NumberForm): z.ZodType<number | null | undefined> {
  return numberRule(INT4, form);
}

/** A `double precision` column (rates). */
export function floatRule(form: NumberForm): z.ZodType<number | null | undefined> {
  return numberRule(FLOAT8, form);
}

/** A text column. */
export const textRule = rule((value, ctx): string | null | undefined => {
  if (value === undefined || value === null) return value;
  if (typeof value !== 'string') return issue(ctx, value, 'expected a string or null');
  return stripNul(value);
});

// ---------------------------------------------------------------------------------------------
// Custom fields (docs/upstream.md, "Subscriber object": "all values are strings")

function fieldText(value: unknown): string | null | undefined {
  if (value === null || value === undefined) return null;
  if (typeof value === 'string') return stripNul(value);
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') return String(value);
  if (isLosslessNumber(value)) return value.value;
  return undefined;
}

const FIELD_VALUE_MESSAGE = 'custom field values must be strings (or numbers, booleans, null)';

/** Webhook `fields`: an object of scalar values, each made a string. */
export const fieldsRule = rule((value, ctx): Record<string, string | null> | null | undefined => {
  if (value === undefined || value === null) return value;
  if (typeof value !== 'object' || Array.isArray(value) || isLosslessNumber(value)) {
    return issue(ctx, value, 'fields must be an object of custom field values');
  }
  const out: Record<string, string | null> = {};
  for (const [key, raw] of Object.entries(value as Record<string, unknown>)) {
    const text = fieldText(raw);
    if (text === undefined) {
      ctx.addIssue({ code: 'custom', message: FIELD_VALUE_MESSAGE, path: [key], input: raw });
      continue;
    }
    out[stripNul(key)] = text;
  }
  return out;
});

/** Legacy `fields`: an array of `{key, value, type}` (or an object, as webhooks send it). A later duplicate key wins. */
export const legacyFieldsRule = rule((value, ctx): Record<string, string | null> | null | undefined => {
  if (value === undefined || value === null) return value;
  if (!Array.isArray(value)) {
    if (typeof value === 'object' && !isLosslessNumber(value)) return forward(ctx, fieldsRule.safeParse(value));
    return issue(ctx, value, `expected an array or an object, got ${describeValue(value)}`);
  }
  const out: Record<string, string | null> = {};
  value.forEach((item: unknown, i) => {
    if (typeof item !== 'object' || item === null || Array.isArray(item)) {
      ctx.addIssue({ code: 'custom', message: 'expected an object {key, value, type}', path: [i], input: item });
      return;
    }
    const entry = item as Record<string, unknown>;
    if (typeof entry.key !== 'string' || entry.key === '') {
      ctx.addIssue({ code: 'custom', message: 'expected a non-empty string', path: [i, 'key'], input: entry.key });
      return;
    }
    const text = fieldText(entry.value);
    if (text === undefined) {
      ctx.addIssue({
        code: 'custom',
        message: `expected a scalar value, got ${describeValue(entry.value)}`,
        path: [i, 'value'],
        input: entry.value,
      });
      return;
    }
    out[stripNul(entry.key)] = text;
  });
  return out;
});

/**
 * JSON as the service sends it (invariant 6): parsed losslessly, so ids above 2^53 arrive exactly.
 */
import { parse as parseLossless } from 'lossless-json';

const INTEGER_TEXT = /^-?\d+$/;

/**
 * lossless-json number parser: integers beyond Number.MAX_SAFE_INTEGER stay strings of digits
 * (legacy ids such as 1261159647788771324; `JSON.parse` would corrupt them, docs/architecture.md, "Traps we work around");
 * every other number becomes a JS number.
 */
export function parseJsonNumber(text: string): number | string {
  const value = Number(text);
  if (INTEGER_TEXT.test(text) && !Number.isSafeInteger(value)) return text;
  return value;
}

/** Sixteen digits in a row: the shortest integer that can be past 2^53. Without one, JSON.parse is exact. */
const LONG_DIGITS = /\d{16}/;
/**
 * A bare integer of 16 or more digits where a value starts (the text's start, or after `:`, `[` or
 * `,`), not a fraction, exponent or key. The same digits inside a string can match too: quoting them there always breaks
 * the text (a digit right after a closing quote), so JSON.parse throws and the slow parser decides.
 */
const BARE_LONG_INTEGER = /(?<=(?:^|[:[,])\s*)-?[1-9]\d{15,}(?![\d.eE]|\s*:)/g;

function quoteUnsafeInteger(digits: string): string {
  return Number.isSafeInteger(Number(digits)) ? digits : `"${digits}"`;
}

/** A later duplicate key wins, as with JSON.parse, so both paths below give the same value. */
const LOSSLESS_OPTIONS = { parseNumber: parseJsonNumber, onDuplicateKey: ({ newValue }: { newValue: unknown }) => newValue };

/**
 * Parses JSON losslessly; throws SyntaxError on anything that is not exactly one JSON value.
 *
 * The fast path is the engine's JSON.parse with every unsafe integer quoted first: a page of 1,000
 * members in about 6 ms against 14 ms for lossless-json's parser, and without the substrings it
 * allocates per token (in a pass, garbage collection was a quarter of the worker's CPU). Text the fast
 * path cannot read goes to lossless-json, which returns the same value or the error.
 */
export function parseJsonLossless(text: string): unknown {
  if (!LONG_DIGITS.test(text)) {
    try {
      return JSON.parse(text);
    } catch {
      return parseLossless(text, null, LOSSLESS_OPTIONS);
    }
  }
  try {
    return JSON.parse(text.replace(BARE_LONG_INTEGER, quoteUnsafeInteger));
  } catch {
    return parseLossless(text, null, LOSSLESS_OPTIONS);
  }
}

/** A JSON object (not an array, not null). */
export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Delivery signatures (docs/upstream.md, "Signature"): `Signature` is the hex HMAC-SHA256 of the raw body, keyed with the
 * webhook's secret. Verification works on the raw bytes, before any parsing, and never reveals which
 * part of a comparison failed (docs/architecture.md, "Traps we work around": timingSafeEqual throws on unequal lengths, so the
 * decoded lengths are compared first).
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

export type SignatureFailure = 'missing' | 'malformed' | 'mismatch';

export type SignatureCheck = { ok: true; secretIndex: number } | { ok: false; reason: SignatureFailure };

const SHA256_BYTES = 32;
const HEX = /^[0-9a-fA-F]+$/;

/** Hex HMAC-SHA256 of the body, as the service computes it. */
export function signBody(raw: Buffer | string, secret: string): string {
  return createHmac('sha256', secret).update(raw).digest('hex');
}

/**
 * Checks `header` against each secret in turn (rotation: several may be valid at once) and reports
 * which one matched. Header whitespace is tolerated; anything but an even-length hex string is
 * `malformed`, a well-formed digest of the wrong length is `mismatch` (it can never verify).
 */
export function verifySignature(raw: Buffer, header: string | undefined, secrets: readonly string[]): SignatureCheck {
  const value = header?.trim();
  if (value === undefined || value === '') return { ok: false, reason: 'missing' };
  if (value.length % 2 !== 0 || !HEX.test(value)) return { ok: false, reason: 'malformed' };
  const given = Buffer.from(value, 'hex');
  // Lengths are public (every valid signature is 32 bytes); comparing them first is not a timing leak.
  if (given.length !== SHA256_BYTES) return { ok: false, reason: 'mismatch' };
  let matched = -1;
  // Every secret is tried even after a match, so the time taken does not depend on which one matched.
  for (let i = 0; i < secrets.length; i++) {
    const secret = secrets[i] as string;
    // An empty key would let anyone sign; it is a configuration slip, never a usable secret.
    if (secret === '') continue;
    const expected = createHmac('sha256', secret).update(raw).digest();
    if (timingSafeEqual(expected, given) && matched === -1) matched = i;
  }
  return matched === -1 ? { ok: false, reason: 'mismatch' } : { ok: true, secretIndex: matched };
}

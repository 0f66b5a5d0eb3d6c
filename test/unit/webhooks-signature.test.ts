import { createHmac } from 'node:crypto';
import { describe, expect, test } from 'vitest';
import { signBody, verifySignature } from '../../src/webhooks/signature.js';

const secret = '4jQ3Y4UlLI';
const body = Buffer.from('{"event":"subscriber.created","id":"130742518836315811","account_id":412873}');
const good = createHmac('sha256', secret).update(body).digest('hex');

describe('signBody', () => {
  test('is the hex HMAC-SHA256 of the raw bytes (docs/upstream.md, "Signature")', () => {
    expect(signBody(body, secret)).toBe(good);
    expect(signBody(body.toString('utf8'), secret)).toBe(good);
    expect(good).toMatch(/^[0-9a-f]{64}$/);
  });
});

describe('verifySignature', () => {
  test.each([
    ['valid', good, [secret], { ok: true, secretIndex: 0 }],
    ['valid, upper-case hex', good.toUpperCase(), [secret], { ok: true, secretIndex: 0 }],
    ['valid, surrounding whitespace', ` ${good} `, [secret], { ok: true, secretIndex: 0 }],
    ['valid with the second of several secrets (rotation)', good, ['old-secret-1', secret], { ok: true, secretIndex: 1 }],
    ['wrong secret', good, ['another-secret'], { ok: false, reason: 'mismatch' }],
    ['no secrets at all', good, [], { ok: false, reason: 'mismatch' }],
    ['an empty secret never verifies', createHmac('sha256', '').update(body).digest('hex'), [''], { ok: false, reason: 'mismatch' }],
    ['missing header', undefined, [secret], { ok: false, reason: 'missing' }],
    ['empty header', '', [secret], { ok: false, reason: 'missing' }],
    ['non-hex characters', `${good.slice(0, 62)}zz`, [secret], { ok: false, reason: 'malformed' }],
    ['odd number of hex digits', good.slice(0, 63), [secret], { ok: false, reason: 'malformed' }],
    ['a prefix like sha256=', `sha256=${good}`, [secret], { ok: false, reason: 'malformed' }],
    ['base64 instead of hex', Buffer.from(good, 'hex').toString('base64'), [secret], { ok: false, reason: 'malformed' }],
    ['too short (length mismatch, must not throw)', good.slice(0, 32), [secret], { ok: false, reason: 'mismatch' }],
    ['too long (length mismatch, must not throw)', `${good}00`, [secret], { ok: false, reason: 'mismatch' }],
    ['one digit changed', `${good.slice(0, 63)}${good.endsWith('0') ? '1' : '0'}`, [secret], { ok: false, reason: 'mismatch' }],
  ] as const)('%s', (_name, header, secrets, expected) => {
    expect(verifySignature(body, header, secrets)).toEqual(expected);
  });

  test('the signature of a different body does not verify', () => {
    const other = Buffer.from(body.toString('utf8').replace('412873', '412874'));
    expect(verifySignature(other, good, [secret])).toEqual({ ok: false, reason: 'mismatch' });
  });

  test('bytes count, not the JSON value: re-serialized JSON does not verify', () => {
    const reformatted = Buffer.from(JSON.stringify(JSON.parse(body.toString('utf8')), null, 2));
    expect(verifySignature(reformatted, good, [secret])).toEqual({ ok: false, reason: 'mismatch' });
  });
});

/**
 * Erasure's link rule (docs/security.md, "Personal data and erasure"): a link keeps scheme, host and
 * path, and loses its query string, fragment, user info and every path segment holding an email; the
 * same rule in the stored bodies (JavaScript) and in `subscriber_activity` (SQL, checked against this
 * one in erasure.spellings.test.ts). Ids are compared as the normalizer reads them. A redacted body is
 * not rewritten again.
 */
import { describe, expect, it } from 'vitest';
import { ACTIVITY_LINK_COLUMNS, linkWithoutPersonalData } from '../../src/mirror/personal-data.js';
import { redactBody } from '../../src/webhooks/redact.js';
import { LINK_CASES } from '../helpers/erasure-cases.js';

describe('linkWithoutPersonalData', () => {
  it.each(LINK_CASES)('%s → %s', (link, expected) => {
    expect(linkWithoutPersonalData(link)).toBe(expected);
  });

  it('reads the link columns from the registry', () => {
    expect(ACTIVITY_LINK_COLUMNS).toEqual(['link_url']);
  });
});

describe('redactBody', () => {
  const click = JSON.stringify({
    type: 'campaign.click',
    subscriber: { id: 'BIG', email: 'jane@example.com', status: 'active', fields: { phone: '+1 555' } },
    campaign: { id: '7', name: 'June' },
    link_url: 'https://shop.example.com/offer?email=jane%40example.com',
  }).replace('"BIG"', '12345678901234567890'); // a JSON number beyond 2^53

  it('cuts the link of an event that carries a redacted subscriber, keeps the other ids exact', () => {
    const redacted = redactBody(click, new Set(['12345678901234567890'])) as string;
    expect(redacted).toContain('"link_url":"https://shop.example.com/offer"');
    expect(redacted).toContain('12345678901234567890');
    expect(redacted).not.toContain('jane');
    expect(redacted).not.toContain('555');
  });

  it('leaves the link of an event about someone else', () => {
    expect(redactBody(click, new Set(['7']))).toBeNull();
  });

  it('does not rewrite a body already redacted', () => {
    const once = redactBody(click, new Set(['12345678901234567890'])) as string;
    expect(redactBody(once, new Set(['12345678901234567890']))).toBeNull();
  });

  it('finds the subscriber however its id is spelled, and scrubs its email from every key, in any case', () => {
    const body = JSON.stringify({
      type: 'campaign.click',
      subscriber: { id: ' 000123', email: 'Jane@Example.com', status: 'active' },
      link_url: 'https://shop.example.com/u/jane@example.com/offer',
      tracking: { recipient: 'JANE@EXAMPLE.COM', note: 'for jane%40example.com', list: ['x', 'jane@example.com'] },
      'jane@example.com': true,
    });
    const redacted = redactBody(body, new Set(['123'])) as string;
    expect(redacted.toLowerCase()).not.toContain('jane');
    expect(JSON.parse(redacted)).toEqual({
      type: 'campaign.click',
      subscriber: { id: ' 000123', email: '', status: 'active' },
      link_url: 'https://shop.example.com/u/-/offer',
      tracking: { recipient: '', note: 'for ', list: ['x', ''] },
    });
    expect(redactBody(redacted, new Set(['123']))).toBeNull();
  });

  it('scrubs emails other bodies gave the subscriber, and no other subscriber', () => {
    const body = JSON.stringify({
      type: 'subscriber.updated',
      subscriber: { id: '9', email: 'other@example.com' },
      note: 'jane@example.com',
    });
    expect(redactBody(body, new Set(['123']))).toBeNull();
    const redacted = JSON.parse(redactBody(body, new Set(['123']), new Set(['jane@example.com'])) as string);
    expect(redacted).toEqual({ type: 'subscriber.updated', subscriber: { id: '9', email: 'other@example.com' }, note: '' });
  });
});

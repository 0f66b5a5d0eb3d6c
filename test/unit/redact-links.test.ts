/**
 * Erasure's link rule (docs/security.md, "Personal data and erasure"): a link keeps scheme, host and
 * path, and loses its query string, fragment and user info; the same rule in the stored bodies
 * (JavaScript) and in `subscriber_activity` (SQL, checked in erasure.audit.test.ts). A redacted body
 * is not rewritten again.
 */
import { describe, expect, it } from 'vitest';
import { ACTIVITY_LINK_COLUMNS, linkWithoutQuery } from '../../src/mirror/personal-data.js';
import { redactBody } from '../../src/webhooks/redact.js';

describe('linkWithoutQuery', () => {
  it.each([
    ['https://shop.example.com/offer?email=a%40b.example&x=1', 'https://shop.example.com/offer'],
    ['https://shop.example.com/offer#jane@example.com', 'https://shop.example.com/offer'],
    ['https://jane%40example.com:pw@shop.example.com/p?q', 'https://shop.example.com/p'],
    ['https://shop.example.com/plain/path', 'https://shop.example.com/plain/path'],
    ['not a url ?email=x', 'not a url '],
  ])('%s → %s', (link, expected) => {
    expect(linkWithoutQuery(link)).toBe(expected);
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
});

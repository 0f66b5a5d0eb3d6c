/**
 * Pure parts of webhook management: the real-time / batched split of the 14 kinds (docs/upstream.md, "Event kinds"),
 * argument checks of `webhooks update` / `register` (before any request), and output formatting.
 */
import { describe, expect, it } from 'vitest';
import { EVENT_KINDS } from '../../src/webhooks/payloads.js';
import { BATCHED_KINDS, batchableViolations, REALTIME_KINDS, roleWebhookName } from '../../src/webhooks/manage.js';
import {
  describeEvents,
  formatRegisterAction,
  formatWebhook,
  formatWebhookList,
  parseRegisterArgs,
  parseUpdateArgs,
  publicWebhook,
  takeAccountOption,
} from '../../src/commands/webhooks.js';
import { UsageError } from '../../src/ground/usage-error.js';
import type { Webhook } from '../../src/upstream/webhooks-api.js';

function usageError(fn: () => unknown): UsageError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(UsageError);
    expect((error as Error).name).toBe('UsageError');
    return error as UsageError;
  }
  throw new Error('expected a UsageError');
}

describe('kinds split (docs/upstream.md, "Event kinds")', () => {
  it('batched = exactly the three kinds that need batchable', () => {
    expect([...BATCHED_KINDS].sort()).toEqual(['campaign.click', 'campaign.open', 'subscriber.deleted']);
  });

  it('real-time and batched cover all 14 kinds without overlap; campaign.sent is real-time', () => {
    expect(EVENT_KINDS).toHaveLength(14);
    expect(REALTIME_KINDS).toHaveLength(11);
    expect(REALTIME_KINDS.filter((k) => BATCHED_KINDS.includes(k))).toEqual([]);
    expect([...REALTIME_KINDS, ...BATCHED_KINDS].sort()).toEqual([...EVENT_KINDS].sort());
    expect(REALTIME_KINDS).toContain('campaign.sent');
  });

  it('batchableViolations names the kinds a non-batchable webhook may not carry', () => {
    expect(batchableViolations(['subscriber.created', 'campaign.open', 'subscriber.deleted'], false)).toEqual([
      'subscriber.deleted',
      'campaign.open',
    ]);
    expect(batchableViolations(['campaign.open'], true)).toEqual([]);
    expect(batchableViolations(REALTIME_KINDS, false)).toEqual([]);
  });

  it('role names', () => {
    expect(roleWebhookName('realtime')).toBe('subscriber-mirror (real-time)');
    expect(roleWebhookName('batched', 'prod')).toBe('prod (batched)');
  });
});

describe('webhooks update arguments', () => {
  it('builds the patch from every option', () => {
    expect(
      parseUpdateArgs([
        '42',
        '--url',
        'https://r.test/h',
        '--name',
        'n',
        '--events',
        'subscriber.created, campaign.open,subscriber.created',
        '--enable',
        '--batchable',
        'true',
      ]),
    ).toEqual({
      id: '42',
      patch: { url: 'https://r.test/h', name: 'n', events: ['subscriber.created', 'campaign.open'], enabled: true, batchable: true },
    });
    expect(parseUpdateArgs(['7', '--disable'])).toEqual({ id: '7', patch: { enabled: false } });
  });

  it('an unknown event kind is named, with the usage text', () => {
    const error = usageError(() => parseUpdateArgs(['42', '--events', 'subscriber.created,subscriber.teleported']));
    expect(error.message).toContain('unknown event kind "subscriber.teleported"');
    expect(error.message).not.toContain('"subscriber.created"');
    expect(error.message).toContain('usage: subscriber-mirror webhooks');
  });

  it('the batchable rule: batched kinds with --batchable false are refused locally', () => {
    const error = usageError(() => parseUpdateArgs(['42', '--events', 'campaign.click,subscriber.created', '--batchable', 'false']));
    expect(error.message).toContain('campaign.click can only be delivered to a batchable webhook');
    expect(parseUpdateArgs(['42', '--events', 'subscriber.created', '--batchable', 'false']).patch).toEqual({
      events: ['subscriber.created'],
      batchable: false,
    });
  });

  it('refuses bad values and empty updates', () => {
    expect(usageError(() => parseUpdateArgs(['42', '--enable', '--disable'])).message).toContain('either --enable or --disable');
    expect(usageError(() => parseUpdateArgs(['42', '--batchable', 'yes'])).message).toContain(
      '--batchable must be true or false, got "yes"',
    );
    expect(usageError(() => parseUpdateArgs(['42', '--url', 'ftp://x'])).message).toContain('--url must be an http(s) URL');
    expect(usageError(() => parseUpdateArgs(['42', '--events', ' , '])).message).toContain('--events needs at least one event kind');
    expect(usageError(() => parseUpdateArgs(['42'])).message).toContain('nothing to change');
    expect(usageError(() => parseUpdateArgs(['--enable'])).message).toContain('needs a webhook ID');
    expect(usageError(() => parseUpdateArgs(['4/2', '--enable'])).message).toContain('"4/2" is not a webhook id');
    expect(usageError(() => parseUpdateArgs(['42', '43', '--enable'])).message).toContain('unexpected argument "43"');
    expect(usageError(() => parseUpdateArgs(['42', '--colour', 'red'])).message).toMatch(/Unknown option '--colour'/);
  });

  it('register needs an http(s) --url', () => {
    expect(parseRegisterArgs(['--url', 'https://r.test/webhooks'])).toEqual({ url: 'https://r.test/webhooks' });
    expect(parseRegisterArgs(['--url', 'https://r.test/webhooks', '--name', 'prod'])).toEqual({
      url: 'https://r.test/webhooks',
      name: 'prod',
    });
    expect(usageError(() => parseRegisterArgs([])).message).toContain('needs --url URL');
    expect(usageError(() => parseRegisterArgs(['--url', 'r.test'])).message).toContain('--url must be an http(s) URL');
  });

  // Deliveries carry personal data: plain HTTP only on loopback or when the operator says so.
  it('refuses an http:// URL to a non-loopback host unless --allow-http is given', () => {
    for (const url of ['http://receiver:8080/webhooks', 'http://203.0.113.7/webhooks', 'http://[2001:db8::1]/webhooks']) {
      expect(usageError(() => parseRegisterArgs(['--url', url])).message, url).toMatch(/plain HTTP[\s\S]*--allow-http/);
      expect(parseRegisterArgs(['--url', url, '--allow-http']), url).toEqual({ url });
      expect(usageError(() => parseUpdateArgs(['7', '--url', url])).message, url).toMatch(/plain HTTP/);
      expect(parseUpdateArgs(['7', '--url', url, '--allow-http']).patch, url).toEqual({ url });
    }
    for (const url of [
      'http://127.0.0.1:8080/webhooks',
      'http://localhost/webhooks',
      'http://[::1]:8080/webhooks',
      'https://r.test/webhooks',
    ]) {
      expect(parseRegisterArgs(['--url', url]), url).toEqual({ url });
    }
  });
});

describe('webhooks --account', () => {
  it('is taken out of the arguments wherever it stands, in either spelling', () => {
    expect(takeAccountOption(['register', '--account', 'shop', '--url', 'https://r.test/webhooks'])).toEqual({
      account: 'shop',
      rest: ['register', '--url', 'https://r.test/webhooks'],
    });
    expect(takeAccountOption(['delete', '42', '--account=blog_eu'])).toEqual({ account: 'blog_eu', rest: ['delete', '42'] });
    expect(takeAccountOption(['list', '--json'])).toEqual({ account: undefined, rest: ['list', '--json'] });
  });

  it('needs a name, once', () => {
    expect(usageError(() => takeAccountOption(['list', '--account'])).message).toContain('--account needs an account name');
    expect(usageError(() => takeAccountOption(['list', '--account', '--json'])).message).toContain('--account needs an account name');
    expect(usageError(() => takeAccountOption(['list', '--account='])).message).toContain('--account needs an account name');
    expect(usageError(() => takeAccountOption(['list', '--account', 'a', '--account=b'])).message).toContain('--account is given twice');
  });
});

describe('output never carries a secret', () => {
  const webhook: Webhook = {
    id: '9',
    name: 'n',
    url: 'https://r.test/h',
    events: ['subscriber.created', 'subscriber.updated', 'campaign.sent', 'subscriber.active'],
    enabled: true,
    batchable: false,
    secret: 'S3cr3tValue',
    created_at: '2024-01-01 00:00:00',
    updated_at: null,
  };

  it('list, get, --json and register lines', () => {
    const lines = [
      ...formatWebhookList({ webhooks: [{ webhook, managed: true, adopted: false }], missingUpstream: [] }),
      ...formatWebhook(webhook, true, true),
      JSON.stringify(publicWebhook(webhook)),
      formatRegisterAction({
        webhook: 'batched',
        action: 'created',
        id: '9',
        name: 'n',
        url: 'https://r.test/h',
        events: ['campaign.open'],
      }),
    ];
    expect(lines.join('\n')).not.toContain('S3cr3tValue');
    expect(lines).toContain('secret:    stored');
    expect(describeEvents(webhook.events)).toBe('4 kinds');
    expect(describeEvents(['campaign.open', 'campaign.click'])).toBe('campaign.open, campaign.click');
    expect(
      formatRegisterAction({
        webhook: 'batched',
        action: 'created',
        id: '9',
        name: 'n',
        url: 'https://r.test/h',
        events: ['campaign.open'],
        replaces: '3',
      }),
    ).toBe('created batched webhook 9 (replacing 3, which was deleted upstream) for campaign.open → https://r.test/h');
  });
});

import { describe, expect, it } from 'vitest';
import { ALL_EVENT_KINDS } from '../../src/simulator/kinds.js';
import { Deliveries } from '../../src/simulator/deliveries.js';
import { WebhookRegistry, pageEnvelope, pageWindow } from '../../src/simulator/webhooks.js';
import { World } from '../../src/simulator/world.js';

const registry = () => new WebhookRegistry({ clock: () => Date.UTC(2022, 9, 4, 21, 59, 40) });

describe('simulator webhooks: validation', () => {
  it('creates with defaults, a secret and numeric-looking string ids', () => {
    const result = registry().create({ url: 'https://hooks.example.com/in', events: ['subscriber.created'] });
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    expect(result.webhook).toMatchObject({
      name: '',
      enabled: true,
      batchable: false,
      created_at: '2022-10-04 21:59:40',
      updated_at: '2022-10-04 21:59:40',
    });
    expect(result.webhook.id).toMatch(/^\d+$/);
    expect(result.webhook.secret).toMatch(/^[A-Za-z0-9]{10}$/);
  });

  it.each([
    [{}, ['url', 'events']],
    [{ url: 'not a url', events: ['subscriber.created'] }, ['url']],
    [{ url: 'ftp://x.example.com', events: ['subscriber.created'] }, ['url']],
    [{ url: 'https://x.example.com', events: [] }, ['events']],
    [{ url: 'https://x.example.com', events: 'subscriber.created' }, ['events']],
    [{ url: 'https://x.example.com', events: ['subscriber.created', 'subscriber.exploded'] }, ['events.1']],
    [{ url: 'https://x.example.com', events: ['subscriber.created'], enabled: 'yes' }, ['enabled']],
    [{ url: 'https://x.example.com', events: ['subscriber.created'], name: 5 }, ['name']],
  ])('rejects %j with errors on %j', (body, keys) => {
    const result = registry().create(body);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(Object.keys(result.errors).sort()).toEqual([...keys].sort());
    for (const messages of Object.values(result.errors)) expect(messages.length).toBeGreaterThan(0);
  });

  it.each(['campaign.open', 'campaign.click', 'subscriber.deleted'])('requires batchable true for %s', (kind) => {
    const r = registry();
    for (const batchable of [undefined, false]) {
      const result = r.create({ url: 'https://x.example.com', events: ['subscriber.created', kind], batchable });
      expect(result.ok ? [] : Object.keys(result.errors)).toEqual(['batchable']);
    }
    expect(r.create({ url: 'https://x.example.com', events: [kind], batchable: true }).ok).toBe(true);
  });

  it('checks the batch rule on the webhook an update would produce', () => {
    const r = registry();
    const created = r.register({ url: 'https://x.example.com', events: ['subscriber.created'] });
    const bad = r.update(created.id, { events: ['campaign.open'] });
    expect(bad?.ok).toBe(false);
    const good = r.update(created.id, { events: ['campaign.open'], batchable: true });
    expect(good?.ok && good.webhook.events).toEqual(['campaign.open']);
    expect(good?.ok && good.webhook.secret).toBe(created.secret);
    expect(r.update('404', { name: 'x' })).toBeUndefined();
  });

  it('lists enabled subscribers of a kind and forgets deleted webhooks', () => {
    const r = registry();
    const a = r.register({ url: 'https://a.example.com', events: ALL_EVENT_KINDS, batchable: true });
    r.register({ url: 'https://b.example.com', events: ['subscriber.created'], enabled: false });
    expect(r.subscribedTo('subscriber.created').map((h) => h.id)).toEqual([a.id]);
    const deleted: string[] = [];
    r.onDelete((id) => deleted.push(id));
    expect(r.delete(a.id)).toBe(true);
    expect(r.delete(a.id)).toBe(false);
    expect(deleted).toEqual([a.id]);
    expect(r.subscribedTo('subscriber.created')).toEqual([]);
  });
});

describe('simulator webhooks: page envelope', () => {
  const items = Array.from({ length: 120 }, (_, i) => i + 1);
  const path = 'http://127.0.0.1:1/api/webhooks';

  it('describes the first page', () => {
    const page = pageEnvelope(items, 1, path);
    expect(page.data).toHaveLength(50);
    expect(page.links).toEqual({ first: `${path}?page=1`, last: `${path}?page=3`, prev: null, next: `${path}?page=2` });
    expect(page.meta).toMatchObject({ current_page: 1, from: 1, to: 50, last_page: 3, per_page: 50, total: 120, path });
    expect(page.meta.links.map((l) => [l.label, l.active, l.url])).toEqual([
      ['&laquo; Previous', false, null],
      ['1', true, `${path}?page=1`],
      ['2', false, `${path}?page=2`],
      ['3', false, `${path}?page=3`],
      ['Next &raquo;', false, `${path}?page=2`],
    ]);
  });

  it('describes the last page and a page past the end', () => {
    const last = pageEnvelope(items, 3, path);
    expect(last.data).toEqual(items.slice(100));
    expect(last.meta).toMatchObject({ from: 101, to: 120 });
    expect(last.links.next).toBeNull();
    const past = pageEnvelope(items, 9, path);
    expect(past.data).toEqual([]);
    expect(past.meta).toMatchObject({ from: null, to: null, current_page: 9, last_page: 3 });
  });

  it('describes an empty list as one empty page', () => {
    const empty = pageEnvelope([], 1, path);
    expect(empty.meta).toMatchObject({ total: 0, last_page: 1, from: null, to: null });
    expect(empty.links).toMatchObject({ prev: null, next: null, last: `${path}?page=1` });
  });

  it('elides page links like Laravel once there are many pages', () => {
    expect(pageWindow(1, 13)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]);
    expect(pageWindow(1, 20)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, null, 19, 20]);
    expect(pageWindow(10, 20)).toEqual([1, 2, null, 7, 8, 9, 10, 11, 12, 13, null, 19, 20]);
    expect(pageWindow(18, 20)).toEqual([1, 2, null, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]);
  });
});

describe('simulator webhooks: disabled after failing deliveries', () => {
  async function failingRun(disableAfterMs: number) {
    const registry = new WebhookRegistry({ clock: Date.now });
    // Port 9 (discard) on loopback refuses at once: every attempt fails.
    const created = registry.create({ url: 'http://127.0.0.1:9/hook', events: ['subscriber.updated'] });
    if (!created.ok) throw new Error('create failed');
    const deliveries = new Deliveries(registry, {
      accountId: 1,
      timeoutMs: 1000,
      retryDelaysMs: [40, 40, 40],
      batchIntervalMs: 1000,
      batchMaxEvents: 100,
      concurrency: 2,
      logLimit: 100,
      disableAfterMs,
    });
    const disabled: string[] = [];
    deliveries.onDisabled((id) => disabled.push(id));
    const world = new World({ subscribers: 3, groups: 1 });
    world.onEvent((e) => deliveries.handle(e));
    world.updateFields([...world.ids()][0] as string, { name: 'x' });
    await deliveries.idle(5_000);
    await deliveries.close();
    expect(deliveries.attempts.length).toBe(4);
    expect(deliveries.attempts.every((a) => !a.ok)).toBe(true);
    return { disabled, id: created.webhook.id, enabled: registry.get(created.webhook.id)?.enabled };
  }

  it('disables a webhook whose deliveries kept failing for disableAfterMs, once', async () => {
    // Any failure after the first disables it: the retries that follow fail too, but it is disabled once.
    const run = await failingRun(1);
    expect(run.disabled).toEqual([run.id]);
    expect(run.enabled).toBe(false);
  });

  it('keeps it enabled while the failures are younger than that', async () => {
    const run = await failingRun(60_000);
    expect(run.disabled).toEqual([]);
    expect(run.enabled).toBe(true);
  });
});

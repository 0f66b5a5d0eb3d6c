/**
 * The metrics of the parts serving one account carry its `account` label (docs/operations.md,
 * "Several accounts"): `metrics.forAccount(name)` records them so, and leaves the deployment's alone.
 */
import { describe, expect, it } from 'vitest';
import { createMetrics, initSeries } from '../../src/ground/metrics.js';

const valuesOf = async (metric: { get(): Promise<{ values: Array<{ labels: object; value: number }> }> }) =>
  (await metric.get()).values.map((v) => ({ labels: v.labels, value: v.value }));

describe('metrics.forAccount', () => {
  it('adds the account to every series a per-account metric records, whatever the call looks like', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    const shop = metrics.forAccount('shop');
    shop.passDuration.observe({ mode: 'full', outcome: 'succeeded' }, 2);
    shop.authPaused.set(1);
    shop.auditRequests.inc();
    shop.auditRequests.inc(2);
    metrics.forAccount('blog').authPaused.set(0);
    expect(await valuesOf(metrics.authPaused)).toEqual([
      { labels: { account: 'shop' }, value: 1 },
      { labels: { account: 'blog' }, value: 0 },
    ]);
    expect(await valuesOf(metrics.auditRequests)).toEqual([{ labels: { account: 'shop' }, value: 3 }]);
    const count = (await metrics.passDuration.get()).values.find((v) => v.metricName?.endsWith('_count'));
    expect(count?.labels).toEqual({ mode: 'full', outcome: 'succeeded', account: 'shop' });
  });

  it('leaves the deployment’s metrics without the label, and gives each account one view', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    const shop = metrics.forAccount('shop');
    expect(metrics.forAccount('shop')).toBe(shop);
    shop.redisMemoryUsed.set(5);
    shop.adminActions.inc({ action: 'login', outcome: 'succeeded' });
    expect(await valuesOf(metrics.redisMemoryUsed)).toEqual([{ labels: {}, value: 5 }]);
    expect(await valuesOf(metrics.adminActions)).toEqual([{ labels: { action: 'login', outcome: 'succeeded' }, value: 1 }]);
  });

  it("resets only the series its account recorded (one account's audit leaves the other's webhook gauges)", async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    const [shop, blog] = [metrics.forAccount('shop'), metrics.forAccount('blog')];
    shop.webhookProblems.set({ webhook: '1', problem: 'disabled' }, 1);
    blog.webhookProblems.set({ webhook: '1', problem: 'disabled' }, 0);
    shop.webhookProblems.reset();
    shop.webhookProblems.set({ webhook: '2', problem: 'missing' }, 1);
    expect(await valuesOf(metrics.webhookProblems)).toEqual([
      { labels: { webhook: '1', problem: 'disabled', account: 'blog' }, value: 0 },
      { labels: { webhook: '2', problem: 'missing', account: 'shop' }, value: 1 },
    ]);
  });

  it("shows each account's learned budgets under its name", async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    metrics
      .forAccount('shop')
      .watchBudgets(['unknown', 'account'], () => ({ model: 'account', budgets: [{ budget: 'shared', perWindow: 54 }] }));
    metrics
      .forAccount('blog')
      .watchBudgets(['unknown', 'account'], () => ({ model: 'unknown', budgets: [{ budget: 'shared', perWindow: 108 }] }));
    expect(await valuesOf(metrics.rateBudget)).toEqual([
      { labels: { budget: 'shared', account: 'shop' }, value: 54 },
      { labels: { budget: 'shared', account: 'blog' }, value: 108 },
    ]);
    expect(await valuesOf(metrics.rateBudgetModel)).toEqual([
      { labels: { model: 'unknown', account: 'shop' }, value: 0 },
      { labels: { model: 'account', account: 'shop' }, value: 1 },
      { labels: { model: 'unknown', account: 'blog' }, value: 1 },
      { labels: { model: 'account', account: 'blog' }, value: 0 },
    ]);
  });

  it("stops showing an account's budgets once its limiter is unwatched (another replica reads it now)", async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    const shop = metrics.forAccount('shop');
    const budgets = (perWindow: number) => () => ({ model: 'account', budgets: [{ budget: 'shared', perWindow }] });
    const unwatchFirst = shop.watchBudgets(['account'], budgets(54));
    // Read here again later: the new limiter's watch replaces the first, whose unwatch then leaves it be.
    const unwatchSecond = shop.watchBudgets(['account'], budgets(60));
    unwatchFirst();
    expect(await valuesOf(metrics.rateBudget)).toEqual([{ labels: { budget: 'shared', account: 'shop' }, value: 60 }]);
    unwatchSecond();
    expect(await valuesOf(metrics.rateBudget)).toEqual([]);
  });

  it('starts the series alerts read at 0 for every account', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    initSeries(metrics, ['pending', 'failed'], ['default', 'shop']);
    const inbox = await valuesOf(metrics.inbox);
    expect(inbox.map((v) => v.labels)).toEqual([
      { status: 'pending', account: 'default' },
      { status: 'failed', account: 'default' },
      { status: 'pending', account: 'shop' },
      { status: 'failed', account: 'shop' },
    ]);
    const applied = (await valuesOf(metrics.deliveries)).filter((v) => (v.labels as { outcome: string }).outcome === 'applied');
    expect(applied.map((v) => v.labels)).toEqual([
      { outcome: 'applied', account: 'default' },
      { outcome: 'applied', account: 'shop' },
    ]);
    // The metrics whose only label is the account's exist from the start too (a histogram's buckets at 0).
    expect((await valuesOf(metrics.authPaused)).map((v) => v.labels)).toEqual([{ account: 'default' }, { account: 'shop' }]);
    const lag = (await metrics.deliveryLag.get()).values.filter((v) => v.metricName?.endsWith('_count'));
    expect(lag.map((v) => [v.labels, v.value])).toEqual([
      [{ account: 'default' }, 0],
      [{ account: 'shop' }, 0],
    ]);
    // The waits for the worker's connections, and its checkouts that got none, by reason.
    const waited = (await metrics.dbCheckoutWait.get()).values.filter((v) => v.metricName?.endsWith('_count'));
    expect(waited.map((v) => v.labels)).toEqual([{ account: 'default' }, { account: 'shop' }]);
    expect((await valuesOf(metrics.dbCheckoutFailures)).map((v) => v.labels)).toEqual([
      { reason: 'timeout', account: 'default' },
      { reason: 'error', account: 'default' },
      { reason: 'timeout', account: 'shop' },
      { reason: 'error', account: 'shop' },
    ]);
  });

  it("starts a receiver's own series only: no pass, limiter, connection wait or pause of a worker it is not", async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    initSeries(metrics, ['pending'], ['shop'], { receiver: true, worker: false });
    const outcomes = (await valuesOf(metrics.deliveries)).map((v) => v.labels as { outcome: string; account?: string });
    expect(outcomes).toEqual([
      { outcome: 'rejected' },
      { outcome: 'received', account: 'shop' },
      { outcome: 'received_invalid', account: 'shop' },
      { outcome: 'rejected', account: 'shop' },
      { outcome: 'duplicate', account: 'shop' },
    ]);
    expect((await valuesOf(metrics.inbox)).map((v) => v.labels)).toEqual([{ status: 'pending', account: 'shop' }]);
    for (const workers of [metrics.authPaused, metrics.dbCheckoutFailures, metrics.syncJobsRefused, metrics.auditRequests])
      expect(await valuesOf(workers)).toEqual([]);
    for (const histogram of [metrics.dbCheckoutWait, metrics.limiterWait, metrics.passDuration, metrics.deliveryLag])
      expect((await histogram.get()).values).toEqual([]);

    // A worker alone: the consumer's outcomes and the rest, none of the receiver's.
    const worker = createMetrics({ defaultMetrics: false });
    initSeries(worker, ['pending'], ['shop'], { receiver: false, worker: true });
    const workerOutcomes = (await valuesOf(worker.deliveries)).map((v) => (v.labels as { outcome: string }).outcome);
    expect(workerOutcomes).toEqual(['applied', 'failed', 'ignored']);
    expect((await valuesOf(worker.authPaused)).map((v) => v.labels)).toEqual([{ account: 'shop' }]);
  });

  it("shows the worker's shared connections when scraped, and nothing once they are closed", async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    expect(await valuesOf(metrics.dbPool)).toEqual([]);
    const now = { busy: 16, idle: 0, waiting: 3 };
    const unwatch = metrics.forAccount('shop').watchConnections(() => now);
    expect(await valuesOf(metrics.dbPool)).toEqual([
      { labels: { state: 'busy' }, value: 16 },
      { labels: { state: 'idle' }, value: 0 },
      { labels: { state: 'waiting' }, value: 3 },
    ]);
    now.waiting = 0;
    expect((await valuesOf(metrics.dbPool)).at(-1)).toEqual({ labels: { state: 'waiting' }, value: 0 });
    unwatch();
    expect(await valuesOf(metrics.dbPool)).toEqual([]);
  });
});

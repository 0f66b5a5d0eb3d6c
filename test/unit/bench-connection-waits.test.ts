/**
 * The accounts benchmark reads each replica's waits for its connections from its `/metrics`
 * (test/bench/lib/connection-waits.ts): from the exposition the service's own registry writes.
 */
import { describe, expect, it } from 'vitest';
import { createMetrics, initSeries } from '../../src/ground/metrics.js';
import { parseConnectionWaits } from '../bench/lib/connection-waits.js';

describe('parseConnectionWaits', () => {
  it("adds up every account's checkouts, waits, waits over a second and timeouts", async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    initSeries(metrics, ['pending'], ['default', 'shop']);
    const shop = metrics.forAccount('shop');
    for (const seconds of [0.001, 0.2, 1.5]) shop.dbCheckoutWait.observe(seconds);
    metrics.forAccount('default').dbCheckoutWait.observe(3);
    shop.dbCheckoutFailures.inc({ reason: 'timeout' });
    shop.dbCheckoutFailures.inc({ reason: 'error' }, 4);
    const waits = parseConnectionWaits(await metrics.registry.metrics());
    expect(waits.checkouts).toBe(4);
    expect(waits.waitedSeconds).toBeCloseTo(4.701, 6);
    expect(waits.overOneSecond).toBe(2);
    expect(waits.timeouts).toBe(1);
  });

  it('reads zeros from a process that says nothing of them', () => {
    expect(parseConnectionWaits('# HELP up\nup 1\n')).toEqual({ checkouts: 0, waitedSeconds: 0, overOneSecond: 0, timeouts: 0 });
  });
});

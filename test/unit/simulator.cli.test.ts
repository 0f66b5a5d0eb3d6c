import { describe, expect, it } from 'vitest';
import { UsageError } from '../../src/ground/usage-error.js';
import { parseSimulatorArgs, runSimulatorCli } from '../../src/simulator/cli.js';
import type { Simulator } from '../../src/simulator/index.js';

describe('simulator CLI arguments', () => {
  it('has the documented defaults', () => {
    const { options, webhookTarget } = parseSimulatorArgs([]);
    expect(options).toMatchObject({
      port: 4010,
      apiKey: 'sim-key',
      webhooksToken: 'sim-token',
      subscribers: 1000,
      groups: 3,
      largeIds: false,
      churn: 0,
      timeScale: 1,
      rateLimit: 60,
    });
    expect(webhookTarget).toBeNull();
  });

  it('reads every flag', () => {
    const { options, webhookTarget } = parseSimulatorArgs([
      '--port',
      '0',
      '--api-key',
      'k',
      '--webhooks-token',
      't',
      '--subscribers',
      '10',
      '--groups',
      '2',
      '--large-ids',
      '--churn',
      '2.5',
      '--time-scale',
      '0.01',
      '--timezone',
      '+14:00',
      '--boundary',
      'whole-day',
      '--webhook-target',
      'http://127.0.0.1:9/hooks',
      '--rate-limit',
      'off',
      '--page-cap',
      '50',
    ]);
    expect(options).toMatchObject({
      port: 0,
      apiKey: 'k',
      webhooksToken: 't',
      subscribers: 10,
      groups: 2,
      largeIds: true,
      churn: 2.5,
      timeScale: 0.01,
      timezone: '+14:00',
      boundary: 'whole-day',
      rateLimit: false,
      pageCap: 50,
    });
    expect(webhookTarget).toBe('http://127.0.0.1:9/hooks');
  });

  it('names every bad value in one UsageError', () => {
    let error: unknown;
    try {
      parseSimulatorArgs([
        '--port',
        '70000',
        '--subscribers',
        'many',
        '--time-scale',
        '0',
        '--timezone',
        'Mars/Base',
        '--boundary',
        'noon',
        '--webhook-target',
        'nope',
      ]);
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(UsageError);
    const message = (error as Error).message;
    for (const flag of ['--port', '--subscribers', '--time-scale', '--timezone', '--boundary', '--webhook-target']) {
      expect(message).toContain(flag);
    }
  });

  it('rejects unknown flags and positionals', () => {
    expect(() => parseSimulatorArgs(['--bogus'])).toThrow(UsageError);
    expect(() => parseSimulatorArgs(['extra'])).toThrow(UsageError);
    expect(() => parseSimulatorArgs(['--port'])).toThrow(UsageError);
  });

  it('starts, prints its address and registers the target webhooks, then stops on abort', async () => {
    const lines: string[] = [];
    const controller = new AbortController();
    let sim: Simulator | undefined;
    await runSimulatorCli(['--port', '0', '--subscribers', '20', '--webhook-target', 'http://127.0.0.1:9/in'], {
      print: (line) => lines.push(line),
      signal: controller.signal,
      onStarted: (started) => {
        sim = started;
        controller.abort();
      },
    });
    expect(lines[0]).toContain(sim?.url ?? 'missing');
    expect(lines[0]).toContain('X-Service-ApiKey');
    for (const groupId of sim?.world.groupIds() ?? []) expect(lines[0]).toContain(groupId);
    expect(lines.some((line) => line.includes('curl'))).toBe(true);
    const hooks = sim?.webhooks.list() ?? [];
    expect(hooks.map((h) => h.batchable)).toEqual([false, true]);
    expect(hooks[1]?.events.sort()).toEqual(['campaign.click', 'campaign.open', 'subscriber.deleted']);
    expect(hooks[0]?.events).toHaveLength(11);
    for (const hook of hooks) expect(lines.some((line) => line.includes(hook.secret))).toBe(true);
  });

  it('prints usage for --help without starting', async () => {
    const lines: string[] = [];
    await runSimulatorCli(['--help'], { print: (line) => lines.push(line) });
    expect(lines.join('\n')).toContain('--webhook-target');
  });
});

describe('simulator CLI: current API flags (issue 22)', () => {
  it('parses --current-page-cap and --moved-account, and rejects a bad cap', () => {
    const parsed = parseSimulatorArgs(['--current-page-cap', '7', '--moved-account']);
    expect(parsed.options.currentPageCap).toBe(7);
    expect(parsed.options.movedAccount).toBe(true);
    expect(parseSimulatorArgs([]).options.movedAccount).toBeUndefined();
    expect(() => parseSimulatorArgs(['--current-page-cap', '0'])).toThrow(/--current-page-cap must be an integer/);
  });
});

/**
 * An event kind is declared in three tables: how it parses (`EVENT_REGISTRY`, src/webhooks/payloads.ts),
 * what it writes (`EFFECTS`, src/webhooks/apply.ts) and how the simulator sends it (`EVENT_KINDS`,
 * src/simulator/kinds.ts, which may import nothing of the service). This keeps the three equal: a kind
 * added to one and not the others fails here, and so does a kind the simulator sends in a shape, or
 * with a context, the registry does not accept.
 */
import { describe, expect, test } from 'vitest';
import { EVENT_KINDS as SIMULATED_KINDS } from '../../src/simulator/kinds.js';
import { EFFECTS } from '../../src/webhooks/apply.js';
import { EVENT_REGISTRY, type EventKind } from '../../src/webhooks/payloads.js';

const sorted = (keys: Iterable<string>) => [...keys].sort();

describe('event kinds: the registry, the effects and the simulator name the same kinds', () => {
  test('the same set of kinds in all three tables', () => {
    expect(sorted(Object.keys(SIMULATED_KINDS))).toEqual(sorted(Object.keys(EVENT_REGISTRY)));
    expect(sorted(Object.keys(EFFECTS))).toEqual(sorted(Object.keys(EVENT_REGISTRY)));
  });

  test.each(Object.entries(SIMULATED_KINDS))('%s: the simulator sends it as the registry reads it', (kind, simulated) => {
    const spec = EVENT_REGISTRY[kind as EventKind];
    expect(spec, `${kind} is not in EVENT_REGISTRY`).toBeDefined();
    expect(spec.shapes as readonly string[]).toContain(simulated.shape);
    expect(simulated.batchOnly).toBe(spec.requiresBatchable);
    if (simulated.context !== null) expect(spec.carries as readonly string[]).toContain(simulated.context);
  });
});

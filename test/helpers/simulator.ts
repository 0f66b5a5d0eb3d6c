/** Reading the simulator's request log. */
import type { Simulator } from '../../src/simulator/index.js';

/** Offset of the first legacy list page the simulator served after request number `since` (null: none). */
export function firstListOffset(sim: Simulator, since = 0): number | null {
  const first = sim.requests.slice(since).find((r) => r.api === 'legacy' && !r.url.includes('/count'));
  const offset = first ? /[?&]offset=(\d+)/.exec(first.url)?.[1] : undefined;
  return offset === undefined ? null : Number(offset);
}

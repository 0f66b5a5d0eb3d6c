/** Reading the simulator's request log. */
import type { Simulator } from '../../src/simulator/index.js';

/**
 * The routes of the legacy list pages (a group's members, of one type or all). Anything else a worker
 * sends between pages (counts, the custom field definitions read at start) carries no offset.
 */
const LIST_PAGE_ROUTE = /^\/api\/v2\/groups\/:groupId\/subscribers(?:\/:type)?$/;

/** Offset of the first legacy list page the simulator served after request number `since` (null: none). */
export function firstListOffset(sim: Simulator, since = 0): number | null {
  const first = sim.requests.slice(since).find((r) => r.api === 'legacy' && LIST_PAGE_ROUTE.test(r.route ?? ''));
  const offset = first ? /[?&]offset=(\d+)/.exec(first.url)?.[1] : undefined;
  return offset === undefined ? null : Number(offset);
}

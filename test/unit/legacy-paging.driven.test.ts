/**
 * The full-pass paging step (src/upstream/legacy/paging.ts) driven to its end over an in-memory list
 * that members the pass already read leave after every request (issue 20): it keeps its footing,
 * ends, and skips a row only where it reports a gap.
 */
import { describe, expect, it } from 'vitest';
import { emptyCapKnowledge } from '../../src/upstream/legacy/cap-knowledge.js';
import { fullStep, startFullPass } from '../../src/upstream/legacy/paging.js';

type Row = { id: number };

/** Runs `fullStep` to its end over `size` rows read at `limit`; after each request `perRequest` members already read leave. */
function drive(size: number, limit: number, perRequest: number): { requests: number; gaps: number; skipped: number } {
  let list: Row[] = Array.from({ length: size }, (_, i) => ({ id: i + 1 }));
  const seen = new Set<number>();
  let state = startFullPass(0, undefined, limit);
  let known = emptyCapKnowledge();
  let requests = 0;
  let gaps = 0;
  for (;;) {
    const page = list.slice(state.offset, state.offset + limit);
    requests += 1;
    if (requests > 10 * size) throw new Error('the pass does not end');
    const step = fullStep(state, { rows: page }, known, { limit, list: 'l', knownLength: size });
    if (step.kind !== 'next' && step.kind !== 'back' && step.kind !== 'end') throw new Error(`unexpected ${step.kind}`);
    // Members already read leave, spread over what was read so far.
    const readUpTo = Math.min(list.length, state.offset + page.length);
    const leaving = new Set(
      Array.from({ length: Math.min(perRequest, readUpTo) }, (_, i) => Math.floor(((i + 1) * readUpTo) / (perRequest + 1))),
    );
    list = list.filter((_, at) => !leaving.has(at));
    known = step.knowledge;
    if (step.kind !== 'back' && step.page) {
      for (const r of step.page.rows) seen.add(r.id);
      if (!step.page.continuous) gaps += 1;
    }
    if (step.kind === 'end') break;
    state = step.state;
  }
  // Rows listed from start to end that the pass never emitted: skipped.
  return { requests, gaps, skipped: list.filter((r) => !seen.has(r.id)).length };
}

describe('a full pass over a list that members leave after every request', () => {
  const quiet = drive(800, 50, 0).requests;

  it('the quiet pass: the pages the rows fill, with the overlap', () => {
    expect(quiet).toBe(17);
  });

  it.each([1, 2, 4, 8])('%i per request over 800 rows at page 50: within 1.5x the quiet pass, nothing skipped', (perRequest) => {
    const moving = drive(800, 50, perRequest);
    expect(moving).toMatchObject({ gaps: 0, skipped: 0 });
    expect(moving.requests).toBeLessThanOrEqual(1.5 * quiet);
  });

  it.each([20, 40])('%i per request (almost a page): still ends at a bounded cost; a skip only where a gap is reported', (perRequest) => {
    const moving = drive(800, 50, perRequest);
    expect(moving.requests).toBeLessThanOrEqual(2 * quiet);
    if (moving.skipped > 0) expect(moving.gaps).toBeGreaterThan(0);
  });
});

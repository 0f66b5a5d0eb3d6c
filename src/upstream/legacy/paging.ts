/**
 * Paging over a legacy list as pure steps (docs/upstream.md, "Legacy lists": a bare array with no
 * total, a silent page cap, and a list that shifts under offset paging while members leave). Given
 * what a pass has seen (its state), the page just read and the install's page-cap knowledge, a step
 * says what to do next: read the next page, step back, read far away to test the service, or stop,
 * possibly handing a page (or a gap) to the caller first. `legacy.ts` runs the requests.
 *
 * Full pass: overlapping pages (each request re-reads the tail of the previous page and steps back
 * when that tail moved away), any page it could not join to the previous one reported as a gap, the
 * cap learned only from evidence churn cannot fake. Incremental pass: read until a page shorter than
 * any cap the service can have. How a full pass moves on and when it ends lives in `fullStep` only.
 */
import { effectivePageSize, noteServedPage, observeShortPage, type PageCapKnowledge, type ShortPage } from './cap-knowledge.js';

/** What paging needs of a row: its id (a number, or digits when beyond 2^53). */
export interface PagedRow {
  id: number | string;
}

/** A page for the caller, without what only the request knows (the service's clock). */
export interface EmittedPage<R extends PagedRow> {
  /** Offset this page was read at. */
  offset: number;
  /** Rows not already emitted with the previous page (the overlap is left out). */
  rows: R[];
  /** Effective page size in force for this page (the learned cap, else the requested limit). */
  limit: number;
  /** Where the next request will read: the checkpoint of a full pass. */
  nextOffset: number;
  /** Ids at the end of this page, saved with the checkpoint so a resumed pass can prove continuity. */
  tail: string[];
  /** False when this full-pass page could not be joined to the previous one: rows may have been skipped (a gap). */
  continuous: boolean;
}

/** What a step is given about the pass; the same for every step of one pass. */
export interface PagingContext {
  /** The `limit` asked for on every request; it never shrinks. */
  limit: number;
  /** The list's `/count` when the pass began; a short page teaches a cap only where this says the list went on. */
  knownLength?: number;
  /** Names the list (`<group>/<type>`) in the cap knowledge. */
  list: string;
}

/** What the service answered: the page at the state's offset, and the far page when a step asked for it. */
export interface PageResponse<R extends PagedRow> {
  rows: R[];
  probe?: R[];
}

/** The state every pass has: where its next request reads. */
export interface PassPosition {
  readonly offset: number;
}

export type PagingStep<S extends PassPosition, R extends PagedRow> =
  /** Emit `page`, then read at `state.offset`. */
  | { kind: 'next'; state: S; knowledge: PageCapKnowledge; page: EmittedPage<R> }
  /** The previous page moved away: read again at the earlier `state.offset`, emit nothing. */
  | { kind: 'back'; state: S; knowledge: PageCapKnowledge }
  /** Read at `offset` too, then give the same page again with that answer as `probe`. */
  | { kind: 'probe'; offset: number; knowledge: PageCapKnowledge }
  /** The pass is over, after emitting `page` when there is one (the last rows, or a gap found on the last request). */
  | { kind: 'end'; knowledge: PageCapKnowledge; page?: EmittedPage<R> }
  /** The service served the same page at `offset` and far past any list: it ignores offset. */
  | { kind: 'ignores-offset'; offset: number; farOffset: number; knowledge: PageCapKnowledge };

export type PagingStepFunction<S extends PassPosition> = <R extends PagedRow>(
  state: S,
  response: PageResponse<R>,
  knowledge: PageCapKnowledge,
  context: PagingContext,
) => PagingStep<S, R>;

/** An offset past any real list (9 digits, what the service's validation accepts). */
export const FAR_OFFSET = 999_999_999;

/** How many pages back a full pass looks for the previous page after a shift larger than the overlap. */
export const MAX_STEP_BACKS = 3;

/**
 * Rows each full-pass request re-reads from the previous page: about 4 % of a page (1 to 20 rows),
 * so up to that many members may leave ahead of the read position between two requests without a
 * skip, for ~4 % more requests. Below the page length, so every request moves on; a page of one
 * row is read again at the same offset (that request also shows whether the list ends there).
 */
export function overlapFor(pageLength: number): number {
  if (pageLength <= 1) return pageLength;
  return Math.min(20, Math.max(1, Math.floor(pageLength / 25)), pageLength - 1);
}

export interface PageFingerprint {
  length: number;
  firstId: string;
  lastId: string;
}

/** Enough to recognise a repeated page without holding the previous page (invariant 8). */
export function fingerprint(rows: readonly PagedRow[]): PageFingerprint {
  return { length: rows.length, firstId: String(rows[0]?.id), lastId: String(rows.at(-1)?.id) };
}

function sameFingerprint(a: PageFingerprint, b: PageFingerprint): boolean {
  return a.length === b.length && a.firstId === b.firstId && a.lastId === b.lastId;
}

// ---------------------------------------------------------------------------------------------
// Incremental pass
// ---------------------------------------------------------------------------------------------

export type IncrementalPassState = PassPosition;

export function startIncrementalPass(startOffset = 0): IncrementalPassState {
  return { offset: startOffset };
}

/**
 * An empty page ends the pass. A short page ends it only when the service has served longer pages
 * (then it is no cap) or a cap is known and the page is shorter; otherwise one more request settles
 * it (never in steady state: full passes serve long pages).
 */
export const incrementalStep: PagingStepFunction<IncrementalPassState> = (state, { rows }, before, context) => {
  const knowledge = noteServedPage(before, rows.length);
  if (rows.length === 0) return { kind: 'end', knowledge };
  const nextOffset = state.offset + rows.length;
  const page = { offset: state.offset, rows, limit: effectivePageSize(context.limit, knowledge), nextOffset, tail: [], continuous: true };
  const short = rows.length < context.limit;
  if (short && rows.length < knowledge.longestPage) return { kind: 'end', knowledge, page };
  if (short && knowledge.cap !== null && rows.length < knowledge.cap) return { kind: 'end', knowledge, page };
  return { kind: 'next', state: { offset: nextOffset }, knowledge, page };
};

// ---------------------------------------------------------------------------------------------
// Full pass
// ---------------------------------------------------------------------------------------------

export interface FullPassState extends PassPosition {
  /** Ids of the previous page (null before the first page of a pass started without a saved tail). */
  readonly previous: ReadonlySet<string> | null;
  readonly previousPrint: PageFingerprint | null;
  /** How many rows of the previous page the request at `offset` re-reads. */
  readonly overlap: number;
  /** The previous page when it was short (a cap, or the list's end for now). */
  readonly shortBefore: ShortPage | null;
  /** Step backs in a row looking for the previous page. */
  readonly stepBacks: number;
  /** Whether the far request that tells a repeated page from a service ignoring offset was made. */
  readonly probed: boolean;
  /** False when rows before `offset` may have been skipped (a resume without a tail). */
  readonly continuous: boolean;
}

/** A full pass from `startOffset`; `startTail` (ids of the page read before it) lets the first page prove it skipped nothing. */
export function startFullPass(startOffset: number, startTail: readonly string[] | undefined, limit: number): FullPassState {
  const previous = startTail && startTail.length > 0 ? new Set(startTail) : null;
  return {
    offset: startOffset,
    previous,
    previousPrint: null,
    overlap: previous ? Math.min(previous.size, overlapFor(limit)) : 0,
    shortBefore: null,
    stepBacks: 0,
    probed: false,
    continuous: startOffset === 0 || previous !== null,
  };
}

/**
 * An overlapping page starts inside the previous one, never at its first row. Members joining
 * ahead of the read position can repeat a page (the list shifted down by one step); a service that
 * ignores offset repeats it everywhere. One request far past any list tells, once per pass.
 */
function needsProbe(state: FullPassState, current: PageFingerprint): boolean {
  return !state.probed && state.previousPrint !== null && current.length > 1 && sameFingerprint(state.previousPrint, current);
}

export const fullStep: PagingStepFunction<FullPassState> = (state, response, before, context) => {
  const { rows } = response;
  const knowledge = noteServedPage(before, rows.length);
  const current = fingerprint(rows);
  let probed = state.probed;
  if (needsProbe(state, current)) {
    if (response.probe === undefined) return { kind: 'probe', offset: FAR_OFFSET, knowledge };
    probed = true;
    if (response.probe.length > 0 && sameFingerprint(fingerprint(response.probe), current)) {
      return { kind: 'ignores-offset', offset: state.offset, farOffset: FAR_OFFSET, knowledge };
    }
  }
  const { previous, offset } = state;
  const joined = previous === null || rows.some((r) => previous.has(String(r.id)));
  if (!joined && offset > 0 && state.stepBacks < MAX_STEP_BACKS) {
    // More members left ahead of the read position than the overlap covers: the previous page's
    // rows moved up. Look for them one page earlier instead of skipping rows.
    const back = Math.max(0, offset - Math.max(1, effectivePageSize(context.limit, knowledge) - state.overlap));
    return { kind: 'back', state: { ...state, probed, stepBacks: state.stepBacks + 1, offset: back }, knowledge };
  }
  // Read from the top again after a miss: nothing before it can be missed.
  const continuous = joined ? state.continuous : offset === 0;
  const fresh = previous ? rows.filter((r) => !previous.has(String(r.id))) : rows;
  const learned =
    state.shortBefore !== null && fresh.length > 0 ? observeShortPage(knowledge, state.shortBefore, context.knownLength, context.list) : knowledge;
  const limit = effectivePageSize(context.limit, learned);
  // The end: this page held only rows the request re-read on purpose (or none at all).
  if (rows.length === 0 || (fresh.length === 0 && joined && rows.length <= state.overlap)) {
    // A gap found on the last request must still reach the caller, who decides what it proves.
    if (continuous) return { kind: 'end', knowledge: learned };
    return { kind: 'end', knowledge: learned, page: { offset, rows: [], limit, nextOffset: offset, tail: [], continuous } };
  }
  const overlap = overlapFor(rows.length);
  const nextOffset = offset + rows.length - overlap;
  const tail = rows.slice(rows.length - Math.max(overlap, 1)).map((r) => String(r.id));
  return {
    kind: 'next',
    knowledge: learned,
    page: { offset, rows: fresh, limit, nextOffset, tail, continuous },
    state: {
      offset: nextOffset,
      previous: new Set(rows.map((r) => String(r.id))),
      previousPrint: current,
      overlap,
      shortBefore: rows.length < limit ? { length: rows.length, offset } : null,
      stepBacks: 0,
      probed,
      continuous: true,
    },
  };
};

/**
 * Paging over a legacy list as pure steps (docs/upstream.md, "Legacy lists": a bare array with no
 * total, a silent page cap, and a list that shifts under offset paging while members leave). Given
 * what a pass has seen (its state), the page just read and the install's page-cap knowledge, a step
 * says what to do next: read the next page, step back, read far away to test the service, or stop,
 * possibly handing a page (or a gap) to the caller first. `client.ts` runs the requests.
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
  /** Step backs made to join this page to the previous one (0 for an incremental pass). */
  stepBacks: number;
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

/**
 * Step backs in a row a full pass makes looking for the previous page before it reports a gap. Each
 * one goes back twice as far as the one before (from what the evidence requires: the shift is
 * larger than the overlap), up to a page; six cover a shift of several pages.
 */
export const MAX_STEP_BACKS = 6;

/**
 * Step backs a whole pass may make beyond a few: one per four pages read. A list that keeps moving
 * faster than any overlap then costs at most ~25 % more requests; past that budget the pass moves
 * on and reports the page it could not join as a gap (it then proves no removal) instead of
 * paging for ever.
 */
export function stepBackBudget(pagesRead: number): number {
  return 4 + Math.floor(pagesRead / 4);
}

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

/**
 * The overlap for the next request when the list just moved up by `shift` rows between two
 * requests (members leaving ahead of the read position): the base overlap plus twice the shift, so
 * the same pace (or a burst twice as large) is still re-read, never a whole page.
 */
export function adaptedOverlap(pageLength: number, shift: number): number {
  if (pageLength <= 1) return pageLength;
  return Math.min(pageLength - 1, overlapFor(pageLength) + 2 * Math.max(0, shift));
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
  const page = {
    offset: state.offset,
    rows,
    limit: effectivePageSize(context.limit, knowledge),
    nextOffset,
    tail: [],
    continuous: true,
    stepBacks: 0,
  };
  const short = rows.length < context.limit;
  if (short && rows.length < knowledge.longestPage) return { kind: 'end', knowledge, page };
  if (short && knowledge.cap !== null && rows.length < knowledge.cap) return { kind: 'end', knowledge, page };
  return { kind: 'next', state: { offset: nextOffset }, knowledge, page };
};

// ---------------------------------------------------------------------------------------------
// Full pass
// ---------------------------------------------------------------------------------------------

export interface FullPassState extends PassPosition {
  /**
   * Ids of the previous page, each with the offset it was read at (null before the first page of a
   * pass started without a saved tail): finding one again tells how far the list moved.
   */
  readonly previous: ReadonlyMap<string, number> | null;
  readonly previousPrint: PageFingerprint | null;
  /** How many rows of the previous page the request at `offset` re-reads. */
  readonly overlap: number;
  /** How far the list moved up between the last two requests that joined (members left ahead of the read position); 0 when quiet. */
  readonly shift: number;
  /** The previous page when it was short (a cap, or the list's end for now). */
  readonly shortBefore: ShortPage | null;
  /** Step backs in a row looking for the previous page. */
  readonly stepBacks: number;
  /** Step backs in this pass so far, held to `stepBackBudget(pages)`. */
  readonly stepBacksInPass: number;
  /** Pages read and joined (or given up on) in this pass so far. */
  readonly pages: number;
  /** Whether the far request that tells a repeated page from a service ignoring offset was made. */
  readonly probed: boolean;
  /** False when rows before `offset` may have been skipped (a resume without a tail). */
  readonly continuous: boolean;
}

/** A full pass from `startOffset`; `startTail` (ids of the page read before it) lets the first page prove it skipped nothing. */
export function startFullPass(startOffset: number, startTail: readonly string[] | undefined, limit: number): FullPassState {
  // The saved tail is what the request at `startOffset` re-reads: its rows were read from there on.
  const previous = startTail && startTail.length > 0 ? new Map(startTail.map((id, i) => [id, startOffset + i] as const)) : null;
  return {
    offset: startOffset,
    previous,
    previousPrint: null,
    overlap: previous ? Math.min(previous.size, overlapFor(limit)) : 0,
    shift: 0,
    shortBefore: null,
    stepBacks: 0,
    stepBacksInPass: 0,
    pages: 0,
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

/**
 * How far the list moved up since the previous page was read, measured on the last row of `rows`
 * that the previous page held (its offset then, against its offset now); null when none is here.
 */
export function measuredShift(previous: ReadonlyMap<string, number>, rows: readonly PagedRow[], offset: number): number | null {
  for (let i = rows.length - 1; i >= 0; i--) {
    const then = previous.get(String(rows[i]?.id));
    if (then !== undefined) return then - (offset + i);
  }
  return null;
}

/**
 * Where to read after a page that holds none of the previous page's rows: they moved up by more
 * than the overlap. The evidence says only that much, so the first step back is small (what the
 * last measured shift suggests) and each further one doubles, never more than a page less the
 * overlap at once (the page read then still reaches past the previous page's end).
 */
function stepBackOffset(state: FullPassState, pageSize: number): number {
  const first = Math.max(1, state.overlap, 2 * state.shift);
  const distance = Math.min(first * 2 ** state.stepBacks, Math.max(1, pageSize - state.overlap));
  return Math.max(0, state.offset - distance);
}

function mayStepBack(state: FullPassState): boolean {
  return state.offset > 0 && state.stepBacks < MAX_STEP_BACKS && state.stepBacksInPass < stepBackBudget(state.pages);
}

/**
 * A short page joined to the previous one ends the list, unless it may be the service's cap. It is
 * not when the service served a longer page before, or when the list's count says it ends here
 * (a cap would leave rows the count includes), and its length is no cap candidate.
 */
function endsList(length: number, pageSize: number, knowledge: PageCapKnowledge, offset: number, context: PagingContext): boolean {
  if (length === 0 || length >= pageSize || knowledge.candidate?.length === length) return false;
  return length < knowledge.longestPage || (context.knownLength !== undefined && offset + length >= context.knownLength);
}

/** A full pass whose list's `/count` was 0 when it began reads nothing: there is no row to page through. */
export function fullPassNeedsNoRead(startOffset: number, context: PagingContext): boolean {
  return startOffset === 0 && context.knownLength === 0;
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
  const shift = previous === null ? 0 : measuredShift(previous, rows, offset);
  const joined = shift !== null;
  if (!joined && mayStepBack(state)) {
    const back = stepBackOffset(state, effectivePageSize(context.limit, knowledge));
    const stepBacks = state.stepBacks + 1;
    return { kind: 'back', state: { ...state, probed, stepBacks, stepBacksInPass: state.stepBacksInPass + 1, offset: back }, knowledge };
  }
  // Read from the top again after a miss: nothing before it can be missed.
  const continuous = joined ? state.continuous : offset === 0;
  const fresh = previous ? rows.filter((r) => !previous.has(String(r.id))) : rows;
  const learned =
    state.shortBefore !== null && fresh.length > 0
      ? observeShortPage(knowledge, state.shortBefore, context.knownLength, context.list)
      : knowledge;
  const limit = effectivePageSize(context.limit, learned);
  const stepBacks = state.stepBacks;
  // The end: this page held only rows the request re-read on purpose (or none at all).
  if (rows.length === 0 || (fresh.length === 0 && joined && rows.length <= state.overlap)) {
    // A gap found on the last request must still reach the caller, who decides what it proves.
    if (continuous) return { kind: 'end', knowledge: learned };
    return { kind: 'end', knowledge: learned, page: { offset, rows: [], limit, nextOffset: offset, tail: [], continuous, stepBacks } };
  }
  const overlap = adaptedOverlap(rows.length, shift ?? 0);
  const nextOffset = offset + rows.length - overlap;
  const tail = rows.slice(rows.length - Math.max(overlap, 1)).map((r) => String(r.id));
  const page = { offset, rows: fresh, limit, nextOffset, tail, continuous, stepBacks };
  // A short page that ends the list needs no request to confirm it.
  if (joined && endsList(rows.length, limit, learned, offset, context)) return { kind: 'end', knowledge: learned, page };
  return {
    kind: 'next',
    knowledge: learned,
    page,
    state: {
      offset: nextOffset,
      previous: new Map(rows.map((r, i) => [String(r.id), offset + i] as const)),
      previousPrint: current,
      overlap,
      shift: Math.max(0, shift ?? 0),
      shortBefore: rows.length < limit ? { length: rows.length, offset } : null,
      stepBacks: 0,
      stepBacksInPass: state.stepBacksInPass,
      pages: state.pages + 1,
      probed,
      continuous: true,
    },
  };
};

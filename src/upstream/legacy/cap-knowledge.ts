/**
 * What an install knows about the legacy service's silent page cap (docs/upstream.md, "Legacy
 * lists"), as immutable values: each function returns new knowledge (or the same object when
 * nothing changed) and never writes into the one it is given.
 */

/**
 * The cap belongs to the service, so there is one per install, shared by every (group, type) and
 * every pass.
 */
export interface PageCapKnowledge {
  /** The cap, learned only from evidence churn cannot fake (see `observeShortPage`); null = none known. */
  readonly cap: number | null;
  /** The longest page the service ever served: it caps no lower, so a shorter page is a list's end. */
  readonly longestPage: number;
  /** A short page that was followed by more rows, not yet seen a second time: its length and where it was served. */
  readonly candidate: { readonly length: number; readonly where: string } | null;
}

export function emptyCapKnowledge(): PageCapKnowledge {
  return { cap: null, longestPage: 0, candidate: null };
}

/** The page size in force: the learned cap, else the requested limit. */
export function effectivePageSize(limit: number, knowledge: PageCapKnowledge): number {
  return Math.min(limit, knowledge.cap ?? limit);
}

/** A cap known for certain (tests, callers without persistence) when nothing was learned yet. */
export function withKnownCap(knowledge: PageCapKnowledge, cap: number | undefined): PageCapKnowledge {
  if (cap === undefined || knowledge.cap !== null) return knowledge;
  return { ...knowledge, cap, longestPage: Math.max(knowledge.longestPage, cap) };
}

/**
 * A page of `length` rows was served: it raises the longest page seen, and a page longer than the
 * known cap means the cap was lifted or raised (forget it).
 */
export function noteServedPage(knowledge: PageCapKnowledge, length: number): PageCapKnowledge {
  let next = knowledge;
  if (length > next.longestPage) next = { ...next, longestPage: length };
  if (next.cap !== null && length > next.cap) next = { ...next, cap: null, candidate: null };
  return next;
}

/** A page shorter than the page size in force, and where it was read. */
export interface ShortPage {
  readonly length: number;
  readonly offset: number;
}

/**
 * A page shorter than asked was followed by more rows: either the service caps pages at that
 * length, or the list grew between the two requests (churn: the demo "learned" caps of 355, 277
 * and 359, its whole growing lists). Growth cannot fake all of: (a) the list's count at the start
 * of the pass (`knownLength`) held at least two such pages beyond this offset, (b) the service
 * never served a longer page, (c) the same length was seen so twice. Only then is it the cap.
 * `list` names the list for the candidate's `where`.
 */
export function observeShortPage(
  knowledge: PageCapKnowledge,
  short: ShortPage,
  knownLength: number | undefined,
  list: string,
): PageCapKnowledge {
  if (knowledge.cap !== null || short.length < knowledge.longestPage) return knowledge;
  if (knownLength === undefined || knownLength < short.offset + 2 * short.length) return knowledge;
  const seen = knowledge.candidate;
  if (seen && seen.length === short.length) return { ...knowledge, cap: short.length, candidate: null };
  return { ...knowledge, candidate: { length: short.length, where: `${list}@${short.offset}` } };
}

/**
 * The audit's decisions as pure functions (docs/operations.md, "The audit"): what a row the service
 * listed says about the mirror, whether a count gap is explained by changes still on their way, where
 * the sample reads next, and which (group, type) pairs a tick can afford. `audit.ts` makes the
 * requests and the writes; everything here is decided from values, so it is tested by tables.
 *
 * Precision matters as much as recall: a change the service stamped is on its way (a webhook, the next
 * incremental pass) and is never reported. Only what no stamp explains is a mismatch.
 */
import type { PendingExtra } from '../db/schema.js';

export type { PendingExtra };

export const MISMATCH_KINDS = ['content', 'missing', 'extra', 'count'] as const;
export type MismatchKind = (typeof MISMATCH_KINDS)[number];

/** The subscriber columns the audit compares, as both read paths render them for the same state. */
export const AUDITED_FIELDS = ['email', 'name', 'status', 'sent', 'opensCount', 'clicksCount', 'fields'] as const;
export type AuditedField = (typeof AUDITED_FIELDS)[number];
/**
 * Timestamps compared to the second: list dates have whole seconds where webhooks carry microseconds.
 * `subscribed_at` is left out: the legacy list may give only its day.
 */
export const AUDITED_TIMES = ['updatedAt', 'unsubscribedAt', 'createdAt'] as const;
export type AuditedTime = (typeof AUDITED_TIMES)[number];

/** The values of one subscriber the audit compares (a normalized row's values, or the mirror's row). */
export type AuditedValues = Partial<Record<AuditedField | AuditedTime, unknown>>;

/** A row the service listed under (group, type), normalized. */
export interface ListedRow {
  id: string;
  /** Its version time (canonical UTC timestamp; whole seconds from a list). */
  version: string;
  values: AuditedValues;
  /** The columns the list carries (only these are compared). */
  provided: ReadonlySet<string>;
}

/** What the mirror holds for a listed id in the audited group. */
export interface MirrorRow {
  /** `subscribers.version_at`, null when the mirror has no such subscriber. */
  version: string | null;
  values: AuditedValues | null;
  /** Its `group_members` row in the audited group, null when there is none. */
  membership: { type: string | null; removed: boolean; factAt: string | null } | null;
}

export type RowFinding =
  | { kind: 'match' }
  /** A newer stamp than the mirror holds (or a stamp of the last `settleMs`): on its way. `overdue`: stamped longer ago than that, so a delivery was missed. */
  | { kind: 'in-flight'; overdue: boolean; fields: string[] }
  | { kind: 'content'; fields: string[] }
  | { kind: 'missing' };

/** When the audit classifies: `now` and how long stamped changes may take to reach the mirror. */
export interface AuditClock {
  /** Epoch ms. */
  now: number;
  /** Webhook batching and the incremental interval: a stamp younger than this may not have arrived. */
  settleMs: number;
}

/** A canonical timestamp cut to its second (`YYYY-MM-DDTHH:MM:SS`). */
function secondOf(ts: string): string {
  return ts.slice(0, 19);
}

function epochOfSecond(ts: string): number {
  return Date.parse(`${secondOf(ts)}Z`);
}

function sameValue(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (a === null || a === undefined || b === null || b === undefined) return (a ?? null) === (b ?? null);
  if (typeof a === 'number' || typeof b === 'number') return Number(a) === Number(b);
  return JSON.stringify(a) === JSON.stringify(b);
}

/** Keys of `listed`'s `fields` whose value differs from the mirror's (a key the mirror lacks counts as null). */
function fieldsDiffer(listed: unknown, mirror: unknown): boolean {
  const l = (listed ?? {}) as Record<string, unknown>;
  const m = (mirror ?? {}) as Record<string, unknown>;
  return Object.keys(l).some((k) => !sameValue(l[k] ?? null, m[k] ?? null));
}

/** The audited columns where the listed row and the mirror's differ (times to the second). */
export function differingFields(listed: ListedRow, mirror: AuditedValues): string[] {
  const out: string[] = [];
  for (const f of AUDITED_FIELDS) {
    if (!listed.provided.has(f)) continue;
    const differs = f === 'fields' ? fieldsDiffer(listed.values.fields, mirror.fields) : !sameValue(listed.values[f], mirror[f]);
    if (differs) out.push(f);
  }
  for (const t of AUDITED_TIMES) {
    if (!listed.provided.has(t)) continue;
    const a = listed.values[t] as string | null | undefined;
    const b = mirror[t] as string | null | undefined;
    if ((a ? secondOf(a) : null) !== (b ? secondOf(b) : null)) out.push(t);
  }
  return out;
}

/**
 * What one listed row says about the mirror:
 * - the mirror lacks the subscriber or its live membership of this type: `missing`, unless the row's
 *   stamp is younger than `settleMs` or the mirror's membership fact is newer (then it is on its way,
 *   or the member changed after the read), or the mirror's row holds the listed status at this stamp
 *   with a live membership of its old type (a stamped status change whose type only a pass writes:
 *   in flight, written now);
 * - the service's stamp is newer (to the second) than the mirror's: `in-flight`;
 * - the mirror's is newer: the mirror is ahead (a change after the read), a `match`;
 * - the same second with different content: `content` (a change the service did not stamp), unless
 *   that second is younger than `settleMs` (a second change within the same second may be on its way).
 */
export function classifyRow(listed: ListedRow, mirror: MirrorRow, type: string, clock: AuditClock): RowFinding {
  const recent = epochOfSecond(listed.version) >= clock.now - clock.settleMs;
  if (mirror.version === null || mirror.values === null)
    return recent ? { kind: 'in-flight', overdue: false, fields: [] } : { kind: 'missing' };
  const listedSecond = secondOf(listed.version);
  const mirrorSecond = secondOf(mirror.version);
  if (listedSecond > mirrorSecond) return { kind: 'in-flight', overdue: !recent, fields: differingFields(listed, mirror.values) };
  if (listedSecond < mirrorSecond) return { kind: 'match' };
  const membership = mirror.membership;
  const listedHere = membership !== null && !membership.removed && membership.type === type;
  const membershipAhead = membership?.factAt != null && secondOf(membership.factAt) > listedSecond;
  // A status event updates the subscriber row, not its memberships' type (the next pass of the type
  // does): a live member whose row already holds the listed status at this stamp is catching up.
  const typeLags =
    !listedHere &&
    !membershipAhead &&
    membership !== null &&
    !membership.removed &&
    listed.provided.has('status') &&
    sameValue(listed.values.status, mirror.values.status);
  if (!listedHere && !membershipAhead && !typeLags) return recent ? { kind: 'in-flight', overdue: false, fields: [] } : { kind: 'missing' };
  const fields = differingFields(listed, mirror.values);
  if (fields.length === 0) return typeLags ? { kind: 'in-flight', overdue: false, fields: [] } : { kind: 'match' };
  return recent ? { kind: 'in-flight', overdue: false, fields } : { kind: 'content', fields };
}

/**
 * Fields whose change a subscriber event carries: an overdue in-flight row differing in one of them
 * is a delivery the webhooks missed. A campaign send moves `sent` with no event per subscriber.
 */
export function announcedChange(fields: readonly string[]): boolean {
  return fields.some((f) => f !== 'sent' && f !== 'updatedAt');
}

// ---------------------------------------------------------------------------------------------
// Counts

/** The mirror's members of (group, type) as of an instant, from the facts it holds now. */
export interface MirrorCountAt {
  /** Live members of this type whose membership fact is not newer than the instant (minus the margin): they were members then. */
  certain: number;
  /** Members of the group (any type, live or not) with a newer fact: each may or may not have been one then. */
  uncertain: number;
}

export interface CountCheck {
  explained: boolean;
  /** The service's count minus the nearest count the mirror's facts allow (0 when explained). */
  gap: number;
}

/**
 * A count the service gave at an instant against what the mirror, having had `settleMs` to catch up
 * on every stamped change before it, says about that instant. Members whose facts changed after it
 * may go either way; every other member's state then is its state now. A gap outside
 * [certain, certain + uncertain] is what no stamped change explains.
 */
export function checkCount(serviceCount: number, mirror: MirrorCountAt): CountCheck {
  if (serviceCount < mirror.certain) return { explained: false, gap: serviceCount - mirror.certain };
  const most = mirror.certain + mirror.uncertain;
  if (serviceCount > most) return { explained: false, gap: serviceCount - most };
  return { explained: true, gap: 0 };
}

// ---------------------------------------------------------------------------------------------
// Extras (the current source's cursor walks ids in ascending order)

/** Compares two ids of digits numerically (they may exceed 2^53). */
export function compareIds(a: string, b: string): number {
  if (a.length !== b.length) return a.length - b.length;
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Whether a page's ids ascend strictly: only then does it cover a range of ids the mirror can be checked against. */
export function ascending(ids: readonly string[]): boolean {
  for (let i = 1; i < ids.length; i++) if (compareIds(ids[i - 1] as string, ids[i] as string) >= 0) return false;
  return true;
}

/**
 * The id range a cursor page covers: after the previous page's last id (null: the list's start), up
 * to its own last id, or to the end of the list when it was the last page.
 */
export interface IdRange {
  after: string | null;
  upTo: string | null;
}

export function pageRange(after: string | null, ids: readonly string[], lastPage: boolean): IdRange | null {
  if (!ascending(ids)) return null;
  if (after !== null && ids.length > 0 && compareIds(ids[0] as string, after) <= 0) return null;
  if (lastPage) return { after, upTo: null };
  if (ids.length === 0) return null;
  return { after, upTo: ids[ids.length - 1] as string };
}

/** Mirror members in the page's range that the page did not list: extra unless a stamped change explains them by the next check. */
export function extraCandidates(listedIds: readonly string[], mirrorIdsInRange: readonly string[]): string[] {
  const listed = new Set(listedIds);
  return mirrorIdsInRange.filter((id) => !listed.has(id));
}

/**
 * Pending extras checked again at least `settleMs` later: those still live in the mirror with no
 * newer fact are extra (a removal nothing stamped); the rest were changes on their way. So is a
 * member moving out of the type: the mirror already holds its new status, which is why the page
 * did not list it; its type follows at the type's next pass.
 */
export function confirmExtras(
  pending: readonly PendingExtra[],
  now: ReadonlyMap<string, { live: boolean; factAt: string | null; moving: boolean }>,
): string[] {
  return pending
    .filter((p) => {
      const current = now.get(p.id);
      return current !== undefined && current.live && !current.moving && (current.factAt ?? '') <= (p.factAt ?? '');
    })
    .map((p) => p.id);
}

// ---------------------------------------------------------------------------------------------
// Where the sample reads next

/**
 * Legacy: the offset after a page, so that the whole list is covered over time; back to 0 at the
 * end of the list (a short page, or the count reached).
 */
export function nextOffset(offset: number, rows: number, limit: number, count: number): number {
  const next = offset + rows;
  return rows < limit || next >= count ? 0 : next;
}

/** Legacy: where a tick reads, given the saved offset and the service's count (a list that shrank starts over). */
export function startOffset(saved: number, count: number): number {
  return saved >= count ? 0 : saved;
}

/** Current: the saved cursor after a page and the last id read; at the end of the list both go back to the start. */
export function nextCursor(page: { nextCursor: string | null; ids: readonly string[] }): { cursor: string | null; afterId: string | null } {
  if (page.nextCursor === null) return { cursor: null, afterId: null };
  return { cursor: page.nextCursor, afterId: page.ids.length > 0 ? (page.ids[page.ids.length - 1] as string) : null };
}

// ---------------------------------------------------------------------------------------------
// Budget

/** The audit's share of the request budget when AUDIT_BUDGET is not set. */
export const AUDIT_BUDGET_SHARE = 0.05;

/** Requests one audit tick earns: the share of `perMinute` over one period (a fraction for short periods). */
export function tickEarning(perMinute: number, everyMs: number, share = AUDIT_BUDGET_SHARE): number {
  return (perMinute * share * everyMs) / 60_000;
}

/** Requests one audit tick may make on its own earning alone. */
export function tickBudget(perMinute: number, everyMs: number, share = AUDIT_BUDGET_SHARE): number {
  return Math.floor(tickEarning(perMinute, everyMs, share));
}

/**
 * The allowance for the next tick: what was left, plus one tick's earning. Carried over because a
 * short period (seconds, for demos and tests) earns less than one pair's cost per tick: without the
 * carry such an audit never ran at all; with it, it audits a pair every few ticks and still spends its
 * share on average. Capped at one period's earning or one whole tick's cost, whichever is larger, so
 * that idle ticks never save up a burst.
 */
export function nextAllowance(left: number, earning: number, wholeTickCost: number): number {
  // Rounded to a millionth: ten earnings of 0.1 make the 1 a pair needs, not 0.9999999999999999.
  return Math.round(Math.min(Math.max(earning, wholeTickCost), left + earning) * 1e6) / 1e6;
}

/** Requests of a tick that audits every pair and reads the webhooks back. */
export function tickCost(groups: number, types: number, source: 'legacy' | 'current', webhookReads = 1): number {
  return groups * types * pairCost(source) + (source === 'current' ? groups : 0) + webhookReads;
}

/** Requests the audit of one (group, type) makes per tick: legacy `/count` and a page; current a page (the group's counts are read once per group). */
export function pairCost(source: 'legacy' | 'current'): number {
  return source === 'legacy' ? 2 : 1;
}

/**
 * The pairs a tick audits within `budget` requests (after `reserved` ones, e.g. the webhook read),
 * starting at `rotation` so that, when not all fit, every pair gets its turn over the following ticks.
 * A group's first pair on the current source costs one more (its counts).
 */
export function planTick<P extends { groupId: string }>(
  pairs: readonly P[],
  source: 'legacy' | 'current',
  budget: number,
  rotation: number,
  reserved = 0,
): P[] {
  const out: P[] = [];
  const groups = new Set<string>();
  let left = budget - reserved;
  for (let i = 0; i < pairs.length; i++) {
    const pair = pairs[(rotation + i) % pairs.length] as P;
    const cost = pairCost(source) + (source === 'current' && !groups.has(pair.groupId) ? 1 : 0);
    if (cost > left) break;
    left -= cost;
    groups.add(pair.groupId);
    out.push(pair);
  }
  return out;
}

/** One tick of the loop as planned: the pairs it audits, whether it reads the webhooks back, what it spends. */
export interface PlannedTick<P> {
  pairs: P[];
  webhooks: boolean;
  cost: number;
}

/**
 * What a loop tick does with `allowance`: the pairs `planTick` fits, and the webhook read-back once
 * per round of the pairs, with the round's first pair (which carries its cost), when what the pairs
 * left still pays for it. So a tick never spends more than its allowance, the audit never more than
 * its share, and the webhook read cannot starve the pairs (it costs one request a round, not a tick).
 */
export function planLoopTick<P extends { groupId: string }>(
  pairs: readonly P[],
  source: 'legacy' | 'current',
  allowance: number,
  rotation: number,
  webhookReads: number,
): PlannedTick<P> {
  const startsRound = pairs.length === 0 || rotation % pairs.length === 0;
  const planned = planTick(pairs, source, allowance, rotation, startsRound ? webhookReads : 0);
  const groups = new Set(planned.map((p) => p.groupId)).size;
  const pairsCost = planned.length * pairCost(source) + (source === 'current' ? groups : 0);
  const webhooks = webhookReads > 0 && startsRound && (planned.length > 0 || pairs.length === 0) && allowance - pairsCost >= webhookReads;
  return { pairs: planned, webhooks, cost: pairsCost + (webhooks ? webhookReads : 0) };
}

/** The audit's settings that decide its schedule. */
export interface ScheduleInput {
  /** API_RATE_LIMIT, requests a minute. */
  perMinute: number;
  /** AUDIT_BUDGET as a fraction (0.05 for `5%`). */
  share: number;
  /** AUDIT_EVERY in ms. */
  everyMs: number;
  groups: number;
  types: number;
  source: 'legacy' | 'current';
  /** 1 when webhook management is configured (the webhooks are read back), else 0. */
  webhookReads: number;
}

/** The period each pair is really checked at, from the loop's own arithmetic. */
export interface AuditSchedule {
  /** AUDIT_EVERY as asked. */
  askedMs: number;
  /** The longest time a pair waits between two audits (a whole number of ticks); null: never audited. */
  effectiveMs: number | null;
  honoured: boolean;
  /** The smallest AUDIT_BUDGET (a fraction, rounded up to a whole percent) that honours AUDIT_EVERY; null: none does (more than 100 %). */
  shareNeeded: number | null;
}

/** How many audits of every pair the schedule is measured over (after each pair's first). */
const SCHEDULE_ROUNDS = 20;
const SCHEDULE_MAX_TICKS = 200_000;

/**
 * Runs the loop's allowance arithmetic (`nextAllowance`, `planLoopTick`) tick by tick, as
 * `loopTick` does, until every pair was audited {@link SCHEDULE_ROUNDS} more times, and reports the
 * longest wait of any pair between two of its audits. Passes it yields to are not counted: they only
 * make the wait longer.
 */
export function auditSchedule(input: ScheduleInput): AuditSchedule {
  const effectiveMs = effectivePeriod(input);
  const honoured = effectiveMs !== null && effectiveMs <= input.everyMs;
  return { askedMs: input.everyMs, effectiveMs, honoured, shareNeeded: honoured ? null : shareNeeded(input) };
}

function effectivePeriod(input: ScheduleInput): number | null {
  const pairs = Array.from({ length: input.groups * input.types }, (_, i) => ({ groupId: String(Math.floor(i / input.types)), index: i }));
  if (pairs.length === 0) return input.everyMs;
  const earning = tickEarning(input.perMinute, input.everyMs, input.share);
  const wholeTick = tickCost(input.groups, input.types, 'legacy', input.webhookReads);
  const last = new Array<number | null>(pairs.length).fill(null);
  const audits = new Array<number>(pairs.length).fill(0);
  let longest = 0;
  let allowance = 0;
  let rotation = 0;
  for (let tick = 1; tick <= SCHEDULE_MAX_TICKS; tick++) {
    allowance = nextAllowance(allowance, earning, wholeTick);
    const plan = planLoopTick(pairs, input.source, allowance, rotation, input.webhookReads);
    allowance -= plan.cost;
    rotation += plan.pairs.length;
    for (const pair of plan.pairs) {
      const previous = last[pair.index];
      if (previous !== null && previous !== undefined) longest = Math.max(longest, tick - previous);
      last[pair.index] = tick;
      audits[pair.index] = (audits[pair.index] ?? 0) + 1;
    }
    if (audits.every((n) => n > SCHEDULE_ROUNDS)) return longest * input.everyMs;
  }
  return null;
}

/** The smallest whole percent that honours AUDIT_EVERY (the schedule is monotone in the share). */
function shareNeeded(input: ScheduleInput): number | null {
  const honours = (percent: number) => {
    const period = effectivePeriod({ ...input, share: percent / 100 });
    return period !== null && period <= input.everyMs;
  };
  if (!honours(100)) return null;
  let low = Math.floor(input.share * 100);
  let high = 100;
  while (high - low > 1) {
    const mid = Math.floor((low + high) / 2);
    if (honours(mid)) high = mid;
    else low = mid;
  }
  return high / 100;
}

/** `2m45s`, `15s`, `1h` style text for a period. */
export function formatPeriod(ms: number): string {
  const total = Math.round(ms / 1000);
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const sec = total % 60;
  const parts = [h > 0 ? `${h}h` : '', m > 0 ? `${m}m` : '', sec > 0 || total === 0 ? `${sec}s` : ''];
  return parts.join('');
}

/** Requests per hour of the audit at a period, for the documentation and the benchmark. */
export function requestsPerHour(groups: number, types: number, source: 'legacy' | 'current', everyMs: number, webhookReads = 1): number {
  return (tickCost(groups, types, source, webhookReads) * 3_600_000) / everyMs;
}

/** Accuracy over a window: the share of checked rows that matched; null when nothing was checked. */
export function accuracy(rowsChecked: number, rowMismatches: number): number | null {
  return rowsChecked === 0 ? null : Math.max(0, (rowsChecked - rowMismatches) / rowsChecked);
}

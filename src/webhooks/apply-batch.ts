/**
 * A batch of stored deliveries applied in one transaction (the consumer runs it; `consumer.ts` has
 * the loop around it). Contract of one batch (`applyBatch`):
 * - `begin`, then claim up to `limit` due `pending` rows, oldest first, `for update skip locked`
 *   (one simple query): replicas claim disjoint rows and never wait for each other; a row is locked
 *   until the batch commits, so a crash leaves it `pending` for the next claim.
 * - parse and plan every delivery in memory (`payloads.ts`, `apply.ts`); a body that cannot be
 *   mirrored fails alone, permanently, as in `apply-job.ts`.
 * - order the deliveries by version (the newest version time each carries, then receipt), and put
 *   them in *waves*: a delivery goes one wave after the last wave holding a subscriber it carries,
 *   so within a wave no two deliveries share a subscriber and across waves each subscriber's
 *   deliveries are applied in version order, as one-by-one applies in that order would. Each wave
 *   is one merged plan, one statement per kind of row (the same guarded writes, `applyPlan`),
 *   inside a savepoint.
 * - a wave that fails is rolled back to its savepoint and its deliveries are applied one by one,
 *   each in a savepoint of its own: the one that fails records its failed try (the same retry rule
 *   as `recordFailedAttempt`) and the others are applied; nothing waits for it.
 * - one statement marks every applied and ignored row, then the forgotten subscribers among all
 *   the batch carries are read, and the transaction commits (one simple query); afterwards each
 *   delivery carrying a forgotten subscriber is redacted (`redactForgotten`, as after one apply).
 * When the transaction itself fails (connection lost, commit refused), nothing of it stands; the
 * claimed rows are then applied one by one (`applyDelivery`), each recording its own failure, so a
 * delivery that breaks batches cannot hold the others back either.
 */
import type pg from 'pg';
import { forgottenAmongSql } from '../mirror/erasure.js';
import { rollbackOrBroken } from '../mirror/store/index.js';
import { versionTime } from '../mirror/version.js';
import { applyPlan, planDelivery, type ApplyCounts, type EffectPlan } from './apply.js';
import {
  applyDelivery,
  ASYNC_COMMIT_SQL,
  describeError,
  failedOutcome,
  GENERIC_PLANS_SQL,
  isPermanent,
  MAX_ERROR_CHARS,
  redactForgotten,
  subscribersOf,
  type ApplyResult,
} from './apply-job.js';
import {
  claimDeliveriesSql,
  claimedBody,
  DEFAULT_RETRY,
  finishDeliveriesSql,
  recordFailedAttempt,
  type ClaimedDelivery,
  type FinishedDelivery,
  type RetryPolicy,
} from './inbox/lifecycle.js';
import { deliveryKinds, parseDelivery } from './payloads.js';

export interface BatchOptions {
  /** Rows claimed at most (default 200). */
  limit?: number;
  /** Body bytes (as stored) one batch holds at most; the first row is taken whatever its size (default 16 MiB). */
  maxBytes?: number;
  retry?: RetryPolicy;
}

export interface BatchResult {
  /** Rows the claim locked (0: nothing was due). */
  claimed: number;
  /** More may be due at once: the claim hit its limit, or the byte budget left claimed rows for the next batch. */
  full: boolean;
  /** What happened to each delivery the batch took, in the order they were applied. */
  results: Array<{ id: string; result: ApplyResult }>;
  /** Store counts of everything the batch applied. */
  counts: ApplyCounts;
  /** True when the batch transaction failed and its rows were applied one by one. */
  fellBack: boolean;
}

/*
 * Every wave runs inside this savepoint, opened with the claim, renewed between waves and released
 * with the final mark (the same simple queries): a batch that fails nothing pays no round trip for it.
 */
const WAVE = 'sm_wave';

/** Bodies up to this size come with the claim; larger ones are read one at a time. */
const INLINE_BODY_BYTES = 256 * 1024;

/** Claims and applies one batch (see the module note). Throws only when the database cannot be reached at all. */
export async function applyBatch(pool: pg.Pool, options: BatchOptions = {}): Promise<BatchResult> {
  const retry = options.retry ?? DEFAULT_RETRY;
  const limit = Math.max(1, options.limit ?? 200);
  const client = await pool.connect();
  let claimed: ClaimedDelivery[] = [];
  let failure: unknown;
  let broken = false;
  try {
    const opened = (await client.query(
      `begin; ${ASYNC_COMMIT_SQL}; ${GENERIC_PLANS_SQL}; ${claimDeliveriesSql(limit, INLINE_BODY_BYTES)}; savepoint ${WAVE}`,
    )) as unknown as pg.QueryResult<ClaimedDelivery>[];
    claimed = opened[3]?.rows ?? [];
    if (claimed.length === 0) {
      await client.query('commit');
      return { claimed: 0, full: false, results: [], counts: emptyCounts(), fellBack: false };
    }
    const taken = await withBodies(client, claimed, options.maxBytes ?? 16 * 1024 * 1024);
    const full = claimed.length >= limit || taken.length < claimed.length;
    return { ...(await applyClaimed(client, taken, retry)), claimed: claimed.length, full, fellBack: false };
  } catch (error) {
    failure = error;
    broken = await rollbackOrBroken(client);
  } finally {
    client.release(broken);
  }
  if (claimed.length === 0) throw failure;
  // The transaction failed as a whole: nothing of it stands, and each row is tried on its own.
  return { ...(await oneByOne(pool, claimed, retry)), claimed: claimed.length, full: claimed.length >= limit, fellBack: true };
}

/** The claimed rows whose bodies fit the batch's byte budget, large bodies read now; the rest wait (locked) for the next batch. */
async function withBodies(client: pg.PoolClient, claimed: readonly ClaimedDelivery[], maxBytes: number): Promise<ClaimedDelivery[]> {
  const taken: ClaimedDelivery[] = [];
  let bytes = 0;
  for (const row of claimed) {
    if (taken.length > 0 && bytes + row.size > maxBytes) break;
    bytes += row.size;
    taken.push(row.body === null ? { ...row, body: await claimedBody(client, row.id) } : row);
  }
  return taken;
}

/** A delivery of the batch, parsed and planned. */
interface Planned {
  id: string;
  /** The newest version time it carries ('' when it carries no subscriber). */
  version: string;
  subscribers: string[];
  plan: EffectPlan;
  finish: FinishedDelivery;
}

type Prepared =
  { kind: 'planned'; delivery: Planned } | { kind: 'ignored'; finish: FinishedDelivery } | { kind: 'unusable'; id: string; error: unknown };

function prepare(row: ClaimedDelivery): Prepared {
  try {
    const parsed = parseDelivery(row.body);
    const kinds = deliveryKinds(parsed);
    const note = parsed.unknownKinds.length > 0 ? `unknown event kind(s): ${parsed.unknownKinds.join(', ')}` : null;
    const finish = { id: row.id, note, kinds, eventCount: parsed.events.length };
    if (parsed.events.length === 0) return { kind: 'ignored', finish: { ...finish, status: 'ignored' } };
    const plan = planDelivery(parsed.events, row.id, row.receivedAt);
    const versions = plan.subscribers.map((r) => versionTime(r.values));
    return {
      kind: 'planned',
      delivery: {
        id: row.id,
        version: versions.reduce((a, b) => (b > a ? b : a), ''),
        subscribers: subscribersOf(plan),
        plan,
        finish: { ...finish, status: 'applied' },
      },
    };
  } catch (error) {
    return { kind: 'unusable', id: row.id, error };
  }
}

/**
 * Waves of deliveries in version order (ties: receipt order, as claimed): a delivery joins the wave
 * after the last one that holds any of its subscribers.
 */
export function wavesOf<T extends { version: string; subscribers: readonly string[] }>(deliveries: readonly T[]): T[][] {
  const ordered = deliveries.map((d, i) => ({ d, i })).sort((a, b) => compare(a.d.version, b.d.version) || a.i - b.i);
  const waveOf = new Map<string, number>();
  const waves: T[][] = [];
  for (const { d } of ordered) {
    const wave = d.subscribers.reduce((w, s) => Math.max(w, (waveOf.get(s) ?? -1) + 1), 0);
    for (const s of d.subscribers) waveOf.set(s, wave);
    (waves[wave] ??= []).push(d);
  }
  return waves;
}

/** The plans of one wave as one plan (no two share a subscriber, so nothing of one can shadow another's). */
export function mergePlans(plans: readonly EffectPlan[]): EffectPlan {
  const merged: EffectPlan = { subscribers: [], groups: [], automations: [], campaigns: [], memberships: [], tombstones: [], activity: [] };
  for (const plan of plans) {
    for (const key of Object.keys(merged) as Array<keyof EffectPlan>) (merged[key] as unknown[]).push(...plan[key]);
  }
  return merged;
}

interface Applied {
  results: Array<{ id: string; result: ApplyResult }>;
  counts: ApplyCounts;
}

/** Applies the taken rows in waves, marks them, commits, then redacts what carries a forgotten subscriber. */
async function applyClaimed(client: pg.PoolClient, rows: readonly ClaimedDelivery[], retry: RetryPolicy): Promise<Applied> {
  const counts = emptyCounts();
  const planned: Planned[] = [];
  const finished: FinishedDelivery[] = [];
  const failures: Array<{ id: string; error: unknown }> = [];
  for (const row of rows) {
    const prepared = prepare(row);
    if (prepared.kind === 'planned') planned.push(prepared.delivery);
    else if (prepared.kind === 'ignored') finished.push(prepared.finish);
    else failures.push({ id: prepared.id, error: prepared.error });
  }

  const applied: Planned[] = [];
  for (const [i, wave] of wavesOf(planned).entries()) {
    if (i > 0) await client.query(`release savepoint ${WAVE}; savepoint ${WAVE}`);
    const done = await applyWave(client, wave, counts);
    applied.push(...done.applied);
    failures.push(...done.failures);
  }

  const results: Array<{ id: string; result: ApplyResult }> = [];
  for (const failure of failures) results.push({ id: failure.id, result: await recordFailure(client, failure, retry) });
  finished.push(...applied.map((d) => d.finish));

  const literal = (text: string) => client.escapeLiteral(text);
  const carried = [...new Set(applied.flatMap((d) => d.subscribers))];
  const statements = [
    `release savepoint ${WAVE}`,
    finished.length > 0 ? finishDeliveriesSql(client, finished) : 'select 1',
    forgottenAmongSql(literal, carried),
    'commit',
  ];
  const done = (await client.query(statements.join(';\n'))) as unknown as [
    pg.QueryResult,
    pg.QueryResult<{ id: string; lagMs: number }>,
    pg.QueryResult<{ forgotten: string[] }>,
  ];
  const lags = new Map(done[1].rows.map((r) => [r.id, r.lagMs]));
  for (const f of finished) {
    results.push({
      id: f.id,
      result:
        f.status === 'ignored'
          ? { outcome: 'ignored' }
          : { outcome: 'applied', events: f.eventCount, counts: emptyCounts(), lagMs: lags.get(f.id) ?? 0 },
    });
  }
  await redactAfterCommit(client, applied, done[2]?.rows[0]?.forgotten ?? []);
  return { results, counts };
}

/**
 * One wave, as one merged plan, inside the wave's savepoint; when it fails, the wave is rolled back
 * and its deliveries are applied one by one, each in a savepoint of its own.
 */
async function applyWave(
  client: pg.PoolClient,
  wave: readonly Planned[],
  counts: ApplyCounts,
): Promise<{ applied: Planned[]; failures: Array<{ id: string; error: unknown }> }> {
  const only = wave.length === 1 ? wave[0] : undefined;
  try {
    addCounts(counts, await applyPlan(client, only ? only.plan : mergePlans(wave.map((d) => d.plan))));
    return { applied: [...wave], failures: [] };
  } catch (error) {
    await client.query(`rollback to savepoint ${WAVE}`);
    if (only) return { applied: [], failures: [{ id: only.id, error }] };
    // Which delivery failed is found by applying them alone, below.
  }
  const applied: Planned[] = [];
  const failures: Array<{ id: string; error: unknown }> = [];
  for (const delivery of wave) {
    try {
      await inSavepoint(client, async () => addCounts(counts, await applyPlan(client, delivery.plan)));
      applied.push(delivery);
    } catch (error) {
      failures.push({ id: delivery.id, error });
    }
  }
  return { applied, failures };
}

/** Runs `work` inside a savepoint: released when it succeeds, rolled back to when it throws (and rethrown). */
async function inSavepoint(client: pg.PoolClient, work: () => Promise<void>): Promise<void> {
  await client.query('savepoint sm_delivery');
  try {
    await work();
  } catch (error) {
    await client.query('rollback to savepoint sm_delivery; release savepoint sm_delivery');
    throw error;
  }
  await client.query('release savepoint sm_delivery');
}

/** A delivery that failed alone: its failed try recorded in the batch's transaction (committed with it). */
async function recordFailure(client: pg.PoolClient, failure: { id: string; error: unknown }, retry: RetryPolicy): Promise<ApplyResult> {
  const message = describeError(failure.error).slice(0, MAX_ERROR_CHARS);
  const marked = await recordFailedAttempt(client, failure.id, message, isPermanent(failure.error), retry);
  // The batch holds the row's lock, so it is still pending.
  return marked ? failedOutcome(message, marked) : { outcome: 'skipped', status: 'missing' };
}

async function redactAfterCommit(client: pg.PoolClient, applied: readonly Planned[], forgotten: readonly string[]): Promise<void> {
  if (forgotten.length === 0) return;
  const gone = new Set(forgotten);
  for (const delivery of applied) {
    const carried = delivery.subscribers.filter((s) => gone.has(s));
    if (carried.length > 0) await redactForgotten(client, delivery.id, carried);
  }
}

/** The fallback: every claimed row applied on its own, recording its own failure. */
async function oneByOne(pool: pg.Pool, rows: readonly ClaimedDelivery[], retry: RetryPolicy): Promise<Applied> {
  const counts = emptyCounts();
  const results: Array<{ id: string; result: ApplyResult }> = [];
  for (const row of rows) {
    const result = await applyDelivery(pool, row.id, { retry });
    if (result.outcome === 'applied') addCounts(counts, result.counts);
    results.push({ id: row.id, result });
  }
  return { results, counts };
}

function emptyCounts(): ApplyCounts {
  return { subscribers: { inserted: 0, updated: 0, unchanged: 0, skipped: 0 }, memberships: 0, membershipsEnded: 0, activity: 0 };
}

function addCounts(total: ApplyCounts, more: ApplyCounts): void {
  total.subscribers.inserted += more.subscribers.inserted;
  total.subscribers.updated += more.subscribers.updated;
  total.subscribers.unchanged += more.subscribers.unchanged;
  total.subscribers.skipped += more.subscribers.skipped;
  total.memberships += more.memberships;
  total.membershipsEnded += more.membershipsEnded;
  total.activity += more.activity;
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

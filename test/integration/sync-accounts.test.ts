/**
 * Two accounts in one database (issue 35): the statements of the passes' bookkeeping (`sync_state`,
 * `upstream_paging`, `sync_passes`), of status and of the audit (`audit_state`, `audit_results`,
 * `audit_webhooks`, and what it reads of the mirror) neither read nor change the other account's
 * rows. Both accounts hold the same group, type and subscriber ids with different data; each pool
 * serves one account (`subscriber_mirror.account`), as the service's pools do.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase, type Database } from '../../src/db/client.js';
import type { Queryable } from '../../src/ground/queryable.js';
import {
  auditWindow,
  claimAudit,
  emptyTally,
  listWebhookHealth,
  markFullPassAsked,
  purgeAuditResults,
  recordAuditResult,
  saveAuditError,
  savePending,
  saveSamplePosition,
  saveWebhookHealth,
} from '../../src/audit/state.js';
import { managedWebhooks, membershipNow, mirrorCountAt, mirrorMembersInRange, mirrorRowsFor } from '../../src/audit/reads.js';
import {
  closeRow,
  lastProvingPasses,
  openRow,
  proofPasses,
  pruneHistory,
  removalRule,
  saveRemovals,
  saveUpstreamCount,
} from '../../src/sync/pass-history.js';
import {
  advanceCursor,
  closeFullPass,
  ensureSyncState,
  fullPassContinuous,
  listSyncStates,
  openCursorPass,
  openFullPass,
  readCursor,
  readPaging,
  readSyncState,
  saveCursorCheckpoint,
  saveFullCheckpoint,
  savePaging,
} from '../../src/sync/state.js';
import { collectStatus } from '../../src/sync/status.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

const OTHER = 'other';

/** A complete, gap-free full pass of (group, type) that listed from `listedFrom`: what the removal rule counts. */
async function provingPass(db: Queryable, groupId: string, listedFrom: string): Promise<number> {
  const id = await openRow(db, { groupId, type: 'active', kind: 'full', source: 'legacy', trigger: 'schedule' });
  await closeRow(db, id, { status: 'succeeded', listedFrom, complete: true, gapFree: true, rowsSeen: 3, rowsWritten: 3, requests: 1 });
  return id;
}

async function passRow(db: Queryable, id: number) {
  const { rows } = await db.query<{ account: string; status: string; upstreamCount: number | null; removed: number }>(
    `select account, status, upstream_count as "upstreamCount", removed from sync_passes where id = $1`,
    [id],
  );
  return rows[0];
}

describe('sync and audit statements keep to their account', () => {
  let database: TestDatabase;
  let other: Database;
  // Both accounts' pools: `own` serves the test database's account (`default`), `other` the second one.
  let own: Queryable;
  let theirs: Queryable;

  beforeAll(async () => {
    database = await createTestDatabase();
    await database.pool.query(`insert into accounts (name) values ($1)`, [OTHER]);
    other = openDatabase(database.url, { account: OTHER, max: 2 });
    own = database.pool;
    theirs = other.pool;
  });

  afterAll(async () => {
    await other?.close();
    await database?.drop();
  });

  it('sync_state and upstream_paging: the same pair resumes from its own account’s cursor and checkpoint', async () => {
    const groupId = 'g-state';
    await openFullPass(own, groupId, 'active');
    await openFullPass(theirs, groupId, 'active');
    await saveFullCheckpoint(own, groupId, 'active', { nextOffset: 500, tailIds: ['1', '2'], continuous: false });
    await saveFullCheckpoint(theirs, groupId, 'active', { nextOffset: 1_500, tailIds: ['9'], continuous: true });
    await advanceCursor(own, groupId, 'active', '2024-01-01T00:00:00.000000Z', null);
    await advanceCursor(theirs, groupId, 'active', '2025-06-01T00:00:00.000000Z', null);

    expect(await readCursor(own, groupId, 'active')).toBe('2024-01-01T00:00:00.000000Z');
    expect(await readCursor(theirs, groupId, 'active')).toBe('2025-06-01T00:00:00.000000Z');
    expect(await fullPassContinuous(own, groupId, 'active')).toBe(false);
    expect(await fullPassContinuous(theirs, groupId, 'active')).toBe(true);
    expect((await readSyncState(own, groupId, 'active'))?.fullTailIds).toEqual(['1', '2']);
    expect((await readSyncState(theirs, groupId, 'active'))?.fullTailIds).toEqual(['9']);
    expect((await listSyncStates(own)).map((s) => [s.groupId, s.fullOffset])).toEqual([[groupId, 500]]);
    expect((await listSyncStates(theirs)).map((s) => [s.groupId, s.fullOffset])).toEqual([[groupId, 1_500]]);

    // Resuming keeps this account's offset; closing one account's pass leaves the other's open.
    expect((await openFullPass(own, groupId, 'active')).offset).toBe(500);
    await closeFullPass(own, groupId, 'active');
    expect((await readSyncState(own, groupId, 'active'))?.fullPassOpen).toBe(false);
    expect((await readSyncState(theirs, groupId, 'active'))?.fullPassOpen).toBe(true);
    expect((await openFullPass(theirs, groupId, 'active')).offset).toBe(1_500);

    // A cursor pass in one account drops that account's foreign checkpoint only.
    await openCursorPass(own, groupId, 'active');
    await saveCursorCheckpoint(own, groupId, 'active', { nextCursor: 'c-own', pages: 3 });
    expect(await openCursorPass(own, groupId, 'active')).toMatchObject({ cursor: 'c-own', pages: 3 });
    expect((await readSyncState(theirs, groupId, 'active'))?.fullSource).toBe('legacy');
    expect((await readSyncState(theirs, groupId, 'active'))?.fullCursor).toBeNull();

    await savePaging(own, { cap: 500, longestPage: 500, candidate: null });
    expect(await readPaging(theirs)).toEqual({ cap: null, longestPage: 0, candidate: null });
    await savePaging(theirs, { cap: null, longestPage: 100, candidate: { length: 100, where: 'subscribers/active' } });
    expect(await readPaging(own)).toEqual({ cap: 500, longestPage: 500, candidate: null });
    expect(await readPaging(theirs)).toEqual({ cap: null, longestPage: 100, candidate: { length: 100, where: 'subscribers/active' } });
  });

  it('sync_passes: rows are closed, counted, pruned and proven within their account', async () => {
    const groupId = 'g-history';
    const first = await provingPass(own, groupId, '2024-01-01T00:00:00.000000Z');
    const second = await provingPass(own, groupId, '2024-01-02T00:00:00.000000Z');
    expect(await removalRule(own, groupId, ['active'], { sweeps: false })).toEqual({
      cutoff: '2024-01-01T00:00:00.000000Z',
      proof: [first, second],
    });
    expect(await removalRule(theirs, groupId, ['active'], { sweeps: false })).toBeNull();
    expect(await proofPasses(theirs, groupId, ['active'])).toEqual([{ type: 'active', proofStartedAt: null, prevProofStartedAt: null }]);
    expect(await lastProvingPasses(theirs, groupId, ['active'])).toEqual([]);
    expect((await lastProvingPasses(own, groupId, ['active'])).map((p) => p.id)).toEqual([second]);

    // A pass opening in the other account does not close this account's running row as abandoned.
    const running = await openRow(own, { groupId, type: 'active', kind: 'full', source: 'legacy', trigger: 'schedule' });
    const theirsRunning = await openRow(theirs, { groupId, type: 'active', kind: 'full', source: 'legacy', trigger: 'schedule' });
    expect((await passRow(own, running))?.status).toBe('running');

    // Writes by id from the other account's pool change nothing (ids are unique, the account still guards).
    await saveUpstreamCount(theirs, running, 999);
    await saveRemovals(theirs, running, 7, [first]);
    await closeRow(theirs, running, { status: 'failed', rowsSeen: 0, rowsWritten: 0, requests: 0, error: 'not yours' });
    expect(await passRow(own, running)).toEqual({ account: 'default', status: 'running', upstreamCount: null, removed: 0 });
    await saveUpstreamCount(theirs, theirsRunning, 42);
    expect(await passRow(theirs, theirsRunning)).toMatchObject({ account: OTHER, upstreamCount: 42 });

    // Status through the view joins the history on the account.
    await ensureSyncState(own, groupId, 'active');
    await ensureSyncState(theirs, groupId, 'active');
    expect((await readSyncState(own, groupId, 'active'))?.upstreamCount ?? null).toBeNull();
    expect((await readSyncState(theirs, groupId, 'active'))?.upstreamCount).toBe(42);

    // Pruning everything the other account may drop leaves this account's rows.
    await closeRow(theirs, theirsRunning, { status: 'failed', rowsSeen: 0, rowsWritten: 0, requests: 0 });
    await pruneHistory(theirs, groupId, 'active', 0);
    for (const id of [first, second, running]) expect((await passRow(own, id))?.account).toBe('default');
  });

  it('status: members, awaiting proof and audit figures are the session account’s', async () => {
    const groupId = 'g-status';
    await own.query(
      `insert into group_members (group_id, subscriber_id, type, added_at, mirrored_via)
       select $1, id::text, 'active', now(), 'poll' from generate_series(1, 3) as id`,
      [groupId],
    );
    await theirs.query(
      `insert into group_members (group_id, subscriber_id, type, added_at, mirrored_via, last_seen_at)
       values ($1, '1', 'active', now(), 'poll', now())`,
      [groupId],
    );
    await provingPass(own, groupId, '2024-01-01T00:00:00.000000Z');
    await provingPass(theirs, groupId, '2024-01-01T00:00:00.000000Z');
    await recordAuditResult(own, groupId, 'active', { ...emptyTally(), rowsChecked: 10, content: 1 });

    const configured = { groups: [groupId], types: ['active'] };
    const mine = (await collectStatus(own, configured)).find((r) => r.groupId === groupId);
    const yours = (await collectStatus(theirs, configured)).find((r) => r.groupId === groupId);
    expect(mine).toMatchObject({ mirrored: 3, awaitingProof: 3, audit: { rowsChecked: 10 } });
    expect(yours).toMatchObject({ mirrored: 1, awaitingProof: 0, audit: { rowsChecked: 0, lastAuditAt: null } });

    expect(await purgeAuditResults(theirs, 0)).toBe(0);
    expect((await auditWindow(own)).get(`${groupId}:active`)?.rowsChecked).toBe(10);
    expect((await auditWindow(theirs)).size).toBe(0);
  });

  it('audit state and webhooks: claims, positions and the read-back are the account’s own', async () => {
    const groupId = 'g-audit';
    const claimed = await claimAudit(own, groupId, 'active', 60_000);
    expect(claimed?.previousAuditAt).toBeNull();
    await saveSamplePosition(own, groupId, 'active', { offset: 100, cursor: 'c-own', afterId: '5' });
    await savePending(own, groupId, 'active', { count: 12, at: '2024-01-01T00:00:00.000000Z', extras: [] });
    await markFullPassAsked(own, groupId, 'active');
    await saveAuditError(own, groupId, 'active', 'boom');

    // The other account's first claim of the same pair is a first claim: no period of this account holds it back.
    const theirClaim = await claimAudit(theirs, groupId, 'active', 60_000);
    expect(theirClaim).toMatchObject({
      account: OTHER,
      previousAuditAt: null,
      sampleOffset: 0,
      sampleCursor: null,
      pendingCount: null,
      fullPassAskedAt: null,
      lastError: null,
    });
    await saveAuditError(theirs, groupId, 'active', null);
    expect(await claimAudit(own, groupId, 'active', 60_000, true)).toMatchObject({
      account: 'default',
      sampleOffset: 100,
      sampleCursor: 'c-own',
      pendingCount: 12,
      lastError: 'boom',
    });

    await saveWebhookHealth(own, [{ id: 'w1', enabled: false, problems: ['disabled'], missingEvents: [] }], []);
    await saveWebhookHealth(theirs, [], []);
    expect((await listWebhookHealth(own)).map((h) => h.id)).toEqual(['w1']);
    expect(await listWebhookHealth(theirs)).toEqual([]);

    await own.query(
      `insert into webhook_endpoints (id, url, events, secret) values ('w1', 'https://own.example/hooks', '{subscriber.created}', 's1')`,
    );
    expect((await managedWebhooks(own)).map((w) => w.url)).toEqual(['https://own.example/hooks']);
    expect(await managedWebhooks(theirs)).toEqual([]);
  });

  it('audit reads: the mirror’s rows, counts and members of the session’s account', async () => {
    const groupId = 'g-reads';
    for (const [db, email, type] of [
      [own, 'own@example.com', 'active'],
      [theirs, 'theirs@example.com', 'unsubscribed'],
    ] as const) {
      await db.query(`insert into subscribers (id, email, status, mirrored_via, version_at) values ('1', $1, $2, 'poll', now())`, [
        email,
        type,
      ]);
      await db.query(
        `insert into group_members (group_id, subscriber_id, type, added_at, source_updated_at, mirrored_via)
         values ($1, '1', $2, now(), '2024-01-01T00:00:00Z', 'poll')`,
        [groupId, type],
      );
    }
    await own.query(
      `insert into group_members (group_id, subscriber_id, type, added_at, source_updated_at, mirrored_via)
       values ($1, '2', 'active', now(), '2024-01-01T00:00:00Z', 'poll')`,
      [groupId],
    );

    const mine = await mirrorRowsFor(own, groupId, ['1', '2']);
    const yours = await mirrorRowsFor(theirs, groupId, ['1', '2']);
    expect(mine.get('1')?.values?.email).toBe('own@example.com');
    expect(mine.get('1')?.membership?.type).toBe('active');
    expect(yours.get('1')?.values?.email).toBe('theirs@example.com');
    expect(yours.get('1')?.membership?.type).toBe('unsubscribed');
    expect(yours.get('2')).toEqual({ version: null, values: null, membership: null });

    const at = '2024-06-01T00:00:00.000000Z';
    expect(await mirrorCountAt(own, groupId, 'active', at)).toEqual({ certain: 2, uncertain: 0 });
    expect(await mirrorCountAt(theirs, groupId, 'active', at)).toEqual({ certain: 0, uncertain: 0 });
    const everything = { after: null, upTo: null };
    expect((await mirrorMembersInRange(own, groupId, 'active', everything)).map((m) => m.id)).toEqual(['1', '2']);
    expect(await mirrorMembersInRange(theirs, groupId, 'active', everything)).toEqual([]);
    expect(Object.fromEntries([...(await membershipNow(theirs, groupId, 'active', ['1', '2']))].map(([id, m]) => [id, m.live]))).toEqual({
      '1': false,
    });
  });
});

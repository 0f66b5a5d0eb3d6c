/**
 * A test-only audit of the passes and the cursor (invariant 3, "cursor after commit"): triggers in the
 * test's own database record every change of a pass's row in `sync_passes` (with the pair's cursor at
 * that moment) and every move of a cursor in `sync_state`, so that each pass can be followed from
 * `running` to `succeeded` or `failed` with the cursor at every step, whatever the timing. The audit
 * lives in its own schema; the product's tables and migrations are not touched.
 */
import type pg from 'pg';
import { iso } from '../../helpers/mirror.js';

const INSTALL = `
create schema if not exists fault_audit;
create table if not exists fault_audit.sync_state_changes (
  seq bigserial primary key,
  account text not null,
  group_id text not null,
  type text not null,
  old_status text,
  new_status text,
  mode text,
  run_started_at timestamptz,
  old_cursor timestamptz,
  new_cursor timestamptz,
  last_error text
);
create or replace function fault_audit.record_pass() returns trigger language plpgsql as $$
declare
  pair_cursor timestamptz;
begin
  if new.kind = 'check' then return new; end if;
  select cursor into pair_cursor from public.sync_state
   where account = new.account and group_id = new.group_id and type = new.type;
  insert into fault_audit.sync_state_changes
    (account, group_id, type, old_status, new_status, mode, run_started_at, old_cursor, new_cursor, last_error)
  values (new.account, new.group_id, new.type, case when tg_op = 'UPDATE' then old.status end, new.status,
          new.kind, new.started_at, pair_cursor, pair_cursor, new.error);
  return new;
end $$;
create or replace function fault_audit.record_cursor() returns trigger language plpgsql as $$
begin
  if tg_op = 'UPDATE' and old.cursor is not distinct from new.cursor then return new; end if;
  insert into fault_audit.sync_state_changes (account, group_id, type, old_cursor, new_cursor)
  values (new.account, new.group_id, new.type, case when tg_op = 'UPDATE' then old.cursor end, new.cursor);
  return new;
end $$;
drop trigger if exists fault_audit_sync_passes on public.sync_passes;
create trigger fault_audit_sync_passes after insert or update on public.sync_passes
  for each row execute function fault_audit.record_pass();
drop trigger if exists fault_audit_sync_state on public.sync_state;
create trigger fault_audit_sync_state after insert or update on public.sync_state
  for each row execute function fault_audit.record_cursor();`;

export async function installCursorAudit(pool: pg.Pool): Promise<void> {
  await pool.query(INSTALL);
}

export interface PassRun {
  groupId: string;
  type: string;
  mode: string | null;
  outcome: 'succeeded' | 'failed' | 'unfinished';
  cursorAtStart: string | null;
  cursorAtEnd: string | null;
  /** Any cursor value seen while the pass ran (a move before the outcome is a violation too). */
  cursorsDuring: Array<string | null>;
  error: string | null;
}

interface Change {
  seq: string;
  group_id: string;
  type: string;
  old_status: string | null;
  new_status: string | null;
  mode: string | null;
  run_started_at: string | null;
  old_cursor: string | null;
  new_cursor: string | null;
  last_error: string | null;
}

/**
 * Every pass the audit saw of the pool's account, in order, per (group, type). Passes of one (group,
 * type) never overlap (pass lock).
 */
export async function readPassRuns(pool: pg.Pool): Promise<PassRun[]> {
  const { rows } = await pool.query<Change>(
    // Ordered by the bigint column, not by the text rendering of it (which would put 1000 before 339).
    `select c.seq::text as seq, group_id, type, old_status, new_status, mode, ${iso('run_started_at')} as run_started_at,
            ${iso('old_cursor')} as old_cursor, ${iso('new_cursor')} as new_cursor, last_error
       from fault_audit.sync_state_changes c where c.account = mirror_account() order by c.seq`,
  );
  const open = new Map<string, { run: PassRun; startedAt: string | null }>();
  const runs: PassRun[] = [];
  for (const c of rows) {
    const key = `${c.group_id}/${c.type}`;
    const current = open.get(key);
    let run = current?.run;
    if (c.new_status === 'running' && (!current || current.startedAt !== c.run_started_at)) {
      if (run) runs.push(run);
      run = {
        groupId: c.group_id,
        type: c.type,
        mode: c.mode,
        outcome: 'unfinished',
        // Opening a pass's row does not touch the cursor: the trigger read it as it stood.
        cursorAtStart: c.old_cursor ?? c.new_cursor,
        cursorAtEnd: null,
        cursorsDuring: [],
        error: null,
      };
      open.set(key, { run, startedAt: c.run_started_at });
    }
    if (!run) continue;
    run.cursorsDuring.push(c.new_cursor);
    if (c.new_status === 'succeeded' || c.new_status === 'failed') {
      runs.push({ ...run, mode: c.mode ?? run.mode, outcome: c.new_status, cursorAtEnd: c.new_cursor, error: c.last_error });
      open.delete(key);
    }
  }
  for (const { run } of open.values()) runs.push(run);
  return runs;
}

/** Passes that broke "a failed pass never moves the cursor" or "the cursor never goes back". */
export function cursorViolations(runs: readonly PassRun[]): string[] {
  const problems: string[] = [];
  for (const r of runs) {
    const where = `${r.mode ?? '?'} pass of ${r.groupId}/${r.type} (${r.outcome})`;
    if (r.outcome === 'failed') {
      const moved = r.cursorsDuring.filter((c) => c !== r.cursorAtStart);
      if (moved.length > 0) problems.push(`${where}: cursor moved from ${r.cursorAtStart} to ${moved.join(', ')} (error: ${r.error})`);
    }
    if (r.outcome === 'succeeded' && r.cursorAtStart !== null && (r.cursorAtEnd === null || r.cursorAtEnd < r.cursorAtStart)) {
      problems.push(`${where}: cursor went back from ${r.cursorAtStart} to ${r.cursorAtEnd}`);
    }
  }
  return problems;
}

/** Writes the raw audit to `${FAULTS_LOG_DIR}/<name>.sync_state_audit.json` when that is set (debugging aid). */
export async function dumpCursorAudit(pool: pg.Pool, name: string): Promise<void> {
  const dir = process.env.FAULTS_LOG_DIR;
  if (!dir) return;
  const { mkdirSync, writeFileSync } = await import('node:fs');
  const path = await import('node:path');
  const { rows } = await pool.query(
    `select seq, account, group_id, type, old_status, new_status, mode, ${iso('run_started_at')} as run_started_at,
            ${iso('old_cursor')} as old_cursor, ${iso('new_cursor')} as new_cursor, last_error
       from fault_audit.sync_state_changes order by seq`,
  );
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, `${name}.sync_state_audit.json`), JSON.stringify(rows, null, 1));
}

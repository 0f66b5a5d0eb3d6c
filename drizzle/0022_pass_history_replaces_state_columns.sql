ALTER TABLE "sync_state" DROP COLUMN "last_mode";--> statement-breakpoint
ALTER TABLE "sync_state" DROP COLUMN "last_status";--> statement-breakpoint
ALTER TABLE "sync_state" DROP COLUMN "last_run_started_at";--> statement-breakpoint
ALTER TABLE "sync_state" DROP COLUMN "last_run_finished_at";--> statement-breakpoint
ALTER TABLE "sync_state" DROP COLUMN "last_success_at";--> statement-breakpoint
ALTER TABLE "sync_state" DROP COLUMN "last_error";--> statement-breakpoint
ALTER TABLE "sync_state" DROP COLUMN "rows_last_run";--> statement-breakpoint
ALTER TABLE "sync_state" DROP COLUMN "rows_seen_last_run";--> statement-breakpoint
ALTER TABLE "sync_state" DROP COLUMN "requests_last_run";--> statement-breakpoint
ALTER TABLE "sync_state" DROP COLUMN "last_full_completed_at";--> statement-breakpoint
ALTER TABLE "sync_state" DROP COLUMN "effective_limit";--> statement-breakpoint
ALTER TABLE "sync_state" DROP COLUMN "proof_started_at";--> statement-breakpoint
ALTER TABLE "sync_state" DROP COLUMN "prev_proof_started_at";--> statement-breakpoint
ALTER TABLE "sync_state" DROP COLUMN "proof_ended_at";--> statement-breakpoint
ALTER TABLE "sync_state" DROP COLUMN "prev_proof_ended_at";--> statement-breakpoint
ALTER TABLE "sync_state" DROP COLUMN "swept_at";--> statement-breakpoint
ALTER TABLE "sync_state" DROP COLUMN "swept_since";--> statement-breakpoint
ALTER TABLE "sync_state" DROP COLUMN "future_rows_last_run";--> statement-breakpoint
ALTER TABLE "sync_state" DROP COLUMN "step_backs_last_full";--> statement-breakpoint
ALTER TABLE "sync_state" DROP COLUMN "upstream_count";--> statement-breakpoint
ALTER TABLE "sync_state" DROP COLUMN "upstream_count_at";--> statement-breakpoint
CREATE VIEW "public"."sync_status" AS (
select s.group_id, s.type, s.cursor,
       l.kind as last_mode, l.status as last_status, l.started_at as last_run_started_at, l.ended_at as last_run_finished_at,
       ok.ended_at as last_success_at, l.error as last_error,
       l.rows_written as rows_last_run, l.rows_seen as rows_seen_last_run, l.requests as requests_last_run,
       l.future_rows as future_rows_last_run,
       f.ended_at as last_full_completed_at, f.step_backs as step_backs_last_full,
       c.upstream_count, c.started_at as upstream_count_at,
       s.full_source is not null as full_pass_open,
       coalesce(s.full_offset, s.full_pages) as full_pass_at
from sync_state s
left join lateral (
  select p.kind, p.status, p.started_at, p.ended_at, p.error, p.rows_written, p.rows_seen, p.requests, p.future_rows
    from sync_passes p
   where p.group_id = s.group_id and p.type = s.type and p.kind <> 'check'
   order by p.id desc limit 1) l on true
left join lateral (
  select p.ended_at from sync_passes p
   where p.group_id = s.group_id and p.type = s.type and p.kind <> 'check' and p.status = 'succeeded'
   order by p.id desc limit 1) ok on true
left join lateral (
  select p.ended_at, p.step_backs from sync_passes p
   where p.group_id = s.group_id and p.type = s.type and p.kind = 'full' and p.complete
   order by p.id desc limit 1) f on true
left join lateral (
  select p.upstream_count, p.started_at from sync_passes p
   where p.group_id = s.group_id and p.type = s.type and p.upstream_count is not null
   order by p.id desc limit 1) c on true);
-- The pass history starts with what sync_state knew (docs/architecture.md, "Pass history and the
-- removal rule"): the two passes and the sweep the removal proof counted, the last complete pass, the
-- last success and the last run, in that order per (group, type), so that the last run is the newest
-- row. Rows written before 0019 have no end times: a pass ended before the next of its type started.
WITH s AS (
  SELECT st.*,
         CASE WHEN EXISTS (SELECT 1 FROM group_members m WHERE m.group_id = st.group_id AND m.mirrored_via = 'current')
              THEN 'current' ELSE 'legacy' END AS source
    FROM sync_state st
)
INSERT INTO sync_passes (group_id, type, kind, source, started_at, listed_from, ended_at, status, complete, gap_free)
SELECT group_id, type, 'full', source, prev_proof_started_at, prev_proof_started_at,
       coalesce(prev_proof_ended_at, proof_started_at), 'succeeded', true, true
  FROM s WHERE prev_proof_started_at IS NOT NULL
 ORDER BY group_id, type;
--> statement-breakpoint
WITH s AS (
  SELECT st.*,
         CASE WHEN EXISTS (SELECT 1 FROM group_members m WHERE m.group_id = st.group_id AND m.mirrored_via = 'current')
              THEN 'current' ELSE 'legacy' END AS source
    FROM sync_state st
)
INSERT INTO sync_passes (group_id, type, kind, source, started_at, listed_from, ended_at, status, complete, gap_free, step_backs)
SELECT group_id, type, 'full', source, proof_started_at, proof_started_at,
       coalesce(proof_ended_at, last_full_completed_at, proof_started_at), 'succeeded', true, true,
       CASE WHEN proof_ended_at IS NOT DISTINCT FROM last_full_completed_at THEN coalesce(step_backs_last_full, 0) ELSE 0 END
  FROM s WHERE proof_started_at IS NOT NULL
 ORDER BY group_id, type;
--> statement-breakpoint
-- A complete pass with a gap proves nothing, but it is the last full pass the schedule counts from.
WITH s AS (
  SELECT st.*,
         CASE WHEN EXISTS (SELECT 1 FROM group_members m WHERE m.group_id = st.group_id AND m.mirrored_via = 'current')
              THEN 'current' ELSE 'legacy' END AS source
    FROM sync_state st
)
INSERT INTO sync_passes (group_id, type, kind, source, started_at, listed_from, ended_at, status, complete, gap_free, step_backs)
SELECT group_id, type, 'full', source, last_full_completed_at, last_full_completed_at, last_full_completed_at,
       'succeeded', true, false, coalesce(step_backs_last_full, 0)
  FROM s WHERE last_full_completed_at IS NOT NULL AND proof_ended_at IS DISTINCT FROM last_full_completed_at
   AND (proof_started_at IS NULL OR last_full_completed_at > proof_started_at)
 ORDER BY group_id, type;
--> statement-breakpoint
INSERT INTO sync_passes (group_id, type, kind, source, started_at, ended_at, status, read_since)
SELECT group_id, type, 'incremental', 'legacy', swept_at, swept_at, 'succeeded', swept_since
  FROM sync_state WHERE swept_at IS NOT NULL AND swept_since IS NOT NULL
 ORDER BY group_id, type;
--> statement-breakpoint
-- The last success, when the last run failed after it.
WITH s AS (
  SELECT st.*,
         CASE WHEN EXISTS (SELECT 1 FROM group_members m WHERE m.group_id = st.group_id AND m.mirrored_via = 'current')
              THEN 'current' ELSE 'legacy' END AS source
    FROM sync_state st
)
INSERT INTO sync_passes (group_id, type, kind, source, started_at, ended_at, status)
SELECT group_id, type, coalesce(last_mode, 'incremental'), source, last_success_at, last_success_at, 'succeeded'
  FROM s WHERE last_success_at IS NOT NULL AND last_status IS DISTINCT FROM 'succeeded'
 ORDER BY group_id, type;
--> statement-breakpoint
-- The last run, newest of its pair. It counts towards no proof (the rows above are its proof, if any).
WITH s AS (
  SELECT st.*,
         CASE WHEN EXISTS (SELECT 1 FROM group_members m WHERE m.group_id = st.group_id AND m.mirrored_via = 'current')
              THEN 'current' ELSE 'legacy' END AS source
    FROM sync_state st
)
INSERT INTO sync_passes (group_id, type, kind, source, started_at, ended_at, status, rows_seen, rows_written, requests,
                         upstream_count, future_rows, error)
SELECT group_id, type, coalesce(last_mode, 'incremental'), source,
       coalesce(last_run_started_at, last_run_finished_at, updated_at),
       CASE WHEN last_status = 'running' THEN NULL ELSE last_run_finished_at END,
       last_status, coalesce(rows_seen_last_run, 0), coalesce(rows_last_run, 0), coalesce(requests_last_run, 0),
       upstream_count, coalesce(future_rows_last_run, 0), last_error
  FROM s WHERE last_status IS NOT NULL
 ORDER BY group_id, type;
--> statement-breakpoint
-- Which source left an open checkpoint, said once instead of guessed at every read: the current
-- source's cursor and page count, or the legacy source's row offset and tail ids.
UPDATE sync_state
   SET full_source = CASE WHEN full_cursor IS NOT NULL OR (full_offset > 0 AND full_tail_ids IS NULL) THEN 'current' ELSE 'legacy' END
 WHERE full_offset IS NOT NULL;
--> statement-breakpoint
UPDATE sync_state SET full_pages = full_offset, full_offset = NULL WHERE full_source = 'current';
--> statement-breakpoint
UPDATE sync_state SET full_started_at = NULL, full_continuous = NULL, full_tail_ids = NULL, full_cursor = NULL
 WHERE full_source IS NULL;
--> statement-breakpoint
-- Ids and times, no personal data: the analyst's to read (docs/security.md, "Database roles").
GRANT SELECT ON sync_passes TO subscriber_mirror_analyst;

-- The last complete full pass before this release counts as one of the two passes a removal needs
-- (issue 11): removals then wait for one more full pass instead of two. Old learned page caps
-- (sync_state.effective_limit) are not carried over: they may have been learned from churn.
update sync_state
   set proof_started_at = full_started_at
 where full_offset is null
   and last_full_completed_at is not null
   and full_started_at is not null
   and last_full_completed_at >= full_started_at;

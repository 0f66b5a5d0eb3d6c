-- The membership-period trigger runs once per membership row a statement starts, ends or retypes,
-- and PL/pgSQL keeps its statements' plans for the session. Planned while group_membership_periods
-- was nearly empty (a new install, the first page of its first pass), the lookup of the member's
-- last period was a sequential scan, cheapest over a few rows, and stayed one as the table grew:
-- every row of every page read the whole table (10,000 members from empty: 44 s against 1 s).
-- Each of its statements reads or writes one member's periods by key, for which an index is the
-- right plan at every size; the function plans without sequential scans.
ALTER FUNCTION group_membership_history() SET enable_seqscan = off;

-- The status view is the analyst's to read, as the sync_state columns it replaces were (docs/security.md, "Database roles").
GRANT SELECT ON sync_status TO subscriber_mirror_analyst;

-- The audit's figures are the analyst's to read (docs/security.md, "Database roles"): ids and
-- counts, no personal data. Tables made after 0012 are private until a migration grants them.
GRANT SELECT ON audit_state, audit_results, audit_webhooks TO subscriber_mirror_analyst;

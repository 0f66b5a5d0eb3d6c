-- Custom fields as typed columns (docs/sql.md, "Custom fields as columns"). Hand-written: drizzle
-- cannot declare a view whose columns are data (one per row of `fields`).
--
-- A value that does not parse as its field's type is null, never an error: a number is an optional
-- sign, digits with an optional fraction and exponent; a date is `YYYY-MM-DD` (anything after the
-- day, such as a time, is ignored) that names a real day.
CREATE FUNCTION mirror_field_number(value text) RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  select case when value ~ '^\s*[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d{1,3})?\s*$' then trim(value)::numeric end
$$;
--> statement-breakpoint
CREATE FUNCTION mirror_field_date(value text) RETURNS date
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
begin
  if value is null or value !~ '^\s*\d{4}-\d{2}-\d{2}' then return null; end if;
  return make_date(substr(trim(value), 1, 4)::int, substr(trim(value), 6, 2)::int, substr(trim(value), 9, 2)::int);
exception when others then
  return null; -- 2024-02-30 and the like
end
$$;
--> statement-breakpoint
-- Rebuilds `subscriber_fields` from `fields`: `id`, then one column per field in key order, typed by
-- the field's type. Called by the store (src/mirror/store/fields.ts) in the transaction that changed
-- the definitions. Dropping the view drops its grant, so the grant is given again here. A field whose
-- key is `id` has no column (it would clash with the subscriber's id).
CREATE FUNCTION rebuild_subscriber_fields() RETURNS void
LANGUAGE plpgsql AS $$
declare
  columns text;
begin
  select string_agg(
           case f.type
             when 'number' then format('mirror_field_number(s.fields->>%L) as %I', f.key, f.key)
             when 'date' then format('mirror_field_date(s.fields->>%L) as %I', f.key, f.key)
             else format('(s.fields->>%L) as %I', f.key, f.key)
           end, ', ' order by f.key)
    into columns
    from fields f
   where f.key <> 'id';
  drop view if exists subscriber_fields;
  execute format('create view subscriber_fields as select s.id%s from subscribers s',
                 coalesce(', ' || columns, ''));
  grant select on subscriber_fields to subscriber_mirror_analyst;
end
$$;
--> statement-breakpoint
SELECT rebuild_subscriber_fields();
--> statement-breakpoint
-- The new table and views are the analyst's to read (docs/security.md, "Database roles"): field
-- definitions, suppressions (addresses and reasons, as `subscribers` already shows them) and figures.
GRANT SELECT ON fields, suppressions, group_stats TO subscriber_mirror_analyst;

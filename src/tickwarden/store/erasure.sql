-- erasure_tenant_tables --
-- Every table of the schema that holds tenant rows (a tenant_id column), found in the
-- catalog so that a table added later is erased without a change here, with the
-- tables each one references: erasure deletes referencing tables first. A month the
-- retention loop took out of the ledger (its tables no partition, dropped whole by the
-- loop, by a later pass if one died in between) is not the ledger any more: erasing it
-- would race with its drop.
SELECT c.relname::text AS table_name,
       coalesce(array_agg(DISTINCT p.relname::text) FILTER (WHERE p.relname IS NOT NULL AND p.oid <> c.oid),
                '{}'::text[]) AS references
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_constraint f ON f.conrelid = c.oid AND f.contype = 'f'
  LEFT JOIN pg_class p ON p.oid = f.confrelid
 WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND NOT c.relispartition
   AND c.relname !~ '^(runs|attempts|attempt_steps)_p[0-9]{6}$'
   AND EXISTS (SELECT 1 FROM pg_attribute a
                WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped)
 GROUP BY c.relname
 ORDER BY c.relname;

-- erasure_count_tenant_rows --
-- How many rows of one table ({table}, an identifier taken from the catalog) belong to a tenant.
SELECT count(*) AS n FROM {table} WHERE tenant_id = %(tenant_id)s;

-- erasure_delete_tenant_rows --
-- Delete one table's rows of a tenant ({table}, an identifier taken from the catalog).
DELETE FROM {table} WHERE tenant_id = %(tenant_id)s;

-- erasure_delete_tenant --
-- Delete the tenant itself, once every table holding its rows is empty of them.
DELETE FROM tenants WHERE id = %(tenant_id)s;

-- erasure_text_columns --
-- Every text and json column of every table of the schema, except columns a CHECK
-- constraint or a constrained domain governs (names, statuses, categories: identifiers a
-- person's name must never rewrite, and which cannot hold an address) but the actors below, with the column that says which
-- tenant a row belongs to (tenant_id, or id for tenants itself; NULL: no tenant). A month
-- taken out of the ledger is left to its drop, as in erasure_tenant_tables.
SELECT c.relname::text AS table_name, array_agg(a.attname::text ORDER BY a.attnum) AS columns,
       array_agg(format_type(a.atttypid, a.atttypmod) ORDER BY a.attnum) AS types,
       CASE WHEN c.relname = 'tenants' THEN 'id'
            WHEN EXISTS (SELECT 1 FROM pg_attribute t
                          WHERE t.attrelid = c.oid AND t.attname = 'tenant_id' AND NOT t.attisdropped)
            THEN 'tenant_id' END AS tenant_column
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
 WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND NOT c.relispartition
   AND c.relname !~ '^(runs|attempts|attempt_steps)_p[0-9]{6}$'
   AND (a.atttypid IN ('text'::regtype, 'varchar'::regtype, 'jsonb'::regtype, 'json'::regtype)
        OR a.atttypid IN (to_regtype('ledger_actor'), to_regtype('ledger_requester')))
   AND (NOT EXISTS (SELECT 1 FROM pg_constraint k
                     WHERE k.conrelid = c.oid AND k.contype = 'c' AND a.attnum = ANY (k.conkey))
        -- Who acknowledged an alert or cancelled a run: free text such as `tenant:token name`,
        -- which may carry an address. Their rules (set together with the time; a length, as
        -- the actor domain of migration 0043) say nothing of their shape, and the
        -- replacement keeps them. Who asked for a manual run is such text too, its length
        -- the requester domain's rule (migration 0044), which has no CHECK of a table.
        OR (c.relname, a.attname) IN (('alerts', 'acknowledged_by'), ('runs', 'cancelled_by')))
 GROUP BY c.oid, c.relname
 ORDER BY c.relname;

-- erasure_find_mentions --
-- Rows of one table whose listed columns mention the address or, in rows of the
-- person's own tenants, one of their names (case-insensitive), locked for the rewrite.
-- {table}, {columns} and {tenant} are identifiers from the catalog; {match} is one
-- strpos test per column and needle.
SELECT ctid::text AS row_ref, {tenant} AS row_tenant, {columns} FROM {table} WHERE {match} FOR UPDATE;

-- erasure_rewrite_row --
-- Rewrite the listed columns of one row located by its ctid (stable inside this transaction).
UPDATE {table} SET {assignments} WHERE ctid = %(row_ref)s::tid;

-- erasure_find_users --
-- The publisher rows of one address, in every tenant.
SELECT * FROM users WHERE lower(email) = lower(%(email)s) ORDER BY id;

-- erasure_anonymise_users --
-- Keep the publisher rows (workflows still point at them) but without the person:
-- an address that says nothing and can never receive mail, no name, inactive.
UPDATE users
   SET email = 'erased-' || id || '@erased.invalid', display_name = 'erased', active = false
 WHERE lower(email) = lower(%(email)s);

-- erasure_record_audit --
-- Record what an erasure removed, when and by whom (counts only, never the values).
INSERT INTO erasure_audits (kind, target, actor, at, counts)
VALUES (%(kind)s, %(target)s, %(actor)s, %(at)s, %(counts)s)
RETURNING *;

-- erasure_list_audits --
-- The erasure audit, newest first.
SELECT * FROM erasure_audits ORDER BY at DESC, id DESC LIMIT %(limit)s;

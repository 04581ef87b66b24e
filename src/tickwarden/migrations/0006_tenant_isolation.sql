-- Tenant isolation: row-level security on every tenant table.
--
-- API requests run as the NOLOGIN role tickwarden_app (`SET LOCAL ROLE`) with
-- `tickwarden.tenant_id` set to the caller's tenant, or `tickwarden.platform` set
-- to 'on' for a platform engineer. Policies are FORCEd so that even the tables'
-- owner is filtered; only superusers (and BYPASSRLS roles) skip them, which is
-- why the API switches role instead of trusting the connection's user.
-- Background loops run as the platform (see docs/api.md).

-- Roles are cluster-wide: create the application role once, whatever schema migrates first.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tickwarden_app') THEN
        CREATE ROLE tickwarden_app NOLOGIN;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;  -- another schema's migration created it at the same moment
END
$$;

-- A non-superuser service account must be a member of the role to `SET ROLE` to it.
DO $$
BEGIN
    IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
       AND NOT pg_has_role(current_user, 'tickwarden_app', 'MEMBER') THEN
        EXECUTE format('GRANT tickwarden_app TO %I', current_user);
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING 'grant the role tickwarden_app to % so that API requests can switch to it', current_user;
END
$$;

-- Enable and force row-level security with one policy on every table of the current
-- schema that has a tenant_id column (and on tenants itself), and grant the
-- application role what it needs. Idempotent: a later migration that adds a tenant
-- table calls it again.
CREATE FUNCTION tickwarden_enforce_tenant_isolation() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    target record;
    tenant_check text;
BEGIN
    FOR target IN
        SELECT c.relname, (c.relname = 'tenants') AS is_tenants
          FROM pg_class c
          JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = current_schema() AND c.relkind = 'r'
           AND (c.relname = 'tenants' OR EXISTS (
                SELECT 1 FROM pg_attribute a
                 WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped))
         ORDER BY c.relname
    LOOP
        tenant_check := CASE WHEN target.is_tenants THEN 'id' ELSE 'tenant_id' END
            || ' = nullif(current_setting(''tickwarden.tenant_id'', true), '''')::bigint';
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', target.relname);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', target.relname);
        EXECUTE format('DROP POLICY IF EXISTS tenant_isolation ON %I', target.relname);
        EXECUTE format(
            'CREATE POLICY tenant_isolation ON %I'
            ' USING (current_setting(''tickwarden.platform'', true) = ''on'' OR %s)'
            ' WITH CHECK (current_setting(''tickwarden.platform'', true) = ''on'' OR %s)',
            target.relname, tenant_check, tenant_check);
    END LOOP;
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO tickwarden_app', current_schema());
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %I TO tickwarden_app', current_schema());
    EXECUTE format('GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %I TO tickwarden_app', current_schema());
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO tickwarden_app',
                   current_schema());
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT USAGE, SELECT ON SEQUENCES TO tickwarden_app',
                   current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION tickwarden_enforce_tenant_isolation() FROM PUBLIC;

SELECT tickwarden_enforce_tenant_isolation();

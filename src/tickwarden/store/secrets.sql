-- secrets_upsert --
-- Store a tenant's sealed secret, replacing an earlier value of the same name.
INSERT INTO tenant_secrets (tenant_id, name, key_id, ciphertext, created_at, updated_at)
VALUES (%(tenant_id)s, %(name)s, %(key_id)s, %(ciphertext)s, %(now)s, %(now)s)
    ON CONFLICT (tenant_id, name) DO UPDATE
   SET key_id = EXCLUDED.key_id, ciphertext = EXCLUDED.ciphertext, updated_at = EXCLUDED.updated_at
RETURNING tenant_id, name, key_id, created_at, updated_at;

-- secrets_delete --
-- Forget a tenant's secret; the row count says whether it existed.
DELETE FROM tenant_secrets WHERE tenant_id = %(tenant_id)s AND name = %(name)s;

-- secrets_list --
-- A tenant's secrets by name, without their values.
SELECT tenant_id, name, key_id, created_at, updated_at
  FROM tenant_secrets WHERE tenant_id = %(tenant_id)s ORDER BY name;

-- secrets_get_sealed --
-- The sealed values of the named secrets of one tenant (what a run needs, nothing more).
SELECT name, key_id, ciphertext
  FROM tenant_secrets WHERE tenant_id = %(tenant_id)s AND name = ANY(%(names)s);

-- secrets_claim_for_rotation --
-- A batch of rows sealed with a key other than the current one, locked so that two
-- rotations running at once re-seal each row once.
SELECT tenant_id, name, key_id, ciphertext
  FROM tenant_secrets WHERE key_id <> %(key_id)s
 ORDER BY tenant_id, name
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED;

-- secrets_reseal --
-- Replace one row's ciphertext with its re-encryption under the current key, only if
-- it still holds what was read (a concurrent `secrets set` wins).
UPDATE tenant_secrets SET key_id = %(key_id)s, ciphertext = %(ciphertext)s
 WHERE tenant_id = %(tenant_id)s AND name = %(name)s AND key_id = %(old_key_id)s;

-- secrets_run_identity --
-- The names a run is known by outside tickwarden: its tenant, workflow and tick (the run key).
SELECT t.name AS tenant, w.name AS workflow, r.scheduled_for
  FROM runs r
  JOIN tenants t ON t.id = r.tenant_id
  JOIN workflows w ON w.id = r.workflow_id
 WHERE r.id = %(run_id)s AND r.tenant_id = %(tenant_id)s;

-- secrets_platform_identity --
-- Who this database is, as any client connected to it can tell: a tenant's sql step
-- compares its own connection's answer with this and refuses to run on a match.
SELECT current_database() || '/' || current_setting('port') || '/'
       || extract(epoch FROM pg_postmaster_start_time())::text AS identity;

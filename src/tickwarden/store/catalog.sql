-- upsert_tenant --
-- Create a tenant or update its display settings; the name is its identity.
INSERT INTO tenants (name, display_name, shadow, created_at)
VALUES (%(name)s, %(display_name)s, %(shadow)s, %(now)s)
    ON CONFLICT (name) DO UPDATE SET display_name = EXCLUDED.display_name, shadow = EXCLUDED.shadow
RETURNING *;

-- get_tenant_by_name --
SELECT * FROM tenants WHERE name = %(name)s;

-- get_tenant --
SELECT * FROM tenants WHERE id = %(tenant_id)s;

-- list_tenants --
SELECT * FROM tenants ORDER BY name;

-- upsert_user --
INSERT INTO users (tenant_id, email, display_name, active, created_at)
VALUES (%(tenant_id)s, %(email)s, %(display_name)s, %(active)s, %(now)s)
    ON CONFLICT (tenant_id, email) DO UPDATE SET display_name = EXCLUDED.display_name, active = EXCLUDED.active
RETURNING *;

-- get_user --
SELECT * FROM users WHERE id = %(user_id)s;

-- upsert_environment --
INSERT INTO environments (tenant_id, name, python, idle_timeout_seconds, settings, created_at, updated_at)
VALUES (%(tenant_id)s, %(name)s, %(python)s, %(idle_timeout_seconds)s, %(settings)s, %(now)s, %(now)s)
    ON CONFLICT (tenant_id, name) DO UPDATE
   SET python = EXCLUDED.python, idle_timeout_seconds = EXCLUDED.idle_timeout_seconds,
       settings = EXCLUDED.settings, updated_at = EXCLUDED.updated_at
RETURNING *;

-- get_environment --
SELECT * FROM environments WHERE id = %(environment_id)s;

-- upsert_workflow --
INSERT INTO workflows (tenant_id, name, description, environment_id, publisher_id, recipe, timeout_seconds,
                       monitoring_enabled, policy_overrides, shadow, created_at, updated_at)
VALUES (%(tenant_id)s, %(name)s, %(description)s, %(environment_id)s, %(publisher_id)s, %(recipe)s,
        %(timeout_seconds)s, %(monitoring_enabled)s, %(policy_overrides)s, %(shadow)s, %(now)s, %(now)s)
    ON CONFLICT (tenant_id, name) DO UPDATE
   SET description = EXCLUDED.description, environment_id = EXCLUDED.environment_id,
       publisher_id = EXCLUDED.publisher_id, recipe = EXCLUDED.recipe,
       timeout_seconds = EXCLUDED.timeout_seconds, monitoring_enabled = EXCLUDED.monitoring_enabled,
       policy_overrides = EXCLUDED.policy_overrides, shadow = EXCLUDED.shadow,
       updated_at = EXCLUDED.updated_at, archived_at = NULL
RETURNING *;

-- get_workflow --
SELECT * FROM workflows WHERE id = %(workflow_id)s;

-- get_workflow_by_name --
SELECT w.* FROM workflows w JOIN tenants t ON t.id = w.tenant_id
 WHERE t.name = %(tenant)s AND w.name = %(workflow)s;

-- list_workflows --
SELECT * FROM workflows WHERE tenant_id = %(tenant_id)s ORDER BY name;

-- upsert_schedule --
-- Attach or edit a workflow's schedule. The version moves only when something the
-- trigger cares about changed, so re-applying the same file converges to a no-op.
INSERT INTO schedules (tenant_id, workflow_id, cron, timezone, status, cadence_seconds,
                       starting_deadline_seconds, version, published_at, created_at, updated_at)
VALUES (%(tenant_id)s, %(workflow_id)s, %(cron)s, %(timezone)s, %(status)s, %(cadence_seconds)s,
        %(starting_deadline_seconds)s, 1, CASE WHEN %(status)s = 'active' THEN %(now)s::timestamptz END, %(now)s, %(now)s)
    ON CONFLICT (workflow_id) DO UPDATE
   SET cron = EXCLUDED.cron, timezone = EXCLUDED.timezone, status = EXCLUDED.status,
       cadence_seconds = EXCLUDED.cadence_seconds,
       starting_deadline_seconds = EXCLUDED.starting_deadline_seconds,
       version = schedules.version + CASE
           WHEN (schedules.cron, schedules.timezone, schedules.status, schedules.starting_deadline_seconds)
                IS DISTINCT FROM (EXCLUDED.cron, EXCLUDED.timezone, EXCLUDED.status, EXCLUDED.starting_deadline_seconds)
           THEN 1 ELSE 0 END,
       published_at = CASE WHEN EXCLUDED.status = 'active' AND schedules.status <> 'active'
                           THEN EXCLUDED.updated_at ELSE schedules.published_at END,
       updated_at = EXCLUDED.updated_at
RETURNING *;

-- get_schedule_for_workflow --
SELECT * FROM schedules WHERE workflow_id = %(workflow_id)s;

-- set_schedule_status --
-- Pause or resume; the version moves so the reconciler converges the trigger.
UPDATE schedules
   SET status = %(status)s, version = version + 1, updated_at = %(now)s,
       published_at = CASE WHEN %(status)s = 'active' THEN %(now)s::timestamptz ELSE published_at END
 WHERE workflow_id = %(workflow_id)s AND status <> %(status)s
RETURNING *;

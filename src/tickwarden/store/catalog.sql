-- catalog_get_tenant_by_name --
SELECT * FROM tenants WHERE name = %(name)s;

-- catalog_get_tenant --
SELECT * FROM tenants WHERE id = %(tenant_id)s;

-- catalog_get_environment --
SELECT * FROM environments WHERE id = %(environment_id)s;

-- catalog_get_workflow --
SELECT * FROM workflows WHERE id = %(workflow_id)s;

-- catalog_get_workflow_by_name --
SELECT w.* FROM workflows w JOIN tenants t ON t.id = w.tenant_id
 WHERE t.name = %(tenant)s AND w.name = %(workflow)s;

-- catalog_list_workflows --
SELECT * FROM workflows WHERE tenant_id = %(tenant_id)s ORDER BY name;

-- catalog_get_schedule_for_workflow --
SELECT * FROM schedules WHERE workflow_id = %(workflow_id)s;

-- catalog_get_schedules_for_workflows --
-- The schedules of several workflows, in no order (a workflow without one has no row).
SELECT * FROM schedules WHERE workflow_id = ANY(%(workflow_ids)s::bigint[]);

-- catalog_apply_tenant --
-- Upsert a tenant from a workflow file; `change` says created, updated or unchanged,
-- and an identical row is left alone so that re-applying a file writes nothing.
WITH up AS (
    INSERT INTO tenants (name, display_name, shadow, created_at)
    VALUES (%(name)s, %(display_name)s, %(shadow)s, %(now)s)
        ON CONFLICT (name) DO UPDATE SET display_name = EXCLUDED.display_name, shadow = EXCLUDED.shadow
     WHERE (tenants.display_name, tenants.shadow) IS DISTINCT FROM (EXCLUDED.display_name, EXCLUDED.shadow)
    RETURNING *, CASE WHEN xmax = 0 THEN 'created' ELSE 'updated' END AS change
)
SELECT * FROM up
UNION ALL
SELECT t.*, 'unchanged' FROM tenants t WHERE t.name = %(name)s AND NOT EXISTS (SELECT 1 FROM up);

-- catalog_apply_user --
-- Upsert a publisher from a workflow file (created, updated or unchanged).
WITH up AS (
    INSERT INTO users (tenant_id, email, display_name, active, created_at)
    VALUES (%(tenant_id)s, %(email)s, %(display_name)s, %(active)s, %(now)s)
        ON CONFLICT (tenant_id, email) DO UPDATE SET display_name = EXCLUDED.display_name, active = EXCLUDED.active
     WHERE (users.display_name, users.active) IS DISTINCT FROM (EXCLUDED.display_name, EXCLUDED.active)
    RETURNING *, CASE WHEN xmax = 0 THEN 'created' ELSE 'updated' END AS change
)
SELECT * FROM up
UNION ALL
SELECT u.*, 'unchanged' FROM users u
 WHERE u.tenant_id = %(tenant_id)s AND u.email = %(email)s AND NOT EXISTS (SELECT 1 FROM up);

-- catalog_apply_environment --
-- Upsert an environment from a workflow file (created, updated or unchanged).
WITH up AS (
    INSERT INTO environments (tenant_id, name, python, idle_timeout_seconds, runtime, pod, created_at, updated_at)
    VALUES (%(tenant_id)s, %(name)s, %(python)s, %(idle_timeout_seconds)s, %(runtime)s, %(pod)s, %(now)s, %(now)s)
        ON CONFLICT (tenant_id, name) DO UPDATE
       SET python = EXCLUDED.python, idle_timeout_seconds = EXCLUDED.idle_timeout_seconds,
           runtime = EXCLUDED.runtime, pod = EXCLUDED.pod, updated_at = EXCLUDED.updated_at
     WHERE (environments.python, environments.idle_timeout_seconds, environments.runtime, environments.pod)
           IS DISTINCT FROM (EXCLUDED.python, EXCLUDED.idle_timeout_seconds, EXCLUDED.runtime, EXCLUDED.pod)
    RETURNING *, CASE WHEN xmax = 0 THEN 'created' ELSE 'updated' END AS change
)
SELECT * FROM up
UNION ALL
SELECT e.*, 'unchanged' FROM environments e
 WHERE e.tenant_id = %(tenant_id)s AND e.name = %(name)s AND NOT EXISTS (SELECT 1 FROM up);

-- catalog_apply_channel --
-- Upsert a notification channel (tenant_id NULL: the platform's) from a workflow file.
-- The unique index is on (coalesce(tenant_id, 0), name), hence the expression target.
WITH up AS (
    INSERT INTO notification_channels (tenant_id, name, kind, audience, config, secret_ref, created_at,
                                       severities, events)
    VALUES (%(tenant_id)s, %(name)s, %(kind)s, %(audience)s, %(config)s, %(secret_ref)s, %(now)s,
            %(severities)s, %(events)s)
        ON CONFLICT ((coalesce(tenant_id, 0)), name) DO UPDATE
       SET kind = EXCLUDED.kind, audience = EXCLUDED.audience, config = EXCLUDED.config,
           secret_ref = EXCLUDED.secret_ref, severities = EXCLUDED.severities, events = EXCLUDED.events
     WHERE (notification_channels.kind, notification_channels.audience, notification_channels.config,
            notification_channels.secret_ref, notification_channels.severities, notification_channels.events)
           IS DISTINCT FROM (EXCLUDED.kind, EXCLUDED.audience, EXCLUDED.config, EXCLUDED.secret_ref,
                             EXCLUDED.severities, EXCLUDED.events)
    RETURNING id, CASE WHEN xmax = 0 THEN 'created' ELSE 'updated' END AS change
)
SELECT * FROM up
UNION ALL
SELECT c.id, 'unchanged' FROM notification_channels c
 WHERE coalesce(c.tenant_id, 0) = coalesce(%(tenant_id)s::bigint, 0) AND c.name = %(name)s
   AND NOT EXISTS (SELECT 1 FROM up);

-- catalog_apply_workflow --
-- Upsert workflows from a workflow file, the API or the simulator (created, updated or
-- unchanged each); applying one again un-archives it. The one write of a workflow's
-- content, for one workflow or many (one `WorkflowContent` a row):
-- the workflows are distinct (tenant_id, name) pairs (an upsert cannot change one row
-- twice in a statement), and they are inserted in the order given, so new ids follow
-- that order as one statement per workflow would give them. Each row comes back with
-- `ord`, its position (from 1), in that order.
WITH given AS (
    SELECT * FROM {unnest_numbered}
), up AS (
    INSERT INTO workflows (tenant_id, name, description, environment_id, publisher_id, recipe, timeout_seconds,
                           monitoring_enabled, policy_overrides, shadow, expect_rows, created_at, updated_at, kind,
                           keep_outputs)
    SELECT tenant_id, name, description, environment_id, publisher_id, recipe, timeout_seconds,
           monitoring_enabled, policy_overrides, shadow, expect_rows, %(now)s, %(now)s, kind, keep_outputs
      FROM given
     ORDER BY ord
        ON CONFLICT (tenant_id, name) DO UPDATE
       SET description = EXCLUDED.description, environment_id = EXCLUDED.environment_id,
           publisher_id = EXCLUDED.publisher_id, recipe = EXCLUDED.recipe,
           timeout_seconds = EXCLUDED.timeout_seconds, monitoring_enabled = EXCLUDED.monitoring_enabled,
           policy_overrides = EXCLUDED.policy_overrides, shadow = EXCLUDED.shadow,
           expect_rows = EXCLUDED.expect_rows, kind = EXCLUDED.kind, keep_outputs = EXCLUDED.keep_outputs,
           updated_at = EXCLUDED.updated_at, archived_at = NULL
     WHERE (workflows.description, workflows.environment_id, workflows.publisher_id, workflows.recipe,
            workflows.timeout_seconds, workflows.monitoring_enabled, workflows.policy_overrides,
            workflows.shadow, workflows.expect_rows, workflows.archived_at, workflows.kind, workflows.keep_outputs)
           IS DISTINCT FROM (EXCLUDED.description, EXCLUDED.environment_id, EXCLUDED.publisher_id, EXCLUDED.recipe,
            EXCLUDED.timeout_seconds, EXCLUDED.monitoring_enabled, EXCLUDED.policy_overrides,
            EXCLUDED.shadow, EXCLUDED.expect_rows, NULL::timestamptz, EXCLUDED.kind, EXCLUDED.keep_outputs)
    RETURNING *, CASE WHEN xmax = 0 THEN 'created' ELSE 'updated' END AS change
)
SELECT up.*, g.ord FROM up JOIN given g ON g.tenant_id = up.tenant_id AND g.name = up.name
UNION ALL
SELECT w.*, 'unchanged', g.ord FROM given g
  JOIN workflows w ON w.tenant_id = g.tenant_id AND w.name = g.name
 WHERE NOT EXISTS (SELECT 1 FROM up WHERE up.id = w.id)
 ORDER BY ord;

-- catalog_apply_schedule --
-- Upsert workflows' schedules (apply, the API, the simulator, tests: the one write of a
-- schedule, for one or many (one `ScheduleContent` a row), of distinct
-- workflows, written in the order given; each row comes back with `ord`, its position
-- from 1, in that order).
-- The version moves only when something the trigger acts on changed; an identical
-- schedule is left alone (no version bump, no new updated_at). A new expression,
-- zone or activation fires from its first tick strictly after this write
-- (`next_fire_at`, computed by the caller), written to the schedule's fire row in the
-- same statement, so the ticker needs nobody to prepare the schedule for it; a pause
-- clears it; otherwise the next fire time stays.
-- What changed is judged against the schedules as committed, not as this statement's
-- snapshot saw them: `old` locks the rows first, in the order given (a concurrent
-- publish of the same schedule is waited for, then read as it committed), and `up`
-- reads them only after (it cannot make a row before `old` has been read to its end).
WITH given AS (
    SELECT * FROM {unnest_numbered}
), old AS (
    SELECT s.id, s.cron, s.timezone, s.status
      FROM given g JOIN schedules s ON s.workflow_id = g.workflow_id
     ORDER BY g.ord
       FOR UPDATE OF s
), up AS (
    INSERT INTO schedules (tenant_id, workflow_id, cron, timezone, status, cadence_seconds,
                           starting_deadline_seconds, version, published_at, created_at, updated_at)
    SELECT g.tenant_id, g.workflow_id, g.cron, g.timezone, g.status, g.cadence_seconds,
           g.starting_deadline_seconds, 1, CASE WHEN g.status = 'active' THEN %(now)s::timestamptz END,
           %(now)s, %(now)s
      FROM given g, (SELECT count(*) FROM old) AS locked_first
     ORDER BY g.ord
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
     WHERE (schedules.cron, schedules.timezone, schedules.status, schedules.cadence_seconds,
            schedules.starting_deadline_seconds)
           IS DISTINCT FROM (EXCLUDED.cron, EXCLUDED.timezone, EXCLUDED.status, EXCLUDED.cadence_seconds,
            EXCLUDED.starting_deadline_seconds)
    RETURNING *, CASE WHEN xmax = 0 THEN 'created' ELSE 'updated' END AS change
), fires AS (
    -- a new schedule, a pause, or a new expression, zone or activation: a new fire time
    INSERT INTO schedule_fires AS f (schedule_id, tenant_id, workflow_id, next_fire_at)
    SELECT up.id, up.tenant_id, up.workflow_id,
           CASE WHEN up.status = 'active' THEN g.next_fire_at END
      FROM up
      JOIN given g ON g.workflow_id = up.workflow_id
      LEFT JOIN old ON old.id = up.id
     WHERE old.id IS NULL OR up.status <> 'active'
        OR (old.cron, old.timezone, old.status) IS DISTINCT FROM (up.cron, up.timezone, up.status)
     ORDER BY g.ord
        ON CONFLICT (schedule_id) DO UPDATE SET next_fire_at = EXCLUDED.next_fire_at
)
SELECT up.*, g.ord FROM up JOIN given g ON g.workflow_id = up.workflow_id
UNION ALL
SELECT s.*, 'unchanged', g.ord FROM given g
  JOIN schedules s ON s.workflow_id = g.workflow_id
 WHERE NOT EXISTS (SELECT 1 FROM up WHERE up.workflow_id = g.workflow_id)
 ORDER BY ord;

-- catalog_workflow_summaries --
-- Every workflow (of one tenant, or all) with its schedule and its newest run, for
-- `tickwarden workflows` and the API; the newest run is one index probe each.
SELECT t.name AS tenant, w.id AS workflow_id, w.name AS workflow, w.description,
       s.cron, s.timezone, s.status AS schedule_status, s.cadence_seconds, s.version AS schedule_version,
       w.monitoring_enabled, w.timeout_seconds, w.shadow, w.archived_at,
       e.name AS environment, u.email AS publisher,
       last.scheduled_for AS last_scheduled_for, last.status AS last_status
  FROM workflows w
  JOIN tenants t ON t.id = w.tenant_id
  LEFT JOIN schedules s ON s.workflow_id = w.id
  LEFT JOIN environments e ON e.id = w.environment_id
  LEFT JOIN users u ON u.id = w.publisher_id
  LEFT JOIN LATERAL (
        SELECT r.scheduled_for, r.status FROM runs r
         WHERE r.workflow_id = w.id ORDER BY r.scheduled_for DESC, r.id DESC LIMIT 1
       ) last ON true
 WHERE (%(tenant)s::text IS NULL OR t.name = %(tenant)s::text)
 ORDER BY t.name, w.name;

-- catalog_count_rows --
-- How many rows the catalog holds, by table: what apply tests check stays empty.
SELECT (SELECT count(*) FROM tenants) AS tenants, (SELECT count(*) FROM users) AS users,
       (SELECT count(*) FROM environments) AS environments,
       (SELECT count(*) FROM notification_channels) AS channels,
       (SELECT count(*) FROM workflows) AS workflows, (SELECT count(*) FROM schedules) AS schedules;

-- catalog_archive_workflow --
-- Archive a workflow (the trigger drops archived workflows; applying it again clears
-- archived_at); compare-and-set on archived_at IS NULL, so a second archive is a no-op.
UPDATE workflows SET archived_at = %(now)s, updated_at = %(now)s
 WHERE id = %(workflow_id)s AND archived_at IS NULL
RETURNING *;

-- catalog_lock_workflow --
-- Tenants' workflows by name (`tenant_ids[i]`, `names[i]`), locked: what a publish is about
-- to change, read in its transaction so two publishes of one workflow apply one after the
-- other. One statement for one workflow or many; the rows are locked in the order given
-- (as one lock after the other would take them) and each comes with `ord`, its position
-- (from 1) in the arrays; a name with no workflow has no row.
SELECT w.*, g.ord
  FROM unnest(%(tenant_ids)s::bigint[], %(names)s::text[]) WITH ORDINALITY AS g (tenant_id, name, ord)
  JOIN workflows w ON w.tenant_id = g.tenant_id AND w.name = g.name
 ORDER BY g.ord
   FOR UPDATE OF w;

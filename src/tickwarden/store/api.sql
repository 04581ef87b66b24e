-- api_enter_app_role --
-- Drop the connection's privileges for the rest of this transaction: from here on
-- row-level security filters every tenant table (superusers would bypass it).
SET LOCAL ROLE tickwarden_app;

-- api_set_tenant_context --
-- Name whose rows this transaction may see: one tenant, or every tenant for the platform.
SELECT set_config('tickwarden.tenant_id', %(tenant_id)s, true),
       set_config('tickwarden.platform', %(platform)s, true);

-- api_create_token --
-- Store a new API token by its SHA-256 hash; the plain token is shown once and never stored.
INSERT INTO api_tokens (tenant_id, user_id, name, role, token_hash, created_at)
VALUES (%(tenant_id)s, %(user_id)s, %(name)s, %(role)s, %(token_hash)s, %(now)s)
RETURNING *;

-- api_find_token --
-- The live token with this hash, with its tenant's name (NULL for platform tokens).
SELECT k.*, t.name AS tenant_name
  FROM api_tokens k
  LEFT JOIN tenants t ON t.id = k.tenant_id
 WHERE k.token_hash = %(token_hash)s AND k.revoked_at IS NULL;

-- api_touch_token --
-- Record use at most once a minute, so busy clients do not write on every request.
UPDATE api_tokens SET last_used_at = %(now)s
 WHERE id = %(token_id)s AND (last_used_at IS NULL OR last_used_at < %(now)s - interval '1 minute');

-- api_list_tokens --
-- Every token with its tenant's name, newest first; hashes are never shown.
SELECT k.id, k.tenant_id, k.user_id, k.name, k.role, k.created_at, k.last_used_at, k.revoked_at,
       t.name AS tenant_name
  FROM api_tokens k
  LEFT JOIN tenants t ON t.id = k.tenant_id
 ORDER BY k.id DESC;

-- api_revoke_token --
-- Revoke a token by id; revoked tokens stop authenticating at once.
UPDATE api_tokens SET revoked_at = %(now)s WHERE id = %(token_id)s AND revoked_at IS NULL
RETURNING id;

-- api_list_tenants --
-- Visible tenants in name order, after the cursor's name.
SELECT * FROM tenants
 WHERE %(after)s::text IS NULL OR name > %(after)s
 ORDER BY name
 LIMIT %(limit)s;

-- api_list_workflows --
-- Visible workflows with their schedule and environment, by tenant then name, after the cursor.
SELECT w.*, t.name AS tenant_name, e.name AS environment_name,
       s.cron, s.timezone, s.status AS schedule_status, s.cadence_seconds, s.version AS schedule_version,
       s.published_at, s.starting_deadline_seconds, u.email AS publisher_email
  FROM workflows w
  JOIN tenants t ON t.id = w.tenant_id
  LEFT JOIN schedules s ON s.workflow_id = w.id
  LEFT JOIN environments e ON e.id = w.environment_id
  LEFT JOIN users u ON u.id = w.publisher_id
 WHERE (%(tenant)s::text IS NULL OR t.name = %(tenant)s)
   AND (%(after_tenant)s::text IS NULL OR (t.name, w.name) > (%(after_tenant)s::text, %(after_name)s::text))
   AND w.archived_at IS NULL
 ORDER BY t.name, w.name
 LIMIT %(limit)s;

-- api_get_workflow --
-- One visible workflow by tenant and workflow name, with its schedule and environment.
SELECT w.*, t.name AS tenant_name, e.name AS environment_name,
       s.cron, s.timezone, s.status AS schedule_status, s.cadence_seconds, s.version AS schedule_version,
       s.published_at, s.starting_deadline_seconds, u.email AS publisher_email
  FROM workflows w
  JOIN tenants t ON t.id = w.tenant_id
  LEFT JOIN schedules s ON s.workflow_id = w.id
  LEFT JOIN environments e ON e.id = w.environment_id
  LEFT JOIN users u ON u.id = w.publisher_id
 WHERE t.name = %(tenant)s AND w.name = %(workflow)s;

-- api_get_environment_by_name --
-- One visible environment of a tenant by name.
SELECT e.* FROM environments e JOIN tenants t ON t.id = e.tenant_id
 WHERE t.name = %(tenant)s AND e.name = %(environment)s;

-- api_recent_outcomes --
-- The newest runs of each workflow, newest first: the dashboard's strip of tick outcomes.
SELECT r.workflow_id, r.id, r.scheduled_for, r.status, r.recovered, r.manual
  FROM unnest(%(workflow_ids)s::bigint[]) AS w(id)
  CROSS JOIN LATERAL (
        SELECT * FROM runs
         WHERE workflow_id = w.id
         ORDER BY scheduled_for DESC, id DESC
         LIMIT %(per_workflow)s) r
 ORDER BY r.workflow_id, r.scheduled_for DESC, r.id DESC;

-- api_list_runs --
-- A workflow's runs newest first, before the cursor's (scheduled_for, id).
SELECT r.* FROM runs r
 WHERE r.workflow_id = %(workflow_id)s
   AND (%(before_at)s::timestamptz IS NULL OR (r.scheduled_for, r.id) < (%(before_at)s::timestamptz, %(before_id)s::bigint))
 ORDER BY r.scheduled_for DESC, r.id DESC
 LIMIT %(limit)s;

-- api_get_run --
-- One visible run with its tenant's and workflow's names.
SELECT r.*, t.name AS tenant_name, w.name AS workflow_name
  FROM runs r
  JOIN workflows w ON w.id = r.workflow_id
  JOIN tenants t ON t.id = r.tenant_id
 WHERE r.id = %(run_id)s;

-- api_run_credential_attempt --
-- The attempt a run credential names, if the caller can see it: its run and whether it still
-- runs. The credential carries its tick to the second (a manual run's is finer), and a manual
-- run may share the tick of a scheduled one: the running attempt is preferred.
SELECT r.id AS run_id, a.status = 'running' AS running
  FROM tenants t
  JOIN workflows w ON w.tenant_id = t.id AND w.name = %(workflow)s
  JOIN runs r ON r.workflow_id = w.id
             AND r.scheduled_for >= %(scheduled_for)s AND r.scheduled_for < %(scheduled_for)s + interval '1 second'
  JOIN attempts a ON a.run_id = r.id AND a.run_scheduled_for = r.scheduled_for AND a.number = %(attempt)s
 WHERE t.name = %(tenant)s
 ORDER BY a.status = 'running' DESC, r.id DESC
 LIMIT 1;

-- api_list_run_steps --
-- What every step of every attempt of a run did, in attempt then step order (every
-- month probed: see api_list_run_steps_in_month).
SELECT s.* FROM attempt_steps s
  JOIN attempts a ON a.id = s.attempt_id AND a.run_scheduled_for = s.run_scheduled_for
 WHERE a.run_id = %(run_id)s
 ORDER BY a.number, s.position, s.step;

-- api_list_run_steps_in_month --
-- What every step of every attempt of a run did, given its tick: only its month is read.
SELECT s.* FROM attempt_steps s
  JOIN attempts a ON a.id = s.attempt_id AND a.run_scheduled_for = s.run_scheduled_for
 WHERE a.run_id = %(run_id)s AND a.run_scheduled_for = %(scheduled_for)s AND s.run_scheduled_for = %(scheduled_for)s
 ORDER BY a.number, s.position, s.step;

-- api_list_alerts --
-- Visible alerts newest first, filtered, before the cursor's id.
SELECT a.*, t.name AS tenant_name, w.name AS workflow_name
  FROM alerts a
  JOIN tenants t ON t.id = a.tenant_id
  JOIN workflows w ON w.id = a.workflow_id
 WHERE (%(status)s::text IS NULL OR a.status = %(status)s)
   AND (%(severity)s::text IS NULL OR a.severity = %(severity)s)
   AND (%(owner)s::text IS NULL OR a.owner = %(owner)s)
   AND (%(tenant)s::text IS NULL OR t.name = %(tenant)s)
   AND (%(workflow)s::text IS NULL OR w.name = %(workflow)s)
   AND (%(before_id)s::bigint IS NULL OR a.id < %(before_id)s)
 ORDER BY a.id DESC
 LIMIT %(limit)s;

-- api_get_alert --
-- One visible alert with its tenant's and workflow's names.
SELECT a.*, t.name AS tenant_name, w.name AS workflow_name
  FROM alerts a
  JOIN tenants t ON t.id = a.tenant_id
  JOIN workflows w ON w.id = a.workflow_id
 WHERE a.id = %(alert_id)s;

-- api_list_alert_events --
-- An alert's history, oldest first.
SELECT * FROM alert_events WHERE alert_id = %(alert_id)s ORDER BY id;

-- api_failing_step --
-- The failing step of an alert's latest failed run: its newest failed attempt's step
-- record (with the step's sanitized log), falling back to the attempt's log tail.
SELECT at.id AS attempt_id, at.number, at.run_id, coalesce(s.step, at.failed_step) AS step,
       coalesce(nullif(s.log, ''), at.log_tail, '') AS log, coalesce(s.error, at.error) AS error,
       at.error_category
  FROM alerts a
  JOIN attempts at ON at.run_id = a.last_run_id AND at.status IN ('failed', 'lost')
  LEFT JOIN attempt_steps s ON s.attempt_id = at.id AND s.step = at.failed_step
 WHERE a.id = %(alert_id)s
 ORDER BY at.number DESC
 LIMIT 1;

-- api_list_environments --
-- Visible environments with their live instances, by id after the cursor.
SELECT e.*, t.name AS tenant_name,
       (SELECT count(*) FROM environment_instances i
         WHERE i.environment_id = e.id AND i.status IN ('starting', 'warm', 'busy')) AS live_instances,
       p.awake AS pod_awake, p.last_used_at AS pod_last_used_at, p.woken_at AS pod_woken_at,
       p.stopped_at AS pod_stopped_at, p.wakes AS pod_wakes
  FROM environments e
  JOIN tenants t ON t.id = e.tenant_id
  LEFT JOIN environment_pods p ON p.environment_id = e.id
 WHERE (%(tenant)s::text IS NULL OR t.name = %(tenant)s)
   AND (%(after_id)s::bigint IS NULL OR e.id > %(after_id)s)
 ORDER BY e.id
 LIMIT %(limit)s;

-- api_list_environment_pods --
-- Every visible environment that runs as a pod, with its pod's state (for `tickwarden envs`).
SELECT e.*, t.name AS tenant_name,
       p.awake AS pod_awake, p.last_used_at AS pod_last_used_at, p.woken_at AS pod_woken_at,
       p.stopped_at AS pod_stopped_at, p.wakes AS pod_wakes
  FROM environments e JOIN tenants t ON t.id = e.tenant_id
  LEFT JOIN environment_pods p ON p.environment_id = e.id
 WHERE e.runtime = 'kubernetes'
 ORDER BY t.name, e.name;

-- api_get_environment --
-- One visible environment with its tenant's name and, for a pod environment, its pod's state.
SELECT e.*, t.name AS tenant_name,
       p.awake AS pod_awake, p.last_used_at AS pod_last_used_at, p.woken_at AS pod_woken_at,
       p.stopped_at AS pod_stopped_at, p.wakes AS pod_wakes
  FROM environments e JOIN tenants t ON t.id = e.tenant_id
  LEFT JOIN environment_pods p ON p.environment_id = e.id
 WHERE e.id = %(environment_id)s;

-- api_list_environment_instances --
-- Where an environment runs (or ran), newest first.
SELECT * FROM environment_instances WHERE environment_id = %(environment_id)s
 ORDER BY started_at DESC, id DESC
 LIMIT 50;

-- api_list_channels --
-- Visible notification channels, by id after the cursor.
SELECT c.*, t.name AS tenant
  FROM notification_channels c
  LEFT JOIN tenants t ON t.id = c.tenant_id
 WHERE (%(tenant)s::text IS NULL OR t.name = %(tenant)s)
   AND (%(after_id)s::bigint IS NULL OR c.id > %(after_id)s)
 ORDER BY c.id
 LIMIT %(limit)s;

-- api_get_channel --
-- One visible notification channel.
SELECT c.*, t.name AS tenant
  FROM notification_channels c
  LEFT JOIN tenants t ON t.id = c.tenant_id
 WHERE c.id = %(channel_id)s;

-- api_overview_tenants --
-- Every visible workspace with its workflow count, open alerts and worst open severity.
SELECT t.id, t.name, t.display_name,
       (SELECT count(*) FROM workflows w WHERE w.tenant_id = t.id AND w.archived_at IS NULL) AS workflows,
       count(a.id) AS open_alerts,
       CASE WHEN bool_or(a.severity = 'critical') THEN 'critical'
            WHEN count(a.id) > 0 THEN 'warning' ELSE '' END AS worst_severity,
       min(a.opened_at) AS oldest_open_at,
       coalesce(sum(a.failure_count), 0) AS failures
  FROM tenants t
  LEFT JOIN alerts a ON a.tenant_id = t.id AND a.status = 'open'
 GROUP BY t.id
 ORDER BY count(a.id) DESC, t.name
 LIMIT %(limit)s;

-- api_open_alerts --
-- Every visible open alert, critical first then oldest: who must act on what.
SELECT a.*, t.name AS tenant_name, w.name AS workflow_name
  FROM alerts a
  JOIN tenants t ON t.id = a.tenant_id
  JOIN workflows w ON w.id = a.workflow_id
 WHERE a.status = 'open'
 ORDER BY (a.severity = 'critical') DESC, a.opened_at, a.id
 LIMIT %(limit)s;

-- api_metrics_runs_in_flight --
-- Runs still waiting for a verdict (queued, running, pending_retry: no finish yet), by status:
-- only the deadline index's partial range, never the ledger.
SELECT status, count(*) AS n FROM runs
 WHERE finished_at IS NULL GROUP BY status;

-- api_metrics_tenant_last_success --
-- Each tenant's newest success: the latest finish among its workflows' newest successes
-- (workflow_successes, one row a workflow: the success of the newest tick), not a read of the
-- runs (their success index went with migration 0042).
SELECT t.id AS tenant_id, max(s.finished_at) AS last_success_at
  FROM tenants t
  LEFT JOIN workflow_successes s ON s.tenant_id = t.id
 GROUP BY t.id
 ORDER BY t.id;

-- api_metrics_open_alerts --
-- Open alerts by severity.
SELECT severity, count(*) AS n FROM alerts WHERE status = 'open' GROUP BY severity;

-- api_metrics_poll_lag --
-- The oldest finished attempt the outcome poller has not claimed yet (the head of
-- outcome_queue_order_idx).
SELECT min(finished_at) AS oldest FROM outcome_queue;

-- api_metrics_outbox --
-- Notifications waiting to be delivered, by status.
SELECT status, count(*) AS n FROM notification_outbox
 WHERE status IN ('pending', 'failed', 'sending', 'held') GROUP BY status;

-- api_loop_heartbeats --
-- Every replica's newest pass of every loop.
SELECT * FROM loop_heartbeats ORDER BY loop, replica_id;

-- api_get_user_by_email --
-- One visible user of a tenant by e-mail: the publisher named when publishing over the API.
SELECT u.* FROM users u JOIN tenants t ON t.id = u.tenant_id
 WHERE t.name = %(tenant)s AND u.email = %(email)s;

-- api_connection_context --
-- Whether this connection sees every tenant outside API requests: a superuser or
-- BYPASSRLS role does; any other role needs tickwarden.platform=on in its options.
SELECT r.rolsuper OR r.rolbypassrls AS bypasses_rls,
       coalesce(current_setting('tickwarden.platform', true), '') = 'on' AS platform
  FROM pg_roles r WHERE r.rolname = current_user;

-- api_undelivered_notifications --
-- Channels with notifications not yet delivered (waiting, retrying, or given up since `since`), failing first.
SELECT c.name AS channel, c.kind, t.name AS tenant,
       count(*) FILTER (WHERE o.status IN ('pending', 'sending')) AS waiting,
       count(*) FILTER (WHERE o.status = 'failed') AS retrying,
       count(*) FILTER (WHERE o.status = 'dead') AS given_up,
       min(o.created_at) AS oldest,
       max(o.tries) AS tries,
       (array_agg(o.last_error ORDER BY o.id DESC) FILTER (WHERE o.last_error IS NOT NULL))[1] AS last_error
  FROM notification_outbox o
  JOIN notification_channels c ON c.id = o.channel_id
  LEFT JOIN tenants t ON t.id = c.tenant_id
 WHERE o.status IN ('pending', 'sending', 'failed')
    OR (o.status = 'dead' AND o.created_at >= %(since)s)
 GROUP BY c.id, c.name, c.kind, t.name
 ORDER BY count(*) FILTER (WHERE o.status IN ('failed', 'dead')) DESC, min(o.created_at), c.id
 LIMIT %(limit)s;

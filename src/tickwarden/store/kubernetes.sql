-- kubernetes_desired_cronjobs --
-- Every schedule with what its CronJob must say, keyed by schedule id: the desired side
-- of the Kubernetes reconciler. Paused schedules and archived workflows are listed too,
-- so the reconciler can tell "suspend" (paused) from "delete" (archived or gone).
-- External workflows are left out: nothing of tickwarden runs for them (their ticks come
-- from check-ins, the deadline detector misses the absent ones), so they get no CronJob
-- and one left from before a change of kind is deleted like an orphan's.
SELECT s.id AS schedule_id, s.version, s.cron, s.timezone, s.status, s.starting_deadline_seconds,
       t.name AS tenant, w.name AS workflow, (w.archived_at IS NOT NULL) AS archived
  FROM schedules s
  JOIN workflows w ON w.id = s.workflow_id
  JOIN tenants t ON t.id = s.tenant_id
 WHERE w.kind <> 'external'
 ORDER BY s.id;

-- kubernetes_tick_context --
-- What `tickwarden tick` needs to decide whether a CronJob's tick is one of the schedule's
-- own, to give its run a retry budget and a deadline, and whether the pod may run its
-- attempt (not when the environment is a pod: only the worker pool may wake one).
SELECT s.id AS schedule_id, s.tenant_id, s.workflow_id, s.cron, s.timezone, s.status, s.version,
       s.starting_deadline_seconds, s.cadence_seconds, s.updated_at,
       (w.archived_at IS NOT NULL) AS archived, w.monitoring_enabled, w.timeout_seconds,
       w.policy_overrides::text AS policy_overrides, w.kind,
       coalesce(e.runtime, 'process') AS environment_runtime
  FROM schedules s
  JOIN workflows w ON w.id = s.workflow_id
  LEFT JOIN environments e ON e.id = w.environment_id
 WHERE s.id = %(schedule_id)s;

-- kubernetes_lease_tick_attempt --
-- Lease the queued attempt of one tick's run for the pod its CronJob started: the
-- worker's lease (lease_attempts) narrowed to that run. SKIP LOCKED and the status
-- check make a CronJob that fired twice lease it once; a run already leased by a worker
-- of the pool, or closed as missed by the deadline detector, leases nothing. The tick is
-- the ledger's partition key, named in every clause: the plan holds its month alone.
WITH next AS (
    SELECT a.id
      FROM runs r
      JOIN attempts a ON a.run_id = r.id AND a.run_scheduled_for = %(scheduled_for)s
     WHERE r.workflow_id = %(workflow_id)s AND r.scheduled_for = %(scheduled_for)s AND NOT r.manual
       AND a.status = 'queued'
     ORDER BY a.number
     LIMIT 1
       FOR UPDATE OF a SKIP LOCKED
), leased AS (
    UPDATE attempts a
       SET status = 'running', worker_id = %(worker_id)s, started_at = %(now)s,
           heartbeat_at = %(now)s, lease_expires_at = %(lease_expires_at)s
      FROM next
     WHERE a.id = next.id AND a.run_scheduled_for = %(scheduled_for)s
    RETURNING a.*
), started AS (
    UPDATE runs r
       SET status = 'running', started_at = coalesce(r.started_at, %(now)s)
      FROM leased
     WHERE r.id = leased.run_id AND r.scheduled_for = %(scheduled_for)s AND r.status IN ('queued', 'pending_retry')
), dequeued AS (
    -- the lease owns the move out of the queue (migration 0039)
    DELETE FROM attempt_queue q WHERE q.attempt_id = ANY (ARRAY(SELECT id FROM leased))
)
SELECT leased.* FROM leased;

-- kubernetes_queued_retries --
-- Retry attempts due to run (queued, number > 1), oldest first: what the retry launcher
-- starts a Job for when retries run as Jobs. Attempts of an environment that runs as a
-- pod stay with the worker pool, the only one that may wake it. Read from the queue
-- (`attempt_queue`: a row exactly while its attempt is queued, with its number), through
-- its index of retries alone: no month of the ledger is planned or read, and the first
-- attempts queued ahead of the retries (a whole fleet's at the top of the hour) are not
-- walked.
SELECT q.attempt_id, q.run_id, q.number, t.name AS tenant, w.name AS workflow
  FROM attempt_queue q
  JOIN workflows w ON w.id = q.workflow_id
  JOIN tenants t ON t.id = q.tenant_id
  LEFT JOIN environments e ON e.id = w.environment_id
 WHERE q.number > 1 AND q.queued_at <= %(now)s
   AND coalesce(e.runtime, 'process') = 'process'
 ORDER BY q.queued_at, q.attempt_id
 LIMIT %(limit)s;

-- kubernetes_lease_attempt --
-- Lease one queued attempt by id for the Job started for it: the worker's lease
-- (lease_attempts) narrowed to that attempt. A worker of the pool that took it first
-- leaves nothing to lease.
WITH next AS (
    SELECT a.id FROM attempts a
     WHERE a.id = %(attempt_id)s AND a.status = 'queued' AND a.queued_at <= %(now)s
       FOR UPDATE SKIP LOCKED
), leased AS (
    UPDATE attempts a
       SET status = 'running', worker_id = %(worker_id)s, started_at = %(now)s,
           heartbeat_at = %(now)s, lease_expires_at = %(lease_expires_at)s
      FROM next
     WHERE a.id = next.id
    RETURNING a.*
), started AS (
    UPDATE runs r
       SET status = 'running', started_at = coalesce(r.started_at, %(now)s)
      FROM leased
     WHERE r.id = leased.run_id AND r.status IN ('queued', 'pending_retry')
), dequeued AS (
    -- the lease owns the move out of the queue (migration 0039)
    DELETE FROM attempt_queue q WHERE q.attempt_id = ANY (ARRAY(SELECT id FROM leased))
)
SELECT leased.* FROM leased;

-- execution_ensure_default_environment --
-- The environment of a workflow that names none: one `default` per tenant, created
-- once (ON CONFLICT keeps racing workers to one row) and never modified here.
WITH created AS (
    INSERT INTO environments (tenant_id, name, python, idle_timeout_seconds, settings, created_at, updated_at)
    VALUES (%(tenant_id)s, 'default', NULL, 600, '{}'::jsonb, %(now)s, %(now)s)
        ON CONFLICT (tenant_id, name) DO NOTHING
    RETURNING *
)
SELECT * FROM created
UNION ALL
SELECT * FROM environments WHERE tenant_id = %(tenant_id)s AND name = 'default'
LIMIT 1;

-- execution_release_attempts --
-- Hand leased attempts back to the queue (a worker stopping before it could start
-- or finish them, or prefetched ones left waiting behind a long attempt).
-- Compare-and-set on (running, this worker): a reaped lease stays lost. Each attempt
-- comes with its run's tick, so only the months holding them are read.
WITH released AS (
    UPDATE attempts a
       SET status = 'queued', worker_id = NULL, lease_expires_at = NULL, started_at = NULL, heartbeat_at = NULL
      FROM unnest(%(attempt_ids)s::bigint[], %(run_scheduled_fors)b::timestamptz[]) AS g (id, run_scheduled_for)
     WHERE a.id = g.id AND a.run_scheduled_for = g.run_scheduled_for
       AND a.run_scheduled_for = ANY (%(run_scheduled_fors)b::timestamptz[])
       AND a.status = 'running' AND a.worker_id = %(worker_id)s
    RETURNING a.id, a.run_id, a.run_scheduled_for
), moved AS (
    UPDATE runs r SET status = 'queued'
      FROM released
     WHERE r.id = released.run_id AND r.scheduled_for = released.run_scheduled_for
       AND r.scheduled_for = ANY (%(run_scheduled_fors)b::timestamptz[]) AND r.status = 'running'
)
SELECT id FROM released;

-- execution_start_attempt --
-- An attempt leased ahead starts now: its start time and a full lease from now.
-- Compare-and-set: only while this worker still holds the lease and nobody started
-- it under that lease (`started_at` NULL). A lease given back, or expired and given
-- back by the reaper (then perhaps leased by another worker), returns no row: the
-- worker skips the attempt, so no attempt runs on two workers. The attempt's tick names
-- its month, as the key's parameter and as `{months}`, constants (`store.ledger.in_months`):
-- a plan made once (the exchange's) then holds and locks that month's partition alone.
-- `IS NOT DISTINCT FROM 'running'` (status is NOT NULL: the same test as `=`) keeps that plan
-- from reading the running attempts' partial lease index instead of the key: made while the
-- month's partition is nearly empty (a worker's first exchange), the two tie, and the index,
-- once chosen, was read whole at every start, through every entry a lease or start had left
-- there since the partition's last VACUUM (see `ledger_finish_attempts`).
UPDATE attempts
   SET started_at = %(now)s, heartbeat_at = %(now)s, lease_expires_at = %(lease_expires_at)s
 WHERE id = %(attempt_id)s AND run_scheduled_for = %(run_scheduled_for)s AND run_scheduled_for {months}
   AND status IS NOT DISTINCT FROM 'running' AND worker_id = %(worker_id)s AND started_at IS NULL
RETURNING id;

-- execution_start_environment_instance --
-- Record a new process of an environment on this worker. A restart within the same
-- instant of the clock (a virtual clock stands still) starts one microsecond later,
-- so (environment, worker, started_at) stays unique without reading a real clock.
WITH previous AS (
    SELECT max(started_at) AS started_at FROM environment_instances
     WHERE environment_id = %(environment_id)s AND worker_id = %(worker_id)s
), stamp AS (
    SELECT greatest(%(now)s::timestamptz, previous.started_at + interval '1 microsecond') AS at FROM previous
)
INSERT INTO environment_instances (tenant_id, environment_id, worker_id, pid, status, started_at, last_used_at)
SELECT %(tenant_id)s, %(environment_id)s, %(worker_id)s, %(pid)s, %(status)s, stamp.at, stamp.at FROM stamp
RETURNING *;

-- execution_update_environment_instance --
-- Move an instance to a new status; a stopped or dead instance never comes back.
-- With `relaxed`, the statement's own transaction commits without waiting for the
-- WAL flush: an instance mark lost in a crash is harmless (the process died with
-- the machine, and the reaper retires the row), and the worker saves a disk flush
-- per attempt. Never relaxed inside a transaction that records an outcome.
-- With `keeping` (not NULL), the status is decided here by the lease sent before it in
-- the same transaction (`ledger_lease_queue`'s settings): busy when the first attempt it
-- locked is of one of those workflows (the process serves that attempt next), else warm;
-- and with `stands` (the row is busy and was written recently), busy writes nothing. The
-- worker records what this returns (`EnvironmentPool.lease_mark`: the row as written, or
-- none), so the rule is applied here alone.
UPDATE environment_instances i
   SET status = d.status,
       pid = coalesce(%(pid)s, i.pid),
       last_used_at = CASE WHEN d.status IN ('busy', 'warm') THEN greatest(i.last_used_at, %(now)s)
                           ELSE i.last_used_at END,
       runs_served = i.runs_served + %(served)s,
       stopped_at = CASE WHEN d.status IN ('stopped', 'dead') THEN %(now)s::timestamptz END
  FROM (SELECT CASE WHEN %(keeping)s::bigint[] IS NULL THEN %(status)s::text
                    WHEN (nullif(current_setting('tickwarden.lease_workflows', true), '')::bigint[])[1]
                         = ANY (%(keeping)s::bigint[]) THEN 'busy'
                    ELSE 'warm' END AS status) d
 WHERE i.id = %(instance_id)s AND i.status NOT IN ('stopped', 'dead')
   AND NOT (d.status = 'busy' AND %(keeping)s::bigint[] IS NOT NULL AND %(stands)s)
   AND (NOT %(relaxed)s OR set_config('synchronous_commit', 'off', true) IS NOT NULL)
RETURNING i.*;

-- execution_abandon_environment_instances --
-- Instances still listed live long after their idle timeout belong to a worker that
-- died without stopping them (their processes exit with it): mark them dead. A busy
-- one is abandoned only when its worker holds no running attempt any more. The CASE
-- orders the tests (its columns are all NOT NULL): the look at every month's running
-- attempts is made only for a busy instance already past its timeout, so a pass that
-- finds none reads the live instances' index and nothing of the ledger.
UPDATE environment_instances i
   SET status = 'dead', stopped_at = %(now)s
  FROM environments e
 WHERE e.id = i.environment_id
   AND i.status IN ('starting', 'warm', 'busy')
   AND CASE WHEN i.last_used_at + make_interval(secs => e.idle_timeout_seconds + %(grace_seconds)s) > %(now)s
            THEN false
            WHEN i.status <> 'busy' THEN true
            ELSE NOT EXISTS (SELECT 1 FROM attempts a WHERE a.status = 'running' AND a.worker_id = i.worker_id)
       END
RETURNING i.id;

-- execution_list_environment_instances --
-- Environment processes, live ones first, newest first.
SELECT i.*, t.name AS tenant, e.name AS environment, e.python, e.idle_timeout_seconds
  FROM environment_instances i
  JOIN environments e ON e.id = i.environment_id
  JOIN tenants t ON t.id = i.tenant_id
 WHERE %(include_stopped)s OR i.status IN ('starting', 'warm', 'busy')
 ORDER BY (i.status IN ('starting', 'warm', 'busy')) DESC, i.started_at DESC, i.id DESC
 LIMIT %(limit)s;

-- execution_queue_waiting --
-- An idle worker's poll, read only and in one round trip: is an attempt queued and due?
-- It locks nothing and opens no transaction; a worker that finds one leases with
-- `ledger_lease_queue` (SKIP LOCKED), which may find it taken by then, as any poll may.
-- It reads the queue (`attempt_queue`), one table, not every month's attempts.
SELECT EXISTS (SELECT 1 FROM attempt_queue WHERE queued_at <= %(now)s) AS found;

-- execution_contexts --
-- Everything a worker needs to run attempts of the given workflows (sent right behind a
-- lease, so a batch of leases costs no look-up per attempt, and no look at the ledger's
-- months): the workflow, its cadence, its publisher and its environment (prefixed
-- columns). `workflow_ids` NULL: those of the attempts the lease sent before it in the same
-- transaction locked (`ledger_lease_queue`'s setting), so it rides in the lease's round trip.
SELECT w.*, s.cadence_seconds AS schedule__cadence_seconds, t.name AS tenant__name,
       u.id AS publisher__id, u.tenant_id AS publisher__tenant_id, u.email AS publisher__email,
       u.display_name AS publisher__display_name, u.active AS publisher__active,
       u.created_at AS publisher__created_at,
       e.id AS environment__id, e.tenant_id AS environment__tenant_id, e.name AS environment__name,
       e.python AS environment__python, e.idle_timeout_seconds AS environment__idle_timeout_seconds,
       e.settings AS environment__settings, e.created_at AS environment__created_at,
       e.updated_at AS environment__updated_at, e.runtime AS environment__runtime, e.pod AS environment__pod
  FROM workflows w
  JOIN tenants t ON t.id = w.tenant_id
  LEFT JOIN schedules s ON s.workflow_id = w.id
  LEFT JOIN users u ON u.id = w.publisher_id
  LEFT JOIN environments e ON e.id = w.environment_id
 WHERE w.id = ANY (coalesce(%(workflow_ids)s::bigint[],
                            nullif(current_setting('tickwarden.lease_workflows', true), '')::bigint[]));

-- execution_begin --
-- Open the exchange's durable transaction explicitly when a wake follows its commit.
BEGIN;

-- execution_generic_plans --
-- The rest of the exchange's transaction runs plans made once per connection (generic), not
-- made afresh at each execution: planning them anew cost the server more than running them,
-- at every attempt. The outcome's write and the start name their months as constants
-- (`ledger_finish_attempts`, `execution_start_attempt`), so their plans hold and lock those
-- months' partitions alone; the lease's writes, whose months only the server learns, bind
-- them as scalars (`ledger_lease_attempts`), which prune such a plan when it starts but lock
-- every month's partitions first (once per batch leased). Local to the transaction: the
-- poller's wake after its commit, and every other statement of the connection, are as before.
-- Not sent on a connection whose session runs generic plans from its start (a worker process's
-- pool, `Database(generic_plans=True)`). The poller's and the deadline detector's passes send
-- it too, behind their BEGIN (`ExecutionRepository.send_generic_plans`; why: their module
-- docstrings).
SELECT set_config('plan_cache_mode', 'force_generic_plan', true);

-- execution_commit --
-- Commit what the exchange sent since its BEGIN (the outcome, its lease and start: durable,
-- waiting for the WAL flush); the statements after it run in a transaction of their own.
COMMIT;

-- execution_wake_poller --
-- Wake the poller for an outcome that has just committed, in a transaction of its own
-- that does not wait for the WAL flush. A notifying commit holds the server's one
-- notification lock until it returns: inside the outcome's durable commit it would
-- serialise every worker's outcome behind each other's disk flush. The wake is only a
-- hint (the poller polls too), so losing it in a crash costs a poll interval, no outcome.
SELECT set_config('synchronous_commit', 'off', true), pg_notify('tickwarden_wake', 'poller');

-- execution_reaper_server_started --
-- When the database server last started: leases that ran out while it was down could not be renewed.
SELECT pg_postmaster_start_time() AS started;

-- execution_reaper_waiting --
-- The lease reaper's idle check, read only: has a running attempt's lease expired
-- (expire_leases), or is an instance left listed live (abandon_environment_instances)?
-- The instances' test is that statement's, ordered the same way: every month's running
-- attempts are looked at only for a busy instance past its timeout, so the usual idle
-- look reads one page of each month's index of running leases and the live instances.
SELECT EXISTS (SELECT 1 FROM attempts WHERE status = 'running' AND lease_expires_at <= %(now)s)
    OR EXISTS (
    SELECT 1
      FROM environment_instances i
      JOIN environments e ON e.id = i.environment_id
     WHERE i.status IN ('starting', 'warm', 'busy')
       AND CASE WHEN i.last_used_at + make_interval(secs => e.idle_timeout_seconds + %(grace_seconds)s) > %(now)s
                THEN false
                WHEN i.status <> 'busy' THEN true
                ELSE NOT EXISTS (SELECT 1 FROM attempts a WHERE a.status = 'running' AND a.worker_id = i.worker_id)
           END
) AS found;

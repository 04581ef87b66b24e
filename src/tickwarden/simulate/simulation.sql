-- simulation_runs --
-- Every run of the simulation with its tenant and workflow names, in tick order.
SELECT t.name AS tenant, w.name AS workflow, r.id, r.scheduled_for, r.manual, r.status, r.recovered,
       r.attempts_count AS attempts, r.finished_at, r.error, r.error_category, r.created_at, r.rows
  FROM runs r
  JOIN workflows w ON w.id = r.workflow_id
  JOIN tenants t ON t.id = r.tenant_id
 ORDER BY r.scheduled_for, t.name, w.name, r.id;

-- simulation_attempts --
-- Every attempt, in no order: the read-out takes its run's names and tick from the runs
-- it read already and orders them by coalesce(finished_at, queued_at), id (`attempts`),
-- where a join with runs and a sort of the whole ledger cost the server more than the
-- client's dictionary lookups.
SELECT a.id, a.run_id, a.number, a.status, a.queued_at, a.started_at, a.finished_at, a.error, a.error_category
  FROM attempts a;

-- simulation_alerts --
-- Every alert with its tenant and workflow names, in id order.
SELECT a.id, t.name AS tenant, w.name AS workflow, a.first_severity, a.severity, a.status, a.opened_at,
       a.escalated_at, a.resolved_at, a.failure_count, a.owner, a.downtime_seconds, a.last_error,
       a.reason
  FROM alerts a
  JOIN workflows w ON w.id = a.workflow_id
  JOIN tenants t ON t.id = a.tenant_id
 ORDER BY a.id;

-- simulation_alert_events --
-- Every alert event, in order, for the timeline.
SELECT e.id, e.alert_id, e.kind, e.at, e.severity, e.owner, e.note, t.name AS tenant, w.name AS workflow,
       a.failure_count
  FROM alert_events e
  JOIN alerts a ON a.id = e.alert_id
  JOIN workflows w ON w.id = a.workflow_id
  JOIN tenants t ON t.id = e.tenant_id
 ORDER BY e.at, e.id;

-- simulation_notifications --
-- Every delivered notification: when, which alert event, which channel and thread.
SELECT o.id, o.sent_at AS at, t.name AS tenant, w.name AS workflow, o.alert_id AS alert, e.kind AS event,
       e.severity, c.name AS channel, th.thread_key AS thread
  FROM notification_outbox o
  JOIN alert_events e ON e.id = o.event_id
  JOIN alerts a ON a.id = o.alert_id
  JOIN workflows w ON w.id = a.workflow_id
  JOIN tenants t ON t.id = o.tenant_id
  JOIN notification_channels c ON c.id = o.channel_id
  LEFT JOIN notification_threads th ON th.alert_id = o.alert_id AND th.channel_id = o.channel_id
 WHERE o.status = 'sent'
 ORDER BY o.sent_at, o.id;

-- simulation_create_channel --
-- A channel of the simulation (a recording one per tenant, and the platform's).
INSERT INTO notification_channels (tenant_id, name, kind, audience, config, created_at)
VALUES (%(tenant_id)s, %(name)s, %(kind)s, %(audience)s, '{}'::jsonb, %(now)s)
RETURNING id;

-- simulation_history --
-- Finished attempts of scheduled runs, with their schedule: the history a backtest replays.
SELECT t.name AS tenant, w.name AS workflow, s.cron, s.timezone, r.scheduled_for, a.number, a.started_at,
       a.finished_at, a.status, a.error, a.retryable
  FROM attempts a
  JOIN runs r ON r.id = a.run_id
  JOIN workflows w ON w.id = a.workflow_id
  JOIN tenants t ON t.id = a.tenant_id
  JOIN schedules s ON s.workflow_id = a.workflow_id
 WHERE NOT r.manual AND a.status IN ('succeeded', 'failed', 'lost') AND a.started_at IS NOT NULL
 ORDER BY r.scheduled_for, a.id;

-- simulation_renew_leases --
-- The simulated worker's renewals: each attempt's newest heartbeat, in one statement,
-- only while the worker still holds the attempt (as renew_lease).
UPDATE attempts a
   SET heartbeat_at = r.renewed_at, lease_expires_at = r.renewed_at + make_interval(secs => %(lease_seconds)s)
  FROM unnest(%(attempt_ids)s::bigint[], %(renewed_ats)b::timestamptz[]) AS r (attempt_id, renewed_at)
 WHERE a.id = r.attempt_id AND a.status = 'running' AND a.worker_id = %(worker_id)s;

-- simulation_tables --
-- The tables of the simulation's own schema (first on its search path), a partition only
-- through its partitioned table: VACUUM and ANALYZE of a partitioned table cover each of
-- its partitions, so naming a partition as well would do its work twice.
SELECT c.relname AS tablename
  FROM pg_class c
 WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
 ORDER BY c.relname;

-- simulation_tables_written --
-- The tables autovacuum would visit now: those the simulation's loops write, that a row
-- ever reached. Every partition and every other unlogged table, never a partitioned table
-- (autovacuum does not process those: a deployment's planner never has their statistics
-- refreshed after they were first analyzed, and analyzing one samples its partitions' rows
-- a second time). Not the logged tables: after the set-up no row reaches one
-- (`simulation_unlog_tables` unlogs every table the loops write, which a test of every
-- scenario's features checks), and the set-up's ANALYZE took their statistics once they
-- were loaded; autovacuum, which counts each table's own changes, never visits a table
-- nobody wrote since it was last analyzed. Visiting them at every pass was work (a VACUUM
-- and an ANALYZE of the whole catalog, ~34 times a simulated day) that changed nothing.
-- A partition counts
-- whatever its persistence: one the retention's `tickwarden_ledger_partition` creates
-- mid-simulation (a logged parent's new partition is logged) receives the loops' rows.
-- A table without a single page has had no row since the catalog was loaded and analyzed
-- (an insert extends the heap at once; only a vacuum that found every row dead gives pages
-- back), so vacuuming or analyzing it again would find what the last pass found: nothing.
-- The schema's tables are listed first (MATERIALIZED): in one scan of pg_class the planner
-- may size every table of the database, every other schema's too, before it looks at the
-- namespace.
WITH ours AS MATERIALIZED (
    SELECT c.oid, c.relname
      FROM pg_class c
     WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
       AND (c.relpersistence = 'u' OR c.relispartition)
)
SELECT relname AS tablename
  FROM ours
 WHERE pg_relation_size(oid) > 0
 ORDER BY relname;

-- simulation_table_rows --
-- The rows of each of `tables` (this schema's) as the VACUUM just run counted them: its
-- live rows, set in pg_class by that VACUUM in this session, so the same on every run of a
-- scenario (the statistics collector's counts arrive asynchronously). The simulated
-- autovacuum decides from them which tables to analyze.
SELECT c.relname AS tablename, c.reltuples
  FROM pg_class c
 WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = ANY(%(tables)s::text[])
 ORDER BY c.relname;

-- simulation_unlog_tables --
-- Make the tables the simulation's loops write unlogged: their rows are scratch, dropped
-- when the simulation ends, so writing them to the WAL is work with no reader. Those are
-- the ledger's partitions and the loops' own tables below, and every table that
-- references one of them (a logged table cannot reference an unlogged one). The rest
-- stay logged: the catalog, written once at set-up, and the tables of what the
-- simulator does not drive (tokens, secrets, environments, retention, self-tests...),
-- which a simulation never writes, so unlogging them was work with no reader either: a
-- rewrite of each with its indexes, and a sync to disk of every new file's init fork
-- (most of this statement's time). A test runs the scenarios' features and checks that
-- no table a row reaches after the set-up stayed logged.
-- A table can turn unlogged only once no logged table references it, so referencing
-- tables go first (a table that references itself does not hold itself back). A
-- partitioned table stays logged (PostgreSQL 15 cannot change it; its partitions do
-- turn unlogged), and so does every table a table that stays logged references.
DO $$
DECLARE
    pending regclass[];
    target regclass;
    progressed boolean;
BEGIN
    WITH RECURSIVE scratch (oid) AS (
        SELECT c.oid
          FROM pg_class c
         WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
           AND (c.relispartition OR c.relname = ANY (ARRAY[
                'attempt_queue', 'outcome_queue', 'schedule_fires', 'tick_audits', 'tick_audit_arms',
                'workflow_successes', 'alerts', 'alert_events', 'notification_outbox', 'notification_threads']))
        UNION
        SELECT k.conrelid
          FROM scratch s
          JOIN pg_constraint k ON k.confrelid = s.oid AND k.contype = 'f'
          JOIN pg_class r ON r.oid = k.conrelid AND r.relkind = 'r'
    )
    SELECT array_agg(c.oid::regclass) INTO pending
      FROM pg_class c
     WHERE c.oid IN (SELECT oid FROM scratch) AND c.relpersistence = 'p';
    WHILE coalesce(array_length(pending, 1), 0) > 0 LOOP
        progressed := false;
        FOREACH target IN ARRAY pending LOOP
            IF EXISTS (
                SELECT 1 FROM pg_constraint k
                  JOIN pg_class r ON r.oid = k.conrelid
                 WHERE k.contype = 'f' AND k.confrelid = target AND k.conrelid <> target
                   AND r.relpersistence = 'p' AND (r.relkind = 'p' OR NOT r.oid::regclass = ANY (pending))) THEN
                pending := array_remove(pending, target);  -- stays logged
                progressed := true;
            ELSIF NOT EXISTS (
                SELECT 1 FROM pg_constraint k
                  JOIN pg_class r ON r.oid = k.conrelid
                 WHERE k.contype = 'f' AND k.confrelid = target AND k.conrelid <> target
                   AND r.relpersistence = 'p') THEN
                EXECUTE format('ALTER TABLE %s SET UNLOGGED', target);
                pending := array_remove(pending, target);
                progressed := true;
            END IF;
        END LOOP;
        IF NOT progressed THEN
            RAISE EXCEPTION 'foreign keys form a cycle among %', pending;
        END IF;
    END LOOP;
END
$$;

-- simulation_open_alert_workflows --
-- The workflows with an open alert: the condition of the poller's claim's `alert_open`.
SELECT workflow_id FROM alerts WHERE status = 'open';

-- simulation_run_in_progress --
-- The newest run of a workflow that has no verdict yet: what a scenario's cancel stops.
SELECT id FROM runs
 WHERE workflow_id = %(workflow_id)s AND status IN ('queued', 'running', 'pending_retry')
 ORDER BY scheduled_for DESC, id DESC
 LIMIT 1;

-- simulation_next_due_ticker --
-- When each loop could next find work in the ledger as it stands (the simulation_next_due_*
-- queries): the earliest instant at which the condition of its own look (or claim)
-- could hold, read from the same partial indexes. A lower bound: a pass then may still
-- find nothing (a lease renewed meanwhile, a deadline's run holding an expired lease),
-- never the reverse. NULL: nothing will be due for that loop until something is written.
SELECT min(next_fire_at) AS due FROM schedule_fires WHERE next_fire_at IS NOT NULL;

-- simulation_next_due_worker --
SELECT min(queued_at) AS due FROM attempt_queue;

-- simulation_next_due_poller --
SELECT min(finished_at) AS due FROM outcome_queue;

-- simulation_next_due_deadlines --
-- A schedule without a watermark, or edited since, is armed by the next pass: due now.
SELECT least(
    (SELECT min(deadline_at) FROM runs WHERE finished_at IS NULL),
    (SELECT min(next_check_at) FROM tick_audits),
    (SELECT %(now)s::timestamptz
      WHERE EXISTS (SELECT 1 FROM schedules s
                      LEFT JOIN tick_audits ta ON ta.schedule_id = s.id
                     WHERE s.status = 'active'
                       AND (ta.schedule_id IS NULL OR ta.schedule_version <> s.version)))) AS due;

-- simulation_next_due_escalation --
-- A warning whose failures reached escalate_after is due at once (unless snoozed).
SELECT min(CASE WHEN failure_count - manual_failures >= escalate_after
                THEN greatest(%(now)s::timestamptz, snoozed_until)
                ELSE greatest(escalate_at, snoozed_until) END) AS due
  FROM alerts
 WHERE status = 'open' AND severity = 'warning' AND acknowledged_at IS NULL;

-- simulation_next_due_notifier --
-- The earliest claimable delivery (as outbox_waiting: the head of each thread's queue),
-- and the earliest sender's claim to run out.
SELECT -- the claimable rows read through the partial index of each status set (pending or
       -- failed; held): one test of the three statuses matches neither index, and its plan read
       -- every row delivered ever since
       (SELECT min(o.next_attempt_at)
          FROM (SELECT alert_id, channel_id, event_id, next_attempt_at FROM notification_outbox
                 WHERE status IN ('pending', 'failed')
                UNION ALL
                SELECT alert_id, channel_id, event_id, next_attempt_at FROM notification_outbox
                 WHERE status = 'held') o
         WHERE EXISTS (SELECT 1 FROM notification_channels c
                        WHERE c.id = o.channel_id AND c.kind = ANY(%(kinds)s::text[]))
           AND NOT EXISTS (
               SELECT 1 FROM notification_outbox p
                WHERE p.alert_id = o.alert_id AND p.channel_id = o.channel_id
                  AND p.status IN ('pending', 'failed', 'sending', 'held')
                  AND p.event_id < o.event_id)) AS due,
       (SELECT min(locked_until) FROM notification_outbox WHERE status = 'sending') AS stale;

-- monitoring_claim_finished_attempts --
-- Claim a batch of finished attempts waiting for the poller: delete their outcome_queue
-- rows and return them, in one statement. SKIP LOCKED hands concurrent pollers disjoint
-- batches; the row goes at claim time, so an outcome is claimed once, and a later fault
-- is logged once instead of reprocessed forever. The claim writes nothing of the ledger
-- (the retry launch below does, for the runs it names). The
-- run's status, read as it is now (it may have moved since the finish: a cancel, a
-- missed deadline), says what to do next (pending_retry: launch a retry; terminal:
-- evaluate), and alert_open whether a success has anything to resolve (false for any other
-- status). A row whose run is gone (expired, erased) is deleted with the batch and returns
-- nothing.
--
-- `after` (finished_at, id) starts the walk of outcome_queue_order_idx past a position
-- (NULL: from its start). The entries of rows already claimed stay in the index, dead,
-- until vacuum, and while any older snapshot is open each costs the walk a heap visit: a
-- walk from the start pays for every outcome claimed since the last vacuum, one that
-- resumes after the previous batch only for what that batch left.
--
-- The same statement launches the retries of the runs it claimed that are pending one
-- (`%(launch)s`; the poller's pass, which would otherwise wait for the claim's rows and send
-- `ledger_queue_retries` with them, a round trip more): each claimed run whose status read
-- here is pending_retry, whose category is not one that never succeeds on retry
-- (`%(not_retryable)s`: those get their verdict from `monitoring_fail_unretryable`), and
-- whose tick lies in `{months}` (the month of the pass's `now`, and the one before it in a
-- month's first week: `launch_months`; as constants: the writes' plan holds those months'
-- partitions alone, whose set-up every claim pays, launching or not, as
-- `ledger_queue_retries`'s does) is moved to queued and its next attempt inserted by
-- `ledger_queue_retries`' own writes, word for word (`{retry_launch}`: its `moved` and its
-- insert as `launched`, told the runs `looked` marks; `store.monitoring.retry_launch`), so
-- the same compare-and-set on pending_retry and UNIQUE (run_id, number) keep replicas and a
-- retry engine racing it to one launch of each retry. Such
-- a row says `retry_sent`, with the attempt launched (`retry_attempt_id`, NULL when the
-- compare-and-set found the run moved) and when it may start; any other run pending a
-- retry (a tick outside those months, an unretryable category) is the caller's, as before.
--
-- `{limit}` is the batch size, a constant of the text (`claim_text`): with it a parameter,
-- the server found each fresh plan cheaper than the one it could keep (which cannot know
-- how many rows the LIMIT takes) and planned the claim again at every pass. The walk's
-- bounds (now, after) are sub-selects for the same reason: as parameters, each fresh plan of
-- a pass that resumes after a full batch (a drain of a backlog) saw how many queued rows lie
-- past the position, found the LIMIT cheaper than the kept plan's guess, and was made again
-- at every pass (about 1 ms of server time each on the benchmark's ledger). Unknown to every
-- plan alike, they leave the kept plan no dearer than a fresh one; the index walk is the same.
WITH next AS (
    SELECT ctid
      FROM outcome_queue
     WHERE finished_at <= (SELECT %(now)s::timestamptz)
       AND (finished_at, attempt_id)
           > ((SELECT coalesce(%(after_at)s::timestamptz, '-infinity')), (SELECT coalesce(%(after_id)s::bigint, 0)))
     ORDER BY finished_at, attempt_id
     LIMIT {limit}
       FOR UPDATE SKIP LOCKED
), claimed AS (
    -- = ANY (ARRAY(…)) and the lateral lookups below keep every lookup a probe; a join
    -- here tempts the planner into hashing. The rows go by their position (a TID scan),
    -- not by a probe of the primary key: each was locked just now by this statement, and a
    -- queue row is only ever inserted and deleted, never updated, so its position is the
    -- row (a fifth of the claim's buffers). The run lookup names its month.
    DELETE FROM outcome_queue q
     WHERE q.ctid = ANY (ARRAY(SELECT ctid FROM next))
    RETURNING q.attempt_id, q.run_id, q.run_scheduled_for, q.workflow_id, q.finished_at
), looked AS (
    SELECT claimed.attempt_id, claimed.run_id, claimed.run_scheduled_for, claimed.workflow_id, claimed.finished_at,
           r.status AS run_status, r.error_category AS run_error_category,
           -- looked up for a success alone, the one status it decides anything for (a failure is
           -- evaluated whatever it says): the AND stops before the probe for every other one
           (r.status = 'succeeded'
            AND EXISTS (SELECT 1 FROM alerts a WHERE a.workflow_id = claimed.workflow_id AND a.status = 'open'))
           AS alert_open,
           (%(launch)s AND r.status = 'pending_retry' AND claimed.run_scheduled_for {months}
            AND coalesce(r.error_category, '') <> ALL (%(not_retryable)s::text[])) AS retry_sent
      FROM claimed
      -- LIMIT 1 (the key names one run) keeps this a probe for each claimed row: a plain lateral
      -- is pulled up into a join, which a plan made while the ledger was small (a simulation's
      -- first hours, until its next ANALYZE) answered by hashing a scan of the whole month
      CROSS JOIN LATERAL (SELECT status, error_category FROM runs
                           WHERE runs.id = claimed.run_id AND runs.scheduled_for = claimed.run_scheduled_for
                           LIMIT 1) r
), {retry_launch}
SELECT looked.attempt_id, looked.run_id,
       -- the tick only where the caller may write the run (a retry to launch): each timestamptz
       -- the client reads is a conversion of its own, and the other rows' ticks went unread
       CASE WHEN looked.run_status = 'pending_retry' THEN looked.run_scheduled_for END AS run_scheduled_for,
       looked.workflow_id, looked.finished_at, looked.run_status, looked.run_error_category, looked.alert_open, looked.retry_sent,
       launched.id AS retry_attempt_id, launched.queued_at AS retry_queued_at
  FROM looked LEFT JOIN launched ON launched.run_id = looked.run_id AND looked.retry_sent;

-- monitoring_fail_unretryable --
-- A run pending a retry whose error category can never succeed on retry (config,
-- auth) gets its verdict now instead of another attempt. The worker normally
-- writes these as failed already; this keeps the rule true whoever wrote the row.
-- `{months}`: the months of the runs' ticks, as constants, so the plan holds only
-- those months' partitions and is kept (see ledger_queue_retries).
UPDATE runs
   SET status = 'failed', finished_at = %(now)s
 WHERE id = ANY(%(run_ids)b::bigint[])
   AND scheduled_for = ANY(%(run_scheduled_fors)b::timestamptz[])
   AND scheduled_for {months}
   AND status = 'pending_retry'
   AND error_category = ANY(%(categories)s::text[])
RETURNING id, workflow_id;

-- monitoring_lock_workflows --
-- Serialise evaluations of the same workflow across replicas for the rest of the
-- transaction: the evaluator reads history after this, so each evaluation sees the
-- writes of the one before it. Taken in ascending order, so two batches never deadlock.
SELECT count(pg_advisory_xact_lock(7301, (s.id %% 2147483647)::integer)) AS locked
  FROM (SELECT DISTINCT id FROM unnest(%(workflow_ids)b::bigint[]) AS u (id) ORDER BY id) s;

-- monitoring_evaluation_inputs --
-- Everything the evaluator needs for a set of workflows, in one statement: the
-- workflow's settings and cadence, the consecutive confirmed failures since the
-- newest success (the success is workflow_successes' row; the walk of the streak
-- reads only the month partitions from its tick on), the newest failure of the
-- streak, the newest success, the open alert, and the failure rate where the rule
-- needs it (see below). The workflows are probed by id
-- (= ANY, not a join with the unnest, which the planner answers with a hash of every
-- workflow of the fleet), in id order, and each row beside a workflow by its key: the
-- tenant, the schedule and the newest success are laterals (LIMIT 1 over a unique key:
-- the same row a join finds), because as plain joins the generic plan the server caches
-- for this prepared statement reads every schedule and every success of the fleet into
-- hashes for a batch of a few workflows (0.77 ms instead of 0.21 ms on 1,000 workflows).
-- Both walks of runs stop at a day past `now` (no bound for NULL): no run is ever ticked in
-- the future (a check-in's tick in the future is refused; the day is for clocks that
-- disagree), and with the bound the server leaves out, at run time, the month partitions
-- retention keeps ahead and, once the newest success names a month, the DEFAULT one: each
-- was an index probe per walk that never found a row (the streak walk was most of the
-- pipeline benchmark's server time).
SELECT w.id AS workflow_id, w.tenant_id, w.monitoring_enabled, w.policy_overrides::text AS policy_overrides,
       (w.shadow OR t.shadow) AS shadow,
       s.cadence_seconds,
       coalesce(lf.failures, 0) AS failures, lf.first_failure_at,
       lf.id AS last_failure_run_id, lf.finished_at AS last_failure_at,
       lf.error_category AS last_error_category, lf.error AS last_error, lf.failed_step AS last_failed_step,
       ok.run_id AS success_run_id, ok.finished_at AS success_at,
       a.id AS alert_id, a.failure_count AS alert_failure_count,
       a.reason AS alert_reason,
       rate.rate_window, coalesce(rate.ticks, 0) AS rate_ticks, coalesce(rate.failures, 0) AS rate_failures
  FROM workflows w
  CROSS JOIN LATERAL (SELECT tn.shadow FROM tenants tn WHERE tn.id = w.tenant_id LIMIT 1) t
  LEFT JOIN LATERAL (SELECT sc.cadence_seconds FROM schedules sc WHERE sc.workflow_id = w.id LIMIT 1) s ON true
  LEFT JOIN LATERAL (
        SELECT su.run_id, su.scheduled_for, su.finished_at FROM workflow_successes su
         WHERE su.workflow_id = w.id LIMIT 1) ok ON true
  -- the newest failure of the streak, with the streak's length and start (window
  -- aggregates see every row of the streak before LIMIT keeps the newest)
  LEFT JOIN LATERAL (
        SELECT r.id, r.finished_at, r.error_category, r.error, r.failed_step,
               count(*) OVER () AS failures, min(r.finished_at) OVER () AS first_failure_at
          FROM runs r
         WHERE r.workflow_id = w.id AND r.status IN ('failed', 'missed')
           AND r.scheduled_for > coalesce(ok.scheduled_for, '-infinity'::timestamptz)
           AND r.scheduled_for <= coalesce(%(now)s::timestamptz + interval '1 day', 'infinity')
         ORDER BY r.scheduled_for DESC, r.id DESC
         LIMIT 1) lf ON true
  -- the open alert: one probe of alerts_one_open_idx per workflow (LIMIT 1 keeps it a
  -- lateral: as a plain join, the generic plan the server caches for this prepared
  -- statement reads every open alert of the fleet and compares each with each workflow)
  LEFT JOIN LATERAL (
        SELECT o.id, o.failure_count, o.reason FROM alerts o
         WHERE o.workflow_id = w.id AND o.status = 'open'
         LIMIT 1) a ON true
  -- The failure rate, counted as monitoring_failure_rates counts it, for a workflow whose
  -- profile the caller lists (cadence, overrides' text → rate window, alert_after: the
  -- profiles with a rate rule it has met) and whose state needs it: no open alert and a
  -- streak under alert_after, or a `failure_rate` alert and no failure since the newest
  -- success (`alerts.rate_window_needed`, which decides; a profile not listed is counted
  -- by monitoring_failure_rates after this). HAVING gates the walk itself: with the
  -- condition false the index is not read and no row comes back (rate_window NULL).
  LEFT JOIN LATERAL (
        SELECT p.n, p.alert_after
          FROM unnest(%(rate_cadences)s::integer[], %(rate_overrides)s::text[], %(rate_windows)s::integer[],
                      %(rate_alert_afters)s::integer[]) AS p (cadence, overrides, n, alert_after)
         WHERE p.cadence = coalesce(s.cadence_seconds, %(unscheduled)s) AND p.overrides = w.policy_overrides::text
         LIMIT 1) g ON true
  LEFT JOIN LATERAL (
        SELECT g.n AS rate_window, count(*)::integer AS ticks,
               (count(*) FILTER (WHERE x.status IN ('failed', 'missed')))::integer AS failures
          FROM (SELECT runs.status FROM runs
                 WHERE runs.workflow_id = w.id AND NOT runs.manual
                   AND runs.status IN ('succeeded', 'failed', 'missed')
                   AND runs.scheduled_for <= coalesce(%(now)s::timestamptz + interval '1 day', 'infinity')
                 ORDER BY runs.scheduled_for DESC, runs.id DESC
                 LIMIT g.n) x
        HAVING w.monitoring_enabled
           AND CASE WHEN a.id IS NULL THEN coalesce(lf.failures, 0) BETWEEN 1 AND g.alert_after - 1
                    ELSE a.reason = 'failure_rate' AND lf.failures IS NULL END) rate ON g.n IS NOT NULL
 WHERE w.id = ANY(%(workflow_ids)b::bigint[])
 ORDER BY w.id;

-- monitoring_failure_rates --
-- The failure-rate rule recounts, per workflow, the failures among its newest N
-- confirmed scheduled ticks (N per workflow, from its profile): no counter is stored.
-- Each lateral is a walk of runs_workflow_recent_idx newest first, stopping after N
-- terminal ticks, so the cost follows the window, never the ledger's length. Manual
-- runs are not ticks; cancelled and unfinished runs are no verdict either way. The walk
-- stops at a day past `now`, as monitoring_evaluation_inputs' walks do.
SELECT u.workflow_id, count(*)::integer AS ticks,
       (count(*) FILTER (WHERE r.status IN ('failed', 'missed')))::integer AS failures
  FROM unnest(%(workflow_ids)b::bigint[], %(windows)b::integer[]) AS u (workflow_id, n)
  CROSS JOIN LATERAL (
        SELECT runs.status
          FROM runs
         WHERE runs.workflow_id = u.workflow_id AND NOT runs.manual
           AND runs.status IN ('succeeded', 'failed', 'missed')
           AND runs.scheduled_for <= coalesce(%(now)s::timestamptz + interval '1 day', 'infinity')
         ORDER BY runs.scheduled_for DESC, runs.id DESC
         LIMIT u.n) r
 GROUP BY u.workflow_id;

-- monitoring_open_alerts --
-- Open one alert per listed workflow and write its `opened` event. The partial
-- unique index on open alerts turns a second opener into nothing (and no event).
WITH wanted AS (
    SELECT * FROM {unnest}
), opened AS (
    INSERT INTO alerts (tenant_id, workflow_id, status, first_severity, severity, owner, failure_count,
                        cadence_seconds, escalation_multiplier, escalate_after, escalate_at, shadow,
                        first_failure_at, last_failure_at, last_run_id, last_error_category, last_error,
                        failed_step, opened_at, reason)
    SELECT tenant_id, workflow_id, 'open', severity, severity, owner, failure_count, cadence_seconds,
           escalation_multiplier, escalate_after, escalate_at, shadow, first_failure_at, last_failure_at, run_id,
           category, error, failed_step, %(now)s, reason
      FROM wanted
        ON CONFLICT (workflow_id) WHERE status = 'open' DO NOTHING
    RETURNING *
), events AS (
    INSERT INTO alert_events (tenant_id, alert_id, kind, at, severity, owner, data)
    SELECT o.tenant_id, o.id, 'opened', %(now)s, o.severity, o.owner,
           jsonb_build_object('failure_count', o.failure_count, 'run_id', o.last_run_id,
                              'error_category', o.last_error_category, 'reason', o.reason)
      FROM opened o
     ORDER BY o.id
    RETURNING id, alert_id
)
SELECT o.id AS alert_id, o.workflow_id, events.id AS event_id,
       o.severity = 'warning' AND o.failures_reached_escalation AS escalates
  FROM opened o JOIN events ON events.alert_id = o.id;

-- monitoring_record_failures --
-- Later confirmed failures update the open alert: count, newest failure and error,
-- and the owner (which follows the newest failure's category until someone
-- reassigns by hand). Compare-and-set on the count: only an evaluation that saw
-- more failures than recorded writes, so replicas never write the same `failed`
-- event twice. `failed` events are history; they do not notify.
WITH wanted AS (
    SELECT * FROM {unnest}
), updated AS (
    UPDATE alerts a
       SET failure_count = w.failure_count, last_failure_at = w.last_failure_at, last_run_id = w.run_id,
           last_error_category = w.category, last_error = w.error, failed_step = w.failed_step,
           -- a manual run's failure is history, never a step towards escalation
           manual_failures = a.manual_failures
                             + CASE WHEN (SELECT r.manual FROM runs r WHERE r.id = w.run_id)
                                    THEN w.failure_count - a.failure_count ELSE 0 END,
           owner = CASE WHEN a.owner_pinned THEN a.owner ELSE w.owner END
      FROM wanted w
     WHERE a.id = w.alert_id AND a.status = 'open' AND a.failure_count < w.failure_count
    RETURNING a.*
), events AS (
    INSERT INTO alert_events (tenant_id, alert_id, kind, at, severity, owner, data)
    SELECT u.tenant_id, u.id, 'failed', %(now)s, u.severity, u.owner,
           jsonb_build_object('failure_count', u.failure_count, 'run_id', u.last_run_id,
                              'error_category', u.last_error_category)
      FROM updated u
     ORDER BY u.id
    RETURNING id, alert_id
)
SELECT u.id AS alert_id, u.workflow_id, events.id AS event_id,
       u.severity = 'warning' AND u.failures_reached_escalation AS escalates
  FROM updated u JOIN events ON events.alert_id = u.id;

-- monitoring_escalate_alerts --
-- Promote those of the listed alerts (just opened or given a failure) whose failures
-- reached escalation, and write their `escalated` events. The compare-and-set on
-- (open, warning) makes a second promoter a no-op; an acknowledged or snoozed alert
-- stays where it is.
WITH updated AS (
    UPDATE alerts a
       SET severity = 'critical', escalated_at = %(now)s
     WHERE a.id = ANY(%(alert_ids)s::bigint[]) AND a.status = 'open' AND a.severity = 'warning'
       AND a.acknowledged_at IS NULL AND (a.snoozed_until IS NULL OR a.snoozed_until <= %(now)s)
       AND a.failures_reached_escalation
    RETURNING a.*
), events AS (
    INSERT INTO alert_events (tenant_id, alert_id, kind, at, severity, owner, data)
    SELECT u.tenant_id, u.id, 'escalated', %(now)s, 'critical', u.owner,
           jsonb_build_object('reason', %(reason)s::text, 'failure_count', u.failure_count)
      FROM updated u
     ORDER BY u.id
    RETURNING id, alert_id
)
SELECT u.id AS alert_id, u.workflow_id, events.id AS event_id
  FROM updated u JOIN events ON events.alert_id = u.id;

-- monitoring_escalate_due --
-- The escalation clock: promote open warnings whose escalate_at has passed (the
-- cadence was captured at open) or whose failures reached escalate_after. The
-- partial index alerts_open_warning_idx holds only open warnings; SKIP LOCKED and
-- the (open, warning) compare-and-set keep replicas from promoting one twice.
WITH due AS (
    SELECT id,
           CASE WHEN failures_reached_escalation THEN 'failures' ELSE 'time' END AS why
      FROM alerts
     WHERE status = 'open' AND severity = 'warning'
       AND acknowledged_at IS NULL AND (snoozed_until IS NULL OR snoozed_until <= %(now)s)
       AND (escalate_at <= %(now)s OR failures_reached_escalation)
     ORDER BY escalate_at, id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), updated AS (
    UPDATE alerts a
       SET severity = 'critical', escalated_at = %(now)s
      FROM due
     WHERE a.id = due.id AND a.status = 'open' AND a.severity = 'warning'
    RETURNING a.*, due.why
), events AS (
    INSERT INTO alert_events (tenant_id, alert_id, kind, at, severity, owner, data)
    SELECT u.tenant_id, u.id, 'escalated', %(now)s, 'critical', u.owner,
           jsonb_build_object('reason', u.why, 'failure_count', u.failure_count)
      FROM updated u
     ORDER BY u.id
    RETURNING id, alert_id
)
SELECT u.id AS alert_id, u.workflow_id, events.id AS event_id
  FROM updated u JOIN events ON events.alert_id = u.id;

-- monitoring_resolve_alerts --
-- Resolve open alerts on the success that ended their streak, recording the
-- downtime from the first failure; compare-and-set on status = 'open'.
WITH wanted AS (
    SELECT * FROM unnest(%(alert_ids)s::bigint[], %(run_ids)s::bigint[]) AS w (alert_id, run_id)
), updated AS (
    UPDATE alerts a
       SET status = 'resolved', resolved_at = %(now)s, resolved_by_run_id = w.run_id,
           downtime_seconds = greatest(0, floor(extract(epoch FROM (%(now)s - a.first_failure_at))))::integer
      FROM wanted w
     WHERE a.id = w.alert_id AND a.status = 'open'
    RETURNING a.*
), events AS (
    INSERT INTO alert_events (tenant_id, alert_id, kind, at, severity, owner, data)
    SELECT u.tenant_id, u.id, 'resolved', %(now)s, u.severity, u.owner,
           jsonb_build_object('run_id', u.resolved_by_run_id, 'downtime_seconds', u.downtime_seconds,
                              'failure_count', u.failure_count)
      FROM updated u
     ORDER BY u.id
    RETURNING id, alert_id
)
SELECT u.id AS alert_id, u.workflow_id, events.id AS event_id
  FROM updated u JOIN events ON events.alert_id = u.id;

-- monitoring_lock_alert --
-- Lock one alert for a manual action (reassign, note).
SELECT * FROM alerts WHERE id = %(alert_id)s FOR UPDATE;

-- monitoring_reassign_alert --
-- Hand an open alert to another owner and pin it there: later failures no longer move it.
WITH updated AS (
    UPDATE alerts SET owner = %(owner)s, owner_pinned = true
     WHERE id = %(alert_id)s AND status = 'open'
    RETURNING *
), event AS (
    INSERT INTO alert_events (tenant_id, alert_id, kind, at, severity, owner, actor, note, data)
    SELECT u.tenant_id, u.id, 'reassigned', %(now)s, u.severity, u.owner, %(actor)s, %(note)s,
           jsonb_build_object('from', %(previous)s::text, 'to', u.owner)
      FROM updated u
    RETURNING *
)
SELECT * FROM event;

-- monitoring_add_note --
-- Append a note to an alert's history (open or resolved); an internal one is for the platform only.
INSERT INTO alert_events (tenant_id, alert_id, kind, at, severity, owner, actor, note, internal)
SELECT a.tenant_id, a.id, 'noted', %(now)s, a.severity, a.owner, %(actor)s, %(note)s, %(internal)s
  FROM alerts a
 WHERE a.id = %(alert_id)s
RETURNING *;

-- monitoring_acknowledge_alert --
-- Acknowledge an open alert: it stays open, escalation stops. Compare-and-set on
-- (open, not yet acknowledged): a second acknowledgement writes nothing.
WITH updated AS (
    UPDATE alerts SET acknowledged_at = %(now)s, acknowledged_by = %(actor)s
     WHERE id = %(alert_id)s AND status = 'open' AND acknowledged_at IS NULL
    RETURNING *
)
INSERT INTO alert_events (tenant_id, alert_id, kind, at, severity, owner, actor, note)
SELECT u.tenant_id, u.id, 'acknowledged', %(now)s, u.severity, u.owner, %(actor)s, %(note)s
  FROM updated u
RETURNING *;

-- monitoring_snooze_alert --
-- Hold an open alert's escalation until a time; compare-and-set on status = 'open'.
WITH updated AS (
    UPDATE alerts SET snoozed_until = %(until)s
     WHERE id = %(alert_id)s AND status = 'open'
    RETURNING *
)
INSERT INTO alert_events (tenant_id, alert_id, kind, at, severity, owner, actor, note, data)
SELECT u.tenant_id, u.id, 'snoozed', %(now)s, u.severity, u.owner, %(actor)s, %(note)s,
       jsonb_build_object('until', to_char(%(until)s AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
  FROM updated u
RETURNING *;

-- monitoring_resolve_alert_by_hand --
-- Resolve an open alert by hand, with a note; the downtime runs to now. A later
-- confirmed failure streak opens a new alert. Compare-and-set on status = 'open'.
WITH updated AS (
    UPDATE alerts
       SET status = 'resolved', resolved_at = %(now)s,
           downtime_seconds = greatest(0, floor(extract(epoch FROM (%(now)s - first_failure_at))))::integer
     WHERE id = %(alert_id)s AND status = 'open'
    RETURNING *
)
INSERT INTO alert_events (tenant_id, alert_id, kind, at, severity, owner, actor, note, data)
SELECT u.tenant_id, u.id, 'resolved', %(now)s, u.severity, u.owner, %(actor)s, %(note)s,
       jsonb_build_object('manual', true, 'downtime_seconds', u.downtime_seconds, 'failure_count', u.failure_count)
  FROM updated u
RETURNING *;

-- monitoring_note_paused --
-- When a workflow with an open alert is paused, say so in the alert's thread.
INSERT INTO alert_events (tenant_id, alert_id, kind, at, severity, owner, actor, note)
SELECT a.tenant_id, a.id, 'paused', %(now)s, a.severity, a.owner, %(actor)s, %(note)s
  FROM alerts a
 WHERE a.workflow_id = %(workflow_id)s AND a.status = 'open'
RETURNING *;

-- monitoring_get_alert --
SELECT a.*, t.name AS tenant, w.name AS workflow
  FROM alerts a
  JOIN tenants t ON t.id = a.tenant_id
  JOIN workflows w ON w.id = a.workflow_id
 WHERE a.id = %(alert_id)s;

-- monitoring_list_alerts --
-- Alerts newest first, optionally of one tenant and only open ones.
SELECT a.*, t.name AS tenant, w.name AS workflow
  FROM alerts a
  JOIN tenants t ON t.id = a.tenant_id
  JOIN workflows w ON w.id = a.workflow_id
 WHERE (%(tenant)s::text IS NULL OR t.name = %(tenant)s)
   AND (NOT %(open_only)s OR a.status = 'open')
 ORDER BY a.opened_at DESC, a.id DESC
 LIMIT %(limit)s;

-- monitoring_list_alert_events --
SELECT * FROM alert_events WHERE alert_id = %(alert_id)s ORDER BY id;

-- monitoring_lock_overdue_and_arm --
-- Steps 1 and 2 of a deadline pass's start, in one statement (they touch different
-- tables, so neither needs to see the other's writes):
--
-- Lock the runs still waiting for an outcome past their deadline, for the verdict `missed`
-- that `monitoring_close_overdue` gives them next in the same transaction (the pass sends it
-- only when this found any, `MonitoringRepository.close_overdue_and_take_audits`). A run whose
-- attempt is running on an expired lease is left to the lease reaper, which fails that attempt
-- so it is retried; a run whose worker still holds a live lease past the deadline is missed
-- all the same (the watchdog should have stopped it). SKIP LOCKED keeps replicas from taking
-- a run twice, and the lock, held until the pass commits, keeps anyone else from moving the
-- run before it is closed. The closing is a statement of its own, not a CTE of this one:
-- every data-modifying CTE of a statement is set up and run at every execution, and nearly
-- every pass finds nothing overdue (its UPDATEs of runs and attempts, with the every
-- partition of both and their indexes opened, were the statement's costliest part).
--
-- Give every active schedule a watermark, and re-arm it when the schedule changed
-- (edit, pause, resume: the version moved). The watermark never starts before the
-- schedule was published or last edited, nor before the look-back window, so ticks
-- nobody expected are never recorded missed. Only the schedules a write listed in
-- `tick_audit_arms` (its trigger, migration 0038) are looked at, not every schedule
-- against every watermark: the rows this pass sees are taken (SKIP LOCKED: a replica
-- takes the others) and deleted, and each listed schedule is armed as the schedule now
-- is, when it is active and its watermark is missing or of an older version.
--
-- Take the due watermarks (up to `audit_limit`; none for 0), exactly those, in the order,
-- that `monitoring_due_tick_audits` would take as the next statement, one statement fewer
-- a pass. Every statement of the WITH sees the tables as they were before it, so the
-- watermarks armed come back through the arming's RETURNING (all due: next_check_at is
-- now), and the others are read as they were, the armed ones left out (a re-armed row's
-- old version is skipped anyway, as changed by this command). The first `audit_limit` of
-- the armed ones and of the first `audit_limit` others are the first `audit_limit` of
-- both. Only the locks differ: when more than `audit_limit` are due, some of the others
-- may be locked and not taken (held until the pass commits; a full pass comes back at
-- once). The result: the overdue runs locked (no schedule_id; their tick as
-- `run_scheduled_for`), then the watermarks taken. Its rows are read by position: the
-- columns of `TickAudit`'s fields in order, then the overdue run's `run_id` and
-- `run_scheduled_for` (`MonitoringRepository.close_overdue_and_take_audits`).
WITH overdue AS (
    SELECT r.id, r.scheduled_for, r.workflow_id
      FROM runs r
     WHERE r.finished_at IS NULL  -- open: queued, running or pending_retry (runs_open_deadline_idx)
       AND r.deadline_at <= %(now)s
       AND NOT EXISTS (
            SELECT 1 FROM attempts a
             WHERE a.run_id = r.id AND a.status = 'running' AND a.lease_expires_at <= %(now)s)
     ORDER BY r.deadline_at, r.id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), listed AS (
    -- the list has no key: its rows are taken by their position (a TID scan)
    DELETE FROM tick_audit_arms l
     WHERE l.ctid = ANY (ARRAY(SELECT ctid FROM tick_audit_arms FOR UPDATE SKIP LOCKED))
    RETURNING l.schedule_id
), armed AS (
    INSERT INTO tick_audits (schedule_id, schedule_version, checked_until, next_check_at, updated_at)
    SELECT s.id, s.version,
           greatest(coalesce(s.published_at, s.created_at), s.updated_at, %(lookback_start)s::timestamptz),
           %(now)s, %(now)s
      FROM schedules s
     WHERE s.id = ANY (ARRAY(SELECT DISTINCT schedule_id FROM listed))
       AND s.status = 'active'
       AND NOT EXISTS (SELECT 1 FROM tick_audits ta WHERE ta.schedule_id = s.id AND ta.schedule_version = s.version)
        ON CONFLICT (schedule_id) DO UPDATE
       SET schedule_version = EXCLUDED.schedule_version,
           checked_until = greatest(tick_audits.checked_until, EXCLUDED.checked_until),
           next_check_at = EXCLUDED.next_check_at,
           updated_at = EXCLUDED.updated_at
    RETURNING schedule_id, checked_until, next_check_at
), due AS (
    -- The watermarks due as they were before this statement, but for those it armed (a
    -- re-armed row's old version would be skipped anyway, as changed by this command).
    -- No join with their schedules and workflows, which `monitoring_due_tick_audits` reads
    -- for their columns: a watermark always has its schedule, and a schedule its workflow
    -- (foreign keys, ON DELETE CASCADE), so the join would drop no row; the columns come
    -- with the final select, for the watermarks taken only.
    SELECT ta.schedule_id, ta.checked_until, ta.next_check_at
      FROM tick_audits ta
     WHERE ta.next_check_at <= %(now)s
       AND ta.schedule_id <> ALL (ARRAY(SELECT schedule_id FROM armed))
     ORDER BY ta.next_check_at, ta.schedule_id
     LIMIT %(audit_limit)s
       FOR UPDATE OF ta SKIP LOCKED
), audits AS (
    SELECT a.schedule_id, a.checked_until, a.next_check_at
      FROM (SELECT * FROM armed UNION ALL SELECT * FROM due) a
     ORDER BY a.next_check_at, a.schedule_id
     LIMIT %(audit_limit)s
)
SELECT NULL::bigint AS schedule_id, NULL::timestamptz AS checked_until, NULL::bigint AS tenant_id, o.workflow_id,
       NULL::text AS cron, NULL::text AS timezone, NULL::text AS status, NULL::integer AS starting_deadline_seconds,
       NULL::boolean AS archived, NULL::text AS kind, NULL::integer AS cadence_seconds, NULL::timestamptz[] AS ran,
       o.id AS run_id, o.scheduled_for AS run_scheduled_for
  FROM overdue o
UNION ALL
(SELECT a.schedule_id, a.checked_until, s.tenant_id, s.workflow_id, s.cron, s.timezone, s.status,
        s.starting_deadline_seconds, (w.archived_at IS NOT NULL), w.kind, s.cadence_seconds,
        ARRAY(SELECT r.scheduled_for FROM runs r
               WHERE r.workflow_id = s.workflow_id AND NOT r.manual
                 AND r.scheduled_for > a.checked_until AND r.scheduled_for <= %(now)s),
        NULL, NULL
   FROM audits a
   JOIN schedules s ON s.id = a.schedule_id
   JOIN workflows w ON w.id = s.workflow_id
  ORDER BY a.next_check_at, a.schedule_id);

-- monitoring_close_overdue --
-- Give the overdue runs `monitoring_lock_overdue_and_arm` locked in this transaction (ids and
-- ticks, index for index) the verdict `missed`, with their queued attempts cancelled, not
-- queued for the poller: the deadline pass evaluates the missed runs itself. The status
-- compare-and-set keeps the verdict to a run still open (always so under the lock). Each run
-- and attempt is probed by its id and tick (= ANY, not a join with the arrays, which generic
-- plans answer with a hash of a month's open runs), and `{months}` stands for the months from
-- the earliest tick's to the latest's, as constants (`store.ledger.in_months`): the plan holds
-- only those months' partitions. Returns each run closed, with its workflow, by id.
WITH closed AS (
    UPDATE runs r
       SET status = 'missed', finished_at = %(now)s, error_category = 'missed',
           error = %(error)s, failed_step = NULL, recovered = false
     WHERE r.id = ANY (%(run_ids)b::bigint[])
       AND r.scheduled_for = ANY (%(run_scheduled_fors)b::timestamptz[])
       AND r.scheduled_for {months}
       AND r.status IN ('queued', 'running', 'pending_retry')
    RETURNING r.id, r.workflow_id, r.scheduled_for
), cancelled AS (
    UPDATE attempts a
       SET status = 'cancelled', finished_at = %(now)s
      FROM closed
     WHERE a.run_id = closed.id AND a.run_scheduled_for = closed.scheduled_for AND a.run_scheduled_for {months}
       AND a.status = 'queued'
)
SELECT id AS run_id, workflow_id FROM closed ORDER BY id;

-- monitoring_due_tick_audits --
-- A pass takes its watermarks in `monitoring_lock_overdue_and_arm`; this is the reading
-- that statement is held to (test_deadline_audits), run after the arming.
-- Watermarks whose next tick has passed its grace, with their schedules. SKIP
-- LOCKED hands replicas disjoint schedules; the lock is held until the missed runs
-- and the new watermark are written in the same transaction. `ran`: the ticks after
-- the watermark, up to now, that already have their run (a probe of the
-- one-run-per-tick index), which the pass then does not try to record missed: on a
-- healthy fleet that is every tick walked, and the pass reads nothing back.
SELECT ta.schedule_id, ta.checked_until, s.tenant_id, s.workflow_id, s.cron, s.timezone, s.status,
       s.starting_deadline_seconds, (w.archived_at IS NOT NULL) AS archived, w.kind, s.cadence_seconds,
       ARRAY(SELECT r.scheduled_for FROM runs r
              WHERE r.workflow_id = s.workflow_id AND NOT r.manual
                AND r.scheduled_for > ta.checked_until AND r.scheduled_for <= %(now)s) AS ran
  FROM tick_audits ta
  JOIN schedules s ON s.id = ta.schedule_id
  JOIN workflows w ON w.id = s.workflow_id
 WHERE ta.next_check_at <= %(now)s
 ORDER BY ta.next_check_at, ta.schedule_id
 LIMIT %(limit)s
   FOR UPDATE OF ta SKIP LOCKED;

-- monitoring_record_missed_and_advance --
-- The end of a deadline pass, in one statement: record ticks that never ran as
-- missed runs (the one-run-per-tick index turns a tick the trigger recorded
-- meanwhile, or another detector got to, into nothing), and move the watermarks
-- forward past the ticks that were checked. A pass with no tick to record (nearly every
-- pass) sends the `advanced` part alone (`store.monitoring.advance_text`, cut from this
-- text): a data-modifying CTE is set up at every execution, rows or none.
WITH missed AS (
    INSERT INTO runs (tenant_id, workflow_id, scheduled_for, manual, status, retry_budget, attempts_count,
                      deadline_at, error_category, error, created_at, finished_at)
    SELECT tenant_id, workflow_id, scheduled_for, false, 'missed', 0, 0, %(now)s, 'missed', %(error)s, %(now)s,
           %(now)s
      FROM unnest(%(tenant_ids)s::bigint[], %(workflow_ids)s::bigint[], %(scheduled_fors)b::timestamptz[])
           AS u (tenant_id, workflow_id, scheduled_for)
        ON CONFLICT (workflow_id, scheduled_for) WHERE NOT manual DO NOTHING
    RETURNING id AS run_id, workflow_id, scheduled_for
), advanced AS (
    -- Each watermark is a probe of the primary key. The unnest comes through a LIMIT of its
    -- own length, which changes nothing it returns but the server's estimate of it (one row,
    -- not ten): with ten, the generic plan it caches for this prepared statement reads
    -- every watermark of a small fleet into a hash (seventeen pages for 1,000 schedules) to
    -- update the few of a pass.
    UPDATE tick_audits ta
       SET checked_until = u.checked_until, next_check_at = u.next_check_at, updated_at = %(now)s
      FROM (SELECT *
              FROM unnest(%(schedule_ids)s::bigint[], %(checked_untils)b::timestamptz[],
                          %(next_check_ats)b::timestamptz[]) AS u (schedule_id, checked_until, next_check_at)
             LIMIT cardinality(%(schedule_ids)s::bigint[])) u
     WHERE ta.schedule_id = u.schedule_id
)
SELECT run_id, workflow_id, scheduled_for FROM missed ORDER BY scheduled_for, workflow_id;

-- monitoring_finished_waiting --
-- The poller's idle check: is any finished attempt waiting for it? (A probe of
-- outcome_queue_order_idx.)
SELECT EXISTS (SELECT 1 FROM outcome_queue WHERE finished_at <= %(now)s) AS found;

-- monitoring_escalation_waiting --
-- The escalation clock's idle check: the condition of monitoring_escalate_due, read only.
SELECT EXISTS (
    SELECT 1 FROM alerts
     WHERE status = 'open' AND severity = 'warning'
       AND acknowledged_at IS NULL AND (snoozed_until IS NULL OR snoozed_until <= %(now)s)
       AND (escalate_at <= %(now)s OR failures_reached_escalation)
) AS found;

-- retention_policy_upsert --
-- Set one tenant's retention overrides (NULL keeps the platform default for that class).
INSERT INTO retention_policies (tenant_id, metadata_days, logs_days, payloads_days, outbox_days, alerts_days, updated_at)
VALUES (%(tenant_id)s, %(metadata_days)s, %(logs_days)s, %(payloads_days)s, %(outbox_days)s, %(alerts_days)s, %(now)s)
    ON CONFLICT (tenant_id) DO UPDATE
   SET metadata_days = EXCLUDED.metadata_days, logs_days = EXCLUDED.logs_days,
       payloads_days = EXCLUDED.payloads_days, outbox_days = EXCLUDED.outbox_days,
       alerts_days = EXCLUDED.alerts_days, updated_at = EXCLUDED.updated_at
RETURNING *;

-- retention_policy_get --
-- One tenant's retention overrides, if it has any.
SELECT * FROM retention_policies WHERE tenant_id = %(tenant_id)s;

-- retention_ensure_marks --
-- Give every workflow a sweep mark (at the beginning of time) before a pass looks for due ones.
INSERT INTO retention_marks (workflow_id, tenant_id, updated_at)
SELECT w.id, w.tenant_id, %(now)s
  FROM workflows w
 WHERE NOT EXISTS (SELECT 1 FROM retention_marks m WHERE m.workflow_id = w.id)
    ON CONFLICT (workflow_id) DO NOTHING;

-- retention_expire_logs --
-- Clear diagnostic logs and error text of the runs each due workflow scheduled
-- before its horizon: min(now − the tenant's logs retention, the workflow's newest
-- success), so the runs the failure count and an open alert read are never touched.
-- The rows stay, with their ids, statuses and categories. SKIP LOCKED on the marks
-- hands replicas disjoint workflows; each workflow gives at most %(runs)s runs, and
-- its mark moves to the horizon once it gave fewer (else to the last run cleared).
WITH candidates AS (
    SELECT m.workflow_id, m.logs_until AS since,
           %(now)s::timestamptz - make_interval(days => coalesce(p.logs_days, %(default_days)s::integer)) AS cutoff
      FROM retention_marks m
      LEFT JOIN retention_policies p ON p.tenant_id = m.tenant_id
     WHERE m.logs_until < %(now)s::timestamptz - make_interval(days => coalesce(p.logs_days, %(default_days)s::integer))
), due AS (
    SELECT c.workflow_id, c.since, least(c.cutoff, coalesce(ok.scheduled_for, '-infinity')) AS upto
      FROM candidates c
      LEFT JOIN workflow_successes ok ON ok.workflow_id = c.workflow_id
     WHERE c.since < least(c.cutoff, coalesce(ok.scheduled_for, '-infinity'))
     ORDER BY c.since, c.workflow_id
     LIMIT %(workflows)s
), locked AS (
    -- The mark as it is once locked (another sweeper may have moved it since this
    -- statement's snapshot), rechecked against the horizon.
    SELECT m.workflow_id, m.logs_until AS since, due.upto
      FROM due JOIN retention_marks m ON m.workflow_id = due.workflow_id
     WHERE m.logs_until < due.upto
       FOR UPDATE OF m SKIP LOCKED
), batch AS (
    SELECT r.id, l.workflow_id, r.scheduled_for
      FROM locked l
     CROSS JOIN LATERAL (
            SELECT r.id, r.scheduled_for FROM runs r
             WHERE r.workflow_id = l.workflow_id AND r.scheduled_for >= l.since AND r.scheduled_for < l.upto
               AND r.status IN ('succeeded', 'failed', 'missed', 'cancelled')
             ORDER BY r.scheduled_for, r.id
             LIMIT %(runs)s) r
), runs_cleared AS (
    UPDATE runs r SET error = NULL
      FROM batch b
     WHERE r.id = b.id AND r.error IS NOT NULL
    RETURNING r.id
), attempts_cleared AS (
    UPDATE attempts a SET error = NULL, log_tail = NULL
      FROM batch b
     WHERE a.run_id = b.id AND (a.error IS NOT NULL OR a.log_tail IS NOT NULL)
    RETURNING a.id
), steps_cleared AS (
    UPDATE attempt_steps s SET log = '', error = NULL
      FROM attempts a, batch b
     WHERE a.run_id = b.id AND s.attempt_id = a.id AND (s.log <> '' OR s.error IS NOT NULL)
    RETURNING s.attempt_id
), per_workflow AS (
    SELECT workflow_id, count(*) AS runs, max(scheduled_for) AS last FROM batch GROUP BY workflow_id
), advanced AS (
    UPDATE retention_marks m
       SET logs_until = CASE WHEN coalesce(n.runs, 0) < %(runs)s THEN l.upto ELSE n.last END, updated_at = %(now)s
      FROM locked l LEFT JOIN per_workflow n ON n.workflow_id = l.workflow_id
     WHERE m.workflow_id = l.workflow_id
    RETURNING m.workflow_id
)
SELECT (SELECT count(*) FROM runs_cleared) + (SELECT count(*) FROM attempts_cleared)
       + (SELECT count(*) FROM steps_cleared) AS expired,
       (SELECT count(*) FROM advanced) AS workflows,
       (SELECT count(*) FROM due) AS due,
       (SELECT count(*) FROM per_workflow WHERE runs >= %(runs)s) AS full_workflows;

-- retention_expire_payloads --
-- Clear step outputs and other customer payloads of the runs each due workflow
-- scheduled before its horizon (as retention_expire_logs, with the payloads
-- retention): the rows and their ids stay.
WITH candidates AS (
    SELECT m.workflow_id, m.payloads_until AS since,
           %(now)s::timestamptz - make_interval(days => coalesce(p.payloads_days, %(default_days)s::integer)) AS cutoff
      FROM retention_marks m
      LEFT JOIN retention_policies p ON p.tenant_id = m.tenant_id
     WHERE m.payloads_until < %(now)s::timestamptz - make_interval(days => coalesce(p.payloads_days, %(default_days)s::integer))
), due AS (
    SELECT c.workflow_id, c.since, least(c.cutoff, coalesce(ok.scheduled_for, '-infinity')) AS upto
      FROM candidates c
      LEFT JOIN workflow_successes ok ON ok.workflow_id = c.workflow_id
     WHERE c.since < least(c.cutoff, coalesce(ok.scheduled_for, '-infinity'))
     ORDER BY c.since, c.workflow_id
     LIMIT %(workflows)s
), locked AS (
    -- The mark as it is once locked (another sweeper may have moved it since this
    -- statement's snapshot), rechecked against the horizon.
    SELECT m.workflow_id, m.payloads_until AS since, due.upto
      FROM due JOIN retention_marks m ON m.workflow_id = due.workflow_id
     WHERE m.payloads_until < due.upto
       FOR UPDATE OF m SKIP LOCKED
), batch AS (
    SELECT r.id, l.workflow_id, r.scheduled_for
      FROM locked l
     CROSS JOIN LATERAL (
            SELECT r.id, r.scheduled_for FROM runs r
             WHERE r.workflow_id = l.workflow_id AND r.scheduled_for >= l.since AND r.scheduled_for < l.upto
               AND r.status IN ('succeeded', 'failed', 'missed', 'cancelled')
             ORDER BY r.scheduled_for, r.id
             LIMIT %(runs)s) r
), attempts_cleared AS (
    UPDATE attempts a SET outputs = '{}'::jsonb
      FROM batch b
     WHERE a.run_id = b.id AND a.outputs <> '{}'::jsonb
    RETURNING a.id
), steps_cleared AS (
    UPDATE attempt_steps s SET output = NULL
      FROM attempts a, batch b
     WHERE a.run_id = b.id AND s.attempt_id = a.id AND s.output IS NOT NULL
    RETURNING s.attempt_id
), per_workflow AS (
    SELECT workflow_id, count(*) AS runs, max(scheduled_for) AS last FROM batch GROUP BY workflow_id
), advanced AS (
    UPDATE retention_marks m
       SET payloads_until = CASE WHEN coalesce(n.runs, 0) < %(runs)s THEN l.upto ELSE n.last END,
           updated_at = %(now)s
      FROM locked l LEFT JOIN per_workflow n ON n.workflow_id = l.workflow_id
     WHERE m.workflow_id = l.workflow_id
    RETURNING m.workflow_id
)
SELECT (SELECT count(*) FROM attempts_cleared) + (SELECT count(*) FROM steps_cleared) AS expired,
       (SELECT count(*) FROM advanced) AS workflows,
       (SELECT count(*) FROM due) AS due,
       (SELECT count(*) FROM per_workflow WHERE runs >= %(runs)s) AS full_workflows;

-- retention_expire_metadata --
-- Delete the runs (and with them their attempts and steps) each due workflow
-- scheduled before its horizon: min(now − the tenant's metadata retention, the
-- workflow's newest success). Runs still waiting for an outcome are never deleted; an
-- attempt's outcome_queue row, if the poller has not claimed it yet, goes with the attempt.
-- Counts the runs and attempts removed.
WITH candidates AS (
    SELECT m.workflow_id, m.metadata_until AS since,
           %(now)s::timestamptz - make_interval(days => coalesce(p.metadata_days, %(default_days)s::integer)) AS cutoff
      FROM retention_marks m
      LEFT JOIN retention_policies p ON p.tenant_id = m.tenant_id
     WHERE m.metadata_until < %(now)s::timestamptz - make_interval(days => coalesce(p.metadata_days, %(default_days)s::integer))
), due AS (
    SELECT c.workflow_id, c.since, least(c.cutoff, coalesce(ok.scheduled_for, '-infinity')) AS upto
      FROM candidates c
      LEFT JOIN workflow_successes ok ON ok.workflow_id = c.workflow_id
     WHERE c.since < least(c.cutoff, coalesce(ok.scheduled_for, '-infinity'))
     ORDER BY c.since, c.workflow_id
     LIMIT %(workflows)s
), locked AS (
    -- The mark as it is once locked (another sweeper may have moved it since this
    -- statement's snapshot), rechecked against the horizon.
    SELECT m.workflow_id, m.metadata_until AS since, due.upto
      FROM due JOIN retention_marks m ON m.workflow_id = due.workflow_id
     WHERE m.metadata_until < due.upto
       FOR UPDATE OF m SKIP LOCKED
), batch AS (
    SELECT r.id, l.workflow_id, r.scheduled_for
      FROM locked l
     CROSS JOIN LATERAL (
            SELECT r.id, r.scheduled_for FROM runs r
             WHERE r.workflow_id = l.workflow_id AND r.scheduled_for >= l.since AND r.scheduled_for < l.upto
               AND r.status IN ('succeeded', 'failed', 'missed', 'cancelled')
             ORDER BY r.scheduled_for, r.id
             LIMIT %(runs)s) r
), attempts_gone AS (
    DELETE FROM attempts a USING batch b WHERE a.run_id = b.id AND a.run_scheduled_for = b.scheduled_for
    RETURNING a.id
), outcomes_gone AS (
    DELETE FROM outcome_queue q WHERE q.attempt_id IN (SELECT id FROM attempts_gone)
), deleted AS (
    DELETE FROM runs r USING batch b WHERE r.id = b.id AND r.scheduled_for = b.scheduled_for RETURNING r.id
), per_workflow AS (
    SELECT workflow_id, count(*) AS runs, max(scheduled_for) AS last FROM batch GROUP BY workflow_id
), advanced AS (
    UPDATE retention_marks m
       SET metadata_until = CASE WHEN coalesce(n.runs, 0) < %(runs)s THEN l.upto ELSE n.last END,
           updated_at = %(now)s
      FROM locked l LEFT JOIN per_workflow n ON n.workflow_id = l.workflow_id
     WHERE m.workflow_id = l.workflow_id
    RETURNING m.workflow_id
)
SELECT (SELECT count(*) FROM deleted) + (SELECT count(*) FROM attempts_gone) AS expired,
       (SELECT count(*) FROM advanced) AS workflows,
       (SELECT count(*) FROM due) AS due,
       (SELECT count(*) FROM per_workflow WHERE runs >= %(runs)s) AS full_workflows;

-- retention_expire_outbox --
-- Delete delivery rows that went out (or were given up, or were suppressed by a
-- maintenance window) before the tenant's outbox horizon. An open alert's deliveries
-- stay whatever their age. SKIP LOCKED hands replicas disjoint rows.
WITH doomed AS (
    SELECT o.id
      FROM notification_outbox o
      JOIN alerts a ON a.id = o.alert_id
      LEFT JOIN retention_policies p ON p.tenant_id = o.tenant_id
     WHERE o.status IN ('sent', 'dead', 'suppressed') AND a.status = 'resolved'
       AND coalesce(o.sent_at, o.created_at)
           < %(now)s::timestamptz - make_interval(days => coalesce(p.outbox_days, %(default_days)s::integer))
     ORDER BY o.id
     LIMIT %(limit)s
       FOR UPDATE OF o SKIP LOCKED
), deleted AS (
    DELETE FROM notification_outbox o USING doomed WHERE o.id = doomed.id RETURNING o.id
)
SELECT count(*) AS expired FROM deleted;

-- retention_expire_alerts --
-- Delete resolved alerts older than the tenant's alert-history horizon, with their
-- events, threads and deliveries (the foreign keys cascade). Open alerts are never
-- touched, however old. Counts the alerts and events removed.
WITH doomed AS (
    SELECT a.id
      FROM alerts a
      LEFT JOIN retention_policies p ON p.tenant_id = a.tenant_id
     WHERE a.status = 'resolved'
       AND a.resolved_at < %(now)s::timestamptz - make_interval(days => coalesce(p.alerts_days, %(default_days)s::integer))
     ORDER BY a.resolved_at, a.id
     LIMIT %(limit)s
       FOR UPDATE OF a SKIP LOCKED
), events_gone AS (
    SELECT count(*) AS n FROM alert_events e JOIN doomed d ON e.alert_id = d.id
), deleted AS (
    DELETE FROM alerts a USING doomed WHERE a.id = doomed.id AND a.status = 'resolved' RETURNING a.id
)
SELECT (SELECT count(*) FROM deleted) + (SELECT n FROM events_gone) AS expired;

-- retention_expire_platform_alerts --
-- Delete the platform's own resolved alerts (a stalled loop of tickwarden) older than the
-- platform's alert-history horizon, with their deliveries, once none of those is still
-- waiting to be sent. Open ones are never touched. Counts the alerts and deliveries removed.
WITH doomed AS (
    SELECT a.id
      FROM platform_alerts a
     WHERE a.status = 'resolved'
       AND a.resolved_at < %(now)s::timestamptz - make_interval(days => %(default_days)s::integer)
       AND NOT EXISTS (SELECT 1 FROM platform_alert_deliveries d
                        WHERE d.alert_id = a.id AND d.status IN ('pending', 'sending', 'failed'))
     ORDER BY a.resolved_at, a.id
     LIMIT %(limit)s
       FOR UPDATE OF a SKIP LOCKED
), deliveries_gone AS (
    SELECT count(*) AS n FROM platform_alert_deliveries d JOIN doomed ON d.alert_id = doomed.id
), deleted AS (
    DELETE FROM platform_alerts a USING doomed WHERE a.id = doomed.id RETURNING a.id
)
SELECT (SELECT count(*) FROM deleted) + (SELECT n FROM deliveries_gone) AS expired;

-- retention_add_totals --
-- Add this pass's expired rows to the per-class counters.
INSERT INTO retention_totals (class, rows, updated_at)
SELECT class, rows, %(now)s FROM unnest(%(classes)s::text[], %(rows)s::bigint[]) AS u (class, rows)
    ON CONFLICT (class) DO UPDATE
   SET rows = retention_totals.rows + EXCLUDED.rows, updated_at = EXCLUDED.updated_at;

-- retention_totals --
-- Rows expired per class since the database was created.
SELECT class, rows FROM retention_totals ORDER BY class;

-- retention_ensure_partition --
-- Create the ledger's month partitions for the UTC month holding %(at)s unless they exist
-- (serialized between replicas inside the function); true when this call created them.
SELECT tickwarden_ledger_partition(%(at)s::timestamptz) AS created;

-- retention_ledger_partitions --
-- The ledger's month partitions, oldest first, with their bounds (named runs_pYYYYMM,
-- the same suffix for attempts and attempt_steps) and the rows the statistics estimate
-- in the month's runs and attempts.
SELECT substr(c.relname, 6) AS suffix,
       to_date(substr(c.relname, 7), 'YYYYMM')::timestamp AT TIME ZONE 'UTC' AS lower,
       (to_date(substr(c.relname, 7), 'YYYYMM')::timestamp + interval '1 month') AT TIME ZONE 'UTC' AS upper,
       greatest(c.reltuples, 0)::bigint
         + coalesce((SELECT greatest(a.reltuples, 0)::bigint FROM pg_class a
                      WHERE a.relnamespace = c.relnamespace AND a.relname = 'attempts_' || substr(c.relname, 6)), 0)
         AS estimated_rows
  FROM pg_inherits i
  JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'runs'::regclass AND c.relname ~ '^runs_p[0-9]{6}$'
 ORDER BY c.relname;

-- retention_shortest_metadata_days --
-- The shortest metadata retention any tenant has: no month younger than it can be dropped.
SELECT least(%(default_days)s::integer, min(metadata_days)) AS days FROM retention_policies;

-- retention_lock_partitions --
-- Serialize with partition creation (the same advisory key as tickwarden_ledger_partition),
-- and wait for locks at most briefly: a month that cannot be dropped now is dropped on a later pass.
SELECT set_config('lock_timeout', '2s', true),
       pg_advisory_xact_lock(hashtextextended(current_schema() || '.ledger_partitions', 0));

-- retention_lock_detach --
-- Serialize with partition creation, and wait for the ledger's locks a moment only: while
-- ACCESS EXCLUSIVE waits, every ledger statement queues behind it, so behind a long reader
-- the month is detached on a later pass instead.
SELECT set_config('lock_timeout', '500ms', true),
       pg_advisory_xact_lock(hashtextextended(current_schema() || '.ledger_partitions', 0));

-- retention_forget_month_outcomes --
-- The queue rows of a month taken out of the ledger: their attempts go with it. The
-- outcome_queue's are the month's unclaimed outcomes. A month is detached only with no
-- open run, so it holds no queued attempt; its attempt_queue rows are dropped all the
-- same, as a detach fires no trigger: a row left without its attempt would be offered to
-- every lease and idle poll ahead of the live queue.
WITH queued AS (
    DELETE FROM attempt_queue WHERE run_scheduled_for >= %(lower)s AND run_scheduled_for < %(upper)s
)
DELETE FROM outcome_queue WHERE run_scheduled_for >= %(lower)s AND run_scheduled_for < %(upper)s;

-- retention_table_kind --
-- Whether a table of this schema exists (no row: it does not) and is a partition.
SELECT c.relispartition AS partition
  FROM pg_class c
 WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = %(name)s AND c.relkind = 'r';

-- retention_outside_keys --
-- The foreign keys of a detached month's tables that reference a table outside the month.
SELECT c.relname AS table_name, k.conname AS constraint_name
  FROM pg_constraint k
  JOIN pg_class c ON c.oid = k.conrelid
 WHERE k.contype = 'f' AND c.relnamespace = current_schema()::regnamespace
   AND c.relname = ANY (%(tables)s::text[])
   AND k.confrelid NOT IN (SELECT o.oid FROM pg_class o
                            WHERE o.relnamespace = current_schema()::regnamespace
                              AND o.relname = ANY (%(tables)s::text[]))
 ORDER BY c.relname, k.conname;

-- retention_detached_months --
-- Months taken out of the ledger whose tables are still there (a pass that died between
-- the detach and the drop, or another replica's drop under way): the ledger's month
-- tables by name that are no partition.
SELECT DISTINCT substring(c.relname FROM '_(p[0-9]{6})$') AS suffix
  FROM pg_class c
 WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' AND NOT c.relispartition
   AND c.relname ~ '^(runs|attempts|attempt_steps)_p[0-9]{6}$'
 ORDER BY 1;

-- retention_month_keeps --
-- Whether a month of the ledger holds a run that retention must keep: a run still waiting
-- for an outcome, or a workflow's run that is inside its tenant's metadata retention or
-- not older than the workflow's newest success (the runs the failure count and an open
-- alert read). The newest run a workflow has in the month decides for all its runs there:
-- both rules keep a suffix of a workflow's history. The month is probed only for the
-- workflows that could keep something in it: those whose tenant's horizon is not past the
-- month's end, or whose newest success (workflow_successes' row) is not after it. On a
-- healthy fleet that is none, and the decision reads nothing of the month but its
-- open-run index.
WITH candidates AS MATERIALIZED (
    -- computed before any probe (a fence: the planner may not join the month in first)
    SELECT w.id AS workflow_id, ok.scheduled_for AS success_at,
           %(now)s::timestamptz - make_interval(days => coalesce(p.metadata_days, %(default_days)s::integer)) AS cutoff
      FROM workflows w
      LEFT JOIN retention_policies p ON p.tenant_id = w.tenant_id
      LEFT JOIN workflow_successes ok ON ok.workflow_id = w.id
     WHERE %(upper)s::timestamptz
               > %(now)s::timestamptz - make_interval(days => coalesce(p.metadata_days, %(default_days)s::integer))
        OR ok.scheduled_for IS NULL OR ok.scheduled_for < %(upper)s::timestamptz
)
SELECT EXISTS (
           SELECT 1 FROM runs r
            WHERE r.scheduled_for >= %(lower)s AND r.scheduled_for < %(upper)s
              AND r.finished_at IS NULL)
    OR EXISTS (
           SELECT 1
             FROM candidates c
            CROSS JOIN LATERAL (
                  SELECT r.scheduled_for FROM runs r
                   WHERE r.workflow_id = c.workflow_id AND r.scheduled_for >= %(lower)s AND r.scheduled_for < %(upper)s
                   ORDER BY r.scheduled_for DESC LIMIT 1) newest
            WHERE newest.scheduled_for >= c.cutoff OR c.success_at IS NULL OR c.success_at <= newest.scheduled_for)
       AS keeps;

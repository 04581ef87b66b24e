-- ledger_create_tick_runs --
-- Insert one run (and its first queued attempt) per wanted tick, and move the
-- schedules the ticker claimed to their next fire time (their `schedule_fires` rows), in
-- one statement: a tick is recorded exactly when its schedule moves past it. Racing
-- triggers insert the same ticks; the unique index turns all but the first into
-- nothing (`{on_conflict}` is ON CONFLICT DO NOTHING). A caller that holds the fire
-- rows of every schedule whose ticks it records (the ticker, for workflows no check-in
-- records) is the only writer of those ticks: its insert is a plain one, without a
-- speculative insertion's probe and confirmation per run, and the unique index stays the
-- last line of defence (a duplicate fails the statement; `LedgerRepository.send_tick_groups`).
-- Callers that only record ticks (a CronJob's report) pass no schedules to
-- advance. A tick of an external workflow gets no attempt (no worker runs it): its run
-- waits for check-ins, and the deadline detector misses it when none comes.
-- Ticks arrive in groups: each group's members (workflow and tenant ids as array text,
-- index for index) share its ticks, deadlines and retry budget, so a fleet firing at one
-- minute is a few array elements rather than one per run; `first_attempt` is 1, 0 for an
-- external workflow, or NULL to look the workflow's kind up. `{returning}` and `{result}`
-- are the runs' columns for the caller, or only their count (see `LedgerRepository`).
WITH grp AS (
    -- backoffs and members arrive as array literals: unnest cannot carry ragged arrays
    SELECT g.no, g.workflow_ids::bigint[] AS workflow_ids, g.tenant_ids::bigint[] AS tenant_ids, g.retry_budget,
           g.retry_backoff::integer[] AS retry_backoff, g.first_attempt
      FROM unnest(%(workflow_ids)s::text[], %(tenant_ids)s::text[], %(retry_budgets)s::integer[],
                  %(retry_backoffs)s::text[], %(first_attempts)s::integer[])
           WITH ORDINALITY AS g (workflow_ids, tenant_ids, retry_budget, retry_backoff, first_attempt, no)
), tick AS (
    SELECT *
      FROM unnest(%(tick_groups)s::bigint[], %(scheduled_fors)b::timestamptz[], %(deadlines)b::timestamptz[])
           WITH ORDINALITY AS t (no, scheduled_for, deadline_at, ord)
), fired AS (
    -- Each group's ticks, in the order the ticks were given (group by group, each group's in
    -- its order), said with ORDER BY: the runs take their ids in the order the insert is fed,
    -- and a join's own order is its plan's (a hash of the ticks gave a group's ticks back
    -- last first). The sort is of the (group, tick) pairs, a handful a pass, not of the runs
    -- (and none when the plan reads the ticks first: their ordinality is known sorted); each
    -- pair's members follow it in their array's order (the claim's, by workflow id), as a
    -- lateral unnest can only be joined by a nested loop over the rows it depends on.
    SELECT g.workflow_ids, g.tenant_ids, g.retry_budget, g.retry_backoff, g.first_attempt,
           t.scheduled_for, t.deadline_at
      FROM grp g
      JOIN tick t ON t.no = g.no
     ORDER BY t.ord
), run AS (
    INSERT INTO runs (tenant_id, workflow_id, scheduled_for, manual, status, retry_budget,
                      attempts_count, deadline_at, created_at, retry_backoff_seconds)
    SELECT m.tenant_id, m.workflow_id, f.scheduled_for, false, 'queued', f.retry_budget,
           coalesce(f.first_attempt, (SELECT CASE WHEN w.kind = 'external' THEN 0 ELSE 1 END
                                        FROM workflows w WHERE w.id = m.workflow_id)),
           f.deadline_at, %(now)s, f.retry_backoff
      FROM fired f
     CROSS JOIN LATERAL unnest(f.workflow_ids, f.tenant_ids) AS m (workflow_id, tenant_id)
    {on_conflict}
    RETURNING {returning}
), attempt AS (
    INSERT INTO attempts (tenant_id, workflow_id, run_id, run_scheduled_for, number, status, queued_at)
    SELECT tenant_id, workflow_id, id, scheduled_for, 1, 'queued', %(now)s FROM run WHERE attempts_count = 1
    RETURNING run_id
), moved AS MATERIALIZED (
    -- One row per schedule moved: its id and its times, and nothing of its group. An UPDATE
    -- carries a whole-row copy of each FROM item's row for its row marks; were the groups' unnest
    -- in the UPDATE's FROM, each member's row would hold its group's whole list of ids as
    -- text, and a plan that hashed them (two groups of 2,000 are enough) held members × list
    -- bytes, spilled to disk, and took seconds where it takes milliseconds.
    SELECT m.schedule_id, a.next_fire_at, a.last_fired_at
      FROM unnest(%(advance_ids)s::text[], %(advance_next)b::timestamptz[], %(advance_last)b::timestamptz[])
           AS a (schedule_ids, next_fire_at, last_fired_at)
     CROSS JOIN LATERAL unnest(a.schedule_ids::bigint[]) AS m (schedule_id)
), advanced AS (
    -- The fire rows are probed by id (= ANY of every advanced schedule): as a join with the
    -- moved rows alone, the generic plan the server caches for this prepared statement reads
    -- every fire row of a small fleet into a hash to move the few of a pass (on 1,000
    -- schedules 0.4 ms of the statement's 1.2).
    UPDATE schedule_fires f
       SET next_fire_at = m.next_fire_at, last_fired_at = coalesce(m.last_fired_at, f.last_fired_at)
      FROM moved m
     WHERE f.schedule_id = ANY (ARRAY(SELECT schedule_id FROM moved))
       AND f.schedule_id = m.schedule_id
)
{result};

-- ledger_create_manual_run --
-- A manual run is a run like any other, flagged manual, through the same worker path.
WITH run AS (
    INSERT INTO runs (tenant_id, workflow_id, scheduled_for, manual, status, retry_budget,
                      attempts_count, deadline_at, requested_by, created_at, retry_backoff_seconds)
    VALUES (%(tenant_id)s, %(workflow_id)s, %(now)s, true, 'queued', %(retry_budget)s, 1,
            %(deadline_at)s, %(requested_by)s, %(now)s, %(retry_backoff_seconds)s::integer[])
    RETURNING *
), attempt AS (
    INSERT INTO attempts (tenant_id, workflow_id, run_id, run_scheduled_for, number, status, queued_at)
    SELECT tenant_id, workflow_id, id, scheduled_for, 1, 'queued', %(now)s FROM run
    RETURNING run_id
)
SELECT run.* FROM run;

-- ledger_lease_queue --
-- Lock the oldest queued attempts for a lease, the first half of it: SKIP LOCKED hands
-- concurrent workers disjoint rows without waiting, and the locks hold until the
-- lease's transaction ends, so `ledger_lease_attempts` (sent right behind it in the same
-- pipeline and transaction, without waiting for these rows) leases attempts nobody else
-- can lease meanwhile. The read is of the queue (`attempt_queue`, migration 0031), one
-- unpartitioned table: which months hold queued attempts is not known ahead, and a read of
-- the attempts would be planned over every month retention keeps. What the writes after it
-- need is handed to them inside the server, as transaction-local settings (so the lease is
-- one round trip, not two): `tickwarden.lease_ids` and `tickwarden.lease_ticks` (the
-- attempts and their runs' ticks, oldest first), `tickwarden.lease_first` and `tickwarden.lease_last` (the span of their ticks: scalars,
-- which prune a plan of the writes when it starts, so it touches only their months) and
-- `tickwarden.lease_workflows` (each attempt's workflow, the same order: the contexts read
-- and the busy mark decided by the first). They are set even when nothing is locked (empty,
-- which leases nothing): the settings come from one aggregate row, always computed, and the
-- rows returned are unnested from it. Local to the transaction: they end with it.
WITH queued AS MATERIALIZED (
    SELECT q.attempt_id, q.run_id, q.run_scheduled_for, q.workflow_id, q.queued_at
      FROM attempt_queue q
     WHERE q.queued_at <= %(now)s
     ORDER BY q.queued_at, q.attempt_id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), told AS (
    SELECT array_agg(attempt_id ORDER BY queued_at, attempt_id) AS ids,
           array_agg(run_id ORDER BY queued_at, attempt_id) AS run_ids,
           array_agg(run_scheduled_for ORDER BY queued_at, attempt_id) AS ticks,
           array_agg(workflow_id ORDER BY queued_at, attempt_id) AS workflows,
           set_config('tickwarden.lease_ids',
                      coalesce(array_agg(attempt_id ORDER BY queued_at, attempt_id), '{}')::text, true)
        || set_config('tickwarden.lease_ticks',
                      coalesce(array_agg(run_scheduled_for ORDER BY queued_at, attempt_id), '{}')::text, true)
        || set_config('tickwarden.lease_first', coalesce(min(run_scheduled_for)::text, ''), true)
        || set_config('tickwarden.lease_last', coalesce(max(run_scheduled_for)::text, ''), true)
        || set_config('tickwarden.lease_workflows',
                      coalesce(array_agg(workflow_id ORDER BY queued_at, attempt_id), '{}')::text, true) AS said
      FROM queued
)
SELECT unnest(ids) AS id, unnest(run_ids) AS run_id, unnest(ticks) AS run_scheduled_for,
       unnest(workflows) AS workflow_id
  FROM told
 WHERE said IS NOT NULL;

-- ledger_lease_attempts --
-- Lease the attempts whose queue rows `ledger_lease_queue` locked just before it in this
-- transaction, as that statement's settings name them (ids oldest first; the ticks' span as
-- the scalars first and last; none when it locked none); the runs move to running in the same
-- statement, and the attempts leave the queue in it too (`dequeued`: the lease owns that move,
-- migration 0039; the queue rows are this transaction's since `ledger_lease_queue` locked
-- them, so the delete waits for nobody). The first %(start)s of them start now (`started_at`);
-- the others are leased ahead: `started_at` stays NULL until their worker starts them with the
-- compare-and-set `execution_start_attempt`, and a lease that runs out before that goes back
-- to the queue (`ledger_expire_leases`) instead of being lost. Each row also carries its run's
-- tick (`run_scheduled_for`), so no second look at the runs is needed (a read of them after
-- their update cost more to plan than to run). The ticks' span (first and last) is a stable
-- expression of the settings, so a plan made once (`execution_generic_plans`; psycopg's
-- prepared plan elsewhere) is pruned to their months when it starts, as one given the span as
-- parameters would be (planning every month's partitions at every lease cost several times the
-- writes themselves). Each attempt is locked by its id and tick (the primary key), and updated
-- by the row version it locked (`ctid`, unchanged while this transaction holds the lock; the
-- id and tick are matched too): a plan made once with small months otherwise scanned the month
-- and tested the settings at every row. The attempts are locked SKIP LOCKED too: a writer that
-- changes a queued attempt (a cancel, a Kubernetes lease) locks the attempt first and its
-- queue row after, so a lease that waited for the attempt while holding the queue row could
-- deadlock with it; skipped, such an attempt is that writer's to move, and the status guard
-- leaves out any that stopped being queued before the queue row was locked. Its commit waits
-- for the WAL flush, as every commit that starts an attempt does: a start lost in a crash
-- would hand a running attempt back to the queue. The rows are read by position, as
-- `models.Attempt`'s fields in order (`ledger.leased_from_rows`): the columns are listed, not
-- `a.*`, so a column added to the table (such as `rows`, which no lease reads) changes nothing.
WITH locked AS (
    SELECT a.id, a.run_scheduled_for, a.ctid
      FROM unnest(current_setting('tickwarden.lease_ids')::bigint[],
                  current_setting('tickwarden.lease_ticks')::timestamptz[]) AS g (id, run_scheduled_for)
     CROSS JOIN LATERAL (
        SELECT a.id, a.run_scheduled_for, a.ctid
          FROM attempts a
         WHERE a.id = g.id AND a.run_scheduled_for = g.run_scheduled_for
           AND a.run_scheduled_for BETWEEN nullif(current_setting('tickwarden.lease_first'), '')::timestamptz
                                       AND nullif(current_setting('tickwarden.lease_last'), '')::timestamptz
           AND a.status = 'queued'
           FOR UPDATE SKIP LOCKED
     ) a
), leased AS (
    UPDATE attempts a
       SET status = 'running', worker_id = %(worker_id)s,
           started_at = CASE WHEN a.id = ANY ((current_setting('tickwarden.lease_ids')::bigint[])[1:%(start)s])
                             THEN %(now)s::timestamptz END,
           heartbeat_at = %(now)s, lease_expires_at = %(lease_expires_at)s
      FROM locked
     WHERE a.ctid = ANY (ARRAY(SELECT ctid FROM locked))
       AND a.id = locked.id AND a.run_scheduled_for = locked.run_scheduled_for
       AND a.run_scheduled_for BETWEEN nullif(current_setting('tickwarden.lease_first'), '')::timestamptz
                                   AND nullif(current_setting('tickwarden.lease_last'), '')::timestamptz
    RETURNING a.id, a.tenant_id, a.workflow_id, a.run_id, a.run_scheduled_for, a.number, a.status, a.worker_id,
              a.lease_expires_at, a.queued_at, a.started_at, a.heartbeat_at, a.finished_at, a.retryable,
              a.error_category, a.error, a.failed_step, a.log_tail, a.outputs
), started AS (
    UPDATE runs r
       SET status = 'running', started_at = coalesce(r.started_at, %(now)s)
      FROM leased
     WHERE r.id = leased.run_id AND r.scheduled_for = leased.run_scheduled_for
       AND r.scheduled_for BETWEEN nullif(current_setting('tickwarden.lease_first'), '')::timestamptz
                               AND nullif(current_setting('tickwarden.lease_last'), '')::timestamptz
       AND r.status IN ('queued', 'pending_retry')
), dequeued AS (
    DELETE FROM attempt_queue q WHERE q.attempt_id = ANY (ARRAY(SELECT id FROM leased))
)
SELECT leased.* FROM leased ORDER BY leased.queued_at, leased.id;

-- ledger_renew_lease --
-- Extend a lease, only while this worker still holds it. The attempt's tick names its
-- month: one partition's probe, not one per month retention keeps. The probe is of its key:
-- `IS NOT DISTINCT FROM 'running'` (the same test as `=`, status being NOT NULL) cannot match
-- the running attempts' partial lease index, read whole otherwise (see `execution_start_attempt`).
UPDATE attempts
   SET heartbeat_at = %(now)s, lease_expires_at = %(lease_expires_at)s
 WHERE id = %(attempt_id)s AND run_scheduled_for = %(run_scheduled_for)s
   AND status IS NOT DISTINCT FROM 'running' AND worker_id = %(worker_id)s;

-- ledger_finish_attempts --
-- Record attempts' outcomes, each once: the compare-and-set on (running, worker) makes
-- a second delivery of the same result, or a result after the lease was reaped, a
-- no-op. Each run moves with its attempt: success is the verdict (recovered when a
-- retry saved it); a retryable failure with budget left for this tick is
-- pending_retry; otherwise failed. Attempts the platform lost and re-queued for free
-- (`lost_requeues`) do not count against the budget. One statement for one attempt
-- (the worker) or for a batch (the simulator), which never holds two attempts of one run.
-- Each attempt comes with its run's tick, the ledger's partition key: every read and
-- write below names it, as a join key and by `{months}`, the months from the batch's
-- earliest tick to its latest as constants (`store.ledger.finish_text`), so the plan holds
-- only those months' partitions however it is made. The worker's exchange runs it as a
-- plan made once per connection (`execution_generic_plans`: planning it cost several times
-- its work); a plan pruned only when it starts (by scalar parameters) still locks every
-- month's partitions at each execution before it prunes them (PostgreSQL 15), which cost
-- the server more than the writes themselves with a year of months. The ledger is
-- touched twice only, each table once: the attempt's workflow comes with it (its
-- `workflow_id`, as leased), so judging an empty result reads the workflow and not the
-- attempt, and the run's verdict is decided inside the update that records it, from the
-- run's own budget columns (a run not running, cancelled meanwhile, is not moved; its
-- attempt's row still comes back, with no run status).
-- The outcomes arrive as one JSON array (`outcomes`: an object per attempt), as the steps do.
-- Each finished attempt is queued for the outcome poller (`outcome_queue`) in the same statement,
-- and its steps' rows (`steps`: one object per step, each naming its attempt) are written
-- with it: only for an attempt that ends here under this worker, so a second delivery, or
-- a result after the lease was reaped, writes none.
-- `{reported}` and `{running}` are filled in by `store.ledger.finish_text`, by the batch's size.
-- A batch reads the array with `jsonb_to_recordset` and tests `= 'running'`. One outcome (the
-- worker's, at every attempt) reads its one object (`jsonb_to_record`, known to the planner as
-- one row, where a set of JSON is taken for 100) and tests `IS NOT DISTINCT FROM 'running'`
-- (the same test: status is NOT NULL), which cannot match the running attempts' partial lease
-- index: its attempt is then found by its key, one probe of the month's primary key. Given 100
-- rows, or that index, the plan read the whole partial index instead, hashing every running
-- attempt of the month, through every entry its leases and starts had left there since the
-- partition's last VACUUM (a bitmap scan never marks one dead): some 1,900 entries at each
-- outcome after 1,000 attempts, a cost that grew with every attempt until the next VACUUM.
WITH reported AS (
    SELECT *
      FROM {reported}
           AS o (attempt_id bigint, run_scheduled_for timestamptz, workflow_id bigint, status text,
                 finished_at timestamptz, error_category text, error text, failed_step text, retryable boolean,
                 log_tail text, outputs jsonb, rows bigint)
), outcome AS (
    -- A workflow that expects rows fails a success that reported none (empty_result,
    -- retryable: the data may be late); judged here so every writer of outcomes agrees.
    SELECT o.attempt_id, o.run_scheduled_for, o.workflow_id, e.status, o.finished_at, o.log_tail, o.outputs, o.rows,
           CASE WHEN e.empty THEN 'empty_result' ELSE o.error_category END AS error_category,
           CASE WHEN e.empty THEN 'the workflow expects rows and its steps reported none' ELSE o.error END AS error,
           CASE WHEN e.empty THEN NULL ELSE o.failed_step END AS failed_step,
           CASE WHEN e.empty THEN true ELSE o.retryable END AS retryable
      FROM reported o
      JOIN workflows w ON w.id = o.workflow_id,
           LATERAL (SELECT o.status = 'succeeded' AND w.expect_rows AND coalesce(o.rows, 0) = 0 AS empty) x,
           LATERAL (SELECT CASE WHEN x.empty THEN 'failed' ELSE o.status END AS status, x.empty) e
), done AS (
    UPDATE attempts a
       SET status = o.status, finished_at = o.finished_at, lease_expires_at = NULL,
           error_category = o.error_category, error = o.error, failed_step = o.failed_step,
           retryable = o.retryable, log_tail = o.log_tail, outputs = o.outputs, rows = o.rows
      FROM outcome o
     WHERE a.id = o.attempt_id AND a.run_scheduled_for = o.run_scheduled_for AND a.workflow_id = o.workflow_id
       AND a.run_scheduled_for {months}
       AND a.status {running} AND a.worker_id = %(worker_id)s
    RETURNING a.id, a.run_id, a.run_scheduled_for, a.number, a.status, a.retryable, a.error_category, a.error, a.failed_step,
              a.finished_at, a.rows, a.tenant_id, a.workflow_id
), queued AS (
    -- the outcome waits for the poller (outcome_queue), committed with the outcome itself
    INSERT INTO outcome_queue (attempt_id, tenant_id, workflow_id, run_id, run_scheduled_for, finished_at)
    SELECT id, tenant_id, workflow_id, run_id, run_scheduled_for, finished_at FROM done
), stepped AS (
    INSERT INTO attempt_steps (attempt_id, run_scheduled_for, tenant_id, step, position, status, started_at,
                               finished_at, log, output, error)
    SELECT done.id, done.run_scheduled_for, done.tenant_id, s.step, s.position, s.status, s.started_at,
           s.finished_at, coalesce(s.log, ''), s.output, s.error
      FROM done
      JOIN jsonb_to_recordset(%(steps)s::jsonb)
           AS s(attempt_id bigint, step text, position integer, status text, started_at timestamptz,
                finished_at timestamptz, log text, output jsonb, error text) ON s.attempt_id = done.id
), moved AS (
    -- the verdict: succeeded, pending_retry while the tick's budget lasts, else failed (the
    -- budget's test is written out twice: an update's FROM cannot see the row it updates)
    UPDATE runs r
       SET status = CASE WHEN done.status = 'succeeded' THEN 'succeeded'
                         WHEN done.retryable AND done.number - r.lost_requeues <= r.retry_budget THEN 'pending_retry'
                         ELSE 'failed' END,
           recovered = (done.status = 'succeeded' AND done.number > 1),
           finished_at = CASE WHEN done.status = 'succeeded'
                                   OR (done.retryable AND done.number - r.lost_requeues <= r.retry_budget) IS NOT TRUE
                              THEN done.finished_at END,
           error_category = CASE WHEN done.status <> 'succeeded' THEN done.error_category END,
           error = CASE WHEN done.status <> 'succeeded' THEN done.error END,
           failed_step = CASE WHEN done.status <> 'succeeded' THEN done.failed_step END,
           rows = done.rows
      FROM done
     WHERE r.id = done.run_id AND r.scheduled_for = done.run_scheduled_for
       AND r.scheduled_for {months} AND r.status = 'running'
    RETURNING r.id, r.status
), woken AS (
    -- the poller decides the retry or the verdict now, not at its next poll (sent at commit);
    -- unless `wake` is false: the worker wakes it from a transaction of its own, right after
    -- this one commits (`execution_wake_poller`), so that this commit does not hold the
    -- server's one notification lock through its WAL flush, serialising every worker's outcome
    SELECT pg_notify('tickwarden_wake', 'poller') FROM (SELECT 1 FROM done LIMIT 1) one WHERE %(wake)s
)
SELECT done.id AS attempt_id, done.run_id, done.number, moved.status AS run_status
  FROM done LEFT JOIN moved ON moved.id = done.run_id
 CROSS JOIN (SELECT count(*) FROM woken) w
 ORDER BY done.id;

-- ledger_lock_expired_leases --
-- Lock the attempts whose lease ran out, the first half of a reaper pass: SKIP LOCKED
-- (replicas of the reaper may pass at once) hands each to one pass, and the locks hold
-- until the pass's transaction ends, so `ledger_expire_leases` (sent with these rows, in
-- the same transaction) acts on rows nobody else can change meanwhile. Only this read
-- scans every month retention keeps (which leases ran out is not known ahead); the writes
-- after it are told the months, so their plans hold only those. A reaper pass sends this
-- and `ledger_expire_leases` as one statement (`store.ledger.reap_text`: the writes told
-- the month of its `now` and the one before, as constants), and the two apart only after
-- it locked a lease of an older month.
SELECT id, run_scheduled_for, started_at IS NULL AS ahead FROM attempts
 WHERE status = 'running' AND lease_expires_at <= %(now)s
 ORDER BY lease_expires_at
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED;

-- ledger_expire_leases --
-- Act on the attempts `ledger_lock_expired_leases` locked in this transaction (ids, ticks
-- and whether each was leased ahead, index for index), each once: the status guard is the
-- lock's, a row this transaction locked running is still running.
-- An attempt leased ahead and never started (`started_at` NULL: its worker never ran
-- a step of it) goes back to the queue exactly as `execution_release_attempts` gives
-- it back: queued, no worker, its run queued again; no `lost` row, nothing counted
-- against the run. Its worker, if alive (its leases ran out through a database outage),
-- can no longer start it: `execution_start_attempt` compares and sets on the worker.
-- A started attempt is lost (the worker was killed or its machine vanished). The
-- workflow did not fail, so before the run's deadline and at most %(free_requeues)s
-- times per run the attempt is queued again without spending the tick's budget
-- (counted in lost_requeues); past that, the loss takes the failure path like any
-- failed attempt, so a workflow that kills its worker every time still ends failed
-- (category lost, owner engineering). Every read and write names the attempts' ticks,
-- the ledger's partition key, as a join key and as the list of their months, so the plan
-- holds only those months' partitions (planned afresh at each execution, as
-- ledger_finish_attempts). Rows: the lost ones (requeued false), then the ones given back
-- (requeued true, run_status queued).
WITH expired AS (
    SELECT * FROM unnest(%(attempt_ids)s::bigint[], %(run_scheduled_fors)b::timestamptz[], %(aheads)s::boolean[])
                  AS e (id, run_scheduled_for, ahead)
), given_back AS (
    UPDATE attempts a
       SET status = 'queued', worker_id = NULL, lease_expires_at = NULL, started_at = NULL, heartbeat_at = NULL
      FROM expired
     WHERE a.id = expired.id AND a.run_scheduled_for = expired.run_scheduled_for AND expired.ahead
       AND a.run_scheduled_for = ANY (%(run_scheduled_fors)b::timestamptz[]) AND a.status = 'running'
    RETURNING a.id, a.run_id, a.run_scheduled_for, a.number
), requeued AS (
    UPDATE runs r SET status = 'queued'
      FROM given_back
     WHERE r.id = given_back.run_id AND r.scheduled_for = given_back.run_scheduled_for
       AND r.scheduled_for = ANY (%(run_scheduled_fors)b::timestamptz[]) AND r.status = 'running'
), done AS (
    UPDATE attempts a
       SET status = 'lost', finished_at = %(now)s, lease_expires_at = NULL, retryable = true,
           error_category = 'lost', error = 'the worker stopped renewing its lease'
      FROM expired
     WHERE a.id = expired.id AND a.run_scheduled_for = expired.run_scheduled_for AND NOT expired.ahead
       AND a.run_scheduled_for = ANY (%(run_scheduled_fors)b::timestamptz[]) AND a.status = 'running'
    RETURNING a.id, a.run_id, a.number, a.tenant_id, a.workflow_id, a.run_scheduled_for, a.finished_at
), queued AS (
    -- the loss waits for the poller (outcome_queue), as a reported outcome does
    INSERT INTO outcome_queue (attempt_id, tenant_id, workflow_id, run_id, run_scheduled_for, finished_at)
    SELECT id, tenant_id, workflow_id, run_id, run_scheduled_for, finished_at FROM done
), decided AS (
    SELECT done.*, free,
           CASE WHEN free OR done.number - r.lost_requeues <= r.retry_budget THEN 'pending_retry'
                ELSE 'failed' END AS run_status
      FROM done
      JOIN runs r ON r.id = done.run_id AND r.scheduled_for = done.run_scheduled_for
                 AND r.scheduled_for = ANY (%(run_scheduled_fors)b::timestamptz[]),
           LATERAL (SELECT r.lost_requeues < %(free_requeues)s AND %(now)s < r.deadline_at AS free) f
), moved AS (
    UPDATE runs r
       SET status = decided.run_status,
           lost_requeues = r.lost_requeues + decided.free::integer,
           finished_at = CASE WHEN decided.run_status = 'failed' THEN %(now)s END,
           error_category = 'lost', error = 'the worker stopped renewing its lease', failed_step = NULL
      FROM decided
     WHERE r.id = decided.run_id AND r.scheduled_for = decided.run_scheduled_for
       AND r.scheduled_for = ANY (%(run_scheduled_fors)b::timestamptz[]) AND r.status = 'running'
    RETURNING r.id, r.status
), woken AS (
    SELECT pg_notify('tickwarden_wake', 'poller') FROM (SELECT 1 FROM done LIMIT 1) one
)
SELECT decided.id AS attempt_id, decided.run_id, decided.number, moved.status AS run_status, false AS requeued
  FROM decided LEFT JOIN moved ON moved.id = decided.run_id
 CROSS JOIN (SELECT count(*) FROM woken) w
UNION ALL
SELECT given_back.id, given_back.run_id, given_back.number, 'queued', true
  FROM given_back;

-- ledger_queue_retries --
-- Launch the next attempt of each given run that is still pending a retry, not
-- before the run's backoff for it has passed since the failed attempt finished,
-- when the failure's category is one that time can heal (`patient`); any other
-- retry is queued at once. The status compare-and-set and UNIQUE (run_id, number)
-- keep racing engines to one. The runs come with their ticks, the ledger's partition
-- key, and `{months}` stands for the months from the earliest tick's to the latest's, as
-- constants (`store.ledger.in_months`): the plan prunes to those months' partitions when it is
-- made, so the server can keep one plan of the text for every batch of the same months
-- instead of planning each batch afresh (an array parameter prunes only a fresh plan,
-- and the fresh plan of this statement over a year of months cost more than its run).
-- The ids and ticks alone still say which runs. It returns what its callers read of each
-- queued retry (`LaunchedRetry`), not the whole attempt row.
WITH moved AS (
    UPDATE runs r
       SET status = 'queued', attempts_count = r.attempts_count + 1
     WHERE r.id = ANY(%(run_ids)b::bigint[])
       AND r.scheduled_for = ANY(%(run_scheduled_fors)b::timestamptz[])
       AND r.scheduled_for {months}
       AND r.status = 'pending_retry'
    RETURNING r.id, r.tenant_id, r.workflow_id, r.attempts_count, r.error_category, r.retry_backoff_seconds,
              r.scheduled_for
)
INSERT INTO attempts (tenant_id, workflow_id, run_id, run_scheduled_for, number, status, queued_at)
SELECT m.tenant_id, m.workflow_id, m.id, m.scheduled_for, m.attempts_count, 'queued',
       CASE WHEN m.error_category = ANY(%(patient)s::text[])
            THEN greatest(%(now)s, failed.finished_at
                          + make_interval(secs => coalesce(m.retry_backoff_seconds[m.attempts_count - 1], 0)))
            ELSE %(now)s END
  FROM moved m
  JOIN attempts failed ON failed.run_id = m.id AND failed.run_scheduled_for = m.scheduled_for
                     AND failed.run_scheduled_for {months}
                     AND failed.number = m.attempts_count - 1
RETURNING id, run_id, number, queued_at;

-- ledger_cancel_run --
-- An operator's cancel: a run with no verdict yet becomes cancelled with its actor,
-- and its queued or running attempt with it. The attempts are not queued for the
-- poller (`outcome_queue`), so it neither retries nor evaluates them (a cancel is no
-- verdict on the workflow: it neither breaks nor extends a failure streak). The worker
-- still running one finds its next lease renewal refused and abandons the attempt, and
-- its late outcome is refused by finish_attempts' compare-and-set on running.
WITH closed AS (
    UPDATE runs
       SET status = 'cancelled', finished_at = %(now)s, cancelled_by = %(actor)s,
           error_category = NULL, error = NULL, failed_step = NULL, recovered = false
     WHERE id = %(run_id)s AND status IN ('queued', 'running', 'pending_retry')
    RETURNING *
), stopped AS (
    UPDATE attempts a
       SET status = 'cancelled', finished_at = %(now)s, lease_expires_at = NULL
      FROM closed
     WHERE a.run_id = closed.id AND a.status IN ('queued', 'running')
    RETURNING a.id
)
SELECT closed.* FROM closed CROSS JOIN (SELECT count(*) FROM stopped) s;

-- ledger_get_run --
-- A run by id alone: one probe of every month's primary key (the key holds the month).
SELECT * FROM runs WHERE id = %(run_id)s;

-- ledger_get_run_in_month --
-- A run by id and tick, for a caller that has the run already: one month's probe.
SELECT * FROM runs WHERE id = %(run_id)s AND scheduled_for = %(scheduled_for)s;

-- ledger_get_run_for_tick --
SELECT * FROM runs WHERE workflow_id = %(workflow_id)s AND scheduled_for = %(scheduled_for)s AND NOT manual;

-- ledger_list_runs --
-- A workflow's runs newest first, paged by (scheduled_for, id).
SELECT * FROM runs
 WHERE workflow_id = %(workflow_id)s
   AND (%(before)s::timestamptz IS NULL OR scheduled_for < %(before)s)
 ORDER BY scheduled_for DESC, id DESC
 LIMIT %(limit)s;

-- ledger_list_attempts --
SELECT * FROM attempts WHERE run_id = %(run_id)s ORDER BY number;

-- ledger_list_attempts_in_month --
-- A run's attempts, given its tick: they live in its month, the only partition read.
SELECT * FROM attempts WHERE run_id = %(run_id)s AND run_scheduled_for = %(scheduled_for)s ORDER BY number;

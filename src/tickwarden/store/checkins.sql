-- checkins_issue_key --
-- Store a new ping key's hash for a workflow, replacing the previous one (rotation):
-- the old URL stops working in the same commit. The rate window starts afresh.
INSERT INTO checkin_keys (workflow_id, tenant_id, key_hash, created_at, window_start, window_count)
VALUES (%(workflow_id)s, %(tenant_id)s, %(key_hash)s, %(now)s, %(now)s, 0)
    ON CONFLICT (workflow_id) DO UPDATE
   SET key_hash = EXCLUDED.key_hash, created_at = EXCLUDED.created_at,
       window_start = EXCLUDED.window_start, window_count = 0
RETURNING workflow_id, created_at;

-- checkins_key_issued_at --
-- When the workflow's current ping key was issued (NULL row: none yet).
SELECT created_at FROM checkin_keys WHERE workflow_id = %(workflow_id)s;

-- checkins_use_key --
-- Find the workflow a ping key belongs to and count the request in the key's rate
-- window, in one statement: the row lock serialises concurrent pings of one key on
-- every replica, so the count is exact. A window older than its length starts over.
-- Lookup is by the key's hash through the unique index; nothing is compared with the
-- key itself, so response timing reveals nothing about stored keys.
UPDATE checkin_keys k
   SET window_start = CASE WHEN k.window_start <= %(window_floor)s THEN %(now)s ELSE k.window_start END,
       window_count = CASE WHEN k.window_start <= %(window_floor)s THEN 1 ELSE k.window_count + 1 END
 WHERE k.key_hash = %(key_hash)s
RETURNING k.workflow_id, k.tenant_id, k.window_start, k.window_count;

-- checkins_start_run --
-- A `start` report: the tick's run, still waiting, is now running (when it started is
-- the first report's time), and its deadline now includes the run timeout. Compare-and-set
-- on queued: a second start changes nothing.
UPDATE runs
   SET status = 'running', started_at = coalesce(started_at, %(at)s),
       deadline_at = greatest(deadline_at, %(deadline_at)s)
 WHERE id = %(run_id)s AND status = 'queued'
RETURNING *;

-- checkins_open_attempt --
-- The attempt a terminal report finishes: the run (queued or running, compare-and-set)
-- counts one attempt, which starts when the run started (its `start` report) or now.
-- Written running with a lease ending now only so that finish_attempts, in the same
-- transaction, takes it like any worker's attempt: nobody else ever sees it running.
WITH moved AS (
    UPDATE runs r
       SET status = 'running', started_at = coalesce(r.started_at, %(at)s), attempts_count = r.attempts_count + 1
     WHERE r.id = %(run_id)s AND r.scheduled_for = %(scheduled_for)s AND r.status IN ('queued', 'running')
    RETURNING r.id, r.tenant_id, r.workflow_id, r.attempts_count, r.started_at, r.scheduled_for
)
INSERT INTO attempts (tenant_id, workflow_id, run_id, run_scheduled_for, number, status, worker_id, lease_expires_at,
                      queued_at, started_at, heartbeat_at)
SELECT tenant_id, workflow_id, id, scheduled_for, attempts_count, 'running', %(worker_id)s, %(at)s, started_at, started_at, %(at)s
  FROM moved
RETURNING *;

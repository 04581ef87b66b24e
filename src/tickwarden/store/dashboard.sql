-- The dashboard's time-bounded reads. Every query here names a window [since, until)
-- and reaches the ledger through an index on (workflow_id, scheduled_for) or
-- (tenant_id, opened_at), one probe per visible workflow or tenant: a page costs
-- what its window holds, never a scan of the whole ledger. Row-level security
-- decides which workflows and tenants are visible.

-- dashboard_workflow_runs --
-- One workflow's runs in the window, newest first: the timeline and the duration chart.
SELECT r.id, r.scheduled_for, r.status, r.recovered, r.manual, r.started_at, r.finished_at,
       r.attempts_count, r.error_category, r.requested_by
  FROM runs r
 WHERE r.workflow_id = %(workflow_id)s
   AND r.scheduled_for >= %(since)s AND r.scheduled_for < %(until)s
 ORDER BY r.scheduled_for DESC, r.id DESC
 LIMIT %(limit)s;

-- dashboard_last_success --
-- A workflow's newest success: its workflow_successes row (migration 0026, kept by a
-- trigger on the runs), one probe whatever the history's length.
SELECT s.run_id AS id, s.scheduled_for, s.finished_at
  FROM workflow_successes s
 WHERE s.workflow_id = %(workflow_id)s;

-- dashboard_runs --
-- Runs of every visible workflow (of one tenant, when named) in the window, newest first,
-- optionally of one status: the runs list across workflows.
SELECT r.id, r.scheduled_for, r.status, r.recovered, r.manual, r.started_at, r.finished_at,
       r.attempts_count, r.error_category, r.requested_by,
       t.name AS tenant_name, w.name AS workflow_name
  FROM workflows w
  JOIN tenants t ON t.id = w.tenant_id
  CROSS JOIN LATERAL (
        SELECT * FROM runs
         WHERE workflow_id = w.id
           AND scheduled_for >= %(since)s AND scheduled_for < %(until)s
           AND (%(status)s::text IS NULL OR status = %(status)s::text)
         ORDER BY scheduled_for DESC, id DESC
         LIMIT %(limit)s) r
 WHERE (%(tenant)s::text IS NULL OR t.name = %(tenant)s::text)
 ORDER BY r.scheduled_for DESC, r.id DESC
 LIMIT %(limit)s;

-- dashboard_failure_buckets --
-- Failed and missed ticks of every visible workflow in the window, counted per bucket
-- (buckets start at `since`).
SELECT date_bin(%(bucket)s::interval, r.scheduled_for, %(since)s::timestamptz) AS bucket, count(*) AS n
  FROM workflows w
  CROSS JOIN LATERAL (
        SELECT scheduled_for FROM runs
         WHERE workflow_id = w.id
           AND scheduled_for >= %(since)s AND scheduled_for < %(until)s
           AND status IN ('failed', 'missed')) r
 GROUP BY 1;

-- dashboard_alert_buckets --
-- Alerts of every visible tenant opened in the window, counted per bucket.
SELECT date_bin(%(bucket)s::interval, a.opened_at, %(since)s::timestamptz) AS bucket, count(*) AS n
  FROM tenants t
  CROSS JOIN LATERAL (
        SELECT opened_at FROM alerts
         WHERE tenant_id = t.id AND opened_at >= %(since)s AND opened_at < %(until)s) a
 GROUP BY 1;

-- dashboard_recently_resolved --
-- Alerts resolved since `since`, newest resolution first. Only alerts opened after
-- `opened_since` are considered, so the read stays on the (tenant_id, opened_at) index.
SELECT a.*, t.name AS tenant_name, w.name AS workflow_name
  FROM tenants t
  CROSS JOIN LATERAL (
        SELECT * FROM alerts
         WHERE tenant_id = t.id AND opened_at >= %(opened_since)s
           AND status = 'resolved' AND resolved_at >= %(since)s) a
  JOIN workflows w ON w.id = a.workflow_id
 ORDER BY a.resolved_at DESC, a.id DESC
 LIMIT %(limit)s;

-- dashboard_checkin_issued --
-- When each of the listed workflows' ping key was issued (external workflows with a
-- check-in URL): the key itself is never stored, only its hash, which no page shows.
SELECT workflow_id, created_at FROM checkin_keys WHERE workflow_id = ANY(%(workflow_ids)s::bigint[]);

-- trigger_claim_due --
-- Lock the schedules that are due, earliest first, through the partial index on
-- next_fire_at. SKIP LOCKED gives concurrent tickers disjoint schedules, and a
-- schedule being written by a publish or a pause is skipped until it commits; only
-- active schedules of live workflows fire.
SELECT s.id AS schedule_id, s.tenant_id, s.workflow_id, s.cron, s.timezone, s.next_fire_at,
       s.starting_deadline_seconds, s.cadence_seconds,
       w.monitoring_enabled, w.timeout_seconds, w.policy_overrides::text AS policy_overrides, w.kind
  FROM schedules s
  JOIN workflows w ON w.id = s.workflow_id
 WHERE s.status = 'active' AND s.next_fire_at <= %(now)s AND w.archived_at IS NULL
 ORDER BY s.next_fire_at
 LIMIT %(limit)s
   FOR UPDATE OF s SKIP LOCKED;

-- trigger_earliest_fire --
-- The earliest pending fire time of an active schedule: one probe of the partial
-- index; the ticker sleeps until it.
SELECT min(next_fire_at) AS next_fire_at FROM schedules WHERE status = 'active';

-- trigger_notify_wake --
-- Wake sleeping loops early (delivered at commit); polling alone keeps them correct.
SELECT pg_notify('tickwarden_wake', %(loop)s);

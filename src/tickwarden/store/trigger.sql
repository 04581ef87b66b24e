-- trigger_claim_due --
-- Lock the fire rows of the schedules that are due, earliest first, through the partial
-- index on next_fire_at. SKIP LOCKED gives concurrent tickers disjoint schedules, and a
-- schedule being written by a publish or a pause is skipped until it commits; only
-- active schedules of live workflows fire. Only the narrow fire rows are locked: they are
-- what the pass writes, and a publish locks them too. The locked schedules come back
-- grouped by everything their ticks are made of (expression, zone, next fire time,
-- starting deadline, profile inputs, kind): a fleet due at one minute is a few rows, not
-- one per schedule. Each group's members travel as array text (the three arrays
-- aggregate the same rows in the same order, so they align index for index), which the
-- ticker hands back to `ledger_create_tick_runs` without reading it. That order is the
-- workflows' ids, said with ORDER BY: the runs' ids are given in it (a workflow has one
-- schedule, so it is total). Without it the members came in the order the plan met the
-- rows: the place of a fire row's newest version, which depends on what VACUUM had freed
-- when it was written (an older snapshot anywhere on the server holds that back), so a
-- second run of one simulated scenario could give two workflows' runs at one tick each
-- other's ids. `later`, on every
-- row: the earliest fire time of the schedules this claim did not take (due ones held
-- elsewhere or beyond the batch included), so that with the fire times the pass writes
-- it gives the earliest once the pass is done, with no read after its writes; when
-- nothing was claimed it is the one row, with no group.
WITH due AS (
    SELECT f.schedule_id AS id, f.tenant_id, f.workflow_id, f.next_fire_at, s.cron, s.timezone,
           s.starting_deadline_seconds, s.cadence_seconds, w.monitoring_enabled, w.timeout_seconds,
           w.policy_overrides::text AS policy_overrides, w.kind
      FROM schedule_fires f
      JOIN schedules s ON s.id = f.schedule_id
      JOIN workflows w ON w.id = f.workflow_id
     WHERE f.next_fire_at <= %(now)s AND s.status = 'active' AND w.archived_at IS NULL
     ORDER BY f.next_fire_at
     LIMIT %(limit)s
       FOR UPDATE OF f SKIP LOCKED
), groups AS (
    SELECT next_fire_at, cron, timezone, starting_deadline_seconds, cadence_seconds, monitoring_enabled,
           timeout_seconds, policy_overrides, kind, count(*) AS members,
           array_agg(id ORDER BY workflow_id)::text AS schedule_ids,
           array_agg(workflow_id ORDER BY workflow_id)::text AS workflow_ids,
           array_agg(tenant_id ORDER BY workflow_id)::text AS tenant_ids, min(workflow_id) AS first_workflow
      FROM due
     GROUP BY next_fire_at, cron, timezone, starting_deadline_seconds, cadence_seconds, monitoring_enabled,
              timeout_seconds, policy_overrides, kind
), rest AS (
    SELECT min(f.next_fire_at) AS later
      FROM schedule_fires f
     WHERE f.next_fire_at IS NOT NULL AND f.schedule_id NOT IN (SELECT id FROM due)
)
SELECT rest.later, g.next_fire_at, g.cron, g.timezone, g.starting_deadline_seconds, g.cadence_seconds,
       g.monitoring_enabled, g.timeout_seconds, g.policy_overrides, g.kind, g.members, g.schedule_ids,
       g.workflow_ids, g.tenant_ids
  FROM rest LEFT JOIN groups g ON true
 ORDER BY g.next_fire_at, g.first_workflow;

-- trigger_earliest_fire --
-- The earliest pending fire time of an active schedule (a paused one has none): one
-- probe of the partial index; the ticker sleeps until it.
SELECT min(next_fire_at) AS next_fire_at FROM schedule_fires WHERE next_fire_at IS NOT NULL;

-- trigger_notify_wake --
-- Wake sleeping loops early (delivered at commit); polling alone keeps them correct.
SELECT pg_notify('tickwarden_wake', %(loop)s);

-- environment_pods_ensure --
-- The pod row of an environment, created on its first wake (awake = false).
INSERT INTO environment_pods (environment_id, tenant_id) VALUES (%(environment_id)s, %(tenant_id)s)
    ON CONFLICT (environment_id) DO NOTHING;

-- environment_pods_lock --
-- Lock an environment's pod row until commit: wakes and stops of one environment take turns.
SELECT * FROM environment_pods WHERE environment_id = %(environment_id)s FOR UPDATE;

-- environment_pods_mark_awake --
-- Record a wake (counted only when it was asleep) and a use at `now`.
UPDATE environment_pods
   SET wakes = wakes + CASE WHEN awake THEN 0 ELSE 1 END,
       woken_at = CASE WHEN awake THEN woken_at ELSE %(now)s END,
       awake = true,
       last_used_at = greatest(coalesce(last_used_at, %(now)s), %(now)s)
 WHERE environment_id = %(environment_id)s;

-- environment_pods_touch --
-- A use of an awake environment (an attempt started or finished on it): the idle clock restarts.
UPDATE environment_pods SET last_used_at = greatest(coalesce(last_used_at, %(now)s), %(now)s)
 WHERE environment_id = %(environment_id)s;

-- environment_pods_idle --
-- Awake environments idle past their timeout and not serving a running attempt whose lease
-- is still valid, locked for the stop (SKIP LOCKED: another replica, or a wake, holds the rest).
SELECT p.environment_id, p.tenant_id
  FROM environment_pods p
  JOIN environments e ON e.id = p.environment_id
 WHERE p.awake
   AND p.last_used_at + make_interval(secs => e.idle_timeout_seconds) <= %(now)s
   AND NOT EXISTS (SELECT 1 FROM attempts a JOIN workflows w ON w.id = a.workflow_id
                    WHERE w.environment_id = p.environment_id AND a.status = 'running'
                      AND a.lease_expires_at > %(now)s)
 ORDER BY p.environment_id
   FOR UPDATE OF p SKIP LOCKED
 LIMIT %(limit)s;

-- environment_pods_mark_stopped --
UPDATE environment_pods SET awake = false, stopped_at = %(now)s WHERE environment_id = %(environment_id)s;

-- environment_pods_desired --
-- Every environment that runs as a pod, with its tenant's name and whether it should be awake.
SELECT e.*, t.name AS tenant, coalesce(p.awake, false) AS awake
  FROM environments e
  JOIN tenants t ON t.id = e.tenant_id
  LEFT JOIN environment_pods p ON p.environment_id = e.id
 WHERE e.runtime = 'kubernetes'
 ORDER BY e.id;

-- environment_pods_get --
SELECT * FROM environment_pods WHERE environment_id = %(environment_id)s;

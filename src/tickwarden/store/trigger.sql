-- trigger_drift_upserts --
-- Active schedules of live workflows whose trigger entry is missing or was built
-- from another schedule version: what the reconciler must (re)write.
SELECT s.id AS schedule_id, s.tenant_id, s.workflow_id, s.cron, s.timezone, s.version,
       s.starting_deadline_seconds, s.updated_at
  FROM schedules s
  JOIN workflows w ON w.id = s.workflow_id
  LEFT JOIN trigger_entries te ON te.schedule_id = s.id
 WHERE s.status = 'active' AND w.archived_at IS NULL
   AND (te.schedule_id IS NULL OR te.schedule_version <> s.version)
 ORDER BY s.id
 LIMIT %(limit)s;

-- trigger_drift_deletes --
-- Trigger entries whose schedule is paused or whose workflow is archived (entries of
-- deleted schedules go with them through the foreign key's cascade).
SELECT te.schedule_id
  FROM trigger_entries te
  JOIN schedules s ON s.id = te.schedule_id
  JOIN workflows w ON w.id = te.workflow_id
 WHERE s.status <> 'active' OR w.archived_at IS NOT NULL
 ORDER BY te.schedule_id
 LIMIT %(limit)s;

-- trigger_upsert_entries --
-- Write trigger entries for the given schedule versions. Joining the schedule at that
-- version drops an entry whose schedule moved on (or vanished) since it was read, and
-- the version guard keeps a slow reconciler from overwriting a newer entry.
INSERT INTO trigger_entries (schedule_id, tenant_id, workflow_id, cron, timezone, schedule_version,
                             next_fire_at, updated_at)
SELECT s.id, s.tenant_id, s.workflow_id, s.cron, s.timezone, s.version, e.next_fire_at, %(now)s
  FROM unnest(%(schedule_ids)s::bigint[], %(versions)s::integer[], %(next_fire_ats)b::timestamptz[])
       AS e (schedule_id, version, next_fire_at)
  JOIN schedules s ON s.id = e.schedule_id AND s.version = e.version
    ON CONFLICT (schedule_id) DO UPDATE
   SET cron = EXCLUDED.cron, timezone = EXCLUDED.timezone, schedule_version = EXCLUDED.schedule_version,
       next_fire_at = EXCLUDED.next_fire_at, updated_at = EXCLUDED.updated_at
 WHERE trigger_entries.schedule_version < EXCLUDED.schedule_version
RETURNING schedule_id;

-- trigger_delete_entries --
-- Remove trigger entries, only while their schedule is still paused or archived
-- (a resume that raced the reconciler keeps its entry for the next pass to update).
DELETE FROM trigger_entries te
 USING schedules s, workflows w
 WHERE te.schedule_id = ANY(%(schedule_ids)s::bigint[])
   AND s.id = te.schedule_id AND w.id = te.workflow_id
   AND (s.status <> 'active' OR w.archived_at IS NOT NULL)
RETURNING te.schedule_id;

-- trigger_claim_due --
-- Lock the trigger entries that are due, earliest first, through the partial index
-- on next_fire_at. SKIP LOCKED gives concurrent tickers disjoint entries; only entries
-- converged with an active schedule of a live workflow fire (the others wait for the
-- reconciler, which recomputes their next fire time from the edit, so nothing is lost).
SELECT te.schedule_id, te.tenant_id, te.workflow_id, te.cron, te.timezone, te.next_fire_at,
       s.starting_deadline_seconds, s.cadence_seconds,
       w.monitoring_enabled, w.timeout_seconds, w.policy_overrides::text AS policy_overrides
  FROM trigger_entries te
  JOIN schedules s ON s.id = te.schedule_id
  JOIN workflows w ON w.id = te.workflow_id
 WHERE te.next_fire_at <= %(now)s
   AND s.status = 'active' AND s.version = te.schedule_version AND w.archived_at IS NULL
 ORDER BY te.next_fire_at
 LIMIT %(limit)s
   FOR UPDATE OF te SKIP LOCKED;

-- trigger_advance_entries --
-- Move claimed entries to their next fire time, remembering the newest tick fired, and
-- return the earliest pending fire time afterwards (what trigger_earliest_fire would
-- say next). The statement's snapshot still shows the moved entries' old times, so
-- the earliest is the least of their new times and of the other entries': a walk of
-- the partial index past the moved entries (the due ones, so the first it meets),
-- each skipped through a hashed set, however large the batch.
WITH moved AS (
    UPDATE trigger_entries te
       SET next_fire_at = a.next_fire_at, last_fired_at = coalesce(a.last_fired_at, te.last_fired_at),
           updated_at = %(now)s
      FROM unnest(%(schedule_ids)s::bigint[], %(next_fire_ats)b::timestamptz[], %(last_fired_ats)b::timestamptz[])
           AS a (schedule_id, next_fire_at, last_fired_at)
     WHERE te.schedule_id = a.schedule_id
    RETURNING te.schedule_id, te.next_fire_at
)
SELECT least((SELECT min(next_fire_at) FROM moved),
             (SELECT min(next_fire_at) FROM trigger_entries
               WHERE next_fire_at IS NOT NULL
                 AND schedule_id NOT IN (SELECT schedule_id FROM moved))) AS earliest;

-- trigger_earliest_fire --
-- The earliest pending fire time: one probe of the partial index; the ticker sleeps until it.
SELECT min(next_fire_at) AS next_fire_at FROM trigger_entries WHERE next_fire_at IS NOT NULL;

-- trigger_list_entries --
-- Every trigger entry, for inspection and tests.
SELECT * FROM trigger_entries ORDER BY schedule_id;

-- trigger_notify_wake --
-- Wake sleeping loops early (delivered at commit); polling alone keeps them correct.
SELECT pg_notify('tickwarden_wake', %(loop)s);

-- Retry backoff: the wait before each retry of a tick, captured per tick from the
-- profile like its retry budget, so the deadline computed at the tick and the
-- retries launched later agree even if the workflow's policy is edited meanwhile.
-- Entry n (1-based) is the wait after attempt n failed with a category that time
-- can heal; the retry engine applies it from the failed attempt's finish.
ALTER TABLE runs ADD COLUMN retry_backoff_seconds integer[] NOT NULL DEFAULT '{}';

-- Ticks straight from schedules: the schedule row carries its next fire time, set in
-- the transaction that writes the schedule, and the ticker claims due schedules
-- itself. The trigger_entries copy, which only a later reconciler pass filled in,
-- goes: a schedule published between two reconciler passes used to have its first
-- ticks recorded missed although nothing had failed.
--
-- next_fire_at: the schedule's next fire time, written with the schedule (its first
-- tick strictly after the write) and moved on by the ticker that fires it; NULL while
-- paused, or when the expression never fires again. The ticker fires every tick at or
-- after it, so the backfill below may use a schedule's last write as a lower bound.
ALTER TABLE schedules ADD COLUMN next_fire_at timestamptz, ADD COLUMN last_fired_at timestamptz;
UPDATE schedules s
   SET next_fire_at = CASE WHEN te.schedule_version = s.version THEN te.next_fire_at ELSE s.updated_at END,
       last_fired_at = te.last_fired_at
  FROM trigger_entries te
 WHERE te.schedule_id = s.id AND s.status = 'active';
-- an active schedule the reconciler had not reached yet fires from its last write
UPDATE schedules s
   SET next_fire_at = s.updated_at
 WHERE s.status = 'active' AND s.next_fire_at IS NULL
   AND NOT EXISTS (SELECT 1 FROM trigger_entries te WHERE te.schedule_id = s.id);
DROP TABLE trigger_entries;
-- The ticker asks "which schedules are due?": an index range scan, whatever the fleet size.
CREATE INDEX schedules_due_idx ON schedules (next_fire_at) WHERE status = 'active';

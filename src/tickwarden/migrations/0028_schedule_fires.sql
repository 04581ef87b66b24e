-- A schedule's fire time in a narrow row of its own, beside the schedule.
--
-- The ticker moves every due schedule's next fire time on, at each of its ticks: at the
-- top of the hour, the whole fleet at once. The fire time is indexed (which schedules are
-- due), so that write cannot be a heap-only update: each one is a new row version and a
-- new entry in every index of its table. On `schedules` that was a copy of the wide row
-- and three index entries (the primary key, one schedule per workflow, the due index),
-- the largest cost of a tick after the runs and attempts themselves. Here it is a row of
-- five narrow columns and two index entries; the schedule row is written only when the
-- schedule is.
--
-- One owner per column, as before: the schedule's publish (`catalog_apply_schedule`)
-- writes the row with the schedule, in the same statement, and the ticker that fires it
-- moves it on. tenant_id and workflow_id never change; they are here so that tenant
-- isolation applies and a tick's run needs no second look at the schedule.
--
-- next_fire_at: the schedule's next fire time (its first tick strictly after the write
-- that set it); NULL while paused, or when the expression never fires again.
CREATE TABLE schedule_fires (
    schedule_id    bigint PRIMARY KEY REFERENCES schedules (id) ON DELETE CASCADE,
    tenant_id      bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    workflow_id    bigint NOT NULL,
    next_fire_at   timestamptz,
    last_fired_at  timestamptz             -- the newest tick the ticker fired
);
-- The ticker asks "which schedules are due?", and sleeps until the earliest: an index
-- range scan, whatever the fleet size.
CREATE INDEX schedule_fires_due_idx ON schedule_fires (next_fire_at) WHERE next_fire_at IS NOT NULL;

INSERT INTO schedule_fires (schedule_id, tenant_id, workflow_id, next_fire_at, last_fired_at)
SELECT id, tenant_id, workflow_id, CASE WHEN status = 'active' THEN next_fire_at END, last_fired_at
  FROM schedules;

DROP INDEX schedules_due_idx;
ALTER TABLE schedules DROP COLUMN next_fire_at, DROP COLUMN last_fired_at;

SELECT tickwarden_enforce_tenant_isolation();

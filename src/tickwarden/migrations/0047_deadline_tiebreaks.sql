-- The deadline pass takes its overdue runs in (deadline_at, id) order and its due watermarks in
-- (next_check_at, schedule_id) order, a limit at a time; their indexes held only the first key.
-- Runs of one tick share their deadline and watermarks of one minute their next check, so at
-- the top of the hour every open run past one deadline (every watermark due at one instant)
-- tied on the index's key, and each pass read all of them and sorted them to keep its limit:
-- on a fleet of 1,000,000 schedules, 198,000 runs and 938,000 watermarks a pass, sorted on
-- disk, about a second each. With the tiebreaker in the key the index gives the pass's order,
-- and the pass reads as many rows as it takes. Neither column added ever changes: a run's
-- lease and its move to pending_retry stay heap-only updates (migration 0042).
--
-- Building the runs' index reads every month of runs once, as migration 0042's did, and
-- holds writes of the runs (ticks, leases, outcomes) for that time; the index itself holds
-- the open runs alone. The watermarks' is one row a schedule.
DROP INDEX runs_open_deadline_idx;
CREATE INDEX runs_open_deadline_idx ON runs (deadline_at, id) WHERE finished_at IS NULL;
DROP INDEX tick_audits_due_idx;
CREATE INDEX tick_audits_due_idx ON tick_audits (next_check_at, schedule_id) WHERE next_check_at IS NOT NULL;

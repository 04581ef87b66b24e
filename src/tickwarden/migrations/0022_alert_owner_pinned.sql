-- Reassignment pins an alert's owner: a column the reassignment sets, read where later
-- failures would otherwise move the owner (no search of the event history).
ALTER TABLE alerts ADD COLUMN owner_pinned boolean NOT NULL DEFAULT false;
UPDATE alerts a SET owner_pinned = true
 WHERE EXISTS (SELECT 1 FROM alert_events e WHERE e.alert_id = a.id AND e.kind = 'reassigned');

-- The one definition of "escalate after N failures": the scheduled failures (a manual
-- run's failure is history, never a step towards escalation) reached the threshold
-- captured at open. The evaluator, the escalation clock and maintenance deferral all
-- read this column; none compares a count with the threshold itself.
ALTER TABLE alerts ADD COLUMN failures_reached_escalation boolean NOT NULL
    GENERATED ALWAYS AS (failure_count - manual_failures >= escalate_after) STORED;

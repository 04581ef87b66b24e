-- The schedules whose tick-audit watermark needs arming, kept by a trigger on `schedules`.
--
-- A deadline pass armed watermarks by an anti-join of every schedule against every
-- watermark (active schedules with no `tick_audits` row, or one of an older version), at
-- every pass: on a fleet of 1,000 schedules 0.63 ms a pass, and nearly always nothing
-- to arm. A schedule needs arming only after it was written: created active, or given a
-- new version or status (an edit, a pause, a resume). Each such write leaves its id here,
-- in the writer's transaction, whatever path it comes by; a deadline pass takes the rows
-- it sees (`monitoring_close_overdue_and_arm`) and arms from the schedule as it then is,
-- exactly as the anti-join did for those schedules, and only the deadline detector writes
-- `tick_audits`.
--
-- An append-only list, with no key: a write of a schedule never waits for a deadline pass
-- that holds the schedule's earlier row (a unique key would make it wait, while the pass
-- may wait for the writer's lock on the workflow to insert a missed run: a deadlock). A
-- schedule written twice before a pass is listed twice and armed once. A pass takes the
-- rows with FOR UPDATE SKIP LOCKED, so replicas take disjoint rows, and deletes them in
-- the statement that arms: a rolled-back pass leaves them listed. No foreign key either:
-- the row of a deleted schedule arms nothing and goes with the next pass.
CREATE TABLE tick_audit_arms (
    schedule_id bigint NOT NULL
);

CREATE FUNCTION tickwarden_tick_audit_arm() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tick_audit_arms (schedule_id) VALUES (NEW.id);
    RETURN NULL;
END
$$;

-- A paused schedule is not armed (a pass disarms its watermark); its resume moves the
-- status, and the version, and lists it.
CREATE TRIGGER tick_audit_armed AFTER INSERT ON schedules
    FOR EACH ROW WHEN (NEW.status = 'active') EXECUTE FUNCTION tickwarden_tick_audit_arm();
CREATE TRIGGER tick_audit_rearmed AFTER UPDATE OF version, status ON schedules
    FOR EACH ROW WHEN (NEW.status = 'active'
                       AND (OLD.version IS DISTINCT FROM NEW.version OR OLD.status IS DISTINCT FROM NEW.status))
    EXECUTE FUNCTION tickwarden_tick_audit_arm();

-- What the anti-join would arm now.
INSERT INTO tick_audit_arms (schedule_id)
SELECT s.id
  FROM schedules s
  LEFT JOIN tick_audits ta ON ta.schedule_id = s.id
 WHERE s.status = 'active'
   AND (ta.schedule_id IS NULL OR ta.schedule_version <> s.version);

SELECT tickwarden_enforce_tenant_isolation();

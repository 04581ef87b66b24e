-- Each workflow's newest success, kept beside the ledger so that the consecutive-failure
-- count reads only the months from it on.
--
-- The ledger is partitioned by month with a DEFAULT partition, so the planner cannot walk
-- the months newest first: finding a workflow's newest success in the runs themselves is
-- one probe of every month's success index, a cost that grows with the months retained.
-- This row names it directly (run id, tick and finish), and the failure count's walk of
-- the streak is pruned to the partitions from that tick on.
--
-- One owner: the trigger below writes the row whenever any statement makes a run
-- succeeded (the worker's outcome, a test fixture, an import), in that statement's
-- transaction, so the row and the run commit together. It only ever moves forward (newest
-- tick, then highest id), so concurrent successes of one workflow leave the newest.
-- Retention never expires a workflow's newest success, so the row never names a run gone.
CREATE TABLE workflow_successes (
    workflow_id    bigint PRIMARY KEY REFERENCES workflows (id) ON DELETE CASCADE,
    tenant_id      bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    run_id         bigint NOT NULL,         -- the run (an opaque reference, as alerts keep them)
    scheduled_for  timestamptz NOT NULL,    -- its tick: the ledger's partition key
    finished_at    timestamptz NOT NULL
);

CREATE FUNCTION tickwarden_note_success() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO workflow_successes AS s (workflow_id, tenant_id, run_id, scheduled_for, finished_at)
    VALUES (NEW.workflow_id, NEW.tenant_id, NEW.id, NEW.scheduled_for, NEW.finished_at)
        ON CONFLICT (workflow_id) DO UPDATE
       SET run_id = EXCLUDED.run_id, scheduled_for = EXCLUDED.scheduled_for, finished_at = EXCLUDED.finished_at
     WHERE (s.scheduled_for, s.run_id) < (EXCLUDED.scheduled_for, EXCLUDED.run_id);
    RETURN NULL;
END
$$;

-- Fires only for rows that are succeeded after the write: queued ticks and other updates
-- (retention clearing a log, erasure rewriting a name) never reach the function.
CREATE TRIGGER runs_note_success AFTER INSERT OR UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.status = 'succeeded') EXECUTE FUNCTION tickwarden_note_success();

-- The rows for the ledger as it is: one probe of each workflow's success index.
INSERT INTO workflow_successes (workflow_id, tenant_id, run_id, scheduled_for, finished_at)
SELECT w.id, w.tenant_id, ok.id, ok.scheduled_for, ok.finished_at
  FROM workflows w
 CROSS JOIN LATERAL (
       SELECT r.id, r.scheduled_for, r.finished_at FROM runs r
        WHERE r.workflow_id = w.id AND r.status = 'succeeded'
        ORDER BY r.scheduled_for DESC, r.id DESC
        LIMIT 1) ok;

SELECT tickwarden_enforce_tenant_isolation();

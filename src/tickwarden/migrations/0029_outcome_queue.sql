-- The outcome poller's work in a narrow table of its own: one row per finished attempt
-- that the poller has not claimed yet.
--
-- The poller used to find its work through a partial index of the attempts (finished,
-- processed_at NULL) and claim it by setting processed_at. That column is in the index's
-- predicate, so the claim could never be a heap-only update: every claimed attempt became
-- a new version of a wide row with a new entry in every index of its month's table, the
-- largest cost of processing an outcome. Here a claim deletes rows of six narrow columns
-- with two index entries each, and writes nothing to the ledger.
--
-- A row exists exactly while its outcome waits for the poller. One writer per path: the
-- statements that finish an attempt with an outcome to act on (the worker's
-- `ledger_finish_attempts`, which check-ins, the self-test and the simulator also use, and
-- the lease reaper's `ledger_expire_leases`) insert the row in the same statement, so the
-- outcome and its row commit together; the poller's claim deletes it. An attempt cancelled
-- with its run (an operator's cancel, a run the deadline detector missed) never gets one:
-- a cancel is no verdict on the workflow, and there is nothing to retry. Retention and
-- tenant erasure delete the rows of the attempts they delete.
--
-- Every column is copied from the attempt and never changes. The run's status is not
-- here: it may still move after the finish (a cancel, the deadline detector), so the claim
-- reads it from the run as it is. tenant_id is here so that erasure finds the rows and
-- tenant isolation applies; no foreign key: it would cost every finish a lookup, and a row
-- whose run is gone is consumed by the next claim without effect (the claim joins the run).
--
-- Platform-internal: only the platform reads or writes it (the loops, and the poll lag
-- metric, read as the platform). A tenant's request sees none of it, not even the rows of
-- its own attempts: the restrictive policy below is ANDed with the tenant isolation policy
-- that every table with a tenant_id gets, and survives that function's later runs (which
-- replace only `tenant_isolation`, and grant the application role every table again).
CREATE TABLE outcome_queue (
    attempt_id        bigint PRIMARY KEY,
    tenant_id         bigint NOT NULL,
    workflow_id       bigint NOT NULL,
    run_id            bigint NOT NULL,
    run_scheduled_for timestamptz NOT NULL,  -- the run's tick: the ledger's partition key
    finished_at       timestamptz NOT NULL   -- the attempt's: the claim takes the oldest first
);
-- The claim walks the queue oldest outcome first.
CREATE INDEX outcome_queue_order_idx ON outcome_queue (finished_at, attempt_id);

INSERT INTO outcome_queue (attempt_id, tenant_id, workflow_id, run_id, run_scheduled_for, finished_at)
SELECT id, tenant_id, workflow_id, run_id, run_scheduled_for, finished_at
  FROM attempts
 WHERE processed_at IS NULL AND status IN ('succeeded', 'failed', 'lost', 'cancelled');

-- Whether an attempt's outcome was processed is now whether its row is gone: the column
-- and its index would only go stale.
DROP INDEX attempts_unprocessed_idx;
ALTER TABLE attempts DROP COLUMN processed_at;

SELECT tickwarden_enforce_tenant_isolation();
CREATE POLICY platform_only ON outcome_queue AS RESTRICTIVE
    USING (current_setting('tickwarden.platform', true) = 'on')
    WITH CHECK (current_setting('tickwarden.platform', true) = 'on');

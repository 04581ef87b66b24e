-- A lease takes its attempts out of the queue itself, set-based; the row trigger no longer
-- fires for the move from queued to running.
--
-- Since 0031 every leased attempt fired the update trigger once, and its function deleted
-- the attempt's queue row by id: a function call, a deferred event and a probe per row, at
-- every lease (some 15,000 a simulated day of 1,000 workflows), though the lease has just
-- locked those very queue rows (`ledger_lease_queue`). Now each statement that leases
-- (the worker's `ledger_lease_attempts`, the Kubernetes `kubernetes_lease_tick_attempt` and
-- `kubernetes_lease_attempt`) deletes the queue rows of the attempts it moved, in the same
-- statement, by one probe of the queue's key with their ids.
--
-- The queue keeps one owner per transition: queued -> running is the lease's, and only
-- the three leasing statements make it (a statement that moved an attempt to running
-- otherwise would leave its queue row behind; no other does). Every other transition
-- stays the triggers': an insert of a queued attempt, a move into queued (a release, a
-- lease expired ahead, a retry), a move out of queued to anything but running (a cancel,
-- a missed run), a queued attempt's due time or number changing, and a delete (retention,
-- erasure, a run's cascade). The trigger is declared again with that narrower WHEN (dropped
-- from the parent, it goes from every partition; declared there, it is cloned to every
-- partition, present and future). No row moves: running attempts have no queue row
-- before this migration or after it.
DROP TRIGGER attempt_queue_moved ON attempts;
CREATE TRIGGER attempt_queue_moved AFTER UPDATE OF status, queued_at, number ON attempts
    FOR EACH ROW WHEN ((OLD.status = 'queued' AND NEW.status <> 'running') OR NEW.status = 'queued')
    EXECUTE FUNCTION tickwarden_attempt_queue_moved();

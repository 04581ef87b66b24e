-- Less work per row on the ledger's hot writes: a lease takes its attempts out of the queue
-- itself, and runs and attempts reference their workflow and tenant by one key.
--
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
-- stays the triggers': an insert of a queued attempt (a tick, a manual run, a retry), a
-- move into queued (a release, a lease expired ahead), a move out of queued to anything but
-- running (a cancel, a missed run), a queued attempt's due time or number changing, and a delete (retention,
-- erasure, a run's cascade). The trigger is declared again with that narrower WHEN (dropped
-- from the parent, it goes from every partition; declared there, it is cloned to every
-- partition, present and future). No row moves: running attempts have no queue row
-- before this migration or after it.
DROP TRIGGER attempt_queue_moved ON attempts;
CREATE TRIGGER attempt_queue_moved AFTER UPDATE OF status, queued_at, number ON attempts
    FOR EACH ROW WHEN ((OLD.status = 'queued' AND NEW.status <> 'running') OR NEW.status = 'queued')
    EXECUTE FUNCTION tickwarden_attempt_queue_moved();

-- A run's and an attempt's tenant is its workflow's: one foreign key each, on both columns.
--
-- Runs and attempts referenced tenants and workflows apart: every run the ticker inserts,
-- and every attempt, paid two referential checks (a lookup and a key-share lock of the
-- tenant's row, then of the workflow's), some 28,000 checks a simulated day of 1,000
-- workflows; and nothing tied a row's tenant to its workflow's. Here each references its
-- workflow by (id, tenant_id), unique in workflows: one check per row, and the row's tenant
-- is its workflow's, whose own key names an existing tenant (NOT NULL, ON DELETE CASCADE),
-- so the tenant still exists for every run and attempt. Deleting a tenant still deletes
-- its runs and attempts, through its workflows; deleting a workflow, through this key. An
-- attempt keeps its key to its run (month partition to month partition, migration 0023):
-- folding the workflow and tenant into that key would give every run an entry in one more
-- unique index, written again at each of its status changes.
--
-- The keys are added on the partitioned parents, so every partition, present and future,
-- gets them; PostgreSQL checks the rows already there as it adds them (it cannot defer that
-- check on a partitioned table): a run or attempt whose tenant is not its workflow's stops
-- the migration.
ALTER TABLE workflows ADD CONSTRAINT workflows_id_tenant_id_key UNIQUE (id, tenant_id);
DO $$
DECLARE
    old record;
BEGIN
    FOR old IN
        SELECT conrelid::regclass AS tab, conname FROM pg_constraint
         WHERE contype = 'f' AND conparentid = 0
           AND conrelid IN ('runs'::regclass, 'attempts'::regclass)
           AND confrelid IN ('tenants'::regclass, 'workflows'::regclass)
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', old.tab, old.conname);
    END LOOP;
END
$$;
ALTER TABLE runs ADD CONSTRAINT runs_workflow_tenant_fkey FOREIGN KEY (workflow_id, tenant_id)
    REFERENCES workflows (id, tenant_id) ON DELETE CASCADE;
ALTER TABLE attempts ADD CONSTRAINT attempts_workflow_tenant_fkey FOREIGN KEY (workflow_id, tenant_id)
    REFERENCES workflows (id, tenant_id) ON DELETE CASCADE;

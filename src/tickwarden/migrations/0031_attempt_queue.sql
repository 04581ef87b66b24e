-- The queued attempts in a narrow table of their own, so that a lease plans over one table.
--
-- A worker's lease looked for the oldest queued attempts through the attempts' partial
-- index (status queued), in every month partition retention keeps: the server planned a
-- merge over some seventeen partitions at every lease (about 1.6 ms of planning for
-- 0.2 ms of execution), and the idle worker's poll likewise. Which months hold queued
-- attempts is not known before the read, so no parameter can prune them; a generic plan
-- costs more still (it locks every partition as it starts). Here the lease and the poll
-- read one small unpartitioned table; the lease's write is told the months the rows name.
--
-- A row exists exactly while its attempt is queued: it carries the attempt's key (id and
-- the run's tick, the ledger's partition key), its run and workflow (what the lease sends
-- back) and its queued_at (the queue's order and due time). Every column is copied from
-- the attempt. The triggers below are the one owner of the table: every statement that
-- inserts a queued attempt (the ticker, a manual run, a retry, a Kubernetes tick, the
-- self-test), moves an attempt into or out of queued (a lease, a lease given back or
-- expired ahead, a release, a cancel, a missed run) or deletes one (retention, erasure,
-- a run's cascade) keeps it, in its own transaction, whatever path it comes by.
--
-- Inserts are caught once per statement, from its transition table: the ticker inserts a
-- fleet's first attempts in one statement, and one set-based insert of their queue rows
-- costs a fraction of one trigger call per row. Updates and deletes are caught per row,
-- filtered by WHEN on the row's status before any function is called, so renewals,
-- starts and finishes (which never involve queued) pay nothing but that comparison.
--
-- Retention drops a month only when no run of it is still open (queued, running or
-- pending a retry), so a dropped month takes no queued attempt with it.
--
-- tenant_id is here so that tenant isolation applies (a tenant's manual run writes its
-- own row) and erasure's tenant is found; no foreign key: it would cost every queued
-- attempt a lookup in its month's partition.
CREATE TABLE attempt_queue (
    attempt_id        bigint PRIMARY KEY,
    run_scheduled_for timestamptz NOT NULL,  -- the run's tick: the ledger's partition key
    run_id            bigint NOT NULL,
    workflow_id       bigint NOT NULL,
    tenant_id         bigint NOT NULL,
    queued_at         timestamptz NOT NULL   -- due from then; the lease takes the oldest first
);
-- The lease walks the queue oldest first, as it walked attempts_queued_idx.
CREATE INDEX attempt_queue_order_idx ON attempt_queue (queued_at, attempt_id);

CREATE FUNCTION tickwarden_attempt_queue_added() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO attempt_queue (attempt_id, run_scheduled_for, run_id, workflow_id, tenant_id, queued_at)
    SELECT id, run_scheduled_for, run_id, workflow_id, tenant_id, queued_at FROM added WHERE status = 'queued';
    RETURN NULL;
END
$$;

CREATE FUNCTION tickwarden_attempt_queue_moved() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- WHEN let through only rows queued before or after the change
    IF TG_OP = 'DELETE' OR NEW.status <> 'queued' THEN
        DELETE FROM attempt_queue WHERE attempt_id = OLD.id;
    ELSIF OLD.status <> 'queued' THEN
        INSERT INTO attempt_queue (attempt_id, run_scheduled_for, run_id, workflow_id, tenant_id, queued_at)
        VALUES (NEW.id, NEW.run_scheduled_for, NEW.run_id, NEW.workflow_id, NEW.tenant_id, NEW.queued_at);
    ELSIF NEW.queued_at IS DISTINCT FROM OLD.queued_at THEN
        UPDATE attempt_queue SET queued_at = NEW.queued_at WHERE attempt_id = NEW.id;
    END IF;
    RETURN NULL;
END
$$;

-- On the partitioned table: the statement trigger sees the rows of every partition, the
-- row triggers are cloned to every partition, present and future.
CREATE TRIGGER attempt_queue_added AFTER INSERT ON attempts
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION tickwarden_attempt_queue_added();
CREATE TRIGGER attempt_queue_moved AFTER UPDATE OF status, queued_at ON attempts
    FOR EACH ROW WHEN (OLD.status = 'queued' OR NEW.status = 'queued') EXECUTE FUNCTION tickwarden_attempt_queue_moved();
CREATE TRIGGER attempt_queue_removed AFTER DELETE ON attempts
    FOR EACH ROW WHEN (OLD.status = 'queued') EXECUTE FUNCTION tickwarden_attempt_queue_moved();

INSERT INTO attempt_queue (attempt_id, run_scheduled_for, run_id, workflow_id, tenant_id, queued_at)
SELECT id, run_scheduled_for, run_id, workflow_id, tenant_id, queued_at FROM attempts WHERE status = 'queued';

SELECT tickwarden_enforce_tenant_isolation();

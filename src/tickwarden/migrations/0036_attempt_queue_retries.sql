-- The queued attempts are read from their queue alone: the attempts' partial index of
-- queued rows goes, and the queue carries the attempt's number for the one reader that
-- chose by it.
--
-- Since 0031 the lease and the idle poll read `attempt_queue`; the partial index
-- `attempts_queued_idx` (queued_at, id WHERE status queued, one copy per month partition)
-- was left for the Kubernetes retry launcher's look for due retries and the self-test's
-- look for its tenant's queued attempts, which now read the queue too. Every queued
-- attempt paid for that index twice: an entry when it was inserted (the ticker inserts a
-- fleet's first attempts at once: 100,000 at the top of the hour, beside their queue
-- rows) and its removal's dead entry when it was leased. Dropping the parent's index drops
-- every partition's copy with it, present and future.
--
-- The retry launcher wants the due attempts numbered above 1, oldest first. The number
-- was only in the attempt: a walk of the queue joined back to each attempt by id and
-- month would probe a partition for every queued first attempt ahead of the retries (a
-- whole fleet's at the top of the hour). Here the queue row copies the number as it
-- copies the rest, and a partial index holds the retries alone, in the queue's order: a
-- first attempt's row pays one comparison for it, no entry. No statement changes an
-- attempt's number; the update trigger watches it all the same (beside status and
-- queued_at, a comparison of the changed columns' list), so the copy cannot go stale.
--
-- The triggers stay the one owner of the queue: their functions are replaced below with
-- the number among the columns they copy, and the update trigger is declared again with
-- number among the columns it watches (dropped from the parent, it goes from every
-- partition; declared there, it is cloned to every partition, present and future). The
-- rows already queued get their number from their attempts, in this transaction.
ALTER TABLE attempt_queue ADD COLUMN number integer;
UPDATE attempt_queue q SET number = a.number
  FROM attempts a
 WHERE a.id = q.attempt_id AND a.run_scheduled_for = q.run_scheduled_for;
ALTER TABLE attempt_queue ALTER COLUMN number SET NOT NULL;
-- The retry launcher walks the queued retries oldest first.
CREATE INDEX attempt_queue_retry_idx ON attempt_queue (queued_at, attempt_id) WHERE number > 1;

CREATE OR REPLACE FUNCTION tickwarden_attempt_queue_added() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO attempt_queue (attempt_id, run_scheduled_for, run_id, workflow_id, tenant_id, queued_at, number)
    SELECT id, run_scheduled_for, run_id, workflow_id, tenant_id, queued_at, number FROM added WHERE status = 'queued';
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION tickwarden_attempt_queue_moved() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- WHEN let through only rows queued before or after the change
    IF TG_OP = 'DELETE' OR NEW.status <> 'queued' THEN
        DELETE FROM attempt_queue WHERE attempt_id = OLD.id;
    ELSIF OLD.status <> 'queued' THEN
        INSERT INTO attempt_queue (attempt_id, run_scheduled_for, run_id, workflow_id, tenant_id, queued_at, number)
        VALUES (NEW.id, NEW.run_scheduled_for, NEW.run_id, NEW.workflow_id, NEW.tenant_id, NEW.queued_at, NEW.number);
    ELSIF NEW.queued_at IS DISTINCT FROM OLD.queued_at OR NEW.number <> OLD.number THEN
        UPDATE attempt_queue SET queued_at = NEW.queued_at, number = NEW.number WHERE attempt_id = NEW.id;
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER attempt_queue_moved ON attempts;
CREATE TRIGGER attempt_queue_moved AFTER UPDATE OF status, queued_at, number ON attempts
    FOR EACH ROW WHEN (OLD.status = 'queued' OR NEW.status = 'queued') EXECUTE FUNCTION tickwarden_attempt_queue_moved();

DROP INDEX attempts_queued_idx;

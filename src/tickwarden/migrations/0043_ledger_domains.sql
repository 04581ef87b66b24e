-- The ledger's single-column rules are domain constraints, not table CHECKs: the same rules,
-- paid once per session instead of at every statement.
--
-- PostgreSQL 15 builds a table's CHECK constraints afresh for every statement that inserts
-- into or updates the table (per partition written: each constraint's stored expression is
-- read back, planned and compiled; nothing is cached across statements), before it tests a
-- single row. `runs` had 8, `attempts` 6 and `attempt_steps` 1, and every hot write of a
-- simulated day writes one or more of them: the ticker's claim+fire (runs and attempts), the
-- lease (attempts, runs), each outcome (attempts, steps, runs), the reaper, the deadline
-- detector's closing. A domain's constraints are compiled once and kept in the session's
-- type cache (invalidated only when the domain changes), so a column of a constrained domain
-- costs a test per value written and no rebuild.
--
-- Every constraint that names one column moves to a domain of that column's type, with the
-- same test, but an attempt's `number >= 1`; the ones relating two columns stay table CHECKs
-- (runs: a recovered run succeeded, a verdict has a finish; attempts: running has a lease, a
-- verdict has a finish). Nullability stays the columns' (NOT NULL), and a CHECK passes a NULL
-- as before. A value that breaks a rule is still refused with check_violation (SQLSTATE
-- 23514); the message names the domain's constraint instead of the table's. A client reading
-- these columns sees their base types (PostgreSQL describes a domain column by its base type).
--
-- No table is rewritten or scanned: each column first moves to an unconstrained domain over
-- its own type (binary-identical: no rewrite), then the domain gets its constraint NOT VALID
-- (the rows already passed the very same test as a table CHECK, which is dropped here; every
-- value written from now on is tested), so the migration holds its locks for moments on a
-- ledger of any size. An index over a moved column is built again (PostgreSQL 15 built the
-- months' indexes anew: tests/integration/test_ledger_domains.py): the one such index is the
-- running leases' partial index, whose predicate names the attempt's status and which holds
-- the running attempts alone. That is why an attempt's `number` keeps its table CHECK: it is a column of the unique
-- key (run_id, number, run_scheduled_for), which would be rebuilt over every attempt kept.
-- The triggers whose WHEN clause names a moved column block ALTER COLUMN TYPE; they are
-- dropped and declared again as they were (migrations 0026, 0031, 0039), in this same
-- transaction. Partitions inherit their columns' types, present and future
-- (`tickwarden_ledger_partition`).
CREATE DOMAIN ledger_run_status AS text;
CREATE DOMAIN ledger_attempt_status AS text;
CREATE DOMAIN ledger_step_status AS text;
CREATE DOMAIN ledger_count AS integer;
CREATE DOMAIN ledger_rows AS bigint;
CREATE DOMAIN ledger_error_category AS text;
CREATE DOMAIN ledger_actor AS text;

DROP TRIGGER runs_note_success ON runs;
DROP TRIGGER attempt_queue_moved ON attempts;
DROP TRIGGER attempt_queue_removed ON attempts;

ALTER TABLE runs
    ALTER COLUMN status TYPE ledger_run_status,
    ALTER COLUMN retry_budget TYPE ledger_count,
    ALTER COLUMN attempts_count TYPE ledger_count,
    ALTER COLUMN lost_requeues TYPE ledger_count,
    ALTER COLUMN rows TYPE ledger_rows,
    ALTER COLUMN cancelled_by TYPE ledger_actor,
    DROP CONSTRAINT runs_status_check1,
    DROP CONSTRAINT runs_retry_budget_check1,
    DROP CONSTRAINT runs_attempts_count_check1,
    DROP CONSTRAINT runs_lost_requeues_check1,
    DROP CONSTRAINT runs_rows_check1,
    DROP CONSTRAINT runs_cancelled_by_check1;

ALTER TABLE attempts
    ALTER COLUMN status TYPE ledger_attempt_status,
    ALTER COLUMN rows TYPE ledger_rows,
    ALTER COLUMN error_category TYPE ledger_error_category,
    DROP CONSTRAINT attempts_status_check1,
    DROP CONSTRAINT attempts_rows_check1,
    DROP CONSTRAINT attempts_error_category_check1;

ALTER TABLE attempt_steps
    ALTER COLUMN status TYPE ledger_step_status,
    DROP CONSTRAINT attempt_steps_status_check1;

ALTER DOMAIN ledger_run_status ADD CONSTRAINT ledger_run_status_check
    CHECK (VALUE IN ('queued', 'running', 'pending_retry', 'succeeded', 'failed', 'missed', 'cancelled')) NOT VALID;
ALTER DOMAIN ledger_attempt_status ADD CONSTRAINT ledger_attempt_status_check
    CHECK (VALUE IN ('queued', 'running', 'succeeded', 'failed', 'lost', 'cancelled')) NOT VALID;
ALTER DOMAIN ledger_step_status ADD CONSTRAINT ledger_step_status_check
    CHECK (VALUE IN ('succeeded', 'failed', 'skipped', 'timeout')) NOT VALID;
ALTER DOMAIN ledger_count ADD CONSTRAINT ledger_count_check CHECK (VALUE >= 0) NOT VALID;
ALTER DOMAIN ledger_rows ADD CONSTRAINT ledger_rows_check CHECK (VALUE >= 0) NOT VALID;
ALTER DOMAIN ledger_error_category ADD CONSTRAINT ledger_error_category_check
    CHECK (VALUE ~ '^[a-z_]{1,32}$') NOT VALID;
ALTER DOMAIN ledger_actor ADD CONSTRAINT ledger_actor_check CHECK (length(VALUE) <= 254) NOT VALID;

-- The rules between a status and its finish, the same tests, with their lists of statuses as
-- one array constant each: PostgreSQL 15 reads each CHECK's stored expression back node by
-- node at every statement, and `ARRAY['succeeded', ...]` is stored as one constant node per
-- status, `'{succeeded,...}'::text[]` as one. Measured with pgbench under callgrind (a table
-- of the runs' three columns and their two row rules, one UPDATE a statement): 237,900
-- instructions a statement before, 219,000 after, 152,000 without the two rules. NOT VALID,
-- as the domains' constraints above: every row already passed the very same test.
ALTER TABLE runs
    DROP CONSTRAINT runs_check3,
    ADD CONSTRAINT runs_check3
        CHECK ((status = ANY ('{succeeded,failed,missed,cancelled}'::text[])) = (finished_at IS NOT NULL)) NOT VALID;
ALTER TABLE attempts
    DROP CONSTRAINT attempts_check3,
    ADD CONSTRAINT attempts_check3
        CHECK ((status = ANY ('{succeeded,failed,lost,cancelled}'::text[])) = (finished_at IS NOT NULL)) NOT VALID;

-- As 0026, 0039 and 0031 declared them.
CREATE TRIGGER runs_note_success AFTER INSERT OR UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.status = 'succeeded') EXECUTE FUNCTION tickwarden_note_success();
CREATE TRIGGER attempt_queue_moved AFTER UPDATE OF status, queued_at, number ON attempts
    FOR EACH ROW WHEN ((OLD.status = 'queued' AND NEW.status <> 'running') OR NEW.status = 'queued')
    EXECUTE FUNCTION tickwarden_attempt_queue_moved();
CREATE TRIGGER attempt_queue_removed AFTER DELETE ON attempts
    FOR EACH ROW WHEN (OLD.status = 'queued') EXECUTE FUNCTION tickwarden_attempt_queue_moved();

-- The ledger's row rules (the tests that relate two columns of a run or an attempt, and an
-- attempt's number) are one CHECK a table, a call of a function that holds them: the same
-- rules, rebuilt at each writing statement from a much smaller expression.
--
-- PostgreSQL 15 builds a table's CHECK constraints afresh for every statement that inserts into
-- or updates it (per partition written): each constraint's stored expression is read back from
-- its node text (`stringToNode`), planned and compiled before the first row is tested. After
-- migration 0043 moved the single-column rules to domains, that was still 2 constraints of
-- `runs` and 3 of `attempts`, about 5,600 characters of node text read back by every statement
-- that writes both (the ticker's runs and their attempts, a lease, an outcome): under callgrind,
-- over a simulated day of 100 workflows, 20,578 constraints rebuilt, 649 M of the simulation
-- backend's 9,190 M instructions in `ExecConstraints`, 483 M of them reading node text back.
-- A call of a function with the row's columns as arguments is a few hundred characters.
-- Measured in a single-user server under callgrind (a table of the runs' columns and rules, 2,000
-- UPDATEs of one row): 151,600 instructions a statement without the two rules, 225,600 with them
-- as CHECKs (one CHECK joining both with AND costs the same: the cost is the text, not the count),
-- 187,200 with them as this function. The function costs more per row (it is a PL/pgSQL call,
-- about 4,000 instructions against 1,100): at 10 rows a statement it is still 12,500 cheaper
-- (284,500 against 272,000), and the ledger's writes carry one to a few dozen rows each.
--
-- The rules are word for word those they replace, joined by AND: a row breaks the function's
-- CHECK exactly when it broke one of the CHECKs (a NULL, which none of these columns holds, passes
-- as it passed each one). A row that breaks one is refused with check_violation (SQLSTATE 23514),
-- as before; the message names the new constraint. IMMUTABLE: the result depends on the
-- arguments alone. NOT VALID, as 0043 added its rewritten rules: every row already passed the
-- very same tests, and nothing is scanned; every row written from now on is tested. Added on
-- the partitioned parents, the constraints reach every partition, present and future.
CREATE FUNCTION tickwarden_run_row_rules(status text, finished_at timestamptz, recovered boolean) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    -- a recovered run succeeded; a run has a finish exactly when it has its verdict
    RETURN (recovered = false OR status = 'succeeded')
       AND ((status = ANY ('{succeeded,failed,missed,cancelled}'::text[])) = (finished_at IS NOT NULL));
END
$$;

CREATE FUNCTION tickwarden_attempt_row_rules(status text, number integer, finished_at timestamptz,
                                             lease_expires_at timestamptz) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    -- numbered from 1; a running attempt has a lease, and only a running one; an attempt has a
    -- finish exactly when it has its verdict
    RETURN number >= 1
       AND ((status = 'running') = (lease_expires_at IS NOT NULL))
       AND ((status = ANY ('{succeeded,failed,lost,cancelled}'::text[])) = (finished_at IS NOT NULL));
END
$$;

ALTER TABLE runs
    DROP CONSTRAINT runs_check2,
    DROP CONSTRAINT runs_check3,
    ADD CONSTRAINT runs_row_rules CHECK (tickwarden_run_row_rules(status, finished_at, recovered)) NOT VALID;

ALTER TABLE attempts
    DROP CONSTRAINT attempts_number_check1,
    DROP CONSTRAINT attempts_check2,
    DROP CONSTRAINT attempts_check3,
    ADD CONSTRAINT attempts_row_rules
        CHECK (tickwarden_attempt_row_rules(status, number, finished_at, lease_expires_at)) NOT VALID;

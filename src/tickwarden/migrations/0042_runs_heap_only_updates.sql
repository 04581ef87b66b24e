-- A run's status changes are heap-only updates where they can be: no index of the runs names
-- its status, and the runs' pages keep room for the next version of their rows.
--
-- Every change of a run's status (queued -> running at the lease, running -> pending_retry or
-- a verdict at the outcome, pending_retry -> queued at the retry) wrote a new entry into each
-- of the runs' indexes (its key, the one-run-per-tick, the recent runs' and the open deadline's
-- indexes: four a change), since two partial indexes named the status in their predicates and
-- PostgreSQL makes an update heap-only only when no column an index reads, predicate
-- included, changes. Now:
--
-- * The open runs' deadline index says `finished_at IS NULL`, the same rows: a run is open
--   (queued, running, pending_retry) exactly when it has no finish, by the runs' CHECK
--   `(status IN ('succeeded', 'failed', 'missed', 'cancelled')) = (finished_at IS NOT NULL)`.
--   Every reader that wants the index names `finished_at IS NULL` (the deadline detector's
--   overdue runs, the in-flight metric, retention's open-run test, the simulator's next due).
-- * The tenants' success index goes (`runs_tenant_success_idx`, written at every success
--   and named status): its one reader, the tenants' last-success metric, reads each tenant's
--   workflows' newest successes from workflow_successes (migration 0026), one row a workflow.
-- * The runs' partitions are filled to 75 %, so the lease's new version of a row finds room
--   on its page (a new version on another page is never heap-only): a fleet's ticks are
--   inserted into the same pages, and then each of them is leased and finished within
--   minutes. Dead versions are pruned from a page when its free space falls below the fill
--   factor's, so the room comes back for the next change of the page's rows. On a simulated
--   day (1,000 workflows) 75 % made every lease, move to pending_retry and retry heap-only
--   (17,046 of 30,580 updates), as 50 % did, where 90 % left 16,037 and 100 % 13,682.
--   Partitions made from now on get it as they are created (`tickwarden_ledger_partition`,
--   below); pages written before this migration keep their layout until their rows move.
--
-- The move to a verdict still writes an entry into the key, the one-run-per-tick and the recent
-- runs' indexes (its finish is in the deadline index's predicate, so it is no heap-only update);
-- the lease, the move to pending_retry and the retry's queued write none.
DROP INDEX runs_open_deadline_idx;
CREATE INDEX runs_open_deadline_idx ON runs (deadline_at) WHERE finished_at IS NULL;
DROP INDEX runs_tenant_success_idx;

DO $$
DECLARE
    part regclass;
BEGIN
    FOR part IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'runs'::regclass LOOP
        EXECUTE format('ALTER TABLE %s SET (fillfactor = 75)', part);
    END LOOP;
END
$$;

-- As 0023 made it, but the runs' partition is created with the runs' fill factor.
CREATE OR REPLACE FUNCTION tickwarden_ledger_partition(at timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    lower_bound timestamptz := date_trunc('month', at, 'UTC');
    upper_bound timestamptz := (date_trunc('month', at, 'UTC') AT TIME ZONE 'UTC' + interval '1 month') AT TIME ZONE 'UTC';
    suffix text := to_char(date_trunc('month', at, 'UTC') AT TIME ZONE 'UTC', '"p"YYYYMM');
    bounds text;
    moving boolean;
    target text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(current_schema() || '.ledger_partitions', 0));
    IF to_regclass(format('%I.%I', current_schema(), 'runs_' || suffix)) IS NOT NULL THEN
        RETURN false;
    END IF;
    bounds := format('FOR VALUES FROM (%L) TO (%L)',
                     to_char(lower_bound AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS+00'),
                     to_char(upper_bound AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS+00'));
    moving := EXISTS (SELECT 1 FROM runs_default WHERE scheduled_for >= lower_bound AND scheduled_for < upper_bound);
    IF moving THEN
        LOCK TABLE runs, attempts, attempt_steps IN EXCLUSIVE MODE;
        CREATE TEMP TABLE tickwarden_moving_runs ON COMMIT DROP AS
            SELECT * FROM runs_default WHERE scheduled_for >= lower_bound AND scheduled_for < upper_bound;
        CREATE TEMP TABLE tickwarden_moving_attempts ON COMMIT DROP AS
            SELECT * FROM attempts_default WHERE run_scheduled_for >= lower_bound AND run_scheduled_for < upper_bound;
        CREATE TEMP TABLE tickwarden_moving_steps ON COMMIT DROP AS
            SELECT * FROM attempt_steps_default
             WHERE run_scheduled_for >= lower_bound AND run_scheduled_for < upper_bound;
        -- attempts and steps go with their runs (ON DELETE CASCADE)
        DELETE FROM runs_default WHERE scheduled_for >= lower_bound AND scheduled_for < upper_bound;
    END IF;
    EXECUTE format('CREATE TABLE %I PARTITION OF runs %s WITH (fillfactor = 75)', 'runs_' || suffix, bounds);
    EXECUTE format('CREATE TABLE %I PARTITION OF attempts %s', 'attempts_' || suffix, bounds);
    EXECUTE format('CREATE TABLE %I PARTITION OF attempt_steps %s', 'attempt_steps_' || suffix, bounds);
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I FOREIGN KEY (run_id, run_scheduled_for)'
                   ' REFERENCES %I (id, scheduled_for) ON DELETE CASCADE',
                   'attempts_' || suffix, 'attempts_' || suffix || '_run_fkey', 'runs_' || suffix);
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I FOREIGN KEY (attempt_id, run_scheduled_for)'
                   ' REFERENCES %I (id, run_scheduled_for) ON DELETE CASCADE',
                   'attempt_steps_' || suffix, 'attempt_steps_' || suffix || '_attempt_fkey', 'attempts_' || suffix);
    FOREACH target IN ARRAY ARRAY['runs_' || suffix, 'attempts_' || suffix, 'attempt_steps_' || suffix] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', target);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', target);
        EXECUTE format(
            'CREATE POLICY tenant_isolation ON %I'
            ' USING (current_setting(''tickwarden.platform'', true) = ''on'''
            ' OR tenant_id = nullif(current_setting(''tickwarden.tenant_id'', true), '''')::bigint)'
            ' WITH CHECK (current_setting(''tickwarden.platform'', true) = ''on'''
            ' OR tenant_id = nullif(current_setting(''tickwarden.tenant_id'', true), '''')::bigint)', target);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I TO tickwarden_app', target);
    END LOOP;
    IF moving THEN
        INSERT INTO runs OVERRIDING SYSTEM VALUE SELECT * FROM tickwarden_moving_runs;
        INSERT INTO attempts OVERRIDING SYSTEM VALUE SELECT * FROM tickwarden_moving_attempts;
        INSERT INTO attempt_steps SELECT * FROM tickwarden_moving_steps;
        DROP TABLE tickwarden_moving_runs, tickwarden_moving_attempts, tickwarden_moving_steps;
    END IF;
    RETURN true;
END
$$;
REVOKE EXECUTE ON FUNCTION tickwarden_ledger_partition(timestamptz) FROM PUBLIC;

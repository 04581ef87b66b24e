-- ANALYZE leaves the ledger's payload columns alone: statistics target 0 on the free text and
-- json a run, an attempt or a step carries (`runs.error`, `requested_by`, `cancelled_by`;
-- `attempts.error`, `log_tail`, `outputs`; `attempt_steps.log`, `output`, `error`).
--
-- ANALYZE of a table samples its rows, then sorts each column's sampled values to find the
-- most common ones and a histogram: for these columns the longest values of the ledger (a log,
-- an error message, a json document), compared by collation or by jsonb order, for statistics
-- no plan uses. No statement filters, joins, groups or sorts the ledger on them: they are
-- written, read back as they are, and cleared or rewritten by row. Retention's expiry tests them
-- (`IS NOT NULL`, `<> ''`, `<> '{}'`) only on rows already found by their run
-- (`retention_expire_logs`, `retention_expire_payloads`); without statistics the planner takes
-- such a test to keep nearly every row, which changes no access path there (the rows are found
-- by `run_id`). Erasure's search tests `strpos(lower(column::text), needle) > 0` on every row of
-- the table, an expression whose estimate never came from the column's statistics. A plan
-- decides how rows are found, never which. `failed_step` keeps its statistics: the alert's and
-- the API's step lookups join `attempt_steps.step` on it; so do `worker_id` (the lease's and the
-- worker's tests) and every status, instant and key.
--
-- Set on the partitioned tables, which PostgreSQL carries to the partitions that exist, but not
-- to a partition created later (`CREATE TABLE ... PARTITION OF` starts every column at the
-- default target): `tickwarden_ledger_partition` (as 0042 made it) now gives each new month its
-- parent's per-column targets, whatever they are.
ALTER TABLE runs ALTER COLUMN error SET STATISTICS 0;
ALTER TABLE runs ALTER COLUMN requested_by SET STATISTICS 0;
ALTER TABLE runs ALTER COLUMN cancelled_by SET STATISTICS 0;
ALTER TABLE attempts ALTER COLUMN error SET STATISTICS 0;
ALTER TABLE attempts ALTER COLUMN log_tail SET STATISTICS 0;
ALTER TABLE attempts ALTER COLUMN outputs SET STATISTICS 0;
ALTER TABLE attempt_steps ALTER COLUMN log SET STATISTICS 0;
ALTER TABLE attempt_steps ALTER COLUMN output SET STATISTICS 0;
ALTER TABLE attempt_steps ALTER COLUMN error SET STATISTICS 0;

-- A partition analyzed before keeps its statistics of those columns until it is dropped
-- (ANALYZE with target 0 neither refreshes nor removes them): harmless, no plan turns on them.
-- SET STATISTICS takes a SHARE UPDATE EXCLUSIVE lock: reads and writes of the ledger go on.

-- As 0042 made it, and a new partition takes its parent's per-column statistics targets.
CREATE OR REPLACE FUNCTION tickwarden_ledger_partition(at timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    lower_bound timestamptz := date_trunc('month', at, 'UTC');
    upper_bound timestamptz := (date_trunc('month', at, 'UTC') AT TIME ZONE 'UTC' + interval '1 month') AT TIME ZONE 'UTC';
    suffix text := to_char(date_trunc('month', at, 'UTC') AT TIME ZONE 'UTC', '"p"YYYYMM');
    bounds text;
    moving boolean;
    target text;
    parent text;
    col record;
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
    FOREACH parent IN ARRAY ARRAY['runs', 'attempts', 'attempt_steps'] LOOP
        FOR col IN SELECT a.attname, a.attstattarget FROM pg_attribute a
                    WHERE a.attrelid = format('%I.%I', current_schema(), parent)::regclass
                      AND a.attnum > 0 AND NOT a.attisdropped AND a.attstattarget >= 0 LOOP
            EXECUTE format('ALTER TABLE %I ALTER COLUMN %I SET STATISTICS %s',
                           parent || '_' || suffix, col.attname, col.attstattarget);
        END LOOP;
    END LOOP;
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

-- Step outputs kept only when a workflow asks; the ledger partitioned by month.
--
-- The ledger (runs, attempts, attempt_steps) is migrated in place: the tables are renamed
-- aside, partitioned tables are created below, a month partition is
-- created for every month that holds runs, the rows are copied (ids kept, the identity
-- sequences continue where they were), and the old tables are dropped. Alerts keep run
-- ids as opaque references (a foreign key to a partitioned table must name the partition
-- key); readers join them with LEFT JOIN, and retention never expires an open alert's runs.

-- Step outputs and attempt outputs are customer data: stored only when the workflow asks.
ALTER TABLE workflows ADD COLUMN keep_outputs boolean NOT NULL DEFAULT false;

ALTER TABLE alerts DROP CONSTRAINT alerts_last_run_id_fkey;
ALTER TABLE alerts DROP CONSTRAINT alerts_resolved_by_run_id_fkey;

DROP INDEX runs_one_per_tick_idx, runs_workflow_recent_idx, runs_workflow_success_idx, runs_open_deadline_idx,
           runs_tenant_success_idx, attempts_queued_idx, attempts_running_lease_idx, attempts_unprocessed_idx;
ALTER TABLE runs RENAME TO runs_unpartitioned;
ALTER TABLE runs_unpartitioned RENAME CONSTRAINT runs_pkey TO runs_unpartitioned_pkey;
ALTER SEQUENCE runs_id_seq RENAME TO runs_unpartitioned_id_seq;
ALTER TABLE attempts RENAME TO attempts_unpartitioned;
ALTER TABLE attempts_unpartitioned RENAME CONSTRAINT attempts_pkey TO attempts_unpartitioned_pkey;
ALTER TABLE attempts_unpartitioned RENAME CONSTRAINT attempts_run_id_number_key TO attempts_unpartitioned_run_id_number_key;
ALTER SEQUENCE attempts_id_seq RENAME TO attempts_unpartitioned_id_seq;
ALTER TABLE attempt_steps RENAME TO attempt_steps_unpartitioned;
ALTER TABLE attempt_steps_unpartitioned RENAME CONSTRAINT attempt_steps_pkey TO attempt_steps_unpartitioned_pkey;

-- The run ledger: one row per tick (or manual run), the customer's view.
--
--   queued ──► running ──► succeeded            (recovered when a retry saved it)
--     ▲           │   └──► failed               (budget exhausted, or not retryable)
--     │           └──────► pending_retry ──► queued (the next attempt)
--     └── missed ◄── (deadline passed with no terminal outcome, or the tick never ran)
--   any non-terminal ──► cancelled
--
-- The ledger (runs, attempts, attempt_steps) is partitioned by the run's tick, one
-- partition per UTC month, so that expiring a month of metadata is dropping three
-- tables instead of deleting millions of rows. A run's attempts and steps carry its
-- `scheduled_for` (`run_scheduled_for`) and so live in the same month; their foreign keys
-- are declared partition to partition (see tickwarden_ledger_partition), which keeps
-- ON DELETE CASCADE and lets a month be dropped with no scan of the other months. The
-- DEFAULT partitions catch a row whose month has no partition yet: a write never fails
-- for want of a partition, and the retention loop moves such rows when it creates it.
CREATE TABLE runs (
    id               bigint GENERATED ALWAYS AS IDENTITY,
    tenant_id        bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    workflow_id      bigint NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
    -- the tick this run belongs to; for a manual run, when it was requested (the partition key)
    scheduled_for    timestamptz NOT NULL,
    manual           boolean NOT NULL DEFAULT false,
    status           text NOT NULL CHECK (status IN
                        ('queued', 'running', 'pending_retry', 'succeeded', 'failed', 'missed', 'cancelled')),
    recovered        boolean NOT NULL DEFAULT false,
    retry_budget     integer NOT NULL CHECK (retry_budget >= 0),   -- captured per tick from the profile
    attempts_count   integer NOT NULL DEFAULT 0 CHECK (attempts_count >= 0),
    deadline_at      timestamptz NOT NULL,
    error_category   text,
    error            text,                  -- sanitized, one line
    failed_step      text,
    requested_by     text,                  -- who asked for a manual run
    created_at       timestamptz NOT NULL,
    started_at       timestamptz,
    finished_at      timestamptz,
    -- attempts lost to the platform that were queued again without spending the budget
    lost_requeues    integer NOT NULL DEFAULT 0 CHECK (lost_requeues >= 0),
    retry_backoff_seconds integer[] NOT NULL DEFAULT '{}',  -- wait before each retry, captured per tick
    rows             bigint CHECK (rows IS NULL OR rows >= 0),  -- rows the verdict's attempt reported
    cancelled_by     text CHECK (length(cancelled_by) <= 254),  -- who cancelled the run by hand
    -- the partition key is part of every unique rule; ids still come from one sequence
    PRIMARY KEY (id, scheduled_for),
    CHECK (recovered = false OR status = 'succeeded'),
    CHECK ((status IN ('succeeded', 'failed', 'missed', 'cancelled')) = (finished_at IS NOT NULL))
) PARTITION BY RANGE (scheduled_for);
-- One run per tick: racing triggers insert the same tick and all but one do nothing.
-- The key holds the partition key, so the rule holds across partitions.
CREATE UNIQUE INDEX runs_one_per_tick_idx ON runs (workflow_id, scheduled_for) WHERE NOT manual;
-- A workflow's history newest first: the runs page and the consecutive-failure walk.
CREATE INDEX runs_workflow_recent_idx ON runs (workflow_id, scheduled_for DESC, id DESC);
-- The newest success of a workflow in one index probe: where the failure count stops.
CREATE INDEX runs_workflow_success_idx ON runs (workflow_id, scheduled_for DESC) WHERE status = 'succeeded';
-- The deadline detector scans only runs still waiting for an outcome.
CREATE INDEX runs_open_deadline_idx ON runs (deadline_at) WHERE status IN ('queued', 'running', 'pending_retry');
-- /metrics: each tenant's newest success in one index probe, whatever the ledger's length.
CREATE INDEX runs_tenant_success_idx ON runs (tenant_id, finished_at DESC) WHERE status = 'succeeded';

-- Attempts: every execution of a run, the engineer's view.
--
--   queued ──► running ──► succeeded | failed   (written by the worker)
--                 └──────► lost                 (lease expired: worker killed, machine gone)
--   queued | running ──► cancelled
CREATE TABLE attempts (
    id                bigint GENERATED ALWAYS AS IDENTITY,
    tenant_id         bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    workflow_id       bigint NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
    run_id            bigint NOT NULL,      -- the run (same month partition: see runs)
    run_scheduled_for timestamptz NOT NULL, -- the run's scheduled_for: the partition key
    number            integer NOT NULL CHECK (number >= 1),
    status            text NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'lost', 'cancelled')),
    worker_id         text,
    lease_expires_at  timestamptz,
    queued_at         timestamptz NOT NULL,
    started_at        timestamptz,
    heartbeat_at      timestamptz,
    finished_at       timestamptz,
    retryable         boolean,
    error_category    text CHECK (error_category IS NULL OR error_category ~ '^[a-z_]{1,32}$'),
    error             text,                 -- sanitized, one line
    failed_step       text,
    log_tail          text,                 -- sanitized, bounded
    outputs           jsonb NOT NULL DEFAULT '{}'::jsonb,
    -- set when the outcome poller claims the finished attempt; NULL = not yet processed
    processed_at      timestamptz,
    rows              bigint CHECK (rows IS NULL OR rows >= 0),  -- rows its steps reported; NULL: none did
    PRIMARY KEY (id, run_scheduled_for),
    UNIQUE (run_id, number, run_scheduled_for),
    CHECK ((status = 'running') = (lease_expires_at IS NOT NULL)),
    CHECK ((status IN ('succeeded', 'failed', 'lost', 'cancelled')) = (finished_at IS NOT NULL))
) PARTITION BY RANGE (run_scheduled_for);
-- Workers lease the oldest queued attempt.
CREATE INDEX attempts_queued_idx ON attempts (queued_at, id) WHERE status = 'queued';
-- The lease reaper looks only at running attempts.
CREATE INDEX attempts_running_lease_idx ON attempts (lease_expires_at) WHERE status = 'running';
-- The outcome poller claims finished, unprocessed attempts; the index holds only those.
CREATE INDEX attempts_unprocessed_idx ON attempts (finished_at, id)
    WHERE processed_at IS NULL AND status IN ('succeeded', 'failed', 'lost', 'cancelled');

-- What each step of an attempt did: status, sanitized log, small outputs.
CREATE TABLE attempt_steps (
    attempt_id   bigint NOT NULL,           -- the attempt (same month partition: see runs)
    run_scheduled_for timestamptz NOT NULL, -- the run's scheduled_for: the partition key
    tenant_id    bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    step         text NOT NULL,
    position     integer NOT NULL,
    status       text NOT NULL CHECK (status IN ('succeeded', 'failed', 'skipped', 'timeout')),
    started_at   timestamptz,
    finished_at  timestamptz,
    log          text NOT NULL DEFAULT '',
    output       jsonb,
    error        text,
    PRIMARY KEY (attempt_id, step, run_scheduled_for)
) PARTITION BY RANGE (run_scheduled_for);

CREATE TABLE runs_default PARTITION OF runs DEFAULT;
CREATE TABLE attempts_default PARTITION OF attempts DEFAULT;
CREATE TABLE attempt_steps_default PARTITION OF attempt_steps DEFAULT;
ALTER TABLE attempts_default ADD CONSTRAINT attempts_default_run_fkey FOREIGN KEY (run_id, run_scheduled_for)
    REFERENCES runs_default (id, scheduled_for) ON DELETE CASCADE;
ALTER TABLE attempt_steps_default ADD CONSTRAINT attempt_steps_default_attempt_fkey
    FOREIGN KEY (attempt_id, run_scheduled_for) REFERENCES attempts_default (id, run_scheduled_for) ON DELETE CASCADE;

CREATE OR REPLACE FUNCTION tickwarden_enforce_tenant_isolation() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    target record;
    tenant_check text;
BEGIN
    FOR target IN
        SELECT c.relname, (c.relname = 'tenants') AS is_tenants
          FROM pg_class c
          JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
           AND (c.relname = 'tenants' OR EXISTS (
                SELECT 1 FROM pg_attribute a
                 WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped))
         ORDER BY c.relname
    LOOP
        tenant_check := CASE WHEN target.is_tenants THEN 'id' ELSE 'tenant_id' END
            || ' = nullif(current_setting(''tickwarden.tenant_id'', true), '''')::bigint';
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', target.relname);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', target.relname);
        EXECUTE format('DROP POLICY IF EXISTS tenant_isolation ON %I', target.relname);
        EXECUTE format(
            'CREATE POLICY tenant_isolation ON %I'
            ' USING (current_setting(''tickwarden.platform'', true) = ''on'' OR %s)'
            ' WITH CHECK (current_setting(''tickwarden.platform'', true) = ''on'' OR %s)',
            target.relname, tenant_check, tenant_check);
    END LOOP;
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO tickwarden_app', current_schema());
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %I TO tickwarden_app', current_schema());
    EXECUTE format('GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %I TO tickwarden_app', current_schema());
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO tickwarden_app',
                   current_schema());
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT USAGE, SELECT ON SEQUENCES TO tickwarden_app',
                   current_schema());
END
$$;

-- Create the month partitions of the ledger (runs, attempts, attempt_steps) for the UTC
-- month holding `at`, unless they exist; return whether they were created. Replica-safe:
-- callers serialize on a transaction advisory lock keyed by the schema. Rows the DEFAULT
-- partitions caught for that month move into the new partitions, with writers held off
-- (EXCLUSIVE: reads go on) so that no update lands on a row while it moves. The new
-- partitions get row-level security like every tenant table: reached directly, they
-- filter by tenant as the parent does.
CREATE FUNCTION tickwarden_ledger_partition(at timestamptz) RETURNS boolean
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
    EXECUTE format('CREATE TABLE %I PARTITION OF runs %s', 'runs_' || suffix, bounds);
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

-- A partition for every month that holds runs, then the rows, ids and all.
SELECT tickwarden_ledger_partition(m)
  FROM (SELECT DISTINCT date_trunc('month', scheduled_for, 'UTC') AS m FROM runs_unpartitioned) months
 ORDER BY m;

INSERT INTO runs (id, tenant_id, workflow_id, scheduled_for, manual, status, recovered, retry_budget, attempts_count, deadline_at, error_category, error, failed_step, requested_by, created_at, started_at, finished_at, lost_requeues, retry_backoff_seconds, rows, cancelled_by) OVERRIDING SYSTEM VALUE
SELECT id, tenant_id, workflow_id, scheduled_for, manual, status, recovered, retry_budget, attempts_count, deadline_at, error_category, error, failed_step, requested_by, created_at, started_at, finished_at, lost_requeues, retry_backoff_seconds, rows, cancelled_by FROM runs_unpartitioned;

INSERT INTO attempts (id, tenant_id, workflow_id, run_id, number, status, worker_id, lease_expires_at, queued_at, started_at, heartbeat_at, finished_at, retryable, error_category, error, failed_step, log_tail, outputs, processed_at, rows, run_scheduled_for) OVERRIDING SYSTEM VALUE
SELECT a.id, a.tenant_id, a.workflow_id, a.run_id, a.number, a.status, a.worker_id, a.lease_expires_at, a.queued_at, a.started_at, a.heartbeat_at, a.finished_at, a.retryable, a.error_category, a.error, a.failed_step, a.log_tail, a.outputs, a.processed_at, a.rows, r.scheduled_for
  FROM attempts_unpartitioned a JOIN runs_unpartitioned r ON r.id = a.run_id;

INSERT INTO attempt_steps (attempt_id, tenant_id, step, position, status, started_at, finished_at, log, output, error, run_scheduled_for)
SELECT s.attempt_id, s.tenant_id, s.step, s.position, s.status, s.started_at, s.finished_at, s.log, s.output, s.error, r.scheduled_for
  FROM attempt_steps_unpartitioned s
  JOIN attempts_unpartitioned a ON a.id = s.attempt_id
  JOIN runs_unpartitioned r ON r.id = a.run_id;

SELECT setval(pg_get_serial_sequence('runs', 'id'), last_value, is_called) FROM runs_unpartitioned_id_seq;
SELECT setval(pg_get_serial_sequence('attempts', 'id'), last_value, is_called) FROM attempts_unpartitioned_id_seq;

DROP TABLE attempt_steps_unpartitioned, attempts_unpartitioned, runs_unpartitioned;

SELECT tickwarden_enforce_tenant_isolation();

-- The declared schema: what applying every migration in order must produce.
-- Change it together with a new migration; tests/integration/test_migrations.py checks both agree.

-- tickwarden's data model. Every tenant-owned row carries tenant_id so that
-- row-level security and per-tenant passes never need a join to find the owner.
-- Times are timestamptz and always written by the application's clock: no
-- column defaults to now(), so the simulator's virtual clock is the only clock.

CREATE TABLE tenants (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    display_name  text NOT NULL,
    -- shadow: evaluate and record alerts, but deliver only to shadow channels
    shadow        boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL
);

-- A publisher of schedules: the worker authenticates as this user on every run.
CREATE TABLE users (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id     bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    email         text NOT NULL CHECK (email ~ '^[^@\s]+@[^@\s]+$'),
    display_name  text NOT NULL,
    active        boolean NOT NULL DEFAULT true,
    created_at    timestamptz NOT NULL,
    UNIQUE (tenant_id, email)
);

-- A long-lived execution context of one tenant project, kept warm between runs.
CREATE TABLE environments (
    id                    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id             bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name                  text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    python                text,                          -- interpreter or venv; NULL = tickwarden's own
    idle_timeout_seconds  integer NOT NULL DEFAULT 600 CHECK (idle_timeout_seconds BETWEEN 1 AND 86400),
    settings              jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at            timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL,
    UNIQUE (tenant_id, name)
);

-- Where an environment is running right now: one process per environment and worker.
CREATE TABLE environment_instances (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id       bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    environment_id  bigint NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    worker_id       text NOT NULL,
    pid             integer,
    status          text NOT NULL CHECK (status IN ('starting', 'warm', 'busy', 'stopping', 'stopped', 'dead')),
    started_at      timestamptz NOT NULL,
    last_used_at    timestamptz NOT NULL,
    stopped_at      timestamptz,
    runs_served     integer NOT NULL DEFAULT 0,
    UNIQUE (environment_id, worker_id, started_at)
);
CREATE INDEX environment_instances_live_idx ON environment_instances (environment_id, worker_id)
    WHERE status IN ('starting', 'warm', 'busy');

CREATE TABLE workflows (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id           bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name                text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    description         text NOT NULL DEFAULT '',
    environment_id      bigint REFERENCES environments (id) ON DELETE RESTRICT,
    publisher_id        bigint REFERENCES users (id) ON DELETE RESTRICT,
    -- the recipe graph: {"steps": [{"name", "kind", "depends_on", ...}]}
    recipe              jsonb NOT NULL DEFAULT '{"steps": []}'::jsonb,
    timeout_seconds     integer CHECK (timeout_seconds BETWEEN 1 AND 604800),  -- NULL: derived from cadence
    monitoring_enabled  boolean NOT NULL DEFAULT true,
    policy_overrides    jsonb NOT NULL DEFAULT '{}'::jsonb,
    shadow              boolean NOT NULL DEFAULT false,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    archived_at         timestamptz,
    -- a zero-row success is a failed tick (category empty_result)
    expect_rows         boolean NOT NULL DEFAULT false,
    -- step outputs (customer data) are stored only when the workflow asks
    keep_outputs        boolean NOT NULL DEFAULT false,
    UNIQUE (tenant_id, name)
);

-- One schedule per workflow: the cron expression in its own zone.
CREATE TABLE schedules (
    id                         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id                  bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    workflow_id                bigint NOT NULL UNIQUE REFERENCES workflows (id) ON DELETE CASCADE,
    cron                       text NOT NULL,
    timezone                   text NOT NULL DEFAULT 'UTC',
    status                     text NOT NULL CHECK (status IN ('active', 'paused')),
    cadence_seconds            integer NOT NULL CHECK (cadence_seconds > 0),
    -- ticks older than this when first seen by a trigger are recorded missed, never run late
    starting_deadline_seconds  integer NOT NULL DEFAULT 300 CHECK (starting_deadline_seconds BETWEEN 1 AND 86400),
    version                    integer NOT NULL DEFAULT 1,   -- bumped on every edit of what fires
    published_at               timestamptz,
    created_at                 timestamptz NOT NULL,
    updated_at                 timestamptz NOT NULL,
    -- the next fire time, written with the schedule (first tick after the write) and moved
    -- on by the ticker that fires it; NULL while paused or when it never fires again
    next_fire_at               timestamptz,
    last_fired_at              timestamptz
);
-- The ticker asks "which schedules are due?": an index range scan, whatever the fleet size.
CREATE INDEX schedules_due_idx ON schedules (next_fire_at) WHERE status = 'active';

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

-- An alert is the state "this workflow is broken".
--
--   open(warning) ──► open(critical)   (escalation clock, or the failures keep coming)
--   open ──► resolved                  (the next success, scheduled or manual)
CREATE TABLE alerts (
    id                     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id              bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    workflow_id            bigint NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
    status                 text NOT NULL CHECK (status IN ('open', 'resolved')),
    first_severity         text NOT NULL CHECK (first_severity IN ('warning', 'critical')),
    severity               text NOT NULL CHECK (severity IN ('warning', 'critical')),
    owner                  text NOT NULL CHECK (owner IN ('engineering', 'customer')),
    failure_count          integer NOT NULL CHECK (failure_count >= 1),
    cadence_seconds        integer NOT NULL CHECK (cadence_seconds > 0),   -- captured at open
    escalation_multiplier  double precision NOT NULL CHECK (escalation_multiplier > 0),
    escalate_after         integer NOT NULL CHECK (escalate_after >= 1),
    escalate_at            timestamptz NOT NULL,
    shadow                 boolean NOT NULL DEFAULT false,
    first_failure_at       timestamptz NOT NULL,
    last_failure_at        timestamptz NOT NULL,
    last_run_id            bigint,                 -- an opaque run id: retention may have expired the run
    last_error_category    text,
    last_error             text,            -- sanitized
    failed_step            text,
    opened_at              timestamptz NOT NULL,
    escalated_at           timestamptz,
    resolved_at            timestamptz,
    resolved_by_run_id     bigint,                 -- an opaque run id: retention may have expired the run
    downtime_seconds       integer,
    acknowledged_at        timestamptz,     -- acknowledged: escalation stops, the alert stays open
    acknowledged_by        text,
    snoozed_until          timestamptz,     -- no escalation before this time
    manual_failures        integer NOT NULL DEFAULT 0 CHECK (manual_failures >= 0),  -- never escalate
    reason                 text NOT NULL DEFAULT 'consecutive_failures' CHECK (reason <> ''),  -- the rule that opened it
    CONSTRAINT alerts_acknowledged_check CHECK ((acknowledged_at IS NULL) = (acknowledged_by IS NULL)),
    CHECK ((status = 'resolved') = (resolved_at IS NOT NULL)),
    CHECK (severity = first_severity OR severity = 'critical'),
    CHECK ((escalated_at IS NOT NULL) = (severity <> first_severity))
);
-- At most one open alert per workflow: later failures update it, never open another.
CREATE UNIQUE INDEX alerts_one_open_idx ON alerts (workflow_id) WHERE status = 'open';
-- The escalation clock examines open warnings only.
CREATE INDEX alerts_open_warning_idx ON alerts (escalate_at) WHERE status = 'open' AND severity = 'warning';
CREATE INDEX alerts_tenant_recent_idx ON alerts (tenant_id, opened_at DESC);

-- An alert's history, and the material notifications are made of.
CREATE TABLE alert_events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id   bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    alert_id    bigint NOT NULL REFERENCES alerts (id) ON DELETE CASCADE,
    kind        text NOT NULL CONSTRAINT alert_events_kind_check
                CHECK (kind IN ('opened', 'failed', 'escalated', 'reassigned', 'noted', 'acknowledged', 'snoozed',
                                'paused', 'resolved')),
    at          timestamptz NOT NULL,
    severity    text NOT NULL CHECK (severity IN ('warning', 'critical')),
    owner       text NOT NULL CHECK (owner IN ('engineering', 'customer')),
    actor       text NOT NULL DEFAULT 'tickwarden',
    note        text,
    data        jsonb NOT NULL DEFAULT '{}'::jsonb,
    internal    boolean NOT NULL DEFAULT false  -- an internal note: platform users and engineering channels only
);
CREATE INDEX alert_events_alert_idx ON alert_events (alert_id, id);

-- Where notifications go. tenant_id NULL is the platform's own (engineering) channel.
CREATE TABLE notification_channels (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id        bigint REFERENCES tenants (id) ON DELETE CASCADE,
    name             text NOT NULL,
    kind             text NOT NULL CHECK (kind IN ('slack', 'email', 'webhook', 'recording', 'pagerduty', 'teams')),
    audience         text NOT NULL CHECK (audience IN ('customer', 'engineering', 'shadow')),
    -- non-secret settings only (channel id, addresses, url); secrets are referenced by name
    config           jsonb NOT NULL DEFAULT '{}'::jsonb,
    secret_ref       text,
    enabled          boolean NOT NULL DEFAULT true,
    disabled_reason  text,
    disabled_at      timestamptz,
    created_at       timestamptz NOT NULL,
    CHECK (audience <> 'customer' OR tenant_id IS NOT NULL),
    -- routing: the severities and event kinds the channel takes (NULL: all of them)
    severities       text[]
        CHECK (severities <@ ARRAY['warning', 'critical']::text[] AND cardinality(severities) > 0),
    events           text[]
        CHECK (events <@ ARRAY['opened', 'escalated', 'reassigned', 'acknowledged', 'snoozed', 'paused', 'noted',
                               'resolved']::text[] AND cardinality(events) > 0)
);
CREATE UNIQUE INDEX notification_channels_name_idx ON notification_channels (coalesce(tenant_id, 0), name);

-- One conversation per alert and channel: the first message's id, replies go under it.
CREATE TABLE notification_threads (
    alert_id     bigint NOT NULL REFERENCES alerts (id) ON DELETE CASCADE,
    channel_id   bigint NOT NULL REFERENCES notification_channels (id) ON DELETE CASCADE,
    tenant_id    bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    thread_key   text NOT NULL,          -- Slack ts, email Message-ID, webhook thread id
    parent_ref   text,                   -- what to update to show the current state
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (alert_id, channel_id)
);

-- The outbox: one row per alert event and channel, written in the same transaction
-- as the event, so replicas deliver each exactly once and nothing is lost.
CREATE TABLE notification_outbox (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id        bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    event_id         bigint NOT NULL REFERENCES alert_events (id) ON DELETE CASCADE,
    alert_id         bigint NOT NULL REFERENCES alerts (id) ON DELETE CASCADE,
    channel_id       bigint NOT NULL REFERENCES notification_channels (id) ON DELETE CASCADE,
    status           text NOT NULL CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'dead')),
    tries            integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL,
    locked_by        text,
    locked_until     timestamptz,
    created_at       timestamptz NOT NULL,
    sent_at          timestamptz,
    last_error       text,
    UNIQUE (event_id, channel_id)
);
CREATE INDEX notification_outbox_due_idx ON notification_outbox (next_attempt_at, id) WHERE status IN ('pending', 'failed');

-- API tokens, stored hashed. tenant_id NULL with role 'platform' crosses tenants.
CREATE TABLE api_tokens (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id     bigint REFERENCES tenants (id) ON DELETE CASCADE,
    user_id       bigint REFERENCES users (id) ON DELETE CASCADE,
    name          text NOT NULL,
    role          text NOT NULL CHECK (role IN ('member', 'platform')),
    token_hash    text NOT NULL UNIQUE,
    created_at    timestamptz NOT NULL,
    last_used_at  timestamptz,
    revoked_at    timestamptz,
    CHECK ((role = 'platform') = (tenant_id IS NULL))
);

-- Every replica records each pass of each loop: the watcher is watched.
CREATE TABLE loop_heartbeats (
    replica_id      text NOT NULL,
    loop            text NOT NULL,
    last_pass_at    timestamptz NOT NULL,
    last_duration_ms double precision NOT NULL DEFAULT 0,
    passes          bigint NOT NULL DEFAULT 0,
    last_error      text,
    next_pass_at    timestamptz,
    PRIMARY KEY (replica_id, loop)
);

-- 0005 outbox delivery: in-order claims per thread, and release of crashed senders' rows.
CREATE INDEX notification_outbox_thread_idx ON notification_outbox (alert_id, channel_id, event_id)
    WHERE status IN ('pending', 'failed', 'sending');
CREATE INDEX notification_outbox_sending_idx ON notification_outbox (locked_until) WHERE status = 'sending';

-- 0004_tick_audits: the deadline detector's per-schedule watermark of checked ticks.
CREATE TABLE tick_audits (
    schedule_id       bigint PRIMARY KEY REFERENCES schedules (id) ON DELETE CASCADE,
    schedule_version  integer NOT NULL,      -- an edit, pause or resume re-arms the watermark
    checked_until     timestamptz NOT NULL,
    next_check_at     timestamptz,           -- NULL: nothing to check (paused, or never fires again)
    updated_at        timestamptz NOT NULL
);
CREATE INDEX tick_audits_due_idx ON tick_audits (next_check_at) WHERE next_check_at IS NOT NULL;

-- 0006 tenant isolation (keep this block LAST: it enables row-level security on every
-- tenant table defined above; a migration adding a tenant table calls the function again).
-- Roles are cluster-wide: create the application role once, whatever schema migrates first.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tickwarden_app') THEN
        CREATE ROLE tickwarden_app NOLOGIN;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;  -- another schema's migration created it at the same moment
END
$$;

-- A non-superuser service account must be a member of the role to `SET ROLE` to it.
DO $$
BEGIN
    IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
       AND NOT pg_has_role(current_user, 'tickwarden_app', 'MEMBER') THEN
        EXECUTE format('GRANT tickwarden_app TO %I', current_user);
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING 'grant the role tickwarden_app to % so that API requests can switch to it', current_user;
END
$$;

-- Enable and force row-level security with one policy on every table of the current
-- schema that has a tenant_id column (and on tenants itself), and grant the
-- application role what it needs. Idempotent: a later migration that adds a tenant
-- table calls it again.
CREATE FUNCTION tickwarden_enforce_tenant_isolation() RETURNS void
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
REVOKE EXECUTE ON FUNCTION tickwarden_enforce_tenant_isolation() FROM PUBLIC;

SELECT tickwarden_enforce_tenant_isolation();

-- Tenant secrets (encrypted by the application; see secrets.py): `secret:NAME` of a tenant.
CREATE TABLE tenant_secrets (
    tenant_id   bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name        text NOT NULL CHECK (name ~ '^[A-Za-z_][A-Za-z0-9_]{0,63}$'),
    key_id      text NOT NULL,
    ciphertext  bytea NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, name)
);
CREATE INDEX tenant_secrets_key_id ON tenant_secrets (key_id);

-- 0012 retention: per-tenant retention overrides, sweep marks, expired-row totals, erasure audits
-- (after the isolation block: its function runs again in the migration for the new tenant tables).

-- How long each class of data is kept for one tenant; NULL keeps the platform default.
-- Metadata and alert history keep at least 7 days: the deadline detector looks back
-- 24 hours, and must never find a tick whose run retention already removed.
CREATE TABLE retention_policies (
    tenant_id      bigint PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    metadata_days  integer CHECK (metadata_days BETWEEN 7 AND 36500),
    logs_days      integer CHECK (logs_days BETWEEN 1 AND 36500),
    payloads_days  integer CHECK (payloads_days BETWEEN 1 AND 36500),
    outbox_days    integer CHECK (outbox_days BETWEEN 1 AND 36500),
    alerts_days    integer CHECK (alerts_days BETWEEN 7 AND 36500),
    updated_at     timestamptz NOT NULL
);

-- How far the retention sweeper has gone through each workflow's ledger, per class:
-- every run scheduled before a mark has had that class expired, so a pass starts
-- where the last one stopped instead of rescanning what it already expired.
CREATE TABLE retention_marks (
    workflow_id     bigint PRIMARY KEY REFERENCES workflows (id) ON DELETE CASCADE,
    tenant_id       bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    logs_until      timestamptz NOT NULL DEFAULT '-infinity',
    payloads_until  timestamptz NOT NULL DEFAULT '-infinity',
    metadata_until  timestamptz NOT NULL DEFAULT '-infinity',
    updated_at      timestamptz NOT NULL
);

-- Rows expired per class since the database was created: the counters /metrics reports.
CREATE TABLE retention_totals (
    class       text PRIMARY KEY CHECK (class IN ('metadata', 'logs', 'payloads', 'outbox', 'alerts')),
    rows        bigint NOT NULL DEFAULT 0 CHECK (rows >= 0),
    updated_at  timestamptz NOT NULL
);

-- What each erasure removed, when and by whom: counts per table and column, never the
-- erased values. No tenant_id: the record outlives the tenant it describes.
CREATE TABLE erasure_audits (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind       text NOT NULL CHECK (kind IN ('tenant', 'subject')),
    target     text NOT NULL,          -- 'tenant <id>', or 'subject' (the address is what was erased)
    actor      text NOT NULL,
    at         timestamptz NOT NULL,
    counts     jsonb NOT NULL DEFAULT '{}'::jsonb
);

-- Deployment self-test: a synthetic tenant's runs go through the live loops and routes.
-- `lent_channel_ids`: a real tenant's channels that also hear the synthetic tenant's
-- alerts; `no_send`: its notifications are written to the outbox but held (never due).
CREATE TABLE selftests (
    tenant_id         bigint PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    no_send           boolean NOT NULL,
    lent_channel_ids  bigint[] NOT NULL DEFAULT '{}',
    started_at        timestamptz NOT NULL,
    started_by        text NOT NULL CHECK (length(started_by) <= 254)
);

SELECT tickwarden_enforce_tenant_isolation();

-- 0017 check-ins: external workflows (no steps; outcomes reported by another scheduler) and their ping keys
-- (after the isolation block: its function runs again for the new tenant table).
ALTER TABLE workflows ADD COLUMN kind text NOT NULL DEFAULT 'managed'
    CHECK (kind IN ('managed', 'external'));

-- The secret in an external workflow's ping URL (`POST /ping/{key}/…`). Only the key's
-- SHA-256 is stored, so a database dump yields no usable URL; the key is shown once when
-- issued, and issuing another replaces it. window_start and window_count are the per-key
-- rate limit (a fixed window, counted in the row so that every replica shares it).
CREATE TABLE checkin_keys (
    workflow_id   bigint PRIMARY KEY REFERENCES workflows (id) ON DELETE CASCADE,
    tenant_id     bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    key_hash      text NOT NULL UNIQUE CHECK (key_hash ~ '^[0-9a-f]{64}$'),
    created_at    timestamptz NOT NULL,
    window_start  timestamptz NOT NULL,
    window_count  integer NOT NULL DEFAULT 0 CHECK (window_count >= 0)
);

SELECT tickwarden_enforce_tenant_isolation();

-- 0018: platform alerts (the watcher watched).
CREATE TABLE platform_alerts (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    loop           text NOT NULL CHECK (loop ~ '^[A-Za-z0-9_.:-]{1,100}$'),
    status         text NOT NULL CHECK (status IN ('open', 'resolved')),
    opened_at      timestamptz NOT NULL,
    last_pass_at   timestamptz,                 -- the loop's newest pass on any replica, when it opened
    stall_seconds  integer NOT NULL CHECK (stall_seconds > 0),
    opened_by      text NOT NULL,               -- the replica whose watchdog noticed
    resolved_at    timestamptz,
    resolved_by    text,
    CHECK ((status = 'resolved') = (resolved_at IS NOT NULL))
);
-- One open alert per loop: replicas that notice the same stall at once open it once.
CREATE UNIQUE INDEX platform_alerts_one_open_idx ON platform_alerts (loop) WHERE status = 'open';

-- One delivery per platform alert, event and platform channel, claimed under a lease.
CREATE TABLE platform_alert_deliveries (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    alert_id         bigint NOT NULL REFERENCES platform_alerts (id) ON DELETE CASCADE,
    event            text NOT NULL CHECK (event IN ('opened', 'resolved')),
    channel_id       bigint NOT NULL REFERENCES notification_channels (id) ON DELETE CASCADE,
    status           text NOT NULL CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'dead')),
    tries            integer NOT NULL DEFAULT 0 CHECK (tries >= 0),
    next_attempt_at  timestamptz NOT NULL,
    locked_by        text,
    locked_until     timestamptz,
    created_at       timestamptz NOT NULL,
    sent_at          timestamptz,
    thread_key       text,
    parent_ref       text,
    last_error       text,
    UNIQUE (alert_id, event, channel_id)
);
CREATE INDEX platform_alert_deliveries_due_idx ON platform_alert_deliveries (next_attempt_at, id)
    WHERE status IN ('pending', 'failed', 'sending');
-- Maintenance windows (see migration 0016): nothing is delivered for a covered workflow,
-- and escalation time does not count inside a window.
CREATE TABLE maintenance_windows (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id         bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    workflow_id       bigint REFERENCES workflows (id) ON DELETE CASCADE,
    source            text NOT NULL CHECK (source IN ('file', 'api')),
    starts_at         timestamptz,
    ends_at           timestamptz,
    cron              text CHECK (length(cron) <= 200),
    timezone          text CHECK (length(timezone) <= 64),
    duration_seconds  integer CHECK (duration_seconds > 0),
    note              text CHECK (length(note) <= 500),
    created_by        text NOT NULL CHECK (length(created_by) <= 254),
    created_at        timestamptz NOT NULL,
    CHECK (source = 'api' OR workflow_id IS NOT NULL),
    CHECK ((starts_at IS NOT NULL AND ends_at IS NOT NULL AND ends_at > starts_at
            AND cron IS NULL AND timezone IS NULL AND duration_seconds IS NULL)
        OR (starts_at IS NULL AND ends_at IS NULL
            AND cron IS NOT NULL AND timezone IS NOT NULL AND duration_seconds IS NOT NULL))
);
CREATE INDEX maintenance_windows_tenant_idx ON maintenance_windows (tenant_id, workflow_id);

ALTER TABLE notification_outbox DROP CONSTRAINT notification_outbox_status_check;
ALTER TABLE notification_outbox ADD CONSTRAINT notification_outbox_status_check
    CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'dead', 'held', 'suppressed'));
CREATE INDEX notification_outbox_held_idx ON notification_outbox (next_attempt_at) WHERE status = 'held';

SELECT tickwarden_enforce_tenant_isolation();

-- 0021 notification links: deliveries of unknown outcome, used acknowledge links
-- (after the isolation block: its function runs again for the new tenant table).

-- A delivery whose outcome is unknown (a sender's lease ran out, or the provider did not
-- answer): a transport that can look its message up does so before sending it again.
ALTER TABLE notification_outbox ADD COLUMN maybe_sent boolean NOT NULL DEFAULT false;

-- Signed acknowledge links that were used (SHA-256 of the token): each acknowledges once.
CREATE TABLE ack_link_uses (
    digest     text PRIMARY KEY CHECK (length(digest) = 64),
    tenant_id  bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    alert_id   bigint NOT NULL REFERENCES alerts (id) ON DELETE CASCADE,
    used_at    timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX ack_link_uses_alert_idx ON ack_link_uses (alert_id);

SELECT tickwarden_enforce_tenant_isolation();

-- 0023 the partitioned ledger: month partitions are created ahead by the retention loop.

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
-- 0024 environments as pods: an environment's runtime and pod, and the shared warm state
-- (after the isolation block: its function runs again for the new tenant table).

-- `process`: local to each worker (the default); `kubernetes`: one StatefulSet per environment.
ALTER TABLE environments
    ADD COLUMN runtime text NOT NULL DEFAULT 'process' CHECK (runtime IN ('process', 'kubernetes')),
    ADD COLUMN pod jsonb,
    ADD CONSTRAINT environments_pod_runtime CHECK ((runtime = 'kubernetes') = (pod IS NOT NULL));

-- What tickwarden last asked of each environment's StatefulSet; wake and stop hold the row lock
-- across their Kubernetes call, so a stop never lands after a later wake.
CREATE TABLE environment_pods (
    environment_id  bigint PRIMARY KEY REFERENCES environments (id) ON DELETE CASCADE,
    tenant_id       bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    awake           boolean NOT NULL DEFAULT false,
    last_used_at    timestamptz,
    woken_at        timestamptz,
    stopped_at      timestamptz,
    wakes           integer NOT NULL DEFAULT 0 CHECK (wakes >= 0)
);
CREATE INDEX environment_pods_awake_idx ON environment_pods (last_used_at) WHERE awake;

SELECT tickwarden_enforce_tenant_isolation();

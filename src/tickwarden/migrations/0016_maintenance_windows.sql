-- Maintenance windows: spans in which a workflow (or a whole tenant) is worked on by its
-- owners. Ticks run and alerts track state as usual; nothing is delivered while a window
-- covers the alert's workflow, and escalation time does not count inside one.
--
-- A window is one-off (starts_at, ends_at) or recurring (a cron expression in an IANA
-- zone, each occurrence lasting duration_seconds). workflow_id NULL covers every workflow
-- of the tenant. source says who owns the row: 'file' rows are replaced whenever the
-- workflow's file is applied, 'api' rows (API, CLI, dashboard) only by a remove.
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
    -- exactly one shape: one-off with an end after its start, or recurring with all three fields
    CHECK ((starts_at IS NOT NULL AND ends_at IS NOT NULL AND ends_at > starts_at
            AND cron IS NULL AND timezone IS NULL AND duration_seconds IS NULL)
        OR (starts_at IS NULL AND ends_at IS NULL
            AND cron IS NOT NULL AND timezone IS NOT NULL AND duration_seconds IS NOT NULL))
);
CREATE INDEX maintenance_windows_tenant_idx ON maintenance_windows (tenant_id, workflow_id);

-- A delivery held by a window waits as 'held' (next_attempt_at: when the window ends);
-- at the end one delivery per alert and channel is released and the rest 'suppressed'.
ALTER TABLE notification_outbox DROP CONSTRAINT notification_outbox_status_check;
ALTER TABLE notification_outbox ADD CONSTRAINT notification_outbox_status_check
    CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'dead', 'held', 'suppressed'));
CREATE INDEX notification_outbox_held_idx ON notification_outbox (next_attempt_at) WHERE status = 'held';

SELECT tickwarden_enforce_tenant_isolation();

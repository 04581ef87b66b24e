-- Retention and erasure: per-tenant retention overrides, per-workflow sweep marks,
-- rows expired per class, and the audit of erasures.

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

SELECT tickwarden_enforce_tenant_isolation();

-- Check-ins from other schedulers: a workflow of kind `external` keeps its schedule in
-- tickwarden but runs elsewhere (crontab, Airflow, a CronJob of its own) and reports
-- start, success or fail; no worker ever runs it, and a tick without a report is missed.
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

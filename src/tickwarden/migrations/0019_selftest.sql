-- Deployment self-test: a synthetic tenant's runs go through the live loops and routes.

-- One row per running `tickwarden selftest`, keyed by its synthetic tenant (a reserved
-- name no tenant can take). `lent_channel_ids` are channels of a real tenant
-- (`--tenant T`) that hear the synthetic tenant's alerts besides the platform's own;
-- with `no_send` its notifications are written to the outbox but held (never due), so
-- the check stops at the outbox. Deleting the tenant deletes the row.
CREATE TABLE selftests (
    tenant_id         bigint PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    no_send           boolean NOT NULL,
    lent_channel_ids  bigint[] NOT NULL DEFAULT '{}',
    started_at        timestamptz NOT NULL,
    started_by        text NOT NULL CHECK (length(started_by) <= 254)
);

SELECT tickwarden_enforce_tenant_isolation();

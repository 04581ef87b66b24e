-- Tenant secrets: credentials a tenant's steps and channels refer to as `secret:NAME`.
--
-- Values are encrypted by the application (AES-256-GCM, the key derived from the
-- platform key, the tenant and name bound in as associated data), so neither a
-- database dump nor a row copied to another tenant yields a usable value. key_id
-- names the key a row was sealed with, so rotation finds the rows still under an
-- old key with an index scan instead of decrypting everything.
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

SELECT tickwarden_enforce_tenant_isolation();

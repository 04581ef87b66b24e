-- Notifications people act on: single-use acknowledge links, and deliveries that may have gone out.

-- A delivery whose outcome is unknown: its sender's lease ran out (it may have died after
-- the provider accepted the message), or the provider did not answer. Before sending such a
-- row again, a transport that can look a message up (Slack, by its metadata) does so, and
-- records the message it finds instead of posting a second one. Cleared never: once
-- uncertain, every later try of the row looks first.
ALTER TABLE notification_outbox ADD COLUMN maybe_sent boolean NOT NULL DEFAULT false;

-- Signed acknowledge links that were used: a link acknowledges its one alert once.
-- The digest is SHA-256 of the whole token, so the table holds nothing that could be
-- replayed; the row is written in the acknowledgement's own transaction.
CREATE TABLE ack_link_uses (
    digest     text PRIMARY KEY CHECK (length(digest) = 64),
    tenant_id  bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    alert_id   bigint NOT NULL REFERENCES alerts (id) ON DELETE CASCADE,
    used_at    timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX ack_link_uses_alert_idx ON ack_link_uses (alert_id);

SELECT tickwarden_enforce_tenant_isolation();

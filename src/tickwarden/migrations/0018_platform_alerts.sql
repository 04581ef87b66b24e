-- The watcher watched: a platform alert opens when one of tickwarden's own loops has
-- passed on no replica for a span derived from its interval, and resolves when it runs
-- again. It is the platform's, not a tenant's: no tenant_id, delivered only to the
-- platform's own channels (notification_channels with no tenant).
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

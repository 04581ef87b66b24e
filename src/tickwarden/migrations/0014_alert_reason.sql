-- Alerting coverage: an alert records which rule opened it. A streak alert resolves on
-- the next success; a failure-rate alert only once the rate has fallen back.
ALTER TABLE alerts ADD COLUMN reason text NOT NULL DEFAULT 'consecutive_failures'
    CHECK (reason <> '');

-- Routing: a channel subscribes to severities and event kinds (NULL: all of them, the
-- default, so existing channels hear what they heard before).
ALTER TABLE notification_channels ADD COLUMN severities text[]
    CHECK (severities <@ ARRAY['warning', 'critical']::text[] AND cardinality(severities) > 0);
ALTER TABLE notification_channels ADD COLUMN events text[]
    CHECK (events <@ ARRAY['opened', 'escalated', 'reassigned', 'acknowledged', 'snoozed', 'paused', 'noted',
                           'resolved']::text[] AND cardinality(events) > 0);

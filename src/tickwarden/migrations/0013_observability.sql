-- Observability: the newest success per tenant in one index probe, and two more channel kinds.

-- /metrics reports each tenant's newest success on every scrape: one probe per tenant
-- on this index, however long the ledger grows.
CREATE INDEX runs_tenant_success_idx ON runs (tenant_id, finished_at DESC) WHERE status = 'succeeded';

-- PagerDuty (Events API v2) and Microsoft Teams (incoming webhooks) transports.
ALTER TABLE notification_channels DROP CONSTRAINT notification_channels_kind_check;
ALTER TABLE notification_channels ADD CONSTRAINT notification_channels_kind_check
    CHECK (kind IN ('slack', 'email', 'webhook', 'recording', 'pagerduty', 'teams'));

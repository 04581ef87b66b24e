-- The alert lifecycle people expect from an on-call tool: acknowledge (escalation
-- stops, the alert stays open), snooze until a time, resolve by hand with a note,
-- internal notes (platform only) apart from customer-visible ones, and a note in the
-- thread when someone pauses the workflow of an open alert.
ALTER TABLE alerts
    ADD COLUMN acknowledged_at timestamptz,
    ADD COLUMN acknowledged_by text,
    ADD COLUMN snoozed_until   timestamptz,
    -- failures of manual runs recorded on the open alert: they never count towards escalation
    ADD COLUMN manual_failures integer NOT NULL DEFAULT 0 CHECK (manual_failures >= 0),
    ADD CONSTRAINT alerts_acknowledged_check CHECK ((acknowledged_at IS NULL) = (acknowledged_by IS NULL));
ALTER TABLE alert_events
    ADD COLUMN internal boolean NOT NULL DEFAULT false,
    DROP CONSTRAINT alert_events_kind_check,
    ADD CONSTRAINT alert_events_kind_check CHECK (kind IN ('opened', 'failed', 'escalated', 'reassigned', 'noted',
                                                           'acknowledged', 'snoozed', 'paused', 'resolved'));

-- Delivery of the outbox. A thread's events go out in order, so the claim asks
-- "is an earlier event of this alert still undelivered on this channel?" for every
-- candidate: this partial index answers it with one probe and holds only live rows.
CREATE INDEX notification_outbox_thread_idx ON notification_outbox (alert_id, channel_id, event_id)
    WHERE status IN ('pending', 'failed', 'sending');
-- A crashed sender leaves rows in 'sending'; each pass releases those whose lease ran out.
CREATE INDEX notification_outbox_sending_idx ON notification_outbox (locked_until) WHERE status = 'sending';

-- The outbox's thread index holds held deliveries too, so it answers the head-of-thread
-- test again.
--
-- Every claim and every look of the notifier asks, for each candidate delivery, "is an
-- earlier event of this alert still undelivered on this channel?", and since 0016 a held
-- delivery (a maintenance window) counts as undelivered: the test names 'held' beside
-- pending, failed and sending. The thread index (0005) held only the first three, so the
-- test could no longer probe it: its plans read the rows of the channel's earlier events
-- through the (event_id, channel_id) key, or the whole outbox, delivered rows included
-- (a simulated day: some 580,000 outbox rows read by sequential scans). With held rows
-- in it, the test is one probe of live rows again; a held delivery is rare, so the
-- index grows by little.
DROP INDEX notification_outbox_thread_idx;
CREATE INDEX notification_outbox_thread_idx ON notification_outbox (alert_id, channel_id, event_id)
    WHERE status IN ('pending', 'failed', 'sending', 'held');

-- enqueue_notifications --
-- Fan alert events out to one outbox row per channel, in the caller's transaction.
-- Events that notify: opened, escalated, reassigned, resolved. A customer channel
-- hears its own tenant's alerts; an engineering channel (tenant NULL) hears every
-- tenant's. A shadow alert goes only to shadow channels (its tenant's or the
-- platform's). UNIQUE (event_id, channel_id) makes a second fan-out a no-op.
INSERT INTO notification_outbox (tenant_id, event_id, alert_id, channel_id, status, next_attempt_at, created_at)
SELECT e.tenant_id, e.id, e.alert_id, c.id, 'pending', %(now)s, %(now)s
  FROM alert_events e
  JOIN alerts a ON a.id = e.alert_id
  JOIN notification_channels c
    ON c.enabled
   AND (c.tenant_id = e.tenant_id OR c.tenant_id IS NULL)
   AND CASE WHEN a.shadow THEN c.audience = 'shadow'
            ELSE (c.audience = 'customer' AND c.tenant_id = e.tenant_id)
              OR (c.audience = 'engineering' AND (c.tenant_id IS NULL OR c.tenant_id = e.tenant_id))
       END
 WHERE e.id = ANY(%(event_ids)s::bigint[])
   AND e.kind IN ('opened', 'escalated', 'reassigned', 'resolved')
    ON CONFLICT (event_id, channel_id) DO NOTHING
RETURNING id;

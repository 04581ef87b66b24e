-- watchdog_probe --
-- One look at everything a watchdog pass decides on, in one statement (an idle pass
-- costs this round trip only): the newest pass of each named loop and of each loop with
-- an open platform alert, across every replica, with the sleep that pass announced
-- (NULL when none) and how many replicas ran it; the open platform alerts; and whether
-- a delivery is due. Always one row at least (beat columns NULL when there are none).
WITH open_alerts AS (
    SELECT id, loop, last_pass_at FROM platform_alerts WHERE status = 'open'
), beats AS (
    SELECT DISTINCT ON (h.loop) h.loop, h.last_pass_at, h.replica_id,
           extract(epoch FROM h.next_pass_at - h.last_pass_at)::double precision AS interval_seconds,
           count(*) OVER (PARTITION BY h.loop) AS replicas
      FROM loop_heartbeats h
     WHERE h.loop = ANY(%(loops)s::text[]) OR h.loop IN (SELECT loop FROM open_alerts)
     ORDER BY h.loop, h.last_pass_at DESC, h.replica_id
), summary AS (
    SELECT coalesce((SELECT jsonb_agg(jsonb_build_object('id', id, 'loop', loop) ORDER BY id) FROM open_alerts),
                    '[]'::jsonb) AS open_alerts,
           EXISTS (SELECT 1 FROM platform_alert_deliveries d
                    WHERE (d.status IN ('pending', 'failed') AND d.next_attempt_at <= %(now)s)
                       OR (d.status = 'sending' AND d.locked_until <= %(now)s)) AS due
)
SELECT s.open_alerts, s.due, b.loop, b.last_pass_at, b.replica_id, b.interval_seconds, b.replicas
  FROM summary s
  LEFT JOIN beats b ON true;

-- watchdog_open_alert --
-- Open a platform alert for a stalled loop and fan it out to the platform's channels that
-- take critical alerts and `opened` events, in one statement. ON CONFLICT on the one-open
-- index: of replicas racing to open the same alert one inserts it, the others nothing, so
-- only one writes deliveries.
WITH opened AS (
    INSERT INTO platform_alerts (loop, status, opened_at, last_pass_at, stall_seconds, opened_by)
    VALUES (%(loop)s, 'open', %(now)s, %(last_pass_at)s, %(stall_seconds)s, %(replica_id)s)
        ON CONFLICT (loop) WHERE status = 'open' DO NOTHING
    RETURNING *
), fanned AS (
    INSERT INTO platform_alert_deliveries (alert_id, event, channel_id, status, next_attempt_at, created_at)
    SELECT o.id, 'opened', c.id, 'pending', %(now)s, %(now)s
      FROM opened o
      JOIN notification_channels c ON c.tenant_id IS NULL AND c.audience = 'engineering' AND c.enabled
     WHERE (c.severities IS NULL OR 'critical' = ANY(c.severities))
       AND (c.events IS NULL OR 'opened' = ANY(c.events))
    RETURNING id
)
SELECT o.*, (SELECT count(*) FROM fanned) AS deliveries FROM opened o;

-- watchdog_resolve_alert --
-- Resolve an open platform alert (compare-and-set on its status: one replica wins) and
-- fan the resolution out to every channel that received the opening, in one statement.
WITH resolved AS (
    UPDATE platform_alerts
       SET status = 'resolved', resolved_at = %(now)s, resolved_by = %(replica_id)s
     WHERE id = %(alert_id)s AND status = 'open'
    RETURNING *
), fanned AS (
    INSERT INTO platform_alert_deliveries (alert_id, event, channel_id, status, next_attempt_at, created_at)
    SELECT r.id, 'resolved', d.channel_id, 'pending', %(now)s, %(now)s
      FROM resolved r
      JOIN platform_alert_deliveries d ON d.alert_id = r.id AND d.event = 'opened'
      JOIN notification_channels c ON c.id = d.channel_id
     WHERE c.events IS NULL OR 'resolved' = ANY(c.events)
    RETURNING id
)
SELECT r.*, (SELECT count(*) FROM fanned) AS deliveries FROM resolved r;

-- watchdog_claim_deliveries --
-- Claim due deliveries under a lease (a crashed sender's run out and are due again),
-- skipping rows another replica holds. A resolution waits until its channel's opening
-- is sent or given up, so that it can reply in the opening's thread.
WITH due AS (
    SELECT d.id
      FROM platform_alert_deliveries d
     WHERE ((d.status IN ('pending', 'failed') AND d.next_attempt_at <= %(now)s)
            OR (d.status = 'sending' AND d.locked_until <= %(now)s))
       AND NOT EXISTS (SELECT 1 FROM platform_alert_deliveries o
                        WHERE o.alert_id = d.alert_id AND o.channel_id = d.channel_id
                          AND o.event = 'opened' AND d.event = 'resolved'
                          AND o.status NOT IN ('sent', 'dead'))
     ORDER BY d.next_attempt_at, d.id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE platform_alert_deliveries d
   SET status = 'sending', locked_by = %(replica_id)s, locked_until = %(locked_until)s
  FROM due
 WHERE d.id = due.id
RETURNING d.id;

-- watchdog_delivery_context --
-- Everything a claimed delivery's message is made of: the alert, the channel, and the
-- thread the opening started on that channel (for a resolution).
SELECT d.id AS delivery_id, d.event, d.tries,
       a.id AS alert_id, a.loop, a.status AS alert_status, a.opened_at, a.last_pass_at, a.stall_seconds,
       a.opened_by, a.resolved_at, a.resolved_by,
       o.thread_key, o.parent_ref,
       c.id AS channel_id, c.tenant_id AS channel_tenant_id, c.name AS channel_name, c.kind AS channel_kind,
       c.audience AS channel_audience, c.config AS channel_config, c.secret_ref AS channel_secret_ref,
       c.enabled AS channel_enabled, c.disabled_reason AS channel_disabled_reason,
       c.disabled_at AS channel_disabled_at, c.created_at AS channel_created_at, NULL::text AS channel_tenant
  FROM platform_alert_deliveries d
  JOIN platform_alerts a ON a.id = d.alert_id
  JOIN notification_channels c ON c.id = d.channel_id
  LEFT JOIN platform_alert_deliveries o
         ON o.alert_id = d.alert_id AND o.channel_id = d.channel_id AND o.event = 'opened' AND o.status = 'sent'
 WHERE d.id = ANY(%(ids)s::bigint[])
 ORDER BY d.id;

-- watchdog_mark_sent --
-- Record a delivery, compare-and-set on the claim.
UPDATE platform_alert_deliveries
   SET status = 'sent', sent_at = %(now)s, tries = tries + 1, locked_by = NULL, locked_until = NULL,
       thread_key = %(thread_key)s, parent_ref = %(parent_ref)s, last_error = NULL
 WHERE id = %(id)s AND status = 'sending' AND locked_by = %(replica_id)s
RETURNING id;

-- watchdog_mark_failed --
-- A failed send: back off, or give up ('dead') once the tries are spent or retrying cannot help.
UPDATE platform_alert_deliveries
   SET status = CASE WHEN %(permanent)s OR tries + 1 >= %(max_tries)s THEN 'dead' ELSE 'failed' END,
       tries = tries + 1, next_attempt_at = %(next_attempt_at)s, last_error = %(error)s,
       locked_by = NULL, locked_until = NULL
 WHERE id = %(id)s AND status = 'sending' AND locked_by = %(replica_id)s
RETURNING id, status;

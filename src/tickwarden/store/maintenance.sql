-- maintenance_insert --
-- Store one maintenance window (validated by tickwarden.maintenance.window_spec).
WITH inserted AS (
    INSERT INTO maintenance_windows (tenant_id, workflow_id, source, starts_at, ends_at, cron, timezone,
                                     duration_seconds, note, created_by, created_at)
    VALUES (%(tenant_id)s, %(workflow_id)s, %(source)s, %(starts_at)s, %(ends_at)s, %(cron)s, %(timezone)s,
            %(duration_seconds)s, %(note)s, %(created_by)s, %(now)s)
    RETURNING *
)
SELECT m.*, t.name AS tenant, w.name AS workflow
  FROM inserted m
  JOIN tenants t ON t.id = m.tenant_id
  LEFT JOIN workflows w ON w.id = m.workflow_id;

-- maintenance_get --
-- One window with its tenant's and workflow's names.
SELECT m.*, t.name AS tenant, w.name AS workflow
  FROM maintenance_windows m
  JOIN tenants t ON t.id = m.tenant_id
  LEFT JOIN workflows w ON w.id = m.workflow_id
 WHERE m.id = %(id)s;

-- maintenance_windows --
-- Every window, or one tenant's (NULL: all), in creation order.
SELECT m.*, t.name AS tenant, w.name AS workflow
  FROM maintenance_windows m
  JOIN tenants t ON t.id = m.tenant_id
  LEFT JOIN workflows w ON w.id = m.workflow_id
 WHERE %(tenant)s::text IS NULL OR t.name = %(tenant)s::text
 ORDER BY m.id;

-- maintenance_delete --
-- Remove one window.
DELETE FROM maintenance_windows WHERE id = %(id)s;

-- maintenance_delete_file_windows --
-- Forget a workflow's file-defined windows before its file's list is written again.
DELETE FROM maintenance_windows WHERE workflow_id = %(workflow_id)s AND source = 'file';

-- maintenance_for_workflows --
-- The windows that apply to these workflows: their own and their tenant's.
SELECT wf.id AS applies_to, m.*, t.name AS tenant, w.name AS workflow
  FROM workflows wf
  JOIN maintenance_windows m ON m.tenant_id = wf.tenant_id AND (m.workflow_id IS NULL OR m.workflow_id = wf.id)
  JOIN tenants t ON t.id = m.tenant_id
  LEFT JOIN workflows w ON w.id = m.workflow_id
 WHERE wf.id = ANY(%(workflow_ids)s::bigint[])
 ORDER BY m.id;

-- maintenance_hold_outbox --
-- Hold new deliveries until their window ends; only rows nobody has claimed yet.
UPDATE notification_outbox o
   SET status = 'held', next_attempt_at = h.until
  FROM unnest(%(ids)s::bigint[], %(untils)b::timestamptz[]) AS h(id, until)
 WHERE o.id = h.id AND o.status = 'pending';

-- maintenance_claim_held_alerts --
-- Alerts with held deliveries whose hold has run out, locked so that one replica
-- decides each alert's release (SKIP LOCKED: another replica takes the others).
SELECT a.id AS alert_id, a.workflow_id, a.status
  FROM alerts a
 WHERE a.id IN (SELECT o.alert_id FROM notification_outbox o
                 WHERE o.status = 'held' AND o.next_attempt_at <= %(now)s)
 ORDER BY a.id
 LIMIT %(limit)s
   FOR UPDATE OF a SKIP LOCKED;

-- maintenance_held_rows --
-- The held deliveries of these alerts, in event order, with whether their channel heard
-- of the alert before (any delivery of it that was neither held nor suppressed).
SELECT o.id, o.alert_id, o.channel_id, o.event_id, e.kind,
       EXISTS (SELECT 1 FROM notification_outbox p
                WHERE p.alert_id = o.alert_id AND p.channel_id = o.channel_id
                  AND p.status NOT IN ('held', 'suppressed')) AS heard
  FROM notification_outbox o
  JOIN alert_events e ON e.id = o.event_id
 WHERE o.alert_id = ANY(%(alert_ids)s::bigint[]) AND o.status = 'held'
 ORDER BY o.alert_id, o.channel_id, o.event_id
   FOR UPDATE OF o;

-- maintenance_extend_holds --
-- The alert's workflow is still (or again) in maintenance: hold its rows until the new end.
UPDATE notification_outbox
   SET next_attempt_at = %(until)s
 WHERE alert_id = ANY(%(alert_ids)s::bigint[]) AND status = 'held';

-- maintenance_release_outbox --
-- The window ended: these rows go out now, the rest of the alerts' held rows are suppressed.
WITH released AS (
    UPDATE notification_outbox
       SET status = 'pending', next_attempt_at = %(now)s
     WHERE id = ANY(%(release_ids)s::bigint[]) AND status = 'held'
    RETURNING id
)
UPDATE notification_outbox
   SET status = 'suppressed', last_error = 'held by a maintenance window; superseded by the message sent at its end'
 WHERE alert_id = ANY(%(alert_ids)s::bigint[]) AND status = 'held'
   AND id NOT IN (SELECT id FROM released);

-- maintenance_escalation_candidates --
-- Open warnings due to escalate by time whose workflow has windows: escalation time is
-- measured outside windows, so their escalate_at may need to move. Locked like the
-- escalation clock's own pass, which runs next in the same transaction.
SELECT a.id, a.workflow_id, a.opened_at, a.cadence_seconds, a.escalation_multiplier, a.escalate_at
  FROM alerts a
 WHERE a.status = 'open' AND a.severity = 'warning'
   AND a.acknowledged_at IS NULL AND (a.snoozed_until IS NULL OR a.snoozed_until <= %(now)s)
   AND a.escalate_at <= %(now)s AND NOT a.failures_reached_escalation
   AND EXISTS (SELECT 1 FROM maintenance_windows m
                WHERE m.tenant_id = a.tenant_id AND (m.workflow_id IS NULL OR m.workflow_id = a.workflow_id))
 ORDER BY a.escalate_at, a.id
 LIMIT %(limit)s
   FOR UPDATE OF a SKIP LOCKED;

-- maintenance_defer_escalation --
-- Move one alert's escalate_at past the maintenance time it spent (compare-and-set).
UPDATE alerts SET escalate_at = %(escalate_at)s
 WHERE id = %(id)s AND status = 'open' AND severity = 'warning' AND escalate_at = %(old)s
RETURNING id;

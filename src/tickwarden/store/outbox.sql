-- outbox_wake_notifier --
-- Wake sleeping notifiers early (delivered at commit); their polling keeps delivery correct.
SELECT pg_notify('tickwarden_wake', 'notifier');

-- outbox_enqueue_notifications --
-- Fan alert events out to one outbox row per channel, in the caller's transaction.
-- Events that notify: opened, escalated, reassigned, acknowledged, snoozed, paused,
-- noted, resolved (`failed` is history only). A customer channel hears its own
-- tenant's alerts, but never an internal note; an engineering channel (tenant NULL)
-- hears every tenant's. A shadow alert goes only to shadow channels (its tenant's
-- or the platform's). Routing: a channel with `severities` or `events` takes only the
-- events of those severities and kinds (NULL: all). UNIQUE (event_id, channel_id)
-- makes a second fan-out a no-op. A self-test's synthetic tenant also reaches the
-- channels lent to it (`selftests.lent_channel_ids`); with `no_send` its rows are
-- held: written, due only in the year 9999 (finite: drivers cannot read infinity),
-- so no notifier sends them. Rows are numbered in (event, channel) order, which is
-- the order a thread's deliveries and same-instant notifications follow.
--
-- Each new row comes back with what `holds.hold_new` decides on, in the same round trip
-- (it was a statement of its own after this one): its alert's workflow, only where a
-- maintenance window of the workflow or its tenant exists at all (the usual answer, no
-- window anywhere near, is NULL), and until when earlier deliveries of the same alert
-- and channel are held (a row written after a window ended but before its release joins
-- them, so the release decides the whole thread at once). The look at held rows sees the
-- table as it was before this insert, which changes nothing: the rows it writes are
-- pending, never held.
WITH new AS (
    INSERT INTO notification_outbox (tenant_id, event_id, alert_id, channel_id, status, next_attempt_at, created_at)
    SELECT e.tenant_id, e.id, e.alert_id, c.id, 'pending',
           CASE WHEN st.no_send THEN '9999-01-01 00:00:00+00'::timestamptz ELSE %(now)s END, %(now)s
      FROM alert_events e
      JOIN alerts a ON a.id = e.alert_id
      LEFT JOIN selftests st ON st.tenant_id = e.tenant_id
      JOIN notification_channels c
        ON c.enabled
       AND (c.tenant_id = e.tenant_id OR c.tenant_id IS NULL OR c.id = ANY (st.lent_channel_ids))
       AND CASE WHEN a.shadow THEN c.audience = 'shadow'
                ELSE (c.audience = 'customer' AND c.tenant_id = e.tenant_id)
                  OR (c.audience = 'engineering' AND (c.tenant_id IS NULL OR c.tenant_id = e.tenant_id))
                  OR (c.id = ANY (st.lent_channel_ids) AND c.audience <> 'shadow')
           END
     WHERE e.id = ANY(%(event_ids)s::bigint[])
       AND e.kind IN ('opened', 'escalated', 'reassigned', 'acknowledged', 'snoozed', 'paused', 'noted', 'resolved')
       AND NOT (e.internal AND c.audience = 'customer')
       AND (c.severities IS NULL OR e.severity = ANY (c.severities))
       AND (c.events IS NULL OR e.kind = ANY (c.events))
     ORDER BY e.id, c.id  -- ids follow event then channel, whatever order the plan reads them in
        ON CONFLICT (event_id, channel_id) DO NOTHING
    RETURNING id, alert_id, channel_id
)
SELECT n.id AS outbox_id, s.workflow_id,
       CASE WHEN s.workflow_id IS NOT NULL THEN
            (SELECT max(h.next_attempt_at) FROM notification_outbox h
              WHERE h.status = 'held' AND h.alert_id = n.alert_id AND h.channel_id = n.channel_id)
       END AS held_until
  FROM new n
  LEFT JOIN LATERAL (
        SELECT a.workflow_id FROM alerts a
         WHERE a.id = n.alert_id
           AND EXISTS (SELECT 1 FROM maintenance_windows m
                        WHERE m.tenant_id = a.tenant_id AND (m.workflow_id IS NULL OR m.workflow_id = a.workflow_id))
         LIMIT 1) s ON true
 ORDER BY n.id;

-- outbox_upsert_notification_channel --
-- Create a channel or update its settings; (tenant, name) is its identity. The
-- enabled flag is left alone: re-enabling a disabled channel is a deliberate act.
INSERT INTO notification_channels (tenant_id, name, kind, audience, config, secret_ref, created_at,
                                   severities, events)
VALUES (%(tenant_id)s, %(name)s, %(kind)s, %(audience)s, %(config)s, %(secret_ref)s, %(now)s,
        %(severities)s, %(events)s)
    ON CONFLICT ((coalesce(tenant_id, 0)), name) DO UPDATE
   SET kind = EXCLUDED.kind, audience = EXCLUDED.audience, config = EXCLUDED.config,
       secret_ref = EXCLUDED.secret_ref, severities = EXCLUDED.severities, events = EXCLUDED.events
RETURNING notification_channels.*, (SELECT name FROM tenants t WHERE t.id = notification_channels.tenant_id) AS tenant;

-- outbox_list_notification_channels --
-- Every channel with its tenant's name and its backlog by delivery status.
SELECT c.*, t.name AS tenant,
       count(o.id) FILTER (WHERE o.status = 'pending') AS pending,
       count(o.id) FILTER (WHERE o.status = 'sending') AS sending,
       count(o.id) FILTER (WHERE o.status = 'failed') AS failed,
       count(o.id) FILTER (WHERE o.status = 'dead') AS dead,
       count(o.id) FILTER (WHERE o.status = 'sent') AS sent
  FROM notification_channels c
  LEFT JOIN tenants t ON t.id = c.tenant_id
  LEFT JOIN notification_outbox o ON o.channel_id = c.id
 GROUP BY c.id, t.name
 ORDER BY t.name NULLS FIRST, c.name;

-- outbox_find_notification_channels --
-- Channels with this name, optionally within one tenant (NULL tenant name = any).
SELECT c.*, t.name AS tenant
  FROM notification_channels c
  LEFT JOIN tenants t ON t.id = c.tenant_id
 WHERE c.name = %(name)s
   AND (%(tenant)s::text IS NULL OR t.name = %(tenant)s::text)
 ORDER BY c.id;

-- outbox_set_notification_channel_enabled --
-- Re-enable a channel (clearing the reason) after its configuration was fixed.
UPDATE notification_channels
   SET enabled = true, disabled_reason = NULL, disabled_at = NULL
 WHERE id = %(channel_id)s
RETURNING id;

-- outbox_release_expired_outbox --
-- A sender that crashed (or stalled past its lease) leaves rows in 'sending'; make
-- them due again. The try counts: the crashed send may or may not have gone out,
-- so the row is marked maybe_sent (the next send looks for it first where it can).
UPDATE notification_outbox
   SET status = 'failed', tries = tries + 1, locked_by = NULL, locked_until = NULL, maybe_sent = true,
       next_attempt_at = %(now)s, last_error = 'the sender stopped before confirming the delivery'
 WHERE status = 'sending' AND locked_until <= %(now)s
RETURNING id;

-- outbox_claim_deliveries --
-- Claim due deliveries for one replica under a lease, and return everything their
-- messages are made of, in one statement. A row is eligible only when no earlier
-- event of the same alert is still undelivered on the same channel, so a thread's
-- first message always goes first and replies follow in event order; the earlier row
-- being locked or 'sending' elsewhere keeps the later one waiting. SKIP LOCKED lets
-- replicas claim disjoint rows; the recheck of the status on a row another replica
-- just claimed makes a double claim impossible.
-- The context of a claimed row: the event, the alert, tenant, workflow, channel, the
-- thread if one exists, and the log tail of the last attempt of the alert's last
-- failing run. It joins the rows the claim returns, not an array of ids, so the
-- statement has no parameter that moves its estimates and its generic plan serves.
-- The names looked up by key (workflow, channel's tenant) and the log tail are
-- subqueries in the select list, not joins: each is planned on its own, and the join
-- search, which a plan after every ANALYZE pays for, is over five relations, not nine
-- (about half the planning time). The keys are foreign keys, so no row is lost or added.
WITH due AS (
    SELECT o.id
      FROM notification_outbox o
     WHERE o.status IN ('pending', 'failed')
       AND o.next_attempt_at <= %(now)s
       -- a replica claims only what it has a transport for
       AND EXISTS (SELECT 1 FROM notification_channels c
                    WHERE c.id = o.channel_id AND c.kind = ANY(%(kinds)s::text[]))
       AND NOT EXISTS (
           SELECT 1 FROM notification_outbox p
            WHERE p.alert_id = o.alert_id AND p.channel_id = o.channel_id
              AND p.status IN ('pending', 'failed', 'sending', 'held')
              AND p.event_id < o.event_id)
     ORDER BY o.next_attempt_at, o.id
     LIMIT %(batch)s
       FOR UPDATE OF o SKIP LOCKED
), claimed AS (
    UPDATE notification_outbox o
       SET status = 'sending', locked_by = %(replica_id)s, locked_until = %(locked_until)s
      FROM due
     WHERE o.id = due.id
    RETURNING o.id, o.event_id, o.alert_id, o.channel_id, o.tries, o.maybe_sent
)
SELECT o.id AS outbox_id, o.event_id, o.tries,
       e.kind AS event_kind, e.at AS event_at, e.severity AS event_severity, e.owner AS event_owner,
       e.actor, e.note, e.data AS event_data,
       a.id AS alert_id, a.tenant_id AS alert_tenant_id, a.status AS alert_status, a.severity AS alert_severity, a.owner AS alert_owner,
       a.first_severity, a.failure_count, a.first_failure_at, a.last_failure_at, a.opened_at,
       a.escalated_at, a.resolved_at, a.downtime_seconds, a.last_error, a.last_error_category,
       a.failed_step, a.shadow,
       t.name AS tenant, t.display_name AS tenant_display_name,
       (SELECT w.name FROM workflows w WHERE w.id = a.workflow_id) AS workflow,
       c.id AS channel_id, c.tenant_id AS channel_tenant_id, c.name AS channel_name, c.kind AS channel_kind,
       c.audience AS channel_audience, c.config AS channel_config, c.secret_ref AS channel_secret_ref,
       c.enabled AS channel_enabled, c.disabled_reason AS channel_disabled_reason,
       c.disabled_at AS channel_disabled_at, c.created_at AS channel_created_at,
       (SELECT ct.name FROM tenants ct WHERE ct.id = c.tenant_id) AS channel_tenant,
       th.thread_key, th.parent_ref,
       (SELECT x.log_tail FROM attempts x WHERE x.run_id = a.last_run_id ORDER BY x.number DESC LIMIT 1) AS log_tail,
       o.maybe_sent, a.last_run_id
  FROM claimed o
  JOIN alert_events e ON e.id = o.event_id
  JOIN alerts a ON a.id = o.alert_id
  JOIN tenants t ON t.id = a.tenant_id
  JOIN notification_channels c ON c.id = o.channel_id
  LEFT JOIN notification_threads th ON th.alert_id = o.alert_id AND th.channel_id = o.channel_id
 ORDER BY o.event_id, o.id;

-- outbox_record_sent --
-- Record a delivery, compare-and-set on the claim: a replica whose lease was taken
-- over changes nothing. A delivery that opened the alert's conversation on its
-- channel (`opens`) also remembers the thread, in the same statement. Only one row per
-- (alert, channel) is ever in flight, so a conflict means this very row was retried.
-- With `relaxed` (a record that is its own transaction, nothing else in it), that
-- transaction commits without waiting for the WAL flush: a database crash may lose the
-- mark of the last few deliveries, which are then sent again after their lease (the
-- idempotency key and stable Message-ID cover that, and Slack looks first), while each
-- delivery stops paying an fsync. Never relaxed where the record precedes a claim.
WITH thread AS (
    INSERT INTO notification_threads (alert_id, channel_id, tenant_id, thread_key, parent_ref, created_at)
    SELECT %(alert_id)s::bigint, %(channel_id)s::bigint, %(tenant_id)s::bigint, %(thread_key)s::text,
           %(parent_ref)s::text, %(now)s::timestamptz
     WHERE %(opens)s::boolean
        ON CONFLICT (alert_id, channel_id) DO NOTHING
)
UPDATE notification_outbox
   SET status = 'sent', sent_at = %(now)s, tries = tries + 1, locked_by = NULL, locked_until = NULL,
       last_error = NULL
 WHERE id = %(id)s AND status = 'sending' AND locked_by = %(replica_id)s
   AND (NOT %(relaxed)s OR set_config('synchronous_commit', 'off', true) IS NOT NULL)
RETURNING id;

-- outbox_mark_outbox_retry --
-- A transient failure: back off, or give up ('dead') once the tries are spent.
-- `maybe_sent`: the provider may have taken the message (no answer came); it stays set.
UPDATE notification_outbox
   SET status = CASE WHEN tries + 1 >= %(max_tries)s THEN 'dead' ELSE 'failed' END,
       tries = tries + 1, next_attempt_at = %(next_attempt_at)s, last_error = %(error)s,
       locked_by = NULL, locked_until = NULL, maybe_sent = maybe_sent OR %(maybe_sent)s
 WHERE id = %(id)s AND status = 'sending' AND locked_by = %(replica_id)s
RETURNING id, status, tries;

-- outbox_defer_outbox --
-- Put a claimed row back untried (its channel failed earlier in this pass).
UPDATE notification_outbox
   SET status = CASE WHEN tries = 0 THEN 'pending' ELSE 'failed' END,
       next_attempt_at = %(next_attempt_at)s, locked_by = NULL, locked_until = NULL
 WHERE id = %(id)s AND status = 'sending' AND locked_by = %(replica_id)s
RETURNING id;

-- outbox_mark_outbox_dead --
-- Give up on one claimed row for a reason that retrying will not change.
UPDATE notification_outbox
   SET status = 'dead', tries = tries + 1, last_error = %(error)s, locked_by = NULL, locked_until = NULL
 WHERE id = %(id)s AND status = 'sending' AND locked_by = %(replica_id)s
RETURNING id;

-- outbox_disable_notification_channel --
-- A permanent error: stop using the channel and say why (first reason wins).
UPDATE notification_channels
   SET enabled = false, disabled_reason = %(reason)s, disabled_at = %(now)s
 WHERE id = %(channel_id)s AND enabled
RETURNING id;

-- outbox_bury_channel_outbox --
-- The channel is disabled: its waiting deliveries will never go out; say so on each.
UPDATE notification_outbox
   SET status = 'dead', last_error = %(reason)s, locked_by = NULL, locked_until = NULL
 WHERE channel_id = %(channel_id)s AND status IN ('pending', 'failed')
RETURNING id;

-- outbox_status_counts --
-- Delivery rows by status, with the oldest waiting row's creation time.
SELECT status, count(*) AS n, min(created_at) AS oldest
  FROM notification_outbox
 GROUP BY status;

-- outbox_list_outbox_problems --
-- Deliveries that failed or were given up, newest first, for operators.
SELECT o.id, o.status, o.tries, o.next_attempt_at, o.last_error, o.alert_id, e.kind AS event,
       c.name AS channel, t.name AS tenant
  FROM notification_outbox o
  JOIN alert_events e ON e.id = o.event_id
  JOIN notification_channels c ON c.id = o.channel_id
  LEFT JOIN tenants t ON t.id = c.tenant_id
 WHERE o.status IN ('failed', 'dead')
 ORDER BY o.id DESC
 LIMIT %(limit)s;

-- outbox_waiting --
-- The notifier's look in one statement: is a sender's claim stale, does a delivery held
-- by a maintenance window await its release, and when does the earliest claimable
-- delivery become due (its next wake-up)? Only the head of each thread's queue counts:
-- a reply waiting behind an undelivered first message is due when that message is,
-- not at its own (past) time, which would otherwise wake the loop over and over for
-- nothing. A held delivery is due when its window ends (its next_attempt_at): the
-- pass then releases it. A pass skips the release of stale claims and of held rows
-- when this says there is none (neither can appear at the same `now`).
SELECT EXISTS (SELECT 1 FROM notification_outbox WHERE status = 'sending' AND locked_until <= %(now)s) AS stale,
       EXISTS (SELECT 1 FROM notification_outbox WHERE status = 'held' AND next_attempt_at <= %(now)s) AS held,
       -- the claimable rows read through the partial index of each status set (pending or
       -- failed; held): one test of the three statuses matches neither index, and its plan read
       -- every row delivered ever since
       (SELECT min(o.next_attempt_at)
          FROM (SELECT alert_id, channel_id, event_id, next_attempt_at FROM notification_outbox
                 WHERE status IN ('pending', 'failed')
                UNION ALL
                SELECT alert_id, channel_id, event_id, next_attempt_at FROM notification_outbox
                 WHERE status = 'held') o
         WHERE EXISTS (SELECT 1 FROM notification_channels c
                        WHERE c.id = o.channel_id AND c.kind = ANY(%(kinds)s::text[]))
           AND NOT EXISTS (
               SELECT 1 FROM notification_outbox p
                WHERE p.alert_id = o.alert_id AND p.channel_id = o.channel_id
                  AND p.status IN ('pending', 'failed', 'sending', 'held')
                  AND p.event_id < o.event_id)) AS due;

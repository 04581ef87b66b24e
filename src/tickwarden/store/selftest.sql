-- selftest_begin --
-- Register a self-test's synthetic tenant: whether it stops at the outbox, and which
-- real tenant's channels hear it besides the platform's.
INSERT INTO selftests (tenant_id, no_send, lent_channel_ids, started_at, started_by)
VALUES (%(tenant_id)s, %(no_send)s, %(lent_channel_ids)s::bigint[], %(now)s, %(started_by)s);

-- selftest_stale_tenants --
-- Synthetic tenants of self-tests that started before a cutoff: left by a process that
-- was killed before it could remove them.
SELECT t.id, t.name
  FROM selftests s JOIN tenants t ON t.id = s.tenant_id
 WHERE s.started_at < %(before)s
 ORDER BY t.id;

-- selftest_routes --
-- The channels a self-test exercises: the platform's (no tenant, engineering
-- audience) and, when a tenant is named, that tenant's own non-shadow channels;
-- disabled ones too, so that the report can say a route is down.
SELECT c.*, t.name AS tenant
  FROM notification_channels c
  LEFT JOIN tenants t ON t.id = c.tenant_id
 WHERE (c.tenant_id IS NULL AND c.audience = 'engineering')
    OR (c.tenant_id = %(tenant_id)s AND c.audience <> 'shadow')
 ORDER BY c.tenant_id NULLS FIRST, c.name;

-- selftest_create_due_run --
-- A tick that is due with no attempt at all (the trigger recorded it, no worker will
-- take it): its deadline is `now`, so the deadline detector's next pass misses it.
INSERT INTO runs (tenant_id, workflow_id, scheduled_for, manual, status, retry_budget,
                  attempts_count, deadline_at, created_at, retry_backoff_seconds)
VALUES (%(tenant_id)s, %(workflow_id)s, %(scheduled_for)s, false, 'queued', 0, 0, %(now)s, %(now)s, '{}')
    ON CONFLICT (workflow_id, scheduled_for) WHERE NOT manual DO NOTHING
RETURNING *;

-- selftest_runs --
-- The synthetic tenant's runs with their workflow's name.
SELECT r.*, w.name AS workflow
  FROM runs r JOIN workflows w ON w.id = r.workflow_id
 WHERE r.tenant_id = %(tenant_id)s
 ORDER BY r.id;

-- selftest_queued_attempts --
-- The synthetic tenant's attempts waiting for a worker: the retries the poller queued
-- (its first attempts are leased in the transaction that records their ticks, so no
-- other attempt of it is ever seen queued). Read from the queue (`attempt_queue`, a row
-- exactly while its attempt is queued) through its index of retries alone, each row
-- joined back to its attempt by id and month (the row's tick prunes the probe to that
-- month's partition as it runs).
SELECT a.* FROM attempt_queue q
  JOIN attempts a ON a.id = q.attempt_id AND a.run_scheduled_for = q.run_scheduled_for
 WHERE q.tenant_id = %(tenant_id)s AND q.number > 1
 ORDER BY a.id;

-- selftest_alerts --
-- The synthetic tenant's alerts with their workflow's name.
SELECT a.*, w.name AS workflow
  FROM alerts a JOIN workflows w ON w.id = a.workflow_id
 WHERE a.tenant_id = %(tenant_id)s
 ORDER BY a.id;

-- selftest_events --
-- The synthetic tenant's alert events, oldest first.
SELECT e.* FROM alert_events e
 WHERE e.tenant_id = %(tenant_id)s
 ORDER BY e.id;

-- selftest_outbox --
-- The synthetic tenant's deliveries with their event's kind and severity.
SELECT o.id, o.event_id, o.alert_id, o.channel_id, o.status, o.tries, o.last_error, o.sent_at,
       e.kind AS event_kind, e.severity AS event_severity
  FROM notification_outbox o JOIN alert_events e ON e.id = o.event_id
 WHERE o.tenant_id = %(tenant_id)s
 ORDER BY o.id;

-- selftest_threads --
-- The synthetic tenant's notification threads: one per alert and channel.
SELECT th.alert_id, th.channel_id, th.thread_key
  FROM notification_threads th
 WHERE th.tenant_id = %(tenant_id)s
 ORDER BY th.alert_id, th.channel_id;

-- selftest_wake --
-- Wake a loop of every running service now ('' wakes them all); polling would get
-- there too, later.
SELECT pg_notify('tickwarden_wake', %(loop)s);

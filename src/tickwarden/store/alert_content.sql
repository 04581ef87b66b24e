-- alert_content_tick_facts --
-- What a message about an alert says beyond the alert row itself, for a set of alerts:
-- the tick of the alert's newest failing run (when it was due, its deadline, its
-- verdict), the newest attempt of that run (number, status, worker, start, end), the
-- failing step with its sanitized log (the step record of the newest failed or lost
-- attempt, falling back to that attempt's log tail), and the run that resolved the
-- alert (its tick and when it finished). Read in the caller's tenant context.
-- `{alerts}` says which alerts: a list of ids, or those of the deliveries a notifier
-- just claimed (`AlertContentRepository`), the one text either way.
SELECT a.id AS alert_id, a.owner,
       r.id AS run_id, r.scheduled_for AS tick, r.manual, r.status AS run_status,
       r.deadline_at, r.error_category AS run_error_category,
       la.number AS attempt_number, la.status AS attempt_status, la.worker_id AS attempt_worker,
       la.started_at AS attempt_started_at, la.finished_at AS attempt_finished_at,
       coalesce(fs.step, fa.failed_step, a.failed_step) AS failed_step,
       coalesce(nullif(fs.log, ''), fa.log_tail) AS log_tail,
       rr.id AS recovered_by_run_id, rr.scheduled_for AS recovered_tick, rr.manual AS recovered_manual,
       coalesce(rr.finished_at, a.resolved_at) AS recovered_at
  FROM alerts a
  LEFT JOIN runs r ON r.id = a.last_run_id
  LEFT JOIN LATERAL (
      SELECT x.number, x.status, x.worker_id, x.started_at, x.finished_at
        FROM attempts x
       WHERE x.run_id = a.last_run_id
       ORDER BY x.number DESC
       LIMIT 1
  ) la ON true
  LEFT JOIN LATERAL (
      SELECT x.id, x.failed_step, x.log_tail
        FROM attempts x
       WHERE x.run_id = a.last_run_id AND x.status IN ('failed', 'lost')
       ORDER BY x.number DESC
       LIMIT 1
  ) fa ON true
  LEFT JOIN attempt_steps fs ON fs.attempt_id = fa.id AND fs.step = fa.failed_step
  LEFT JOIN runs rr ON rr.id = a.resolved_by_run_id
 WHERE {alerts};

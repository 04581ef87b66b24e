-- Each workflow's consecutive confirmed failures since its newest success, kept beside the
-- ledger so that an evaluation reads one row instead of walking the streak.
--
-- The streak is the workflow's runs with status failed or missed whose tick is later than
-- its newest success's (workflow_successes.scheduled_for; every run when it has none):
-- their count, the earliest finish among them, and the newest of them by (tick, id). The
-- walk that computes it from the ledger costs one probe of every month since the success
-- and a read of every failure of the streak; this row is what that walk returns.
--
-- One owner: the trigger below, on every statement that makes a run a failure, leaves one,
-- or makes one a success, in that statement's transaction. A workflow's row is written
-- under its row lock, and what decides the new value is read after the lock is taken, so
-- concurrent outcomes of one workflow apply one after the other. The row is exact for the
-- success tick it names (`since`); a success commits without waiting for a row it cannot
-- see yet (a concurrent first failure), so a row may name an older success than
-- workflow_successes: the evaluation then walks the ledger as before, and the next outcome
-- of the workflow counts the row again. A row whose failures are 0 is exact whatever
-- success it names: a later failure always goes through the row.
--
-- Retention deletes only runs older than a workflow's newest success and keeps every month
-- holding a later run, so it never removes a run of the streak; erasure removes the
-- workflow with its row. The error text stays in the run (retention and erasure may
-- rewrite it): the row names the newest failure, and the evaluation reads it by id and tick.
CREATE TABLE workflow_streaks (
    workflow_id         bigint PRIMARY KEY REFERENCES workflows (id) ON DELETE CASCADE,
    tenant_id           bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    since               timestamptz,            -- the newest success's tick it counts from (NULL: none)
    failures            integer NOT NULL CHECK (failures >= 0),
    first_failure_at    timestamptz,            -- the earliest finish of the streak
    last_run_id         bigint,                 -- the newest failure of the streak (an opaque reference)
    last_scheduled_for  timestamptz,            -- its tick: the ledger's partition key
    CHECK ((failures = 0) = (last_run_id IS NULL)),
    CHECK ((last_run_id IS NULL) = (last_scheduled_for IS NULL) AND (last_run_id IS NULL) = (first_failure_at IS NULL))
);

-- The row as the ledger has it now: the streak counted from the workflow's newest success.
CREATE FUNCTION tickwarden_count_streak(wid bigint, since_tick timestamptz) RETURNS void
LANGUAGE sql AS $$
    UPDATE workflow_streaks s
       SET since = since_tick, failures = c.failures, first_failure_at = c.first_failure_at,
           last_run_id = c.last_run_id, last_scheduled_for = c.last_scheduled_for
      FROM (SELECT count(*)::integer AS failures, min(r.finished_at) AS first_failure_at,
                   (array_agg(r.id ORDER BY r.scheduled_for DESC, r.id DESC))[1] AS last_run_id,
                   max(r.scheduled_for) AS last_scheduled_for
              FROM runs r
             WHERE r.workflow_id = wid AND r.status IN ('failed', 'missed')
               AND r.scheduled_for > coalesce(since_tick, '-infinity'::timestamptz)) c
     WHERE s.workflow_id = wid;
$$;

CREATE FUNCTION tickwarden_note_streak() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    run runs%ROWTYPE;
    adds boolean;
    newer boolean;
    streak workflow_streaks%ROWTYPE;
    since_tick timestamptz;
BEGIN
    IF TG_OP = 'DELETE' THEN run := OLD; ELSE run := NEW; END IF;
    -- a run becoming a failure: the common case, one more failure at the head of the streak
    adds := TG_OP <> 'DELETE' AND NEW.status IN ('failed', 'missed')
            AND (TG_OP = 'INSERT' OR OLD.status NOT IN ('failed', 'missed'));
    IF adds THEN
        INSERT INTO workflow_streaks (workflow_id, tenant_id, failures) VALUES (run.workflow_id, run.tenant_id, 0)
            ON CONFLICT (workflow_id) DO NOTHING;
    END IF;
    -- The row lock orders this workflow's outcomes; what follows reads what the ones
    -- before committed (each statement of this function takes a new snapshot).
    SELECT * INTO streak FROM workflow_streaks WHERE workflow_id = run.workflow_id FOR UPDATE;
    IF NOT FOUND OR (NOT adds AND streak.failures = 0) THEN
        RETURN NULL;  -- no failure counted: a success or a failure changing or leaving changes nothing
    END IF;
    SELECT scheduled_for INTO since_tick FROM workflow_successes WHERE workflow_id = run.workflow_id;
    IF streak.failures > 0 AND streak.since IS DISTINCT FROM since_tick
       AND streak.last_scheduled_for <= since_tick AND coalesce(streak.since, '-infinity') < since_tick THEN
        -- A success at the head of the streak (or after it): a row counts every failure after
        -- the success it names, and none of them is after the newest, so none is in a streak.
        UPDATE workflow_streaks
           SET since = since_tick, failures = 0, first_failure_at = NULL, last_run_id = NULL, last_scheduled_for = NULL
         WHERE workflow_id = run.workflow_id;
        streak.failures := 0;
    END IF;
    IF streak.failures = 0 OR streak.since IS NOT DISTINCT FROM since_tick THEN
        IF run.scheduled_for <= coalesce(since_tick, '-infinity'::timestamptz) THEN
            RETURN NULL;  -- not after the newest success: in no streak
        END IF;
        IF adds THEN
            newer := streak.failures = 0
                     OR (run.scheduled_for, run.id) > (streak.last_scheduled_for, streak.last_run_id);
            UPDATE workflow_streaks
               SET since = since_tick, failures = streak.failures + 1,
                   first_failure_at = least(first_failure_at, run.finished_at),
                   last_run_id = CASE WHEN newer THEN run.id ELSE last_run_id END,
                   last_scheduled_for = CASE WHEN newer THEN run.scheduled_for ELSE last_scheduled_for END
             WHERE workflow_id = run.workflow_id;
            RETURN NULL;
        END IF;
    END IF;
    -- A counted failure changed or left, or a success landed inside the streak (out of
    -- order): the ledger from the newest success on.
    PERFORM tickwarden_count_streak(run.workflow_id, since_tick);
    RETURN NULL;
END
$$;

-- After runs_note_success (triggers fire in name order), which has moved the newest success.
CREATE TRIGGER runs_streak_insert AFTER INSERT ON runs
    FOR EACH ROW WHEN (NEW.status IN ('failed', 'missed', 'succeeded')) EXECUTE FUNCTION tickwarden_note_streak();
CREATE TRIGGER runs_streak_update AFTER UPDATE OF status, finished_at ON runs
    FOR EACH ROW WHEN (OLD.status IN ('failed', 'missed') OR NEW.status IN ('failed', 'missed')
                       OR (NEW.status = 'succeeded' AND OLD.status <> 'succeeded'))
    EXECUTE FUNCTION tickwarden_note_streak();
CREATE TRIGGER runs_streak_delete AFTER DELETE ON runs
    FOR EACH ROW WHEN (OLD.status IN ('failed', 'missed')) EXECUTE FUNCTION tickwarden_note_streak();

-- The rows for the ledger as it is: each workflow with a failure since its newest success.
INSERT INTO workflow_streaks (workflow_id, tenant_id, since, failures, first_failure_at, last_run_id, last_scheduled_for)
SELECT w.id, w.tenant_id, ok.scheduled_for, c.failures, c.first_failure_at, c.last_run_id, c.last_scheduled_for
  FROM workflows w
  LEFT JOIN workflow_successes ok ON ok.workflow_id = w.id
 CROSS JOIN LATERAL (
       SELECT count(*)::integer AS failures, min(r.finished_at) AS first_failure_at,
              (array_agg(r.id ORDER BY r.scheduled_for DESC, r.id DESC))[1] AS last_run_id,
              max(r.scheduled_for) AS last_scheduled_for
         FROM runs r
        WHERE r.workflow_id = w.id AND r.status IN ('failed', 'missed')
          AND r.scheduled_for > coalesce(ok.scheduled_for, '-infinity'::timestamptz)) c
 WHERE c.failures > 0;

SELECT tickwarden_enforce_tenant_isolation();

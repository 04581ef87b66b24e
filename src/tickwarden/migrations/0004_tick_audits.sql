-- The deadline detector's watermark per schedule: every tick of the schedule at or
-- before checked_until has a run (possibly a `missed` one the detector wrote). A
-- pass looks only at rows whose next tick has passed its grace (next_check_at), so
-- finding ticks the trigger never fired costs one index range scan plus one cron
-- step per newly due tick, whatever the fleet size.
CREATE TABLE tick_audits (
    schedule_id       bigint PRIMARY KEY REFERENCES schedules (id) ON DELETE CASCADE,
    schedule_version  integer NOT NULL,      -- an edit, pause or resume re-arms the watermark
    checked_until     timestamptz NOT NULL,
    next_check_at     timestamptz,           -- NULL: nothing to check (paused, or never fires again)
    updated_at        timestamptz NOT NULL
);
CREATE INDEX tick_audits_due_idx ON tick_audits (next_check_at) WHERE next_check_at IS NOT NULL;

-- An attempt lost to the platform (its worker died, its lease expired) is queued
-- again without spending the tick's retry budget, a bounded number of times per
-- run: this counts those free re-queues, and the budget compares against the
-- attempts the workflow itself spent (number - lost_requeues).
ALTER TABLE runs ADD COLUMN lost_requeues integer NOT NULL DEFAULT 0 CHECK (lost_requeues >= 0);

-- Expected results: the rows a step reported, and workflows whose zero-row success is a failure.

-- A feed that always carries records declares it; a success that committed nothing is then
-- a failed tick (category empty_result) instead of silently counting as a success.
ALTER TABLE workflows ADD COLUMN expect_rows boolean NOT NULL DEFAULT false;
-- The rows an attempt's steps reported (NULL: no step reported a count); the run keeps its verdict's.
ALTER TABLE attempts ADD COLUMN rows bigint CHECK (rows IS NULL OR rows >= 0);
ALTER TABLE runs ADD COLUMN rows bigint CHECK (rows IS NULL OR rows >= 0);

-- Cancel: who stopped a run (the status `cancelled` existed; nothing set it by hand).
ALTER TABLE runs ADD COLUMN cancelled_by text CHECK (length(cancelled_by) <= 254);

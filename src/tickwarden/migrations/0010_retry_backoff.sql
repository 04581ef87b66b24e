-- Retry backoff: the wait before each retry of a tick, captured per tick from the
-- profile like its retry budget, so the deadline computed at the tick and the
-- retries launched later agree even if the workflow's policy is edited meanwhile.
-- Entry n (1-based) is the wait after attempt n failed with a category that time
-- can heal; the retry engine applies it from the failed attempt's finish.
ALTER TABLE runs ADD COLUMN retry_backoff_seconds integer[] NOT NULL DEFAULT '{}';

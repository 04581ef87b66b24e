-- Alerting coverage: an alert records which rule opened it. A streak alert resolves on
-- the next success; a failure-rate alert only once the rate has fallen back.
ALTER TABLE alerts ADD COLUMN reason text NOT NULL DEFAULT 'consecutive_failures'
    CHECK (reason <> '');

-- Who asked for a manual run (`runs.requested_by`) is bounded in the schema, as a run's
-- canceller is (migration 0043's `ledger_actor`): at most 254 characters.
--
-- The one write path (`catalog.run_now`, used by the CLI, the API, the dashboard and the
-- simulator) already stores it redacted, on one line, at most 100 characters
-- (`sanitize.clean_actor`); the schema's rule is the backstop for any other writer, so that an
-- unbounded name (a token's, a `--by` value) can never reach the ledger whole.
--
-- A domain, not a table CHECK: PostgreSQL 15 rebuilds every table CHECK at each statement that
-- writes the table (see 0043), a domain's constraint is compiled once a session and tested only
-- when a value is written to the column. No month is rewritten or scanned: the column moves to
-- an unconstrained domain over its own type first (binary-identical), then the domain gets its
-- constraint NOT VALID. A run stored before with a longer requester keeps it and can still be
-- updated (an UPDATE tests the columns it assigns, not the ones it carries over); every value
-- written from now on is tested. Partitions inherit the column's type, present and future
-- (`tickwarden_ledger_partition`). No trigger's WHEN clause, index or view names the column.
CREATE DOMAIN ledger_requester AS text;

ALTER TABLE runs ALTER COLUMN requested_by TYPE ledger_requester;

ALTER DOMAIN ledger_requester ADD CONSTRAINT ledger_requester_check CHECK (length(VALUE) <= 254) NOT VALID;

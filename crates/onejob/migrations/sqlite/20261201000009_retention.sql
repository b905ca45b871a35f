-- Retention (see the PostgreSQL twin): a DELETE on job_events is refused unless the
-- deleting transaction holds a row in onejob_retention_pass (inserted and removed inside
-- its own BEGIN IMMEDIATE transaction, so no other connection ever sees one).
CREATE TABLE onejob_retention_pass (started_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))) STRICT;

DROP TRIGGER job_events_no_delete;
CREATE TRIGGER job_events_no_delete BEFORE DELETE ON job_events
WHEN NOT EXISTS (SELECT 1 FROM onejob_retention_pass)
BEGIN SELECT RAISE(ABORT, 'onejob: the job event log is append-only'); END;

CREATE INDEX jobs_finished ON jobs (updated_at) WHERE state IN ('succeeded', 'failed', 'cancelled');

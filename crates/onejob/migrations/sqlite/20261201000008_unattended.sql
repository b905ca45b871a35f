-- no-transaction
-- Unattended resolution of unknown attempts (see the PostgreSQL twin): `attempts.key_spent`,
-- and the event kinds `resent` and `exhausted`.
--
-- SQLite cannot alter a CHECK constraint, so `job_events` is rebuilt with the wider one, in
-- one transaction with foreign keys off (as in 20261130000006_key_scope.sql): a migrator
-- killed half-way rolls the whole rebuild back.
PRAGMA foreign_keys = OFF;
BEGIN IMMEDIATE;

ALTER TABLE attempts ADD COLUMN key_spent INTEGER NOT NULL DEFAULT 0 CHECK (key_spent IN (0, 1));
UPDATE attempts SET key_spent = 1 WHERE state IN ('failed', 'cancelled');

CREATE TABLE job_events_widened (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id      TEXT NOT NULL REFERENCES jobs (id),
    attempt_id  TEXT,
    kind        TEXT NOT NULL CHECK (kind IN ('created', 'replayed', 'key_conflict', 'attempt_started',
                    'attempt_unknown', 'attempt_resolved', 'won', 'race_lost', 'failover',
                    'failover_refused', 'recovered', 'cancelled', 'resent', 'exhausted')),
    actor       TEXT,
    detail      TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(detail)),
    at          TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;

INSERT INTO job_events_widened (id, job_id, attempt_id, kind, actor, detail, at)
SELECT id, job_id, attempt_id, kind, actor, detail, at FROM job_events;

DROP TABLE job_events;
ALTER TABLE job_events_widened RENAME TO job_events;

CREATE INDEX job_events_by_job ON job_events (job_id, id);

CREATE TRIGGER job_events_no_update BEFORE UPDATE ON job_events
BEGIN SELECT RAISE(ABORT, 'onejob: the job event log is append-only'); END;
CREATE TRIGGER job_events_no_delete BEFORE DELETE ON job_events
BEGIN SELECT RAISE(ABORT, 'onejob: the job event log is append-only'); END;

COMMIT;
PRAGMA foreign_keys = ON;

-- onejob schema, SQLite. Same tables and constraints as the PostgreSQL schema; the
-- differences: uuids, timestamps and JSON are TEXT (timestamps as RFC 3339 UTC with
-- milliseconds, so they compare as strings), and triggers use RAISE(ABORT).

CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY,
    tenant       TEXT NOT NULL CHECK (tenant <> ''),
    user_id      TEXT NOT NULL CHECK (user_id <> ''),
    salt         BLOB NOT NULL CHECK (length(salt) = 16),
    secret_hash  BLOB NOT NULL CHECK (length(secret_hash) = 32),
    operator     INTEGER NOT NULL DEFAULT 0 CHECK (operator IN (0, 1)),
    created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    revoked_at   TEXT
) STRICT;

CREATE TABLE jobs (
    id            TEXT PRIMARY KEY,
    tenant        TEXT NOT NULL,
    user_id       TEXT NOT NULL,
    key_hash      BLOB NOT NULL CHECK (length(key_hash) = 32),
    kind          TEXT NOT NULL,
    fingerprint   BLOB NOT NULL CHECK (length(fingerprint) = 32),
    params        TEXT NOT NULL CHECK (json_valid(params)),
    state         TEXT NOT NULL DEFAULT 'pending'
                  CHECK (state IN ('pending', 'running', 'unknown', 'succeeded', 'failed', 'cancelled')),
    version       INTEGER NOT NULL DEFAULT 0,
    attempts      INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    completed_by  TEXT,
    result        TEXT CHECK (result IS NULL OR json_valid(result)),
    error         TEXT CHECK (error IS NULL OR json_valid(error)),
    dispatch_at   TEXT DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CONSTRAINT jobs_one_per_key UNIQUE (tenant, user_id, key_hash),
    CONSTRAINT jobs_winner_iff_succeeded CHECK ((completed_by IS NOT NULL) = (state = 'succeeded')),
    CONSTRAINT jobs_result_only_when_succeeded CHECK (result IS NULL OR state = 'succeeded'),
    CONSTRAINT jobs_error_only_when_failed CHECK (error IS NULL OR state = 'failed'),
    CONSTRAINT jobs_winner_is_own_attempt FOREIGN KEY (id, completed_by) REFERENCES attempts (job_id, id)
) STRICT;

CREATE INDEX jobs_dispatch ON jobs (dispatch_at) WHERE dispatch_at IS NOT NULL;
CREATE INDEX jobs_owner_recent ON jobs (tenant, user_id, id DESC);

CREATE TABLE attempts (
    id                TEXT PRIMARY KEY,
    job_id            TEXT NOT NULL REFERENCES jobs (id),
    number            INTEGER NOT NULL CHECK (number >= 1),
    provider          TEXT NOT NULL,
    state             TEXT NOT NULL DEFAULT 'starting'
                      CHECK (state IN ('starting', 'running', 'unknown', 'succeeded', 'failed', 'cancelled', 'discarded')),
    hedge             INTEGER NOT NULL DEFAULT 0 CHECK (hedge IN (0, 1)),
    task_id           TEXT,
    worker            TEXT,
    lease_expires_at  TEXT,
    deadline_at       TEXT,
    started_at        TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    acknowledged_at   TEXT,
    finished_at       TEXT,
    error             TEXT CHECK (error IS NULL OR json_valid(error)),
    CONSTRAINT attempts_number_per_job UNIQUE (job_id, number),
    CONSTRAINT attempts_job_and_id UNIQUE (job_id, id)
) STRICT;

CREATE INDEX attempts_live_leases ON attempts (lease_expires_at) WHERE state IN ('starting', 'running');
CREATE INDEX attempts_unknown ON attempts (job_id) WHERE state = 'unknown';

CREATE TABLE job_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id      TEXT NOT NULL REFERENCES jobs (id),
    attempt_id  TEXT,
    kind        TEXT NOT NULL CHECK (kind IN ('created', 'replayed', 'key_conflict', 'attempt_started',
                    'attempt_unknown', 'attempt_resolved', 'won', 'race_lost', 'failover',
                    'failover_refused', 'recovered', 'cancelled')),
    actor       TEXT,
    detail      TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(detail)),
    at          TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;

CREATE INDEX job_events_by_job ON job_events (job_id, id);

CREATE TRIGGER job_events_no_update BEFORE UPDATE ON job_events
BEGIN SELECT RAISE(ABORT, 'onejob: the job event log is append-only'); END;
CREATE TRIGGER job_events_no_delete BEFORE DELETE ON job_events
BEGIN SELECT RAISE(ABORT, 'onejob: the job event log is append-only'); END;

CREATE TRIGGER jobs_intent_is_immutable BEFORE UPDATE ON jobs
WHEN OLD.tenant IS NOT NEW.tenant OR OLD.user_id IS NOT NEW.user_id
  OR OLD.key_hash IS NOT NEW.key_hash OR OLD.kind IS NOT NEW.kind
  OR OLD.fingerprint IS NOT NEW.fingerprint OR OLD.params IS NOT NEW.params
BEGIN SELECT RAISE(ABORT, 'onejob: a job never changes its owner, key, kind or params'); END;

CREATE TRIGGER jobs_result_written_once BEFORE UPDATE ON jobs
WHEN OLD.completed_by IS NOT NULL AND (NEW.completed_by IS NOT OLD.completed_by OR NEW.result IS NOT OLD.result)
BEGIN SELECT RAISE(ABORT, 'onejob: a job''s result is written once'); END;

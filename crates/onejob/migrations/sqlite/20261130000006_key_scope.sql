-- no-transaction
-- Widen the key's unique scope from (tenant, user_id, key_hash) to (tenant, user_id,
-- environment, key_hash), DESIGN §2.10. Every existing and new job is in the environment
-- 'default', so keys behave exactly as before; the wider boundary lets a later version keep
-- the same key apart in two environments (say sandbox and live) without a schema change.
--
-- SQLite cannot drop a table's UNIQUE constraint, and has no concurrent index builds: this
-- is the plain transactional swap of its documented table rebuild (foreign keys off while
-- the table is replaced, checked before the commit). The old and the new table exist side
-- by side inside one transaction; a migrator killed at any point rolls the whole swap back
-- (the journal), leaving the old table and its constraint in force. It runs outside sqlx's
-- own transaction (`no-transaction`) because `PRAGMA foreign_keys` is a no-op inside one.
PRAGMA foreign_keys = OFF;
BEGIN IMMEDIATE;

CREATE TABLE jobs_widened (
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
    recoveries    INTEGER NOT NULL DEFAULT 0 CHECK (recoveries >= 0),
    environment   TEXT NOT NULL DEFAULT 'default' CHECK (environment <> ''),
    CONSTRAINT jobs_one_per_key_scope UNIQUE (tenant, user_id, environment, key_hash),
    CONSTRAINT jobs_winner_iff_succeeded CHECK ((completed_by IS NOT NULL) = (state = 'succeeded')),
    CONSTRAINT jobs_result_only_when_succeeded CHECK (result IS NULL OR state = 'succeeded'),
    CONSTRAINT jobs_error_only_when_failed CHECK (error IS NULL OR state = 'failed'),
    CONSTRAINT jobs_winner_is_own_attempt FOREIGN KEY (id, completed_by) REFERENCES attempts (job_id, id)
) STRICT;

INSERT INTO jobs_widened (id, tenant, user_id, key_hash, kind, fingerprint, params, state, version,
    attempts, completed_by, result, error, dispatch_at, created_at, updated_at, recoveries)
SELECT id, tenant, user_id, key_hash, kind, fingerprint, params, state, version,
    attempts, completed_by, result, error, dispatch_at, created_at, updated_at, recoveries
FROM jobs;

DROP TABLE jobs;
ALTER TABLE jobs_widened RENAME TO jobs;

CREATE INDEX jobs_dispatch ON jobs (dispatch_at) WHERE dispatch_at IS NOT NULL;
CREATE INDEX jobs_owner_recent ON jobs (tenant, user_id, id DESC);

CREATE TRIGGER jobs_intent_is_immutable BEFORE UPDATE ON jobs
WHEN OLD.tenant IS NOT NEW.tenant OR OLD.user_id IS NOT NEW.user_id
  OR OLD.key_hash IS NOT NEW.key_hash OR OLD.environment IS NOT NEW.environment
  OR OLD.kind IS NOT NEW.kind
  OR OLD.fingerprint IS NOT NEW.fingerprint OR OLD.params IS NOT NEW.params
BEGIN SELECT RAISE(ABORT, 'onejob: a job never changes its owner, key, kind or params'); END;

CREATE TRIGGER jobs_result_written_once BEFORE UPDATE ON jobs
WHEN OLD.completed_by IS NOT NULL AND (NEW.completed_by IS NOT OLD.completed_by OR NEW.result IS NOT OLD.result)
BEGIN SELECT RAISE(ABORT, 'onejob: a job''s result is written once'); END;

COMMIT;
PRAGMA foreign_keys = ON;

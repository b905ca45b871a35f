-- onejob schema, PostgreSQL. The constraints here are the arbiters of the design's
-- invariants; application checks in front of them are only optimisations.

-- API keys: `oj_<id>_<secret>`; only SHA-256(salt || secret) is kept.
CREATE TABLE api_keys (
    id           text PRIMARY KEY,
    tenant       text NOT NULL CHECK (tenant <> ''),
    user_id      text NOT NULL CHECK (user_id <> ''),
    salt         bytea NOT NULL CHECK (octet_length(salt) = 16),
    secret_hash  bytea NOT NULL CHECK (octet_length(secret_hash) = 32),
    operator     boolean NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz
);

-- One row per intent.
CREATE TABLE jobs (
    id            uuid PRIMARY KEY,
    tenant        text NOT NULL,
    user_id       text NOT NULL,
    -- SHA-256 of the raw idempotency key: no business identifier in the index.
    key_hash      bytea NOT NULL CHECK (octet_length(key_hash) = 32),
    kind          text NOT NULL,
    fingerprint   bytea NOT NULL CHECK (octet_length(fingerprint) = 32),
    params        jsonb NOT NULL,
    state         text NOT NULL DEFAULT 'pending'
                  CHECK (state IN ('pending', 'running', 'unknown', 'succeeded', 'failed', 'cancelled')),
    -- Bumped by every change of the row; completion is a compare-and-swap on it.
    version       bigint NOT NULL DEFAULT 0,
    attempts      integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    completed_by  uuid,
    result        jsonb,
    error         jsonb,
    -- When a worker should next look at the job (start or hedge an attempt); NULL: nothing to do.
    dispatch_at   timestamptz DEFAULT now(),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    -- Invariant 1: at most one job per (tenant, user, key).
    CONSTRAINT jobs_one_per_key UNIQUE (tenant, user_id, key_hash),
    -- A result exists exactly when a winning attempt is recorded and the job succeeded.
    CONSTRAINT jobs_winner_iff_succeeded CHECK ((completed_by IS NOT NULL) = (state = 'succeeded')),
    CONSTRAINT jobs_result_only_when_succeeded CHECK (result IS NULL OR state = 'succeeded'),
    CONSTRAINT jobs_error_only_when_failed CHECK (error IS NULL OR state = 'failed')
);

CREATE INDEX jobs_dispatch ON jobs (dispatch_at) WHERE dispatch_at IS NOT NULL;
CREATE INDEX jobs_owner_recent ON jobs (tenant, user_id, id DESC);

-- Many attempts, one job.
CREATE TABLE attempts (
    id                uuid PRIMARY KEY,
    job_id            uuid NOT NULL REFERENCES jobs (id),
    number            integer NOT NULL CHECK (number >= 1),
    provider          text NOT NULL,
    state             text NOT NULL DEFAULT 'starting'
                      CHECK (state IN ('starting', 'running', 'unknown', 'succeeded', 'failed', 'cancelled', 'discarded')),
    hedge             boolean NOT NULL DEFAULT false,
    -- The provider's task id, stored the moment it is known so reconciliation can find it.
    task_id           text,
    -- The worker holding the lease, and until when.
    worker            text,
    lease_expires_at  timestamptz,
    deadline_at       timestamptz,
    started_at        timestamptz NOT NULL DEFAULT now(),
    acknowledged_at   timestamptz,
    finished_at       timestamptz,
    error             jsonb,
    CONSTRAINT attempts_number_per_job UNIQUE (job_id, number),
    CONSTRAINT attempts_job_and_id UNIQUE (job_id, id)
);

CREATE INDEX attempts_live_leases ON attempts (lease_expires_at) WHERE state IN ('starting', 'running');
CREATE INDEX attempts_unknown ON attempts (job_id) WHERE state = 'unknown';

-- The winner must be one of the job's own attempts.
ALTER TABLE jobs ADD CONSTRAINT jobs_winner_is_own_attempt
    FOREIGN KEY (id, completed_by) REFERENCES attempts (job_id, id);

-- The append-only event log.
CREATE TABLE job_events (
    id          bigserial PRIMARY KEY,
    job_id      uuid NOT NULL REFERENCES jobs (id),
    attempt_id  uuid,
    kind        text NOT NULL CHECK (kind IN ('created', 'replayed', 'key_conflict', 'attempt_started',
                    'attempt_unknown', 'attempt_resolved', 'won', 'race_lost', 'failover',
                    'failover_refused', 'recovered', 'cancelled')),
    actor       text,
    detail      jsonb NOT NULL DEFAULT '{}'::jsonb,
    at          timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX job_events_by_job ON job_events (job_id, id);

CREATE FUNCTION onejob_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'onejob: %', TG_ARGV[0] USING ERRCODE = 'integrity_constraint_violation';
END;
$$;

CREATE TRIGGER job_events_append_only BEFORE UPDATE OR DELETE ON job_events
    FOR EACH ROW EXECUTE FUNCTION onejob_refuse_change('the job event log is append-only');

-- A job never changes its intent or owner.
CREATE TRIGGER jobs_intent_is_immutable BEFORE UPDATE ON jobs
    FOR EACH ROW
    WHEN (OLD.tenant IS DISTINCT FROM NEW.tenant OR OLD.user_id IS DISTINCT FROM NEW.user_id
          OR OLD.key_hash IS DISTINCT FROM NEW.key_hash OR OLD.kind IS DISTINCT FROM NEW.kind
          OR OLD.fingerprint IS DISTINCT FROM NEW.fingerprint OR OLD.params IS DISTINCT FROM NEW.params)
    EXECUTE FUNCTION onejob_refuse_change('a job never changes its owner, key, kind or params');

-- Invariant 5: a result, once written, is never overwritten.
CREATE TRIGGER jobs_result_written_once BEFORE UPDATE ON jobs
    FOR EACH ROW
    WHEN (OLD.completed_by IS NOT NULL AND (NEW.completed_by IS DISTINCT FROM OLD.completed_by
          OR NEW.result IS DISTINCT FROM OLD.result))
    EXECUTE FUNCTION onejob_refuse_change('a job''s result is written once');

-- The pgbench ceiling's table: the shape of onejob's `jobs` table (columns, defaults, CHECKs,
-- the unique index `jobs_one_per_key (tenant, user_id, key_hash)` and the two secondary
-- indexes), copied from crates/onejob/migrations/postgres/20261130000001_init.sql and
-- 20261130000003_recovery.sql. Deliberately without onejob's triggers, the foreign key to
-- attempts and the event log: this is the single statement an intake must do durably.
CREATE TABLE jobs (
    id            uuid PRIMARY KEY,
    tenant        text NOT NULL,
    user_id       text NOT NULL,
    key_hash      bytea NOT NULL CHECK (octet_length(key_hash) = 32),
    kind          text NOT NULL,
    fingerprint   bytea NOT NULL CHECK (octet_length(fingerprint) = 32),
    params        jsonb NOT NULL,
    state         text NOT NULL DEFAULT 'pending'
                  CHECK (state IN ('pending', 'running', 'unknown', 'succeeded', 'failed', 'cancelled')),
    version       bigint NOT NULL DEFAULT 0,
    attempts      integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    completed_by  uuid,
    result        jsonb,
    error         jsonb,
    dispatch_at   timestamptz DEFAULT now(),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    recoveries    integer NOT NULL DEFAULT 0 CHECK (recoveries >= 0),
    CONSTRAINT jobs_one_per_key UNIQUE (tenant, user_id, key_hash),
    CONSTRAINT jobs_winner_iff_succeeded CHECK ((completed_by IS NOT NULL) = (state = 'succeeded')),
    CONSTRAINT jobs_result_only_when_succeeded CHECK (result IS NULL OR state = 'succeeded'),
    CONSTRAINT jobs_error_only_when_failed CHECK (error IS NULL OR state = 'failed')
);
CREATE INDEX jobs_dispatch ON jobs (dispatch_at) WHERE dispatch_at IS NOT NULL;
CREATE INDEX jobs_owner_recent ON jobs (tenant, user_id, id DESC);

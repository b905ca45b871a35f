-- Resolving the unknown, recovery and certificates.

-- Controlled recoveries of a failed job: each grants another `max_attempts` and a new
-- upstream idempotency generation.
ALTER TABLE jobs ADD COLUMN recoveries integer NOT NULL DEFAULT 0 CHECK (recoveries >= 0);

-- When an attempt became unknown, and when the reconciler should next ask its provider.
ALTER TABLE attempts ADD COLUMN unknown_since timestamptz;
ALTER TABLE attempts ADD COLUMN reconcile_at timestamptz;
ALTER TABLE attempts ADD COLUMN reconcile_checks integer NOT NULL DEFAULT 0;
CREATE INDEX attempts_reconcile ON attempts (reconcile_at) WHERE state = 'unknown';

-- Every `onejob verify` run. A certificate is valid for failover while it passed and its
-- hashes equal the kind's current template and output schema hashes.
CREATE TABLE certificates (
    id             uuid PRIMARY KEY,
    provider       text NOT NULL,
    kind           text NOT NULL,
    template_hash  text NOT NULL,
    schema_hash    text NOT NULL,
    passed         boolean NOT NULL,
    report         jsonb NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX certificates_by_pair ON certificates (provider, kind, created_at DESC);

-- Resolving the unknown, recovery and certificates (see the PostgreSQL twin).
ALTER TABLE jobs ADD COLUMN recoveries INTEGER NOT NULL DEFAULT 0 CHECK (recoveries >= 0);

ALTER TABLE attempts ADD COLUMN unknown_since TEXT;
ALTER TABLE attempts ADD COLUMN reconcile_at TEXT;
ALTER TABLE attempts ADD COLUMN reconcile_checks INTEGER NOT NULL DEFAULT 0;
CREATE INDEX attempts_reconcile ON attempts (reconcile_at) WHERE state = 'unknown';

CREATE TABLE certificates (
    id             TEXT PRIMARY KEY,
    provider       TEXT NOT NULL,
    kind           TEXT NOT NULL,
    template_hash  TEXT NOT NULL,
    schema_hash    TEXT NOT NULL,
    passed         INTEGER NOT NULL CHECK (passed IN (0, 1)),
    report         TEXT NOT NULL CHECK (json_valid(report)),
    created_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;
CREATE INDEX certificates_by_pair ON certificates (provider, kind, created_at DESC);

-- See the PostgreSQL twin: certificates record the provider's settings hash.
ALTER TABLE certificates ADD COLUMN settings_hash TEXT NOT NULL DEFAULT '';

-- Prepare to widen the key's unique scope from (tenant, user_id, key_hash) to (tenant,
-- user_id, environment, key_hash), DESIGN §2.10. Every existing and new job is in the
-- environment 'default' (a constant default: PostgreSQL adds the column without rewriting
-- the table), so keys behave exactly as before.
--
-- The new unique index cannot be built here: CREATE UNIQUE INDEX CONCURRENTLY cannot run
-- inside a transaction, and sqlx runs each migration in one. It is an online step of
-- `onejob migrate` (src/store/postgres/online.rs): build the index concurrently, verify
-- pg_index.indisvalid, and only then drop `jobs_one_per_key`. Until then the old constraint
-- is the boundary, so there is no moment without one.
ALTER TABLE jobs ADD COLUMN environment text NOT NULL DEFAULT 'default' CHECK (environment <> '');

DROP TRIGGER jobs_intent_is_immutable ON jobs;
CREATE TRIGGER jobs_intent_is_immutable BEFORE UPDATE ON jobs
    FOR EACH ROW
    WHEN (OLD.tenant IS DISTINCT FROM NEW.tenant OR OLD.user_id IS DISTINCT FROM NEW.user_id
          OR OLD.key_hash IS DISTINCT FROM NEW.key_hash OR OLD.environment IS DISTINCT FROM NEW.environment
          OR OLD.kind IS DISTINCT FROM NEW.kind
          OR OLD.fingerprint IS DISTINCT FROM NEW.fingerprint OR OLD.params IS DISTINCT FROM NEW.params)
    EXECUTE FUNCTION onejob_refuse_change('a job never changes its owner, key, kind or params');

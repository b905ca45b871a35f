-- Agent runs (see the PostgreSQL twin): a later step of a run carries the run's key and its
-- step; NULL for every other job.
ALTER TABLE jobs ADD COLUMN run_key BLOB;
ALTER TABLE jobs ADD COLUMN step INTEGER;

CREATE INDEX jobs_run_steps ON jobs (tenant, user_id, run_key, step) WHERE run_key IS NOT NULL;

DROP TRIGGER jobs_intent_is_immutable;
CREATE TRIGGER jobs_intent_is_immutable BEFORE UPDATE ON jobs
WHEN OLD.tenant IS NOT NEW.tenant OR OLD.user_id IS NOT NEW.user_id
  OR OLD.key_hash IS NOT NEW.key_hash OR OLD.environment IS NOT NEW.environment
  OR OLD.kind IS NOT NEW.kind
  OR OLD.fingerprint IS NOT NEW.fingerprint OR OLD.params IS NOT NEW.params
  OR OLD.request_body IS NOT NEW.request_body
  OR OLD.run_key IS NOT NEW.run_key OR OLD.step IS NOT NEW.step
BEGIN SELECT RAISE(ABORT, 'onejob: a job never changes its owner, key, kind or params'); END;

-- Agent runs: every model call of a run under one Idempotency-Key is a step of that run
-- (docs/gateway.md, "Agent runs"). The run's first call is the job under the key itself;
-- each later step is a job of its own under a key derived from the run's key and the step
-- (`KeyHash::step`), so the unique key index keeps one job per step, and carries here the
-- run's key and its step (its number of conversation items). NULL for every other job.
ALTER TABLE jobs ADD COLUMN run_key bytea;
ALTER TABLE jobs ADD COLUMN step integer;

-- A run's steps in order, by their owner and the run's key; other jobs are not in it.
CREATE INDEX jobs_run_steps ON jobs (tenant, user_id, run_key, step) WHERE run_key IS NOT NULL;

-- Like its key and params, the run and step a job was created in never change.
DROP TRIGGER jobs_intent_is_immutable ON jobs;
CREATE TRIGGER jobs_intent_is_immutable BEFORE UPDATE ON jobs
    FOR EACH ROW
    WHEN (OLD.tenant IS DISTINCT FROM NEW.tenant OR OLD.user_id IS DISTINCT FROM NEW.user_id
          OR OLD.key_hash IS DISTINCT FROM NEW.key_hash OR OLD.environment IS DISTINCT FROM NEW.environment
          OR OLD.kind IS DISTINCT FROM NEW.kind
          OR OLD.fingerprint IS DISTINCT FROM NEW.fingerprint OR OLD.params IS DISTINCT FROM NEW.params
          OR OLD.request_body IS DISTINCT FROM NEW.request_body
          OR OLD.run_key IS DISTINCT FROM NEW.run_key OR OLD.step IS DISTINCT FROM NEW.step)
    EXECUTE FUNCTION onejob_refuse_change('a job never changes its owner, key, kind or params');

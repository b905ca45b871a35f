-- The caller's request as sent, for a gateway job (see the PostgreSQL twin): forwarded as
-- it came; `params` stays the intent and the fingerprint's source. NULL for other jobs.
ALTER TABLE jobs ADD COLUMN request_body TEXT;

DROP TRIGGER jobs_intent_is_immutable;
CREATE TRIGGER jobs_intent_is_immutable BEFORE UPDATE ON jobs
WHEN OLD.tenant IS NOT NEW.tenant OR OLD.user_id IS NOT NEW.user_id
  OR OLD.key_hash IS NOT NEW.key_hash OR OLD.environment IS NOT NEW.environment
  OR OLD.kind IS NOT NEW.kind
  OR OLD.fingerprint IS NOT NEW.fingerprint OR OLD.params IS NOT NEW.params
  OR OLD.request_body IS NOT NEW.request_body
BEGIN SELECT RAISE(ABORT, 'onejob: a job never changes its owner, key, kind or params'); END;

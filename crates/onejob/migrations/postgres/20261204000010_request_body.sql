-- The caller's request as sent, for a gateway job (POST /v1/chat/completions): the bytes
-- the upstream receives (with only `model` and the provider's own settings changed), in
-- the caller's key order and number spelling. `params` (jsonb, keys sorted) stays the
-- job's intent and the source of its fingerprint; this column is only what is forwarded.
-- NULL for every other job (and for gateway jobs created before it existed, which are
-- forwarded from `params` as before).
ALTER TABLE jobs ADD COLUMN request_body text;

-- Like the params, the request a job was created with never changes.
DROP TRIGGER jobs_intent_is_immutable ON jobs;
CREATE TRIGGER jobs_intent_is_immutable BEFORE UPDATE ON jobs
    FOR EACH ROW
    WHEN (OLD.tenant IS DISTINCT FROM NEW.tenant OR OLD.user_id IS DISTINCT FROM NEW.user_id
          OR OLD.key_hash IS DISTINCT FROM NEW.key_hash OR OLD.environment IS DISTINCT FROM NEW.environment
          OR OLD.kind IS DISTINCT FROM NEW.kind
          OR OLD.fingerprint IS DISTINCT FROM NEW.fingerprint OR OLD.params IS DISTINCT FROM NEW.params
          OR OLD.request_body IS DISTINCT FROM NEW.request_body)
    EXECUTE FUNCTION onejob_refuse_change('a job never changes its owner, key, kind or params');

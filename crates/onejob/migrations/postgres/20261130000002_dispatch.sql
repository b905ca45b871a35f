-- Wake-ups for workers: every commit that makes a job due for dispatch notifies
-- `onejob_dispatch` (PostgreSQL folds identical notifications of one transaction into one).
-- Workers LISTEN on it and claim with FOR UPDATE SKIP LOCKED; polling is only a fallback.

CREATE FUNCTION onejob_notify_dispatch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('onejob_dispatch', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_notify_dispatch AFTER INSERT OR UPDATE OF dispatch_at ON jobs
    FOR EACH ROW WHEN (NEW.dispatch_at IS NOT NULL)
    EXECUTE FUNCTION onejob_notify_dispatch();

-- Workers look attempts up by job, and leases by worker for heartbeats.
CREATE INDEX attempts_by_job ON attempts (job_id, number);
CREATE INDEX attempts_by_worker ON attempts (worker) WHERE state IN ('starting', 'running');

-- At most one attempt of a job is `starting` at any moment: attempts start one at a time,
-- under the job's row lock. This index makes that structural.
CREATE UNIQUE INDEX attempts_one_starting ON attempts (job_id) WHERE state = 'starting';

-- Retention ([retention] finished_after): finished jobs older than that are deleted with
-- their attempts and events, in small batches.
--
-- The event log stays append-only for everything else: a DELETE on job_events is refused
-- unless the deleting transaction is a pruning pass, which says so by holding a row in
-- onejob_retention_pass (inserted and removed inside its own transaction, so no other
-- transaction ever sees one).
CREATE TABLE onejob_retention_pass (started_at timestamptz NOT NULL DEFAULT now());

CREATE FUNCTION onejob_refuse_delete_unless_pruning() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM onejob_retention_pass) THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'onejob: %', TG_ARGV[0] USING ERRCODE = 'integrity_constraint_violation';
END;
$$;

DROP TRIGGER job_events_append_only ON job_events;
CREATE TRIGGER job_events_append_only BEFORE UPDATE ON job_events
    FOR EACH ROW EXECUTE FUNCTION onejob_refuse_change('the job event log is append-only');
CREATE TRIGGER job_events_deleted_only_by_retention BEFORE DELETE ON job_events
    FOR EACH STATEMENT EXECUTE FUNCTION
    onejob_refuse_delete_unless_pruning('the job event log is append-only (only retention deletes, with its job)');

-- Finished jobs by when they finished, for the pruning pass (new and running jobs are not in it).
CREATE INDEX jobs_finished ON jobs (updated_at) WHERE state IN ('succeeded', 'failed', 'cancelled');

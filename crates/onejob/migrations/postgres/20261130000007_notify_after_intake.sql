-- New jobs no longer notify from inside their transaction: NOTIFY holds a cluster-wide lock
-- from pre-commit until the commit record is flushed, so notifying transactions cannot
-- share a WAL flush, and every intake batch paid one of its own. Intake now sends
-- `pg_notify('onejob_dispatch', '')` after its batch committed (store/postgres/relaxed.rs);
-- the trigger stays for the rarer updates that make a job due again.

DROP TRIGGER jobs_notify_dispatch ON jobs;

CREATE TRIGGER jobs_notify_dispatch AFTER UPDATE OF dispatch_at ON jobs
    FOR EACH ROW WHEN (NEW.dispatch_at IS NOT NULL)
    EXECUTE FUNCTION onejob_notify_dispatch();

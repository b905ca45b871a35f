-- The tenant in every job table (see the PostgreSQL twin): `attempts` and `job_events`
-- carry their job's tenant, copied here and written by every insert from now on, so that
-- both databases run the same statements, each naming the tenant of the job it is about.
--
-- SQLite is one file on one node: nothing is distributed, so its keys stay as they are
-- (changing them would rebuild both tables for no gain). The column has a constant default
-- only because SQLite cannot add a NOT NULL column without one; every insert sets it.
ALTER TABLE attempts ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
UPDATE attempts SET tenant = (SELECT j.tenant FROM jobs j WHERE j.id = attempts.job_id);

-- The event log refuses updates: this one backfill runs with its guard lifted, in the
-- migration's transaction, and the guard is put back as it was.
ALTER TABLE job_events ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
DROP TRIGGER job_events_no_update;
UPDATE job_events SET tenant = (SELECT j.tenant FROM jobs j WHERE j.id = job_events.job_id);
CREATE TRIGGER job_events_no_update BEFORE UPDATE ON job_events
BEGIN SELECT RAISE(ABORT, 'onejob: the job event log is append-only'); END;
